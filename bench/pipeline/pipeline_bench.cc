#include "bench/pipeline/pipeline_bench.h"

#include <sched.h>
#include <sys/wait.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/spec_parser.h"

#ifndef SLUICE_BENCH_PIPELINE_SOURCE_DIR
#define SLUICE_BENCH_PIPELINE_SOURCE_DIR "bench/pipeline"
#endif

namespace sluice::bench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kWarmupBatches = 2;
constexpr double kFfcvAnchorPerVcpu = 326.0;  // FFCV's published ResNet-50 data loading rate per vCPU

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Say(const std::string& line) {
  std::cout << line << "\n";
  std::cout.flush();
}

std::string ShellQuote(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}

bool SetThreadCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(pos + 1)));
    }
  }
  return "unknown";
}

std::vector<fs::path> JpegFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".jpg") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Runs a shell command, forwarding each output line through `on_line`; returns its exit code.
int RunCommand(const std::string& command, const std::function<void(const std::string&)>& on_line) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) {
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      on_line(line);
      line.clear();
    }
  }
  if (!line.empty()) on_line(line);
  int status = pclose(pipe);
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

absl::Status EnsureDataset(const PipelineBenchOptions& options, const fs::path& dir, bool explicit_dir) {
  if (explicit_dir && !JpegFiles(dir).empty()) {
    Say(absl::StrCat("bench pipeline: using the JPEGs already in ", dir.string()));
    return absl::OkStatus();
  }
  const std::string script = (fs::path(BenchPipelineDir()) / "make_jpeg_dataset.py").string();
  const std::string command = absl::StrCat(ShellQuote(options.python), " ", ShellQuote(script), " ",
                                           ShellQuote(dir.string()), " --count ", options.image_count, " 2>&1");
  int rc = RunCommand(command, [](const std::string& line) { Say(line); });
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("make_jpeg_dataset.py failed (exit ", rc, "): ", command));
  }
  if (JpegFiles(dir).empty()) return absl::InternalError(absl::StrCat("no JPEGs in ", dir.string()));
  return absl::OkStatus();
}

// Reads every file once so both sides start with the same warm page cache.
void WarmCache(const std::vector<fs::path>& files, double* mean_kb) {
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
      total += static_cast<uint64_t>(in.gcount());
      if (in.eof()) break;
    }
  }
  *mean_kb = files.empty() ? 0 : static_cast<double>(total) / 1e3 / static_cast<double>(files.size());
}

absl::StatusOr<SideResult> RunSluice(const std::string& spec, const std::string& spec_name,
                                     const PipelineBenchOptions& options, int cores, const std::vector<int>& cpus,
                                     std::vector<std::string>* plan) {
  auto def = pipeline::ParsePipelineSpec(spec, spec_name);
  if (!def.ok()) return def.status();
  pipeline::RuntimeOptions runtime;
  runtime.cpu_budget = cores;
  auto created = pipeline::Pipeline::Create(*std::move(def), runtime);
  if (!created.ok()) return created.status();
  std::unique_ptr<pipeline::Pipeline> p = *std::move(created);
  *plan = absl::StrSplit(p->Explain(), '\n', absl::SkipWhitespace());
  Say("sluice: plan:");
  for (const auto& line : *plan) Say(absl::StrCat("  ", line));

  // Pin this thread; the pipeline's threads inherit the mask when the iterator starts them.
  const std::vector<int> previous = AllowedCpus();
  const bool pinned = SetThreadCpus(cpus);
  SideResult result;
  absl::Status status;
  {
    auto it = p->MakeIterator();
    if (!it.ok()) {
      if (pinned) SetThreadCpus(previous);
      return it.status();
    }
    int64_t batches = 0;
    double start = 0, cpu_start = 0, last_report = Now();
    while (true) {
      auto next = (*it)->Next();
      if (!next.ok()) {
        status = next.status();
        break;
      }
      if (!next->has_value()) {
        status = absl::InternalError("the pipeline ended; it should repeat forever");
        break;
      }
      const pipeline::Tensor* image = (*next)->Find("image");
      if (image == nullptr || image->rank() != 4 || image->dtype() != pipeline::DType::kFloat32 ||
          image->shape()[1] != 3 || image->shape()[2] != 224 || image->shape()[3] != 224) {
        status = absl::InternalError(absl::StrCat("unexpected batch: ", (*next)->DebugString()));
        break;
      }
      ++batches;
      if (batches == kWarmupBatches) {
        start = Now();
        cpu_start = ProcessCpuSeconds();
        continue;
      }
      if (batches < kWarmupBatches) continue;
      result.images += image->shape()[0];
      const double now = Now();
      if (now - last_report >= 5) {
        Say(absl::StrFormat("sluice: %d images in %.1f s (%.1f images/s)", result.images, now - start,
                            static_cast<double>(result.images) / (now - start)));
        last_report = now;
      }
      if (now - start >= options.seconds) {
        result.seconds = now - start;
        result.cpu_seconds = ProcessCpuSeconds() - cpu_start;
        break;
      }
    }
  }  // the iterator (and its threads) end here
  if (pinned) SetThreadCpus(previous);
  if (!status.ok()) return status;
  Say("sluice: per-stage statistics:");
  Say(pipeline::FormatStatsTable(p->Stats(), result.seconds));
  return result;
}

