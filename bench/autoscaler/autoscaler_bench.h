// `sluice bench autoscaler`: the resident memory and CPU of sluice-autoscaler handling many
// autoscaled DataServices, without a cluster (the counterpart of `sluice bench operator`).
//
// Starts the test API server (e2e/apiserver) and simulated process nodes (e2e/processnode
// --simulated --schedule: pods are bound and marked Running and Ready without running anything),
// installs the CRD, creates N DataServices with spec.autoscaling.enabled and, for each, the pods the
// operator would make (a dispatcher and W workers, labelled as the operator labels them), starts a
// fake Prometheus (bench/autoscaler/fake_prometheus.py: the autoscaler's default queries answered
// for every DataService in a steady state that needs no change), then the real sluice-autoscaler
// binary with --prometheus-url and its default client settings, and measures:
//   seconds_to_all_decided  from its start until every DataService carries status.autoscaler
//   cpu_core_fraction       CPU seconds (utime + stime of the autoscaler process alone) per wall
//                           second over each of `windows`
//                           decision periods once all are decided (median, min, max reported)
//   rss_mib / peak_rss_mib  VmRSS at the end of each window (median) and VmHWM at the end
//   API requests            the autoscaler made (the server counts them by User-Agent)
// Prints progress lines on stderr, then one JSON object as the last stdout line (docs/benchmarks.md).
//
// Single-threaded driver; every child process (server, nodes, fake Prometheus, autoscaler) is in its
// own process group, killed on the way out and with the driver (PR_SET_PDEATHSIG).
#ifndef SLUICE_BENCH_AUTOSCALER_AUTOSCALER_BENCH_H_
#define SLUICE_BENCH_AUTOSCALER_AUTOSCALER_BENCH_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct AutoscalerBenchOptions {
  int dataservices = 1000;
  int workers = 2;                 // worker pods per DataService
  int nodes = 2;                   // simulated process nodes
  double period_seconds = 15;      // the autoscaler's --period
  int windows = 4;                 // CPU measured over this many periods
  double timeout_seconds = 900;    // give up if not all decided by then
  std::string autoscaler_binary;   // "" = the build's sluice-autoscaler
  std::string source_dir;          // repository root (e2e/, crds/, bench/); "" = $SLUICE_SOURCE_DIR, else the build's
  std::string python = "/usr/bin/python3";
  std::string work_dir;            // "" = a temporary directory, removed afterwards
  bool quiet = false;              // no progress lines
};

void AddAutoscalerBenchFlags(CLI::App* app, AutoscalerBenchOptions& options);

struct AutoscalerBenchResult {
  int dataservices = 0;
  int pods = 0;
  double period_seconds = 0;
  double seconds_to_all_decided = 0;
  std::vector<double> cpu_core_fraction;  // one per window
  std::vector<double> rss_mib;            // VmRSS at the end of each window
  double peak_rss_mib = 0;                // VmHWM
  int64_t requests = 0;
  int64_t writes = 0;
  int64_t failed_requests = 0;
  std::map<std::string, int64_t> by_resource;
  int64_t prometheus_queries = 0;
  std::string machine;
  int cores = 0;
  // /proc/loadavg's 1-minute load when the measured periods began and ended: the machine's load
  // (the CPU figures count the autoscaler process alone: its utime + stime, all threads).
  double load_before = -1, load_after = -1;
};

absl::StatusOr<AutoscalerBenchResult> MeasureAutoscaler(const AutoscalerBenchOptions& options, std::ostream* progress);

// The final JSON line (no trailing newline): medians and spread, and the goals (64 MiB, 5 % of a core).
std::string AutoscalerResultJson(const AutoscalerBenchResult& result);

// Median of `v` (0 when empty).
double PeriodMedian(std::vector<double> v);

int RunAutoscalerBenchmark(const AutoscalerBenchOptions& options);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_AUTOSCALER_AUTOSCALER_BENCH_H_
