#include "bench/autoorder/autoorder_bench.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "bench/common/bench_util.h"
#include "dataplane/pipeline/autoorder/auto_order.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/pipeline/tfrecord/example.h"
#include "dataplane/pipeline/tfrecord/tfrecord_writer.h"

#ifndef SLUICE_BENCH_AUTOORDER_SOURCE_DIR
#define SLUICE_BENCH_AUTOORDER_SOURCE_DIR "bench/autoorder"
#endif

namespace sluice::bench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void Say(const std::string& line) {
  std::cout << line << "\n";
  std::cout.flush();
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return load;
}

absl::Status EnsureData(const AutoOrderBenchOptions& options, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir / "jpeg", ec);
  if (JpegFiles(dir / "jpeg").empty()) {
    const std::string script = absl::StrCat(SLUICE_BENCH_AUTOORDER_SOURCE_DIR, "/../pipeline/make_jpeg_dataset.py");
    const std::string command = absl::StrCat(ShellQuote(options.python), " ", ShellQuote(script), " ",
                                             ShellQuote((dir / "jpeg").string()), " --count ", options.images, " 2>&1");
    Say(absl::StrCat("bench autoorder: making JPEGs: ", command));
    const int rc = RunCommand(command, [](const std::string& line) { std::cout << line << "\n"; });
    if (rc == -1) return absl::InternalError("cannot run make_jpeg_dataset.py");
    if (rc != 0 || JpegFiles(dir / "jpeg").empty()) {
      return absl::InternalError(absl::StrCat("make_jpeg_dataset.py failed: ", command));
    }
  }
  if (!fs::exists(dir / "detection.tfrecord")) {
    if (absl::Status s = WriteDetectionRecords(dir.string()); !s.ok()) return s;
  }
  if (!fs::exists(dir / "text.jsonl")) {
    if (absl::Status s = WriteTextDocuments(dir.string(), options.documents); !s.ok()) return s;
  }
  return absl::OkStatus();
}

struct Run {
  double elements = 0;  // output rows (batch sizes summed)
  double cpu_seconds = 0;
  double per_cpu_second() const { return cpu_seconds > 0 ? elements / cpu_seconds : 0; }
};

absl::StatusOr<Run> RunOnce(const pipeline::PipelineDef& def, int cores) {
  pipeline::RuntimeOptions runtime;
  runtime.cpu_budget = cores;
  auto created = pipeline::Pipeline::Create(def, runtime);
  if (!created.ok()) return created.status();
  Run run;
  const double start = ThisProcessCpuSeconds();
  {
    auto it = (*created)->MakeIterator();
    if (!it.ok()) return it.status();
    while (true) {
      auto next = (*it)->Next();
      if (!next.ok()) return next.status();
      if (!next->has_value()) break;
      const auto& fields = (*next)->fields();
      run.elements += fields.empty() || fields[0].second.rank() == 0 ? 1 : static_cast<double>(fields[0].second.shape()[0]);
    }
  }  // the iterator's threads are joined here
  run.cpu_seconds = ThisProcessCpuSeconds() - start;
  return run;
}

// Without "n" (unlike the pipeline benchmark's): every figure here has --rounds values.
json SpreadJson(const RunSpread& s) { return {{"median", s.median}, {"min", s.min}, {"max", s.max}}; }

}  // namespace

std::string ExpandDataTemplate(absl::string_view text, absl::string_view data_dir) {
  return absl::StrReplaceAll(text, {{"${DATA}", data_dir}});
}

std::string BenchAutoOrderDir() {
  const char* env = std::getenv("SLUICE_BENCH_AUTOORDER_DIR");
  return env != nullptr && *env != '\0' ? env : SLUICE_BENCH_AUTOORDER_SOURCE_DIR;
}

