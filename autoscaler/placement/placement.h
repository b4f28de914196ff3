// Pecan's AutoPlacement, continued: how many of a DataService's workers run locally (on the spare
// CPU of the accelerator hosts, next to the trainers) and how many on remote CPU nodes, and which
// workers go when some must.
//
// Local capacity is free CPU on hosts already paid for, and it saves the network, so it is used
// first — but only while the trainers' compute time per element stays within a tolerance of its
// value without local workers (their interference), and only while a local worker costs less in
// slowed-down accelerator time than a remote one costs in CPU. The interference is learnt from
// observation: a baseline compute time measured while no local worker runs, and the slowdown per
// local worker measured while some do (a linear model, re-learnt at every settled observation and
// probed again after `reprobe_after`).
//
// Pure: no I/O, no clock (times come in), no threads. Safe to call from any thread.
#ifndef SLUICE_AUTOSCALER_PLACEMENT_PLACEMENT_H_
#define SLUICE_AUTOSCALER_PLACEMENT_PLACEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace sluice::autoscaler {

enum class Placement { kHybrid, kRemoteOnly, kLocalOnly };
const char* PlacementName(Placement p);

struct CostModel {
  std::optional<double> accelerator_hourly;  // one accelerator node, per hour
  std::optional<double> remote_cpu_hourly;   // one remote CPU core, per hour
};

struct PlacementConfig {
  Placement policy = Placement::kRemoteOnly;
  double interference_tolerance = 0.10;  // most slowdown of the trainers' compute per element local workers may cause
  double interference_noise = 0.02;  // compute ratios within this of the model's prediction agree with it
  absl::Duration reprobe_after = absl::Minutes(10);  // try one more local worker than the learnt cap after this long
                                                     // (doubled for each probe in a row that confirmed the cap)
  CostModel cost;
  double worker_cpus = 0;  // CPU cores of one worker (0: unknown)
};

// What has been learnt about local workers' interference; carried from decision to decision.
//
// Interference is measured differentially, across a change of the local worker count: with
// compute C1 at L1 local workers (the reference) and C2 at L2, the linear model
// C = C0 (1 + k L) gives k = r / (L2 - L1 - r L1) with r = C2 / C1 - 1. A change of compute while
// the local count stays the same is the trainers' own (a new phase, another model), not
// interference: it moves the reference, not k. A measurement that agrees with the model (the
// compute ratio within `interference_noise` of what k predicts) refines k, weighted by how many
// workers the change moved; one that disagrees replaces it (the interference changed). A slowdown
// that grows at a constant count is found by the periodic probe — one local worker more than a
// binding cap, or one fewer when the cap does not bind — which backs off (doubling) while probes
// keep agreeing with the model.
struct InterferenceState {
  std::optional<double> reference_compute;    // the last settled compute per element
  int32_t reference_local = 0;                // with this many local workers
  std::optional<double> slowdown_per_worker;  // k
  double weight = 0;                          // local workers moved by the changes k was learnt from (capped)
  std::optional<int32_t> cap;                 // most local workers within tolerance (none: no limit)
  absl::Time learnt_at = absl::InfinitePast();  // when k was last measured across a change
  int32_t probes_confirmed = 0;               // probes in a row that confirmed the cap
  std::optional<int32_t> probe_local;         // a probe in progress: hold this many local workers until it is learnt
  absl::Time probe_started = absl::InfinitePast();

  // Compute per element without local workers, by the model (when known).
  std::optional<double> Baseline() const;
  bool operator==(const InterferenceState&) const = default;
};

// One settled observation of the trainers with `local_workers` local workers running.
struct InterferenceObservation {
  absl::Time at;
  int32_t local_workers = 0;
  std::optional<double> compute_per_element;  // unknown: nothing is learnt
  bool settled = false;  // the window covers only time after the last change took effect
};

// Updates the interference model with one observation. Returns the new state and one sentence
// saying what was learnt (empty when nothing). An observation with the probe's local count ends the
// probe.
struct InterferenceUpdate {
  InterferenceState state;
  std::string learnt;
  bool interfering = false;  // by the model, the local workers slow the trainers beyond the tolerance
  double slowdown = 0;       // k x local workers (0 when unknown)
};
InterferenceUpdate ObserveInterference(const InterferenceState& state, const InterferenceObservation& obs,
                                       const PlacementConfig& config);

enum class SplitReason {
  kRemoteOnly,         // policy RemoteOnly
  kLocalOnly,          // policy LocalOnly: every worker local
  kLocalFirst,         // local capacity first, the rest remote
  kCapacityLimited,    // local capacity smaller than wanted
  kInterference,       // local workers limited by their interference with the trainers
  kLocalCostsMore,     // a local worker's interference costs more accelerator time than a remote worker's CPU
  kProbing,            // one local worker more than the learnt cap, to learn again
  kCapacityUnknown,    // local capacity not reported: keep the local workers there are
};
const char* SplitReasonName(SplitReason r);

struct SplitInput {
  int32_t replicas = 0;
  int32_t current_local = 0;
  std::optional<int32_t> local_capacity;  // worker slots the consumer nodes have (status.localCapacity)
  int32_t consumer_nodes = 1;             // accelerator hosts running trainers (for interference cost)
  absl::Time now;
};

struct Split {
  int32_t local = 0;
  int32_t remote = 0;
  SplitReason reason = SplitReason::kRemoteOnly;
  std::string why;  // one sentence with the numbers
  bool probing = false;
};

// The local/remote split of `in.replicas` workers under `config` and what `state` has learnt.
// When it starts a probe (`probing`), record it with StartProbe once the split is carried out.
Split SplitWorkers(const SplitInput& in, const InterferenceState& state, const PlacementConfig& config);

// The state after a probe to `local` workers was carried out at `now`: the split holds that count
// until an observation at it has been learnt.
InterferenceState StartProbe(InterferenceState state, int32_t local, absl::Time now);

// A worker that may be removed.
struct WorkerCandidate {
  std::string name;
  bool local = false;
  bool ready = true;
  double cost_per_element = 0;  // higher: removed first among equals (0: unknown)
  absl::Time created = absl::InfinitePast();
};

// Names `remove_local` local and `remove_remote` remote workers to remove: in each pool the
// not-ready ones first, then the ones that cost most per element, then the newest; at most what
// the pool has. Deterministic (ties by name).
std::vector<std::string> ChooseRemovals(const std::vector<WorkerCandidate>& workers, int32_t remove_local,
                                        int32_t remove_remote);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_PLACEMENT_PLACEMENT_H_
