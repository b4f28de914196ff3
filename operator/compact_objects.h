// What the operator keeps of the objects it caches.
//
// The operator caches every pod of the cluster (local capacity needs the CPU requested on each
// node), so a full pod per cache entry would cost megabytes per thousand pods. The informer
// transforms below keep only the fields ObservedPodFromJson / ObservedNodeFromJson read; parsing
// the compact object gives the same result as parsing the original (tested). Anything of an
// unexpected shape is kept as it was, so that the parser still reports it.
//
// Threading: the transforms are pure.
#ifndef SLUICE_OPERATOR_COMPACT_OBJECTS_H_
#define SLUICE_OPERATOR_COMPACT_OBJECTS_H_

#include "nlohmann/json.hpp"
#include "operator/observed_state.h"

namespace sluice::op {

// metadata {name, namespace, uid, resourceVersion, creationTimestamp, deletionTimestamp, labels,
// sluice.dev/* annotations, the controller ownerReference}, spec {nodeName, CPU of containers, init
// containers and overhead, a node-pinning affinity}, status {phase, podIP, the Ready condition, the
// PodScheduled condition while it is False}.
nlohmann::json CompactPod(nlohmann::json&& pod);
// metadata {name, uid, resourceVersion, labels}, spec {taints, unschedulable}, status {allocatable}.
nlohmann::json CompactNode(nlohmann::json&& node);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_COMPACT_OBJECTS_H_
