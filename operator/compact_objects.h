// What the operator keeps of the objects it caches, and the running CPU sums it derives from pods.
//
// The operator caches every pod of the cluster (local capacity needs the CPU requested on each
// node), so a full pod per cache entry would cost megabytes per thousand pods. The informer
// transforms below keep only the fields ObservedPodFromJson / ObservedNodeFromJson read; parsing
// the compact object gives the same result as parsing the original (tested). Anything of an
// unexpected shape is kept as it was, so that the parser still reports it.
//
// NodeCpuLedger replaces summing every cached pod on every reconcile: pod events update a per-node
// sum (the same rule as SumCpuRequestsByNode).
//
// Threading: the transforms are pure. NodeCpuLedger is thread-safe.
#ifndef SLUICE_OPERATOR_COMPACT_OBJECTS_H_
#define SLUICE_OPERATOR_COMPACT_OBJECTS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "operator/observed_state.h"

namespace sluice::op {

// metadata {name, namespace, uid, resourceVersion, creationTimestamp, deletionTimestamp, labels,
// sluice.dev/* annotations, the controller ownerReference}, spec {nodeName, CPU of containers, init
// containers and overhead, a node-pinning affinity}, status {phase, podIP, the Ready condition}.
nlohmann::json CompactPod(nlohmann::json&& pod);
// metadata {name, uid, resourceVersion, labels}, spec {taints, unschedulable}, status {allocatable}.
nlohmann::json CompactNode(nlohmann::json&& node);

class NodeCpuLedger {
 public:
  // A pod changed from `before` to `after` (either may be null: added, deleted).
  void Update(const ObservedPod* before, const ObservedPod* after);
  // CPU millis requested per node, as SumCpuRequestsByNode over every pod seen.
  std::map<std::string, int64_t> Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> by_node_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_COMPACT_OBJECTS_H_
