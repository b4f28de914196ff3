// The autoscaling policy: from what the trainers and workers did over the last window (Signals),
// what the DataService asks for now (Target) and the policy's own history, the number of workers
// the DataService needs and their local/remote split — with every step of the arithmetic and the
// reason for every limit, so that each decision can be explained in status and Events.
//
// Sizing is from a model, not one step at a time: the trainers' true demand is what they consume
// now divided by the share of time they are not stalled (a stalled job wants more than it gets),
// and one worker's capacity is what it produces per CPU-second times its CPUs (or, while the
// trainers stall and buffers are empty, what it produces now). Needed workers = true demand x
// (1 - target stall) x (1 + headroom) / capacity. Then, as Kubernetes' HPA does: a tolerance, a
// scale-up and a scale-down stabilization window over the recommendations, step limits and bounds.
// Unknown, stale or NaN data is never read as zero: it holds the size (never scales down), and
// only a stall that is known to be too high scales up without a model. Churn (workers lost to
// missed heartbeats) and data from before the last change took effect also hold scale-down.
//
// Pure: time and history come in, the new history goes out; no I/O, no clock, no threads.
#ifndef SLUICE_AUTOSCALER_POLICY_POLICY_H_
#define SLUICE_AUTOSCALER_POLICY_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "autoscaler/placement/placement.h"
#include "autoscaler/policy/signals.h"

