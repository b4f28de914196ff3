// PodSnapshot: the pods one reconcile reads, taken from the operator's pod cache in one state.
//
// Local capacity combines three things about pods: the consumer pods of the DataService's namespace
// (which nodes are consumer nodes), the CPU requested on those nodes by every pod of the cluster,
// and the DataService's own pods (its local workers' CPU is added back). Read from different places,
// or from one place at different moments, they can disagree: a trainer seen bound to its node while
// the CPU sum of that node does not count it yet gave a pass more local workers than fit (issue 9
// §4, when the sums came from a ledger updated by a later event handler than the one that queued the
// reconcile). Here all three come from one kube::Store::ByIndexes call, so they describe one moment.
//
// Pod cache entries are packed (kube/packed_object.h) and also carry `spec.nodeName` next to the
// identity (PackPod), so that the node index (IndexByPodNode) needs no unpacking.
//
// Threading: pure functions, plus ReadPodSnapshot, which only reads the (thread-safe) store.
#ifndef SLUICE_OPERATOR_POD_SNAPSHOT_H_
#define SLUICE_OPERATOR_POD_SNAPSHOT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kube/store.h"
#include "nlohmann/json.hpp"
#include "operator/dataservice_types.h"
#include "operator/observed_state.h"

namespace sluice::op {

// Index names of the operator's pod cache.
inline constexpr char kPodIndexControllerUid[] = "controller-uid";
inline constexpr char kPodIndexNamespace[] = "namespace";
inline constexpr char kPodIndexNode[] = "node";

// The informer transform of the pod cache: CompactPod, packed, plus {"spec": {"nodeName": ...}}
// beside the packed text when the pod is bound.
nlohmann::json PackPod(nlohmann::json&& pod);
// Index by the spec.nodeName PackPod recorded (no value for unbound pods).
kube::IndexFunc IndexByPodNode();

struct PodSnapshot {
  std::vector<ObservedPod> owned;           // controlled by the DataService (controller uid)
  std::vector<ObservedPod> namespace_pods;  // every pod of its namespace (only with a consumer selector)
  // CPU requested per node by every pod on it (SumCpuRequestsByNode), for each node that runs a pod
  // of the namespace matching the consumer selector (at least every consumer node).
  std::map<std::string, int64_t> cpu_requested_by_node;
  std::vector<std::string> malformed;  // cached pods that did not parse (to log)
};

// Reads the pods of the DataService with uid `uid` in namespace `ns` from `pods` (a store with the
// three indexes above) in one state. Without `consumers` (RemoteOnly, or no selector) only the owned
// pods are read. `consumer_nodes` is the caller's guess of the consumer nodes (the last snapshot's;
// may be empty); when the snapshot shows a consumer on a node outside it, the read is repeated with
// that node added (the guess only grows, so this ends), and on return it holds the nodes whose sums
// the snapshot carries.
PodSnapshot ReadPodSnapshot(const kube::Store& pods, const std::string& ns, const std::string& uid,
                            const std::optional<LabelSelector>& consumers, std::set<std::string>* consumer_nodes);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_POD_SNAPSHOT_H_
