// The local capacity model, shared by the operator and the autoscaler (and the simulator's operator
// model), so that they never disagree about how many workers fit next to the trainers:
//
//  - ComputeLocalCapacity: how many worker slots the consumer (trainer) nodes have. For each
//    consumer node that is not excluded, floor(floor((allocatable CPU - CPU requested by everything
//    but the service's own local workers) x localCpuFraction) / worker CPU request).
//  - SplitByCapacity: how a worker count is split between local and remote under a placement
//    policy, an optional asked-for local share and that capacity (the split the operator carries
//    out; the autoscaler's SplitWorkers ends with it, so the operator carries out the autoscaler's
//    split unchanged whenever they see the same capacity).
//  - SplitAfterNamedRemovals: the same split when named removals (workersToDelete) just shrank the
//    pools of a Hybrid service that left the split to the operator.
//
// Plain inputs: the caller says which nodes run consumers and why a node is excluded (the operator
// adapts its observed pods and nodes in operator/capacity_input.h); nothing here knows Kubernetes.
// Pure: no I/O, no clock, no threads. Safe to call from any thread.
#ifndef SLUICE_AUTOSCALER_PLACEMENT_LOCAL_CAPACITY_H_
#define SLUICE_AUTOSCALER_PLACEMENT_LOCAL_CAPACITY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autoscaler/placement/placement.h"

namespace sluice::autoscaler {

// One node as the capacity model sees it.
struct CapacityNode {
  std::string name;
  bool consumer = false;  // runs a consumer (trainer) pod: only consumer nodes take local workers
  int64_t allocatable_cpu_millis = 0;
  // CPU requested on the node by every pod except the service's own local workers (so that
  // existing local workers do not shrink their own room).
  int64_t cpu_requested_by_others_millis = 0;
  std::string excluded_reason;  // non-empty: the node takes no local workers, and why
};

struct CapacityInput {
  Placement policy = Placement::kHybrid;  // RemoteOnly: no local capacity at all
  std::vector<CapacityNode> nodes;        // one entry per node; nodes without consumers may be left out
  int64_t worker_cpu_millis = 0;          // one worker's CPU request (0 or less: no worker fits)
  double local_cpu_fraction = 0;          // share of a node's unrequested CPU local workers may take, (0, 1]
};

struct NodeCapacity {
  std::string node;
  int64_t allocatable_millis = 0;
  int64_t requested_by_others_millis = 0;
  int64_t budget_millis = 0;  // (allocatable - others) x localCpuFraction, floored, >= 0
  int64_t workers = 0;        // budget / worker CPU request, floored
  std::string excluded_reason;

  bool operator==(const NodeCapacity&) const = default;
};

struct LocalCapacity {
  std::vector<NodeCapacity> nodes;  // every consumer node, sorted by name (excluded ones too)
  int64_t total_workers = 0;        // over the nodes that are not excluded (status.localCapacity)

  // Worker slots on `node` (0 for a node that is not a consumer node or is excluded).
  int64_t WorkersOn(const std::string& node) const;
  bool operator==(const LocalCapacity&) const = default;
};

// Total over any input: negative CPU figures count as 0, a fraction outside (0, 1] is clamped into
// [0, 1] (NaN counts as 0), a node listed twice counts once (its first entry), an excluded node
// reports its slots but adds none.
LocalCapacity ComputeLocalCapacity(const CapacityInput& in);

// Why a split runs fewer local workers than asked for.
enum class CapacityLimit {
  kNone,
  kLocalCapacityExhausted,  // LocalOnly: fewer slots than replicas; the rest is not run at all
  kLocalSplitCapped,        // Hybrid with an asked-for local share above capacity: the rest runs remote
};
const char* CapacityLimitName(CapacityLimit limit);  // "", "LocalCapacityExhausted", "LocalSplitCapped"

struct CapacitySplitInput {
  Placement policy = Placement::kHybrid;
  int64_t replicas = 0;
  std::optional<int64_t> local;  // Hybrid: the local share asked for (spec.workers.local); none: capacity first
  int64_t capacity = 0;          // LocalCapacity::total_workers
};

struct CapacitySplit {
  int64_t local = 0;
  int64_t remote = 0;  // LocalOnly: always 0 (local + remote < replicas when capacity is short)
  CapacityLimit limit = CapacityLimit::kNone;
  int64_t wanted_local = 0;  // the local workers asked for before capacity cut them (for messages)

  bool operator==(const CapacitySplit&) const = default;
};

// RemoteOnly: every worker remote. LocalOnly: min(replicas, capacity) local, none remote
// (kLocalCapacityExhausted when short). Hybrid: min(local, replicas, capacity) local with a local
// share (kLocalSplitCapped when capacity cut it), else min(replicas, capacity); the rest remote.
// Negative counts count as 0.
CapacitySplit SplitByCapacity(const CapacitySplitInput& in);

// The split of a Hybrid service without an asked-for local share right after named removals left
// `local_left` local and `remote_left` remote workers: the pools keep what is left rather than
// being rebalanced in the same breath (which would delete a worker nobody named and create
// another); only a shortfall is filled, local first. Any other case (another policy, a local share,
// more workers left than replicas, more local ones left than the split's local share): the plain
// SplitByCapacity.
CapacitySplit SplitAfterNamedRemovals(const CapacitySplitInput& in, int64_t local_left, int64_t remote_left);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_PLACEMENT_LOCAL_CAPACITY_H_
