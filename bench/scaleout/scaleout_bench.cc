#include "bench/scaleout/scaleout_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "bench/dataservice/bench_report.h"
#include "bench/dataservice/bench_service.h"
#include "bench/dataservice/trial_spread.h"
#include "common/log.h"
#include "dataplane/client/data_service_client.h"
#include "local/cpu_quota.h"

namespace sluice::bench {
namespace {

using local::CpuQuota;
using local::LocalDataService;
using local::LocalDataServiceOptions;
using local::ThrottleStats;

absl::Status ValidateOptions(const ScaleoutBenchOptions& o) {
  if (o.worker_counts.empty()) return absl::InvalidArgumentError("--workers: give at least one worker count");
  for (int n : o.worker_counts) {
    if (n < 1 || n > 64) return absl::InvalidArgumentError(absl::StrCat("--workers: ", n, " is outside [1, 64]"));
  }
  if (o.cpus_per_worker < 0.01 || o.cpus_per_worker > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--cpus_per_worker must be in [0.01, 64], got ", o.cpus_per_worker));
  }
  if (o.seconds <= 0) return absl::InvalidArgumentError(absl::StrCat("--seconds must be > 0, got ", o.seconds));
  if (o.windows < 1 || o.windows > 100) {
    return absl::InvalidArgumentError(absl::StrCat("--windows must be in [1, 100], got ", o.windows));
  }
  if (o.warmup_seconds < 0) return absl::InvalidArgumentError(absl::StrCat("--warmup must be >= 0, got ", o.warmup_seconds));
  if (o.image_size < 2 || o.image_size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--image_size must be in [2, 4096], got ", o.image_size));
  }
  if (o.output_size < 1 || o.output_size > o.image_size) {
    return absl::InvalidArgumentError(absl::StrCat("--output_size must be in [1, --image_size], got ", o.output_size));
  }
  if (o.quota != "auto" && o.quota != "taskset") {
    return absl::InvalidArgumentError(absl::StrCat("--quota: '", o.quota, "' is not auto or taskset"));
  }
  return absl::OkStatus();
}

int Fail(const absl::Status& status, const std::string& log_dir) {
  std::cerr << "scaleout: " << status.message() << "\n";
  if (!log_dir.empty()) std::cerr << "scaleout: the processes' logs are kept in " << log_dir << "\n";
  return 1;
}

struct WorkerSample {
  std::vector<double> cpu_seconds;
  std::vector<ThrottleStats> throttle;
};

WorkerSample Sample(const LocalDataService& ds, const CpuQuota& quota) {
  WorkerSample s;
  for (int i = 0; i < ds.num_workers(); ++i) {
    s.cpu_seconds.push_back(ProcessCpuSeconds(ds.worker(i).process->pid()).value_or(0));
    s.throttle.push_back(quota.Stats(i));
  }
  return s;
}

// Reads a fresh SHARDING_OFF job from all current workers: a warm-up, then `windows` consecutive
// windows; the point is their median.
absl::StatusOr<ScaleoutPoint> Measure(LocalDataService& ds, const CpuQuota& quota, const pipeline::PipelineDef& def,
                                      const ScaleoutBenchOptions& o) {
  client::DataServiceClientOptions co;
  co.dispatcher_address = ds.dispatcher_address();
  co.pipeline = def;
  co.sharding = service::SHARDING_OFF;
  co.compression = service::COMPRESSION_NONE;
  co.heartbeat_interval = absl::Milliseconds(100);
  auto created = client::DataServiceClient::Create(co);
  if (!created.ok()) return created.status();
  std::unique_ptr<client::DataServiceClient> c = *std::move(created);
  const int n = ds.num_workers();
  absl::Time first = absl::InfiniteFuture(), start = absl::InfiniteFuture();
  WorkerSample before;
  int64_t elements = 0;
  ScaleoutPoint p;
  p.workers = n;
  std::vector<double> cpu_per_second;
  int64_t periods = 0, throttled = 0;
  while (static_cast<int>(p.window_elements_per_second.size()) < o.windows) {
    auto next = c->GetNext(absl::Seconds(60));
    if (!next.ok()) return next.status();
    if (!next->has_value()) return absl::DataLossError("the scale-out job ended before the measurement window closed");
    const absl::Time now = absl::Now();
    if (start == absl::InfiniteFuture()) {
      if (first == absl::InfiniteFuture()) first = now;
      if (now - first >= absl::Seconds(o.warmup_seconds)) {
        start = now;
        before = Sample(ds, quota);
      }
      continue;
    }
    ++elements;
    if (now - start >= absl::Seconds(o.seconds)) {
      const WorkerSample after = Sample(ds, quota);
      const double wall = absl::ToDoubleSeconds(now - start);
      double cpu = 0;
      for (int i = 0; i < n; ++i) {
        cpu += after.cpu_seconds[i] - before.cpu_seconds[i];
        periods += after.throttle[i].periods - before.throttle[i].periods;
        throttled += after.throttle[i].throttled_periods - before.throttle[i].throttled_periods;
      }
      p.window_elements_per_second.push_back(static_cast<double>(elements) / wall);
      cpu_per_second.push_back(cpu / wall / n);
      std::fprintf(stderr, "scaleout: %d workers  window %zu/%d  %9.1f elements/s\n", n,
                   p.window_elements_per_second.size(), o.windows, p.window_elements_per_second.back());
      // The next window starts with this element's arrival.
      start = now;
      before = after;
      elements = 0;
    }
  }
  p.elements_per_second = Median(p.window_elements_per_second);
  p.worker_cpu_per_second = Median(cpu_per_second);
  p.throttled_fraction = Ratio(static_cast<double>(throttled), static_cast<double>(periods));
  c->Cancel();
  return p;
}

}  // namespace

std::string ScaleoutPipelineSpec(const ScaleoutBenchOptions& o) {
  // 10 million elements: far more than any worker reads in a point (about 600/s for ~15 s), and
  // only 39,063 splits to list. (With 1e9, 3.9 million splits, a worker held to 0.2 CPU on a loaded
  // machine took over a minute to list them for each new job.)
  return absl::StrCat("name: scaleout-bench\n",
                      "source: {synthetic: {count: 10000000, shape: [", o.image_size, ", ", o.image_size,
                      ", 3], dtype: uint8, split_size: 256}}\n",
                      "steps:\n",
                      "  - map:\n",
                      "      parallelism: 1\n",
                      "      ops:\n",
                      "        - resize: {field: data, size: [", o.output_size, "]}\n",
                      "        - normalize: {field: data, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n",
                      "options: {cpu_budget: 1}\n");
}

double ScalingEfficiency(double throughput_n, int n, double throughput_1) {
  if (n <= 0) return 0;
  return Ratio(throughput_n, n * throughput_1);
}

nlohmann::json ScaleoutResultJson(const std::vector<ScaleoutPoint>& points, const std::string& mechanism,
                                  const nlohmann::json& extra) {
  nlohmann::json out = {{"benchmark", "scaleout"}, {"quota_mechanism", mechanism}};
  double one = 0;
  for (const auto& p : points) {
    if (p.workers == 1) one = p.elements_per_second;
  }
  nlohmann::json list = nlohmann::json::array();
  const ScaleoutPoint* max = nullptr;
  for (const auto& p : points) {
    const double eff = ScalingEfficiency(p.elements_per_second, p.workers, one);
    out[absl::StrCat("throughput_", p.workers)] = Round(p.elements_per_second, 1);
    out[absl::StrCat("efficiency_", p.workers)] = Round(eff, 3);
    std::vector<double> windows = p.window_elements_per_second;
    if (windows.empty()) windows.push_back(p.elements_per_second);
    nlohmann::json rounded = nlohmann::json::array();
    for (double w : windows) rounded.push_back(Round(w, 1));
    list.push_back({{"workers", p.workers},
                    {"elements_per_second", Round(p.elements_per_second, 1)},
                    {"elements_per_second_spread", TrialSpreadJson(SpreadOfRuns(windows), 1)},
                    {"window_elements_per_second", rounded},
                    {"per_worker_elements_per_second", Round(Ratio(p.elements_per_second, p.workers), 1)},
                    {"efficiency", Round(eff, 3)},
                    {"worker_cpu_per_second", Round(p.worker_cpu_per_second, 3)},
                    {"throttled_fraction", Round(p.throttled_fraction, 3)}});
    if (max == nullptr || p.workers > max->workers) max = &p;
  }
  out["points"] = std::move(list);
  out["max_workers"] = max == nullptr ? 0 : max->workers;
  out["efficiency_at_max"] = max == nullptr ? 0.0 : Round(ScalingEfficiency(max->elements_per_second, max->workers, one), 3);
  // How far the efficiency can move with the windows: the largest count's slowest (fastest) window
  // over the one-worker point's fastest (slowest) window.
  const ScaleoutPoint* base = nullptr;
  for (const auto& p : points) {
    if (p.workers == 1) base = &p;
  }
  nlohmann::json range = nullptr;
  if (max != nullptr && base != nullptr) {
    auto windows = [](const ScaleoutPoint& p) {
      return p.window_elements_per_second.empty() ? std::vector<double>{p.elements_per_second}
                                                  : p.window_elements_per_second;
    };
    const RunSpread m = SpreadOfRuns(windows(*max)), b = SpreadOfRuns(windows(*base));
    range = {Round(ScalingEfficiency(m.min, max->workers, b.max), 3), Round(ScalingEfficiency(m.max, max->workers, b.min), 3)};
  }
  out["efficiency_at_max_range"] = range;
  for (const auto& [key, value] : extra.items()) out[key] = value;
  return out;
}

void AddScaleoutBenchFlags(CLI::App* app, ScaleoutBenchOptions& o) {
  app->add_option("--workers", o.worker_counts, "worker counts to measure, ascending")->capture_default_str();
  app->add_option("--cpus_per_worker", o.cpus_per_worker, "CPU quota per worker (fraction of one CPU)")
      ->capture_default_str();
  app->add_option("--seconds", o.seconds, "seconds per measured window")->capture_default_str();
  app->add_option("--windows", o.windows, "measured windows per worker count (median and spread reported)")
      ->capture_default_str();
  app->add_option("--warmup", o.warmup_seconds, "unmeasured seconds per worker count")->capture_default_str();
  app->add_option("--image_size", o.image_size, "synthetic input image side (pixels)")->capture_default_str();
  app->add_option("--output_size", o.output_size, "image side after resize")->capture_default_str();
  app->add_option("--quota", o.quota, "auto (cgroup v2, v1, else taskset) or taskset")->capture_default_str();
  app->add_option("--bin_dir", o.bin_dir, "directory of sluice-dispatcher and sluice-worker (default: this binary's)");
  app->add_flag("--keep_logs", o.keep_logs, "keep the processes' logs");
}

int RunScaleoutBenchmark(const ScaleoutBenchOptions& o) {
  if (absl::Status s = ValidateOptions(o); !s.ok()) return Fail(s, "");
  log::SetMinLevel(log::Level::kWarning);  // the client's start-up lines would drown the progress
  auto def = ParseBenchPipeline(ScaleoutPipelineSpec(o), "scaleout");
  if (!def.ok()) return Fail(def.status(), "");
  std::vector<int> counts = o.worker_counts;
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  const MachineInfo machine = ReadMachineInfo();
  auto log_dir = MakeLogDir("scaleout");
  if (!log_dir.ok()) return Fail(log_dir.status(), "");

  // Every worker gets the same CPU limit; the supervisor sets the cgroups up (or falls back to
  // taskset) and removes them once the workers are gone.
  LocalDataServiceOptions dso = BenchServiceOptions(o.bin_dir, *log_dir, {"--job_gc_grace_ms=0", "--tick_interval_ms=50"});
  dso.worker_flags = {"--cpu_budget=1"};
  dso.worker_cpus = o.cpus_per_worker;
  dso.cpu_quota_cgroups = o.quota == "auto";
  dso.cpu_quota_group = absl::StrCat("sluice-bench-scaleout-", getpid());
  auto ds = StartBenchService(dso);
  if (!ds.ok()) return Fail(ds.status(), *log_dir);
  const CpuQuota* quota = (*ds)->cpu_quota();
  std::cerr << "scaleout: CPU limit per worker: " << quota->Describe() << std::endl;
  for (const auto& note : quota->notes()) std::cerr << "scaleout:   (" << note << ")" << std::endl;
  std::cerr << "scaleout: logs in " << *log_dir << std::endl;

  std::vector<ScaleoutPoint> points;
  for (int n : counts) {
    while ((*ds)->num_workers() < n) {
      if (absl::Status s = AddBenchWorker(**ds); !s.ok()) return Fail(s, *log_dir);
    }
    if (absl::Status s = (*ds)->WaitForWorkers(n, absl::Seconds(30)); !s.ok()) return Fail(s, *log_dir);
    if (absl::Status s = (*ds)->WaitForJobsFinished(absl::Seconds(20)); !s.ok()) return Fail(s, *log_dir);
    auto p = Measure(**ds, *quota, *def, o);
    if (!p.ok()) {
      return Fail(absl::Status(p.status().code(), absl::StrCat("measurement with ", n, " workers failed: ",
                                                               p.status().message())),
                  *log_dir);
    }
    const RunSpread spread = SpreadOfRuns(p->window_elements_per_second);
    std::fprintf(stderr,
                 "scaleout: %d workers  %9.1f elements/s median of %d windows (%.1f-%.1f; %.1f per worker, worker CPU "
                 "%.3f/s each, throttled %.0f%%)\n",
                 n, p->elements_per_second, spread.n, spread.min, spread.max, p->elements_per_second / n,
                 p->worker_cpu_per_second, 100 * p->throttled_fraction);
    points.push_back(*p);
  }
  const MachineInfo after = ReadMachineInfo();
  nlohmann::json extra = {
      {"quota", quota->Describe()},
      {"quota_notes", quota->notes()},
      {"cpus_per_worker", o.cpus_per_worker},
      {"mode", "processes: sluice-dispatcher + CPU-limited sluice-worker processes, client in the benchmark process"},
      {"pipeline", absl::StrCat("synthetic uint8 ", o.image_size, "x", o.image_size, "x3 -> resize ", o.output_size,
                                " -> normalize (float32), 1 thread per worker")},
      {"seconds_per_window", o.seconds},
      {"windows_per_point", o.windows},
      {"machine", ToJson(machine)},
      {"load_avg_after", {after.load1, after.load5, after.load15}},
  };
  const std::string mechanism = local::MechanismName(quota->mechanism());
  StopBenchService(*ds);
  if (!o.keep_logs) RemoveLogDir(*log_dir);
  std::cout << ScaleoutResultJson(points, mechanism, extra).dump() << std::endl;
  return 0;
}

}  // namespace sluice::bench
