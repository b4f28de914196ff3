#include "bench/pipeline/pipeline_bench.h"

#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
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

// Progress goes to stderr; stdout carries only the JSON line.
void Say(const std::string& line) {
  std::cerr << line << "\n";
  std::cerr.flush();
}

std::vector<double> LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  in >> a >> b >> c;
  return {a, b, c};
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

absl::Status EnsureDataset(const PipelineBenchOptions& options, const fs::path& dir, bool explicit_dir) {
  return EnsureJpegDataset(options.python, dir.string(), options.image_count, explicit_dir);
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
                                     std::vector<std::string>* plan, bool print_stats) {
  auto def = pipeline::ParsePipelineSpec(spec, spec_name);
  if (!def.ok()) return def.status();
  pipeline::RuntimeOptions runtime;
  runtime.cpu_budget = cores;
  auto created = pipeline::Pipeline::Create(*std::move(def), runtime);
  if (!created.ok()) return created.status();
  std::unique_ptr<pipeline::Pipeline> p = *std::move(created);
  if (plan->empty()) {
    *plan = absl::StrSplit(p->Explain(), '\n', absl::SkipWhitespace());
    Say("sluice: plan:");
    for (const auto& line : *plan) Say(absl::StrCat("  ", line));
  }

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
        cpu_start = ThisProcessCpuSeconds();
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
        result.cpu_seconds = ThisProcessCpuSeconds() - cpu_start;
        break;
      }
    }
  }  // the iterator (and its threads) end here
  if (pinned) SetThreadCpus(previous);
  if (!status.ok()) return status;
  if (print_stats) {
    Say("sluice: per-stage statistics (last run):");
    Say(pipeline::FormatStatsTable(p->Stats(), result.seconds));
  }
  return result;
}

absl::StatusOr<SideResult> RunTorch(const PipelineBenchOptions& options, const fs::path& dir, int cores,
                                    const std::vector<int>& cpus, const std::string& variant, std::string* version) {
  const std::string script = (fs::path(BenchPipelineDir()) / "torch_pipeline.py").string();
  const std::string command =
      absl::StrCat(ShellQuote(options.python), " ", ShellQuote(script), " --images ", ShellQuote(dir.string()),
                   " --workers ", cores, " --variant ", variant, " --seconds ", options.seconds, " --batch ",
                   options.batch_size, " --cpus ", absl::StrJoin(cpus, ","), " 2>&1");
  std::string last;
  int rc = RunCommand(command, [&](const std::string& line) {
    if (!last.empty()) Say(last);
    last = line;
  });
  if (rc != 0) {
    if (!last.empty()) Say(last);
    return absl::InternalError(absl::StrCat("torch_pipeline.py --variant ", variant, " failed (exit ", rc, ")"));
  }
  return ParseTorchResult(last, version);
}

}  // namespace

std::string BenchPipelineDir() {
  if (const char* env = std::getenv("SLUICE_BENCH_PIPELINE_DIR"); env != nullptr && *env != '\0') return env;
  return SLUICE_BENCH_PIPELINE_SOURCE_DIR;
}

