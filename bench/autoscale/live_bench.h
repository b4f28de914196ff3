// `sluice bench autoscale --live`: the autoscaler's closed loop with real processes on this
// machine — a sluice-dispatcher, sluice-worker processes under CPU quotas (local/), the local
// autoscaler (autoscaler/local: the real policy over a direct scrape of the processes' /metrics,
// the dispatcher's through a MetricsRelay that can be cut) and a stand-in trainer reading the
// demo workload. The schedule: low demand (one worker serves it), a demand step up, then a step
// down during which the dispatcher's metrics are cut (an outage: a scale-down is due, nothing
// justifies it), restored, then low demand until the end. Then, in the same run, static worker
// counts at the peak demand, each on a fresh job (no count lives on elements prefetched before
// it), upwards from one worker to the smallest that keeps the stall under the target.
//
// Progress on stderr, one JSON object as the last line on stdout:
//   decisions_to_no_stall        decision periods from the stall's onset after the step up until
//                                the consumer's stall over a period is under the target (goal <= 2)
//   worker_seconds_vs_best_static  worker-seconds the autoscaler used / those of the smallest static
//                                count that keeps the stall under target, over the same schedule
//                                (goal <= 1.15; null in --smoke, which skips the static runs)
//   scale_downs_on_missing_data  (goal 0)
//   elements_lost                buffered in removed workers when they were stopped (goal 0)
// --smoke: a short schedule and no static search, for a ctest.
//
// Single-threaded apart from the autoscaler's and the consumer's own threads.
#ifndef SLUICE_BENCH_AUTOSCALE_LIVE_BENCH_H_
#define SLUICE_BENCH_AUTOSCALE_LIVE_BENCH_H_

#include <ostream>
#include <string>
#include <vector>

namespace sluice::bench {

struct LiveAutoscaleOptions {
  bool smoke = false;
  double cpus_per_worker = 0.25;
  double period_s = 1;
  double window_s = 8;
  double scale_down_window_s = 8;
  double target_stall = 0.10;
  double low_step_ms = 40;
  double high_step_ms = 4;
  int image_size = 768;
  int max_workers = 6;
  std::string bin_dir;  // sluice-dispatcher and sluice-worker; empty: next to this binary
};

// One decision period of the run, for the JSON and for the figures.
struct LivePeriod {
  double t = 0;          // seconds since the autoscaler started
  std::string phase;     // "low", "high", "outage", "after"
  int workers = 0;       // serving after the decision
  double stall = -1;     // the consumer's stall over the period (-1: no steps)
  double throughput = 0;  // elements/s the consumer read over the period
  std::string reasons;
};

// decisions_to_no_stall from the periods: within `phase`, from the stall's onset (the first period
// stalled above `target`: prefetched elements hide a demand step for a period or two) to the first
// later period whose stall is known and at most `target`, in decision periods; 0 when the phase
// never stalled, -1 when the stall never came back under the target.
int DecisionsToNoStall(const std::vector<LivePeriod>& periods, const std::string& phase, double target);

// Validates the options; the message names the flag.
std::string CheckLiveOptions(const LiveAutoscaleOptions& o);

// Runs it; progress to `err`, the JSON line to `out`; 0, 2 on bad options, 1 on failure.
int RunLiveAutoscaleBenchmark(const LiveAutoscaleOptions& options, std::ostream& out, std::ostream& err);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_AUTOSCALE_LIVE_BENCH_H_