absl::StatusOr<SideResult> RunTorch(const PipelineBenchOptions& options, const fs::path& dir, int cores,
                                    const std::vector<int>& cpus, std::string* version) {
  const std::string script = (fs::path(BenchPipelineDir()) / "torch_pipeline.py").string();
  const std::string command =
      absl::StrCat(ShellQuote(options.python), " ", ShellQuote(script), " --images ", ShellQuote(dir.string()),
                   " --workers ", cores, " --seconds ", options.seconds, " --batch ", options.batch_size, " --cpus ",
                   absl::StrJoin(cpus, ","), " 2>&1");
  std::string last;
  int rc = RunCommand(command, [&](const std::string& line) {
    if (!last.empty()) Say(last);
    last = line;
  });
  if (rc != 0) {
    if (!last.empty()) Say(last);
    return absl::InternalError(absl::StrCat("torch_pipeline.py failed (exit ", rc, ")"));
  }
  return ParseTorchResult(last, version);
}

}  // namespace

std::string BenchPipelineDir() {
  if (const char* env = std::getenv("SLUICE_BENCH_PIPELINE_DIR"); env != nullptr && *env != '\0') return env;
  return SLUICE_BENCH_PIPELINE_SOURCE_DIR;
}

std::string ExpandSpecTemplate(absl::string_view text, absl::string_view images_dir, int batch_size) {
  return absl::StrReplaceAll(text, {{"${IMAGES}", images_dir}, {"${BATCH}", absl::StrCat(batch_size)}});
}

std::vector<int> PickCpus(const std::vector<int>& allowed, int count) {
  if (count <= 0 || count >= static_cast<int>(allowed.size())) return allowed;
  return std::vector<int>(allowed.begin(), allowed.begin() + count);
}

absl::StatusOr<SideResult> ParseTorchResult(absl::string_view line, std::string* torch_version) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("torch_pipeline.py: last line is not a JSON object: '", line, "'"));
  }
  for (const char* key : {"images", "seconds", "cpu_seconds"}) {
    if (!j.contains(key) || !j[key].is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("torch_pipeline.py: result lacks numeric '", key, "': '", line, "'"));
    }
  }
  SideResult r;
  r.images = j["images"].get<int64_t>();
  r.seconds = j["seconds"].get<double>();
  r.cpu_seconds = j["cpu_seconds"].get<double>();
  if (r.seconds <= 0) return absl::InvalidArgumentError("torch_pipeline.py: non-positive measured time");
  if (torch_version != nullptr && j.contains("torch") && j["torch"].is_string()) {
    *torch_version = j["torch"].get<std::string>();
  }
  return r;
}

std::string ReportJson(const BenchReport& r) {
  auto per_sec = [](const SideResult& s) { return s.seconds > 0 ? static_cast<double>(s.images) / s.seconds : 0.0; };
  auto per_cpu = [](const SideResult& s) {
    return s.cpu_seconds > 0 ? static_cast<double>(s.images) / s.cpu_seconds : 0.0;
  };
  const double cores = std::max(1, r.cores);
  json out;
  out["benchmark"] = "pipeline";
  out["cores"] = r.cores;
  out["images"] = r.dataset_images;
  out["sluice_images_per_sec"] = per_sec(r.sluice);
  out["sluice_images_per_sec_per_core"] = per_sec(r.sluice) / cores;
  if (r.torch.has_value()) {
    out["torch_images_per_sec"] = per_sec(*r.torch);
    out["torch_images_per_sec_per_core"] = per_sec(*r.torch) / cores;
    const double t = per_sec(*r.torch);
    out["ratio"] = t > 0 ? json(per_sec(r.sluice) / t) : json(nullptr);
  } else {
    out["torch_images_per_sec"] = nullptr;
    out["torch_images_per_sec_per_core"] = nullptr;
    out["ratio"] = nullptr;
  }
  json d;
  d["images_dir"] = r.images_dir;
  d["dataset_mean_kb"] = r.dataset_mean_kb;
  d["batch_size"] = r.batch_size;
  d["machine"] = r.machine;
  d["sluice_images_measured"] = r.sluice.images;
  d["sluice_seconds"] = r.sluice.seconds;
  d["sluice_cpu_seconds"] = r.sluice.cpu_seconds;
  d["sluice_images_per_cpu_second"] = per_cpu(r.sluice);
  if (r.torch.has_value()) {
    d["torch_images_measured"] = r.torch->images;
    d["torch_seconds"] = r.torch->seconds;
    d["torch_cpu_seconds"] = r.torch->cpu_seconds;
    d["torch_images_per_cpu_second"] = per_cpu(*r.torch);
    const double tc = per_cpu(*r.torch);
    d["cpu_efficiency_ratio"] = tc > 0 ? json(per_cpu(r.sluice) / tc) : json(nullptr);
    d["torch_version"] = r.torch_version;
  } else {
    d["torch_error"] = r.torch_error;
  }
  d["sluice_plan"] = r.plan;
  d["ffcv_anchor_images_per_sec_per_vcpu"] = kFfcvAnchorPerVcpu;
  d["sluice_vs_ffcv_anchor"] = per_sec(r.sluice) / cores / kFfcvAnchorPerVcpu;
  out["details"] = d;
  return out.dump();
}

