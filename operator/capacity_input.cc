#include "operator/capacity_input.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "operator/manifests.h"

namespace sluice::op {

autoscaler::Placement PlacementOf(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kHybrid: return autoscaler::Placement::kHybrid;
    case PlacementPolicy::kLocalOnly: return autoscaler::Placement::kLocalOnly;
    case PlacementPolicy::kRemoteOnly: return autoscaler::Placement::kRemoteOnly;
  }
  return autoscaler::Placement::kRemoteOnly;
}

autoscaler::CapacityInput CapacityInputFor(const DataService& ds, const std::vector<ObservedNode>& nodes,
                                           const std::vector<ObservedPod>& consumer_pods,
                                           const std::map<std::string, int64_t>& cpu_requested_by_node,
                                           const std::vector<ObservedPod>& owned_pods) {
  const PlacementSpec& placement = ds.spec.placement;
  autoscaler::CapacityInput in;
  in.policy = PlacementOf(placement.policy);
  in.worker_cpu_millis = WorkerCpuMillis(ds.spec.workers);
  in.local_cpu_fraction = placement.local_cpu_fraction;
  if (placement.policy == PlacementPolicy::kRemoteOnly || !placement.consumer_selector.has_value()) return in;

  std::set<std::string> consumer_nodes;
  for (const ObservedPod& pod : consumer_pods) {
    if (pod.node_name.empty() || pod.terminating || pod.Finished()) continue;
    if (pod.controller_uid == ds.metadata.uid && !ds.metadata.uid.empty()) continue;  // our own pods
    if (!SelectorMatches(*placement.consumer_selector, pod.labels)) continue;
    consumer_nodes.insert(pod.node_name);
  }
  // CPU requested on each node by this DataService's own local workers (taken off the node's sum).
  std::map<std::string, int64_t> own_local;
  for (const ObservedPod& pod : owned_pods) {
    if (pod.node_name.empty() || pod.Finished()) continue;
    auto role = pod.labels.find(kLabelRole);
    auto place = pod.labels.find(kLabelPlacement);
    if (role == pod.labels.end() || role->second != "worker") continue;
    if (place == pod.labels.end() || place->second != "local") continue;
    own_local[pod.node_name] += pod.cpu_request_millis;
  }

  for (const std::string& name : consumer_nodes) {
    autoscaler::CapacityNode cn;
    cn.name = name;
    cn.consumer = true;
    auto node_it = std::find_if(nodes.begin(), nodes.end(), [&](const ObservedNode& n) { return n.name == name; });
    if (node_it == nodes.end()) {
      cn.excluded_reason = "node not observed";
      in.nodes.push_back(std::move(cn));
      continue;
    }
    const ObservedNode& node = *node_it;
    cn.allocatable_cpu_millis = node.allocatable_cpu_millis;
    auto req = cpu_requested_by_node.find(name);
    const int64_t requested = req == cpu_requested_by_node.end() ? 0 : req->second;
    cn.cpu_requested_by_others_millis = std::max<int64_t>(0, requested - own_local[name]);
    if (node.unschedulable) {
      cn.excluded_reason = "node is cordoned (spec.unschedulable)";
    } else if (!MapSelectorMatches(placement.accelerator_node_selector, node.labels)) {
      cn.excluded_reason = "node lacks the labels of spec.placement.acceleratorNodeSelector";
    } else if (std::optional<Taint> taint = FirstUntoleratedTaint(placement.local_tolerations, node.taints)) {
      cn.excluded_reason = absl::StrCat("taint ", taint->key, "=", taint->value, ":", taint->effect,
                                        " is not tolerated by spec.placement.localTolerations");
    }
    in.nodes.push_back(std::move(cn));
  }
  return in;
}

}  // namespace sluice::op
