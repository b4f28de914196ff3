// LocalAutoscaler: the autoscaler's local mode — the real policy (autoscaler/policy) closing the
// loop over worker processes on this machine, through the local process supervisor (local/).
// Each decision period it
//   1. observes the DataService: by default a direct scrape of the dispatcher's and every worker's
//      /metrics (ScrapeSource, over the rate window and over a short recent window that sees a
//      demand step at once), or Prometheus' HTTP API when a URL is given (PrometheusSource);
//   2. runs Decide with the policy's own history (one pool of workers: no local/remote split);
//   3. carries the decision out: starts sluice-worker processes (each under the CPU quota the
//      supervisor was configured with, if any), or removes the workers the policy named without
//      losing an element — drained through the dispatcher first (no new splits; their splits
//      handed back, what they read served: local/worker_drain), then stopped. A worker's buffered
//      elements at its last scrape before the stop are counted as lost (the answer should be 0).
//      Drains never block the loop: a decision waits at most drain_step_wait for its removals;
//      the loop then polls the draining workers every drain_poll between decisions and stops
//      each one as soon as the dispatcher says it is drained (reported with the next decision). A
//      drain longer than drain_timeout is reported in action_error, never forced.
// Every decision is logged as one logfmt line (inputs, arithmetic, outcome, reasons) and kept for
// a terminal view (decisions(), stats()).
//
// Threading: Start() runs the loop on a thread of its own; Step() runs one decision on the
// caller's thread (tests) — do not mix the two. decisions(), stats() and the sink-free accessors
// may be called from any thread. No lock is held across a scrape, a process start or a drain.
#ifndef SLUICE_AUTOSCALER_LOCAL_LOCAL_AUTOSCALER_H_
#define SLUICE_AUTOSCALER_LOCAL_LOCAL_AUTOSCALER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "autoscaler/policy/policy.h"
#include "autoscaler/sources/prometheus_source.h"
#include "autoscaler/sources/scrape_source.h"
#include "local/local_dataservice.h"

