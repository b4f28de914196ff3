// `sluice bench autoscale`: the autoscaling policies on simulated clusters (sim/): every scenario
// under every policy, progress lines on stderr, one JSON object as the last line on stdout (see
// docs/autoscaling.md, "The simulator"). Optionally writes each scenario's time series for the plots
// (scripts/autoscale_plots.sh draws them) and the Markdown results table.
//
// `--live` runs the closed loop with real processes instead (a dispatcher, workers under CPU
// quotas, the local autoscaler and a consumer on this machine: live_bench.h), `--live --smoke` a
// short version of it. Without --live the command runs the simulator.
//
// Single-threaded; deterministic (the scenarios are seeded).
#ifndef SLUICE_BENCH_AUTOSCALE_AUTOSCALE_BENCH_H_
#define SLUICE_BENCH_AUTOSCALE_AUTOSCALE_BENCH_H_

#include <ostream>
#include <string>
#include <vector>

#include "bench/autoscale/live_bench.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct AutoscaleBenchOptions {
  bool live = false;                   // the real-process closed loop (live_bench.h)
  LiveAutoscaleOptions live_options;
  std::vector<std::string> scenarios;  // empty: all
  std::vector<std::string> policies;   // empty: all
  std::string series_dir;              // "": no time series files
  std::string markdown;                // "": no table file
  int rate_window_s = 60;
  int decision_period_s = 15;
  int remote_start_s = 0;              // > 0: every scenario's remote pod start latency (sensitivity runs)
  int local_slots = 0;                 // > 0: every scenario's local worker slots per host (sensitivity runs)
  bool quiet = false;
};

// Registers --live, --scenario, --policy, --series-dir, --markdown, --rate-window, --period,
// --remote-start, --local-slots, --quiet, and the live run's --smoke, --cpus-per-worker,
// --live-period, --live-window, --scale-down-window, --target-stall, --low-step-ms, --high-step-ms,
// --image-size, --max-workers.
void AddAutoscaleBenchFlags(CLI::App* app, AutoscaleBenchOptions& options);

// Runs the benchmark: progress to `err`, the JSON line to `out`; returns the exit code (0; 2 on bad
// options or unwritable outputs, with a message naming the problem).
int RunAutoscaleBenchmark(const AutoscaleBenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_AUTOSCALE_AUTOSCALE_BENCH_H_
