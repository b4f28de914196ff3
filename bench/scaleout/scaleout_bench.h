// `sluice bench scaleout`: throughput of one client reading a CPU-bound pipeline (synthetic images
// -> resize -> normalize) from 1, 2, 4 and 8 sluice-worker processes, each limited to a fraction of
// a CPU (local/cpu_quota.h: cgroup v2, else cgroup v1, else taskset+nice; the mechanism is reported).
// Workers are added between the measurements (1 -> 2 -> 4 -> 8); each worker count reads a fresh
// SHARDING_OFF job, so every worker runs the pipeline, for `windows` consecutive measured windows
// after a warm-up; a point reports the median and spread of its windows. Also samples each worker's
// CPU time and the cgroups' throttling counters over each window, to show the quota held. Progress
// goes to stderr, the JSON line to stdout.
//
// Threading: RunScaleoutBenchmark runs on the caller's thread (the supervisor forks on its own).
#ifndef SLUICE_BENCH_SCALEOUT_SCALEOUT_BENCH_H_
#define SLUICE_BENCH_SCALEOUT_SCALEOUT_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace sluice::bench {

struct ScaleoutBenchOptions {
  std::vector<int> worker_counts = {1, 2, 4, 8};
  double cpus_per_worker = 0.2;
  double seconds = 4.0;          // length of one measured window
  int windows = 3;               // measured windows per worker count
  double warmup_seconds = 1.5;   // unmeasured, after the first element
  int image_size = 256;          // synthetic input images (pixels per side, 3 channels, uint8)
  int output_size = 32;          // after resize (then normalised to float32)
  std::string quota = "auto";    // auto | taskset (force the fallback)
  std::string bin_dir;
  bool keep_logs = false;
};

void AddScaleoutBenchFlags(CLI::App* app, ScaleoutBenchOptions& options);
// Prints progress, then the JSON result as the last line. Returns the exit code.
int RunScaleoutBenchmark(const ScaleoutBenchOptions& options);

std::string ScaleoutPipelineSpec(const ScaleoutBenchOptions& options);

// One worker count's measurement: the median over its windows (each window's figures in
// `window_elements_per_second`; empty when the point was built from one figure).
struct ScaleoutPoint {
  int workers = 0;
  double elements_per_second = 0;     // median over the windows
  double worker_cpu_per_second = 0;   // mean over the workers: CPU seconds per wall second (median window)
  double throttled_fraction = 0;      // throttled periods / periods over the windows (cgroups)
  std::vector<double> window_elements_per_second;
};

// throughput(n) / (n * throughput(1)); 0 when throughput(1) is 0.
double ScalingEfficiency(double throughput_n, int n, double throughput_1);
// The result object: per-count points (median, spread and every window), throughput_<n> (median),
// efficiency_<n> and efficiency_at_max (medians; for the largest count, relative to the count 1
// measurement; 0 if 1 was not measured), and efficiency_at_max_range: [min, max] of that efficiency
// over the pairs of windows (worst: the largest count's slowest window over the count 1's fastest).
nlohmann::json ScaleoutResultJson(const std::vector<ScaleoutPoint>& points, const std::string& mechanism,
                                  const nlohmann::json& extra);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_SCALEOUT_SCALEOUT_BENCH_H_
