// Adapts what the operator observes (operator/observed_state.h, read in one state through
// operator/pod_snapshot.h) into the input of the shared capacity model
// (autoscaler/placement/local_capacity.h): which nodes are consumer nodes, the CPU requested on them
// by everything but the DataService's own local workers, and why a node takes no local workers
// (not observed, cordoned, lacking the accelerator labels, an untolerated taint). The arithmetic and
// the split are the model's, the same the autoscaler uses. Pure; safe to call from any thread.
#ifndef SLUICE_OPERATOR_CAPACITY_INPUT_H_
#define SLUICE_OPERATOR_CAPACITY_INPUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autoscaler/placement/local_capacity.h"
#include "operator/dataservice_types.h"
#include "operator/observed_state.h"

namespace sluice::op {

// The placement policy of the CRD as the placement library names it.
autoscaler::Placement PlacementOf(PlacementPolicy policy);

// `consumer_pods` may hold any pods of the namespace: only running or pending pods bound to a node
// that match spec.placement.consumerSelector and are not owned by the DataService make their node a
// consumer node (listed once, with consumer = true; other nodes are left out). A consumer node
// missing from `nodes` is listed as excluded ("node not observed"). `cpu_requested_by_node` comes
// from SumCpuRequestsByNode over all pods; `owned_pods` are the DataService's own pods (the CPU of
// its local workers is taken off the node's sum, so existing local workers do not shrink their own
// capacity). Without a consumer selector there are no consumer nodes; under RemoteOnly the model
// gives no capacity.
autoscaler::CapacityInput CapacityInputFor(const DataService& ds, const std::vector<ObservedNode>& nodes,
                                           const std::vector<ObservedPod>& consumer_pods,
                                           const std::map<std::string, int64_t>& cpu_requested_by_node,
                                           const std::vector<ObservedPod>& owned_pods);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_CAPACITY_INPUT_H_