namespace sluice::autoscaler {

struct LocalDecision;

struct LocalAutoscalerOptions {
  PolicyConfig policy;                      // placement is forced to one pool (RemoteOnly, nothing local to split)
  absl::Duration period = absl::Seconds(2);  // between decisions
  absl::Duration window = absl::Seconds(12);  // the rate window
  absl::Duration recent_window = absl::Seconds(5);  // the short window (about two periods)
  // Prometheus' base URL; empty: scrape the dispatcher and the workers directly.
  std::string prometheus_url;
  PrometheusOptions prometheus;             // its window is set from `window`
  // Where the dispatcher's /metrics are scraped (http://host:port); empty: the supervisor's
  // dispatcher admin port. (The benchmark points it at a MetricsRelay to stage an outage.)
  std::string dispatcher_metrics_url;
  std::string ns = "local";                 // names for the sources (the metrics' dataservice label)
  std::string name = "local";
  local::WorkerOptions worker;              // how new workers start (CPU limit: the supervisor's default)
  absl::Duration drain_timeout = absl::Seconds(20);  // a drain longer than this is reported (never forced)
  absl::Duration drain_step_wait = absl::Seconds(1);  // the most a decision waits for its removals to drain
  absl::Duration drain_poll = absl::Milliseconds(250);  // between decisions, while workers drain
  size_t keep_decisions = 200;              // decisions() keeps this many
  // Each decision's logfmt line (with ts=, level=, component=); none: written to stderr.
  std::function<void(const std::string& line)> log_sink;
  // Called on the loop's thread after each decision was carried out.
  std::function<void(const LocalDecision&)> on_decision;
};

// One decision and what was done about it.
struct LocalDecision {
  int64_t number = 0;  // 1, 2, ...
  absl::Time at;
  Signals signals;
  std::vector<std::string> source_errors;  // the metric source's problems (unreachable, bad answer)
  Decision decision;
  int32_t workers_before = 0;              // serving workers when deciding
  int32_t workers_after = 0;               // serving workers once carried out
  std::vector<std::string> added, removed;  // worker names
  std::vector<std::string> still_draining;  // removals still draining (polled until drained)
  int64_t elements_lost = 0;               // buffered in removed workers when they were stopped
  std::string action_error;                // starting or draining failed (the next period retries)
  bool scale_down_on_missing_data = false;  // a removal decided while data was missing (must never happen)
};

struct LocalAutoscalerStats {
  int64_t decisions = 0;
  int64_t scale_ups = 0;
  int64_t scale_downs = 0;
  int64_t holds_on_missing_data = 0;       // decisions held on missing or stale data
  int64_t scale_downs_on_missing_data = 0;
  int64_t workers_added = 0;
  int64_t workers_removed = 0;
  int64_t elements_lost = 0;
  int32_t workers = 0;                     // serving now
  double worker_seconds = 0;               // integral of running workers (serving + draining) over time
};

// --- pure parts

// What the policy sees of the supervisor's workers: the serving ones (in one pool), as removal
// candidates; `started` gives each worker's start time when known (newest go first).
Target TargetFromWorkers(const std::vector<local::WorkerStatus>& workers,
                         const std::map<std::string, absl::Time>& started);
// The direct scrape's request: the dispatcher's URL and every running worker's.
ObserveRequest ScrapeRequest(const std::string& ns, const std::string& name, const std::string& dispatcher_url,
                             const std::vector<local::WorkerStatus>& workers, const std::string& host);
// The long-window signals with the recent window's rates added.
Signals MergeRecent(Signals window, const Signals& recent);
// A removal decided while any signal the decision needed was missing or stale.
bool IsScaleDownOnMissingData(const Decision& d);
// The decision as one logfmt line (no timestamp; the sink or common/log adds it).
std::string DecisionLogfmt(const LocalDecision& d);
// The policy settings of the local mode (one pool; worker_cpus from the CPU limit).
PolicyConfig LocalPolicy(PolicyConfig policy, double worker_cpus);

class LocalAutoscaler {
 public:
  // `service` must outlive the autoscaler; its dispatcher must be started.
  LocalAutoscaler(local::LocalDataService* service, LocalAutoscalerOptions options);
  ~LocalAutoscaler();  // Stop()
  LocalAutoscaler(const LocalAutoscaler&) = delete;
  LocalAutoscaler& operator=(const LocalAutoscaler&) = delete;

  // Decides every period on a thread of its own, the first decision one period from now.
  void Start();
  // Stops the loop (waits for a decision being carried out).
  void Stop();
  // One decision at `now`, carried out before it returns (removals: drains begun, and waited for
  // at most drain_step_wait).
  LocalDecision Step(absl::Time now);
  // One pass over the workers still draining: stops those the dispatcher says are drained (they are
  // reported with the next decision). The loop calls it between decisions; tests may too.
  void PollDrains();

  std::vector<LocalDecision> decisions() const;
  LocalAutoscalerStats stats() const;
  const LocalAutoscalerOptions& options() const { return options_; }

 private:
  Observation Observe(const std::vector<local::WorkerStatus>& workers, absl::Time now);
  void Account(absl::Time now, const std::vector<local::WorkerStatus>& workers);
  // Drains the named workers for at most `wait`; records the stopped ones in pending_removed_ and
  // returns the names still draining, with an error for anything but "not drained yet".
  std::vector<std::string> DrainFor(const std::vector<std::string>& names, absl::Duration wait, std::string* error);
  bool AnyDraining() const;

  local::LocalDataService* const service_;
  const LocalAutoscalerOptions options_;
  const PolicyConfig policy_;
  ScrapeSource scrape_;
  ScrapeSource scrape_recent_;
  std::unique_ptr<PrometheusSource> prometheus_;

  // The loop's state (touched by the deciding thread only).
  PolicyHistory history_;
  std::map<std::string, absl::Time> started_;
  std::map<std::string, absl::Time> draining_since_;  // removals not stopped yet
  std::vector<local::LocalDataService::StoppedWorker> pending_removed_;  // stopped, not yet reported

  mutable absl::Mutex mu_;
  std::deque<LocalDecision> decisions_ ABSL_GUARDED_BY(mu_);
  LocalAutoscalerStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Time last_account_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int32_t last_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_LOCAL_LOCAL_AUTOSCALER_H_
