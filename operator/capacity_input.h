// How many worker pods the consumer (trainer) nodes can take: for each node running a consumer pod,
// (allocatable CPU - CPU requested by every pod other than this DataService's local workers)
// x localCpuFraction, divided by the worker CPU request. Pure; safe to call from any thread.
#ifndef SLUICE_OPERATOR_LOCAL_CAPACITY_H_
#define SLUICE_OPERATOR_LOCAL_CAPACITY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "operator/dataservice_types.h"
#include "operator/observed_state.h"

namespace sluice::op {

struct NodeCapacity {
  std::string node;
  int64_t allocatable_millis = 0;
  int64_t requested_by_others_millis = 0;  // all pods on the node except this DataService's local workers
  int64_t budget_millis = 0;               // (allocatable - others) * localCpuFraction, floored, >= 0
  int64_t workers = 0;                     // budget / worker CPU request, floored
  std::string excluded_reason;             // non-empty: the node takes no local workers, and why
};

struct LocalCapacity {
  std::vector<NodeCapacity> nodes;  // every node running a consumer pod, sorted by name
  int64_t total_workers = 0;

  // Worker slots on `node` (0 for a node that is not a consumer node or is excluded).
  int64_t WorkersOn(const std::string& node) const;
};

// `consumer_pods` may hold any pods of the namespace: only running or pending pods bound to a node
// that match spec.placement.consumerSelector and are not owned by the DataService count.
// `cpu_requested_by_node` comes from SumCpuRequestsByNode over all pods; `owned_pods` are the
// DataService's own pods (its local workers' requests are added back, so existing local workers do
// not shrink their own capacity). RemoteOnly, or no consumer selector, gives no capacity.
LocalCapacity ComputeLocalCapacity(const DataService& ds, const std::vector<ObservedNode>& nodes,
                                   const std::vector<ObservedPod>& consumer_pods,
                                   const std::map<std::string, int64_t>& cpu_requested_by_node,
                                   const std::vector<ObservedPod>& owned_pods);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_LOCAL_CAPACITY_H_