absl::Status WriteDetectionRecords(const std::string& dir) {
  const std::vector<fs::path> jpegs = JpegFiles(fs::path(dir) / "jpeg");
  if (jpegs.empty()) return absl::FailedPreconditionError(absl::StrCat("no JPEGs in ", dir, "/jpeg"));
  std::mt19937_64 rng(14);
  std::vector<std::string> records;
  for (const fs::path& path : jpegs) {
    auto bytes = ReadWholeFile(path);
    if (!bytes.ok()) return bytes.status();
    // 1-8 boxes; the largest is s x s pixels with s uniform in [16, 128], so about 40% of the images
    // have no box of at least 64 x 64 (the pipeline's filter drops those).
    const int boxes = 1 + static_cast<int>(rng() % 8);
    const double side = 16 + static_cast<double>(rng() % 113);
    pipeline::Tensor t = pipeline::Tensor::Allocate(pipeline::DType::kFloat32, {boxes, 4});
    float* b = t.mutable_data<float>();
    for (int k = 0; k < boxes; ++k) {
      const double s = k == 0 ? side : side * (0.2 + 0.8 * static_cast<double>(rng() % 1000) / 1000.0);
      const double y = static_cast<double>(rng() % 200), x = static_cast<double>(rng() % 200);
      b[k * 4 + 0] = static_cast<float>(y);
      b[k * 4 + 1] = static_cast<float>(x);
      b[k * 4 + 2] = static_cast<float>(y + s);
      b[k * 4 + 3] = static_cast<float>(x + s);
    }
    pipeline::Element e;
    e.Set("image", pipeline::Tensor::StringScalar(*std::move(bytes)));
    e.Set("boxes", std::move(t));
    e.Set("max_box_area", pipeline::Tensor::ScalarFloat(static_cast<float>(side * side)));
    auto encoded = pipeline::EncodeExample(e);
    if (!encoded.ok()) return encoded.status();
    records.push_back(*std::move(encoded));
  }
  return pipeline::WriteTFRecordFile((fs::path(dir) / "detection.tfrecord").string(), records);
}

absl::Status WriteTextDocuments(const std::string& dir, int documents) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> words(5.0, 0.9);  // median ~150 words, a long tail
  // A Zipf-like vocabulary of 5000 made-up words of 2-10 letters.
  std::vector<std::string> vocab;
  for (int i = 0; i < 5000; ++i) {
    std::string w;
    const int len = 2 + static_cast<int>(rng() % 9);
    for (int k = 0; k < len; ++k) w.push_back(static_cast<char>('a' + rng() % 26));
    vocab.push_back(w);
  }
  std::ofstream out(fs::path(dir) / "text.jsonl");
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir, "/text.jsonl"));
  for (int d = 0; d < documents; ++d) {
    const int n = std::clamp(static_cast<int>(words(rng)), 5, 4000);
    std::string text;
    for (int k = 0; k < n; ++k) {
      const double u = static_cast<double>(rng() % 1000000) / 1000000.0;
      const size_t rank = static_cast<size_t>(std::pow(5000.0, u)) - 1;  // log-uniform ranks: few words dominate
      if (k > 0) text.push_back(k % 17 == 0 ? '\n' : ' ');
      text += vocab[std::min(rank, vocab.size() - 1)];
    }
    json line = {{"text", text}, {"label", d % 5}};
    out << line.dump() << "\n";
  }
  return out.good() ? absl::OkStatus() : absl::InternalError("writing text.jsonl failed");
}

void AddAutoOrderBenchFlags(CLI::App* app, AutoOrderBenchOptions& options) {
  app->add_option("--data", options.data_dir,
                  "data directory (made if missing; default $SLUICE_BENCH_AUTOORDER_DATA or <tmp>/sluice-bench-autoorder)");
  app->add_option("--rounds", options.rounds, "rounds of A B B A runs (default 3)")->check(CLI::PositiveNumber);
  app->add_option("--cores", options.cores, "CPU budget of each run (default 1)")->check(CLI::PositiveNumber);
  app->add_option("--images", options.images, "JPEGs to make when missing (default 256)")->check(CLI::PositiveNumber);
  app->add_option("--documents", options.documents, "text documents to make when missing (default 4000)")
      ->check(CLI::PositiveNumber);
  app->add_option("--sample", options.sample, "AutoOrder's sample per reorderable part (default 64)")
      ->check(CLI::PositiveNumber);
  app->add_option("--pipelines", options.pipelines, "which of image, detection, text (default all)")->delimiter(',');
}