namespace sluice::autoscaler {

enum class Mode { kAuto, kRecommend };
const char* ModeName(Mode m);

struct ScalingRules {
  absl::Duration stabilization_window = absl::ZeroDuration();
  int32_t max_step = 0;  // most workers added (or removed) by one decision; 0: unlimited
};

struct Fallback {
  int32_t failure_threshold = 0;  // decisions in a row without the data to size; 0: no fallback
  int32_t replicas = 0;           // then at least this many workers (never fewer than there are)
};

struct PolicyConfig {
  Mode mode = Mode::kAuto;
  double target_stall_ratio = 0.05;
  int32_t min_replicas = 1;
  int32_t max_replicas = 32;
  double headroom = 0.05;   // capacity planned above the estimated need
  double tolerance = 0.10;  // no change while |needed / current - 1| stays within it (and stall is on target)
  ScalingRules scale_up{absl::ZeroDuration(), 0};
  ScalingRules scale_down{absl::Minutes(5), 0};
  absl::Duration max_signal_age = absl::Minutes(2);  // signals older than this are stale
  absl::Duration settle_time = absl::Seconds(30);    // after a change: pod start and rate window catch-up
  Fallback fallback;
  PlacementConfig placement;
};

// What the DataService asks for and has now.
struct Target {
  int32_t replicas = 0;                   // spec.workers.replicas
  std::optional<absl::Duration> pod_start_latency;  // observed: creation to ready of recent workers
  int32_t local = 0;                      // local workers asked for (spec.workers.local, else as placed)
  std::optional<int32_t> local_capacity;  // status.localCapacity
  int32_t consumer_nodes = 1;
  std::vector<WorkerCandidate> workers;   // the workers there are (for choosing removals)
};

struct Recommendation {
  absl::Time at;
  int32_t replicas = 0;
  bool operator==(const Recommendation&) const = default;
};

// What the policy remembers between decisions. Persist it (the Kubernetes controller keeps it in
// status.autoscaler) so that a restarted or new leader continues with the same windows.
struct PolicyHistory {
  // Within the longest stabilization window; a scale-down held for want of evidence (missing or
  // unsettled data, churn) records none.
  std::vector<Recommendation> recommendations;
  absl::Time last_change = absl::InfinitePast();  // when the size or the split last changed
  int32_t failures_in_a_row = 0;                 // decisions without the data to size
  std::optional<double> capacity_per_worker;     // elements/s of one busy worker, last measured saturated
  // elements/s of one worker by its CPU (supply per worker / utilization), last measured while the
  // workers were at least half busy: sizes an idle pool (full buffers) when no saturated
  // measurement exists, instead of holding on "workers idle".
  std::optional<double> cpu_capacity_per_worker;
  int32_t surge_extra = 0;                       // workers kept ahead of a removal (make before break) ...
  int32_t surge_total = 0;                       // ... in a pool of this many (a different count: someone else changed it)
  InterferenceState interference;
  bool operator==(const PolicyHistory&) const = default;
};

// Why a decision came out as it did. Each limit that changed the result adds one.
enum class Reason {
  kScaledUp,
  kScaledDown,
  kShifted,              // same size, another local/remote split
  kNoChange,
  kIdle,                 // the trainers consume nothing: the minimum
  kWithinTolerance,
  kScaleUpStabilized,    // a lower recommendation within the scale-up window
  kScaleDownStabilized,  // a higher recommendation within the scale-down window
  kScaleUpLimited,       // scaleUp.maxStep
  kScaleDownLimited,     // scaleDown.maxStep
  kTooFewReplicas,       // raised to minReplicas
  kTooManyReplicas,      // cut to maxReplicas
  kHeldOnMissingData,
  kHeldOnStaleData,
  kHeldOnChurn,
  kHeldUntilSettled,     // the data predates the last change
  kScaleUpWithoutModel,  // stall known to be too high, sizing data missing: one step up
  kFallback,             // fallback.replicas after failure_threshold decisions without data
  kStallNotFromWorkers,  // stalled while elements wait in the workers' buffers: more workers would not help
  kBrokenWorkers,        // workers not ready for longer than a pod takes to start: planned on top of the need
  kRecommendOnly,        // mode Recommend: computed, not acted on
};
const char* ReasonName(Reason r);

struct ReasonNote {
  Reason reason;
  std::string message;
};

// Every number the decision used, for status.autoscaler and the Event.
struct Arithmetic {
  std::optional<double> stall_ratio, demand, true_demand, supply, supply_per_worker, utilization,
      capacity_per_worker, needed_exact;
  std::string capacity_source;  // "CPU", "saturated", "remembered", "remembered (CPU)", ""
  std::optional<double> recent_needed_exact;  // the same model over the recent window (while it stalls)
  std::string sized_from;        // "window" or "recent window"
  int32_t broken_workers = 0;  // not ready long after their creation: planned on top of the need
  int32_t raw = 0;         // the model's recommendation before windows, limits and bounds
  int32_t stabilized = 0;  // after the windows
  int32_t limited = 0;     // after step limits and bounds
  std::optional<double> interference_slowdown;  // this window's compute / baseline - 1
};

enum class Direction { kNone, kUp, kDown, kShift };
const char* DirectionName(Direction d);

struct Decision {
  int32_t replicas = 0;  // what to ask for (== Target.replicas when nothing changes)
  int32_t local = 0;
  int32_t remote = 0;
  std::vector<std::string> workers_to_delete;  // named removals, when the count drops
  Direction direction = Direction::kNone;
  bool act = false;  // false in Recommend mode or without change
  std::vector<ReasonNote> reasons;
  Split split;
  Arithmetic arithmetic;
  std::vector<std::string> learnt;  // what the interference model learnt this time
  std::vector<std::string> missing;  // "demand: no series", ...
  bool holding = false;              // held on missing/stale data or churn
  std::string Summary() const;       // one line: "3 -> 5 workers (2 local, 3 remote): ..."
  bool Has(Reason r) const;
};

struct DecisionResult {
  Decision decision;
  PolicyHistory history;
};

// One decision at `now`.
DecisionResult Decide(const PolicyConfig& config, const Target& target, const Signals& signals,
                      const PolicyHistory& history, absl::Time now);

// The pod start latency to expect: the median (creation to ready) of the ten newest workers that
// became ready; none without any. Pairs are (created, ready).
std::optional<absl::Duration> ObservedStartLatency(std::vector<std::pair<absl::Time, absl::Time>> created_ready);

// The steps of Decide, for the simulator and for tests.

// The model's recommendation (and its arithmetic) from the signals alone; nullopt when the data
// to size is missing (`missing` says what).
struct Sizing {
  std::optional<int32_t> replicas;
  Arithmetic arithmetic;
  std::vector<std::string> missing;
  bool stall_not_from_workers = false;
  bool idle = false;
};
// `settled`: the window covers only time after the last change took effect (otherwise a remembered
// capacity is preferred to one measured while new workers were still starting).
Sizing SizeFromSignals(const PolicyConfig& config, const Signals& signals, const PolicyHistory& history,
                       bool settled);

// HPA's stabilization: the lowest recommendation within the scale-up window bounds a scale-up,
// the highest within the scale-down window bounds a scale-down. `recommendations` includes the new one.
struct Stabilized {
  int32_t replicas = 0;
  std::optional<Reason> reason;
};
Stabilized Stabilize(const std::vector<Recommendation>& recommendations, int32_t current, int32_t recommended,
                     const PolicyConfig& config, absl::Time now);

// Step limits, then min/max bounds.
struct Limited {
  int32_t replicas = 0;
  std::vector<Reason> reasons;
};
Limited LimitRate(int32_t current, int32_t desired, const PolicyConfig& config);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_POLICY_POLICY_H_