absl::Status EnsureJpegDataset(const std::string& python, const std::string& dir_name, int count, bool explicit_dir) {
  const fs::path dir = dir_name;
  if (explicit_dir && !JpegFiles(dir).empty()) {
    Say(absl::StrCat("bench: using the JPEGs already in ", dir.string()));
    return absl::OkStatus();
  }
  const std::string script = (fs::path(BenchPipelineDir()) / "make_jpeg_dataset.py").string();
  const std::string command = absl::StrCat(ShellQuote(python), " ", ShellQuote(script), " ", ShellQuote(dir.string()),
                                           " --count ", count, " 2>&1");
  int rc = RunCommand(command, [](const std::string& line) { Say(line); });
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("make_jpeg_dataset.py failed (exit ", rc, "): ", command));
  }
  if (JpegFiles(dir).empty()) return absl::InternalError(absl::StrCat("no JPEGs in ", dir.string()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResnetPipelineSpec(const std::string& images_dir, int batch_size) {
  const std::string spec_path = (fs::path(BenchPipelineDir()) / "resnet.yaml").string();
  absl::StatusOr<std::string> text = ReadWholeFile(spec_path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat(text.status().message(), " (set SLUICE_BENCH_PIPELINE_DIR)"));
  return ExpandSpecTemplate(*text, fs::absolute(images_dir).string(), batch_size);
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

std::string RoundOrder(bool with_torch) { return with_torch ? "SUBBUS" : "SS"; }

namespace {

json SpreadJson(const RunSpread& s) { return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", s.n}}; }

std::vector<double> PerCpu(const std::vector<SideResult>& runs) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(r.images_per_cpu_second());
  return v;
}
std::vector<double> PerSec(const std::vector<SideResult>& runs) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(r.images_per_second());
  return v;
}

json RunsJson(const std::vector<SideResult>& runs) {
  json out = json::array();
  for (const auto& r : runs) {
    out.push_back({{"images", r.images}, {"seconds", r.seconds}, {"cpu_seconds", r.cpu_seconds},
                   {"images_per_second", r.images_per_second()}, {"images_per_cpu_second", r.images_per_cpu_second()}});
  }
  return out;
}

json RatioOrNull(double a, double b) { return a > 0 && b > 0 ? json(a / b) : json(nullptr); }

// Per round r: (images / CPU-seconds of a's runs 2r, 2r+1) / (the same for b): the two runs of each
// side sit symmetrically in the round (S U B B U S), so drift within the round cancels.
std::vector<double> RoundRatios(const std::vector<SideResult>& a, const std::vector<SideResult>& b, bool per_cpu) {
  std::vector<double> out;
  for (size_t i = 0; i + 1 < a.size() && i + 1 < b.size(); i += 2) {
    auto rate = [per_cpu](const SideResult& x, const SideResult& y) {
      const double denominator = per_cpu ? x.cpu_seconds + y.cpu_seconds : x.seconds + y.seconds;
      return denominator > 0 ? static_cast<double>(x.images + y.images) / denominator : 0.0;
    };
    const double ra = rate(a[i], a[i + 1]), rb = rate(b[i], b[i + 1]);
    if (ra > 0 && rb > 0) out.push_back(ra / rb);
  }
  return out;
}

}  // namespace

std::string ReportJson(const BenchReport& r) {
  const double cores = std::max(1, r.cores);
  const RunSpread s_cpu = SpreadOfRuns(PerCpu(r.sluice)), s_sec = SpreadOfRuns(PerSec(r.sluice));
  const RunSpread u_cpu = SpreadOfRuns(PerCpu(r.torch_usual)), u_sec = SpreadOfRuns(PerSec(r.torch_usual));
  const RunSpread b_cpu = SpreadOfRuns(PerCpu(r.torch_best)), b_sec = SpreadOfRuns(PerSec(r.torch_best));
  const bool usual = !r.torch_usual.empty(), best = !r.torch_best.empty();
  json out;
  out["benchmark"] = "pipeline";
  out["cores"] = r.cores;
  out["images"] = r.dataset_images;
  out["rounds"] = r.rounds;
  out["order"] = RoundOrder(usual || best);
  out["unit"] = "images per CPU-second (process + DataLoader workers), median of runs";
  // The headline: per CPU-second, against the usual torch recipe.
  out["ratio"] = RatioOrNull(s_cpu.median, u_cpu.median);
  out["ratio_vs_usual"] = out["ratio"];
  out["ratio_vs_best"] = RatioOrNull(s_cpu.median, b_cpu.median);
  out["wall_ratio_vs_usual"] = RatioOrNull(s_sec.median, u_sec.median);
  out["wall_ratio_vs_best"] = RatioOrNull(s_sec.median, b_sec.median);
  out["sluice_images_per_cpu_second"] = SpreadJson(s_cpu);
  out["torch_usual_images_per_cpu_second"] = usual ? SpreadJson(u_cpu) : json(nullptr);
  out["torch_best_images_per_cpu_second"] = best ? SpreadJson(b_cpu) : json(nullptr);
  out["sluice_images_per_sec"] = SpreadJson(s_sec);
  out["torch_usual_images_per_sec"] = usual ? SpreadJson(u_sec) : json(nullptr);
  out["torch_best_images_per_sec"] = best ? SpreadJson(b_sec) : json(nullptr);
  out["sluice_images_per_sec_per_core"] = s_sec.median / cores;
  out["torch_images_per_sec_per_core"] = usual ? json(u_sec.median / cores) : json(nullptr);
  out["torch_best_images_per_sec_per_core"] = best ? json(b_sec.median / cores) : json(nullptr);
  out["ratio_vs_usual_per_round"] = usual ? SpreadJson(SpreadOfRuns(RoundRatios(r.sluice, r.torch_usual, true)))
                                          : json(nullptr);
  out["ratio_vs_best_per_round"] = best ? SpreadJson(SpreadOfRuns(RoundRatios(r.sluice, r.torch_best, true)))
                                        : json(nullptr);
  json d;
  d["images_dir"] = r.images_dir;
  d["dataset_mean_kb"] = r.dataset_mean_kb;
  d["batch_size"] = r.batch_size;
  d["machine"] = r.machine;
  d["load_avg_start"] = r.load_avg_start;
  d["load_avg_end"] = r.load_avg_end;
  d["sluice_runs"] = RunsJson(r.sluice);
  if (usual || best) {
    d["torch_usual_runs"] = RunsJson(r.torch_usual);
    d["torch_best_runs"] = RunsJson(r.torch_best);
    d["torch_version"] = r.torch_version;
  }
  if (!r.torch_error.empty()) d["torch_error"] = r.torch_error;
  d["sluice_plan"] = r.plan;
  d["ffcv_anchor_images_per_sec_per_vcpu"] = kFfcvAnchorPerVcpu;
  d["sluice_vs_ffcv_anchor"] = s_cpu.median / kFfcvAnchorPerVcpu;
  out["details"] = d;
  return out.dump();
}

void AddPipelineBenchFlags(CLI::App* app, PipelineBenchOptions& options) {
  app->add_option("--images", options.images_dir,
                  "directory of *.jpg files (made by make_jpeg_dataset.py if it has none; default "
                  "$SLUICE_BENCH_IMAGES or <tmp>/sluice-bench-jpeg)");
  app->add_option("--cores", options.cores, "CPUs for each side (default: all)")->check(CLI::NonNegativeNumber);
  app->add_option("--seconds", options.seconds, "measured seconds per run (default 5)")
      ->check(CLI::PositiveNumber);
  app->add_option("--rounds", options.rounds, "rounds of Sluice, torch usual, torch best, best, usual, Sluice (default 2)")
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
  report.machine = CpuModelName();
  const std::vector<int> allowed = AllowedCpus();
  const std::vector<int> cpus = PickCpus(allowed, options.cores);
  report.cores = static_cast<int>(cpus.size());
  WarmCache(files, &report.dataset_mean_kb);
  Say(absl::StrFormat("bench pipeline: %d JPEGs (%.1f kB mean) in %s; %d cores (CPUs %s); %.0f s per run",
                      files.size(), report.dataset_mean_kb, dir.string(), report.cores, absl::StrJoin(cpus, ","),
                      options.seconds));

  const std::string spec_path = (fs::path(BenchPipelineDir()) / "resnet.yaml").string();  // names the spec in errors
  absl::StatusOr<std::string> resnet_spec = ResnetPipelineSpec(dir.string(), options.batch_size);
  if (!resnet_spec.ok()) {
    std::cerr << "bench pipeline: " << resnet_spec.status().message() << "\n";
    return 1;
  }
  const std::string spec = *std::move(resnet_spec);

  report.rounds = options.rounds;
  report.load_avg_start = LoadAverage();
  const std::string order = RoundOrder(options.run_torch);
  Say(absl::StrFormat("bench pipeline: %d rounds of %s (S: Sluice, U: torch usual, B: torch best), %.0f s each run; "
                      "load average %.2f",
                      options.rounds, order, options.seconds, report.load_avg_start[0]));
  int rc = 0;
  bool torch_ok = options.run_torch;
  if (!options.run_torch) report.torch_error = "skipped (--no-torch)";
  for (int round = 0; round < options.rounds && rc == 0; ++round) {
    for (size_t k = 0; k < order.size(); ++k) {
      const char side = order[k];
      const std::string tag = absl::StrFormat("round %d/%d run %d/%d", round + 1, options.rounds, k + 1, order.size());
      if (side == 'S') {
        const bool last = round + 1 == options.rounds && k + 1 == order.size();
        auto run = RunSluice(spec, spec_path, options, report.cores, cpus, &report.plan, last);
        if (!run.ok()) {
          std::cerr << "bench pipeline: sluice run failed: " << run.status().message() << "\n";
          return 1;
        }
        report.sluice.push_back(*run);
        Say(absl::StrFormat("%s sluice: %.1f images/s, %.1f per CPU-second", tag, run->images_per_second(),
                            run->images_per_cpu_second()));
      } else if (torch_ok) {
        const std::string variant = side == 'U' ? "usual" : "best";
        auto run = RunTorch(options, dir, report.cores, cpus, variant, &report.torch_version);
        if (!run.ok()) {
          report.torch_error = std::string(run.status().message());
          std::cerr << "bench pipeline: " << report.torch_error << "\n";
          torch_ok = false;
          rc = 1;
          continue;
        }
        (side == 'U' ? report.torch_usual : report.torch_best).push_back(*run);
        Say(absl::StrFormat("%s torch %s: %.1f images/s, %.1f per CPU-second", tag, variant,
                            run->images_per_second(), run->images_per_cpu_second()));
      }
    }
  }
  report.load_avg_end = LoadAverage();
  if (!torch_ok) {
    // A side that failed part-way is not reported: its runs no longer pair with Sluice's.
    report.torch_usual.clear();
    report.torch_best.clear();
  }
  std::cout << ReportJson(report) << std::endl;
  return rc;
}

}  // namespace sluice::bench