void AddPipelineBenchFlags(CLI::App* app, PipelineBenchOptions& options) {
  app->add_option("--images", options.images_dir,
                  "directory of *.jpg files (made by make_jpeg_dataset.py if it has none; default "
                  "$SLUICE_BENCH_IMAGES or <tmp>/sluice-bench-jpeg)");
  app->add_option("--cores", options.cores, "CPUs for each side (default: all)")->check(CLI::NonNegativeNumber);
  app->add_option("--seconds", options.seconds, "measured seconds per side (default 20)")
      ->check(CLI::PositiveNumber);
  app->add_option("--batch", options.batch_size, "batch size (default 128)")->check(CLI::PositiveNumber);
  app->add_option("--count", options.image_count, "JPEGs to generate when the set is missing (default 2048)")
      ->check(CLI::PositiveNumber);
  app->add_flag_function("--no-torch", [&options](int64_t) { options.run_torch = false; },
                "run only the Sluice side");
}

int RunPipelineBenchmark(const PipelineBenchOptions& options) {
  const bool explicit_dir = !options.images_dir.empty();
  fs::path dir = options.images_dir;
  if (!explicit_dir) {
    const char* env = std::getenv("SLUICE_BENCH_IMAGES");
    dir = (env != nullptr && *env != '\0') ? fs::path(env) : fs::temp_directory_path() / "sluice-bench-jpeg";
  }
  dir = fs::absolute(dir);
  if (absl::Status st = EnsureDataset(options, dir, explicit_dir); !st.ok()) {
    std::cerr << "bench pipeline: " << st.message() << "\n";
    return 1;
  }
  const std::vector<fs::path> files = JpegFiles(dir);

  BenchReport report;
  report.images_dir = dir.string();
  report.dataset_images = static_cast<int64_t>(files.size());
  report.batch_size = options.batch_size;
  report.machine = CpuModel();
  const std::vector<int> allowed = AllowedCpus();
  const std::vector<int> cpus = PickCpus(allowed, options.cores);
  report.cores = static_cast<int>(cpus.size());
  WarmCache(files, &report.dataset_mean_kb);
  Say(absl::StrFormat("bench pipeline: %d JPEGs (%.1f kB mean) in %s; %d cores (CPUs %s); %.0f s per side",
                      files.size(), report.dataset_mean_kb, dir.string(), report.cores, absl::StrJoin(cpus, ","),
                      options.seconds));

  const std::string spec_path = (fs::path(BenchPipelineDir()) / "resnet.yaml").string();
  std::ifstream spec_in(spec_path);
  if (!spec_in) {
    std::cerr << "bench pipeline: cannot read " << spec_path << " (set SLUICE_BENCH_PIPELINE_DIR)\n";
    return 1;
  }
  std::stringstream spec_text;
  spec_text << spec_in.rdbuf();
  const std::string spec = ExpandSpecTemplate(spec_text.str(), dir.string(), options.batch_size);

  Say("sluice: running");
  auto sluice = RunSluice(spec, spec_path, options, report.cores, cpus, &report.plan);
  if (!sluice.ok()) {
    std::cerr << "bench pipeline: sluice run failed: " << sluice.status().message() << "\n";
    return 1;
  }
  report.sluice = *sluice;
  Say(absl::StrFormat("sluice: %.1f images/s (%.1f per core, %.1f per CPU-second)",
                      static_cast<double>(report.sluice.images) / report.sluice.seconds,
                      static_cast<double>(report.sluice.images) / report.sluice.seconds / report.cores,
                      static_cast<double>(report.sluice.images) / std::max(1e-9, report.sluice.cpu_seconds)));

  int rc = 0;
  if (options.run_torch) {
    Say("torch: running torch_pipeline.py (DataLoader + torchvision)");
    auto torch = RunTorch(options, dir, report.cores, cpus, &report.torch_version);
    if (torch.ok()) {
      report.torch = *torch;
      Say(absl::StrFormat("torch: %.1f images/s (%.1f per core, %.1f per CPU-second)",
                          static_cast<double>(torch->images) / torch->seconds,
                          static_cast<double>(torch->images) / torch->seconds / report.cores,
                          static_cast<double>(torch->images) / std::max(1e-9, torch->cpu_seconds)));
    } else {
      report.torch_error = std::string(torch.status().message());
      std::cerr << "bench pipeline: " << report.torch_error << "\n";
      rc = 1;
    }
  } else {
    report.torch_error = "skipped (--no-torch)";
  }
  std::cout << ReportJson(report) << std::endl;
  return rc;
}

}  // namespace sluice::bench