int RunAutoOrderBenchmark(const AutoOrderBenchOptions& options) {
  fs::path dir = options.data_dir;
  if (dir.empty()) {
    const char* env = std::getenv("SLUICE_BENCH_AUTOORDER_DATA");
    dir = (env != nullptr && *env != '\0') ? fs::path(env) : fs::temp_directory_path() / "sluice-bench-autoorder";
  }
  dir = fs::absolute(dir);
  if (absl::Status s = EnsureData(options, dir); !s.ok()) {
    std::cerr << "bench autoorder: " << s.message() << "\n";
    return 1;
  }
  const double load_start = LoadAverage();
  Say(absl::StrFormat("bench autoorder: data in %s; %d rounds of A B B A; CPU budget %d; load average %.2f",
                      dir.string(), options.rounds, options.cores, load_start));
  json pipelines = json::object();
  json ratios = json::object();
  for (const std::string& name : options.pipelines) {
    const fs::path spec_path = fs::path(BenchAutoOrderDir()) / (name + ".yaml");
    auto text = ReadWholeFile(spec_path);
    if (!text.ok()) {
      std::cerr << "bench autoorder: " << text.status().message() << " (pipelines: image, detection, text)\n";
      return 1;
    }
    auto written = pipeline::ParsePipelineSpec(ExpandDataTemplate(*text, dir.string()), spec_path.string());
    if (!written.ok()) {
      std::cerr << "bench autoorder: " << written.status().message() << "\n";
      return 1;
    }
    pipeline::AutoOrderOptions ao;
    ao.mode = pipeline::AutoOrderMode::kRelaxed;
    ao.sample_elements = options.sample;
    auto planned = pipeline::PlanAutoOrder(*written, ao);
    if (!planned.ok()) {
      std::cerr << "bench autoorder: " << name << ": " << planned.status().message() << "\n";
      return 1;
    }
    const pipeline::AutoOrderReport& report = planned->report;
    Say(absl::StrCat(name, ": ", pipeline::FormatAutoOrderReport(report)));
    std::vector<double> a_rates, b_rates, round_ratios;
    double elements = 0;
    for (int r = 0; r < options.rounds; ++r) {
      Run a1, b1, b2, a2;
      for (auto [run, def] : {std::pair<Run*, const pipeline::PipelineDef*>{&a1, &*written}, {&b1, &planned->def},
                              {&b2, &planned->def}, {&a2, &*written}}) {
        auto done = RunOnce(*def, options.cores);
        if (!done.ok()) {
          std::cerr << "bench autoorder: " << name << ": " << done.status().message() << "\n";
          return 1;
        }
        *run = *done;
      }
      if (a1.elements != b1.elements) {
        std::cerr << "bench autoorder: " << name << ": the rewritten pipeline produced " << b1.elements
                  << " elements, the original " << a1.elements << "\n";
        return 1;
      }
      elements = a1.elements;
      const double a = (a1.elements + a2.elements) / (a1.cpu_seconds + a2.cpu_seconds);
      const double b = (b1.elements + b2.elements) / (b1.cpu_seconds + b2.cpu_seconds);
      for (const Run* run : {&a1, &a2}) a_rates.push_back(run->per_cpu_second());
      for (const Run* run : {&b1, &b2}) b_rates.push_back(run->per_cpu_second());
      round_ratios.push_back(b / a);
      Say(absl::StrFormat("%s round %d: as written %.1f, rewritten %.1f elements per CPU-second: %.2fx", name, r + 1, a,
                          b, b / a));
    }
    const RunSpread a = SpreadOfRuns(a_rates), b = SpreadOfRuns(b_rates), ratio = SpreadOfRuns(round_ratios);
    const double median_ratio = a.median > 0 ? b.median / a.median : 0;
    json p = {{"spec", spec_path.string()},
              {"outcome", report.outcome()},
              {"written_order", absl::StrJoin(report.original_order(), " -> ")},
              {"rewritten_order", absl::StrJoin(report.chosen_order(), " -> ")},
              {"predicted_speedup", report.predicted_speedup()},
              {"sample_measured_speedup", report.measured_speedup()},
              {"max_abs_diff", report.max_abs_diff()},
              {"planning_cpu_seconds", report.planning_cpu_seconds()},
              {"elements_per_run", elements},
              {"written_per_cpu_second", SpreadJson(a)},
              {"rewritten_per_cpu_second", SpreadJson(b)},
              {"ratio_per_round", SpreadJson(ratio)},
              {"ratio", median_ratio}};
    if (!report.reason().empty()) p["reason"] = report.reason();
    pipelines[written->name()] = p;
    ratios[written->name()] = median_ratio;
    Say(absl::StrFormat("%s: rewritten / written elements per CPU-second: median %.2fx (rounds %.2f-%.2f)", name,
                        median_ratio, ratio.min, ratio.max));
  }
  json out = {{"benchmark", "autoorder"},
              {"machine", CpuModelName()},
              {"cores", options.cores},
              {"rounds", options.rounds},
              {"order", "A B B A per round (A: as written, B: AutoOrder relaxed)"},
              {"unit", "output elements per CPU-second of the process"},
              {"load_average_start", load_start},
              {"load_average_end", LoadAverage()},
              {"data", dir.string()},
              {"pipelines", pipelines},
              {"ratios", ratios}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace sluice::bench
