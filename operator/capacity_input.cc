#include "operator/local_capacity.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "operator/manifests.h"

namespace sluice::op {

int64_t LocalCapacity::WorkersOn(const std::string& node) const {
  for (const NodeCapacity& n : nodes) {
    if (n.node == node) return n.excluded_reason.empty() ? n.workers : 0;
  }
  return 0;
}

LocalCapacity ComputeLocalCapacity(const DataService& ds, const std::vector<ObservedNode>& nodes,
                                   const std::vector<ObservedPod>& consumer_pods,
                                   const std::map<std::string, int64_t>& cpu_requested_by_node,
                                   const std::vector<ObservedPod>& owned_pods) {
  LocalCapacity result;
  const PlacementSpec& placement = ds.spec.placement;
  if (placement.policy == PlacementPolicy::kRemoteOnly || !placement.consumer_selector.has_value()) return result;

  std::set<std::string> consumer_nodes;
  for (const ObservedPod& pod : consumer_pods) {
    if (pod.node_name.empty() || pod.terminating || pod.Finished()) continue;
    if (pod.controller_uid == ds.metadata.uid && !ds.metadata.uid.empty()) continue;  // our own pods
    if (!SelectorMatches(*placement.consumer_selector, pod.labels)) continue;
    consumer_nodes.insert(pod.node_name);
  }
  // CPU requested on each node by this DataService's own local workers (added back below).
  std::map<std::string, int64_t> own_local;
  for (const ObservedPod& pod : owned_pods) {
    if (pod.node_name.empty() || pod.Finished()) continue;
    auto role = pod.labels.find(kLabelRole);
    auto place = pod.labels.find(kLabelPlacement);
    if (role == pod.labels.end() || role->second != "worker") continue;
    if (place == pod.labels.end() || place->second != "local") continue;
    own_local[pod.node_name] += pod.cpu_request_millis;
  }
  int64_t worker_cpu = WorkerCpuMillis(ds.spec.workers);

  for (const std::string& name : consumer_nodes) {
    NodeCapacity nc;
    nc.node = name;
    auto node_it = std::find_if(nodes.begin(), nodes.end(), [&](const ObservedNode& n) { return n.name == name; });
    if (node_it == nodes.end()) {
      nc.excluded_reason = "node not observed";
      result.nodes.push_back(std::move(nc));
      continue;
    }
    const ObservedNode& node = *node_it;
    nc.allocatable_millis = node.allocatable_cpu_millis;
    auto req = cpu_requested_by_node.find(name);
    int64_t requested = req == cpu_requested_by_node.end() ? 0 : req->second;
    nc.requested_by_others_millis = std::max<int64_t>(0, requested - own_local[name]);
    int64_t left = std::max<int64_t>(0, nc.allocatable_millis - nc.requested_by_others_millis);
    nc.budget_millis = static_cast<int64_t>(std::floor(static_cast<double>(left) * placement.local_cpu_fraction));
    nc.workers = worker_cpu > 0 ? nc.budget_millis / worker_cpu : 0;
    if (node.unschedulable) {
      nc.excluded_reason = "node is cordoned (spec.unschedulable)";
    } else if (!MapSelectorMatches(placement.accelerator_node_selector, node.labels)) {
      nc.excluded_reason = "node lacks the labels of spec.placement.acceleratorNodeSelector";
    } else if (std::optional<Taint> taint = FirstUntoleratedTaint(placement.local_tolerations, node.taints)) {
      nc.excluded_reason = absl::StrCat("taint ", taint->key, "=", taint->value, ":", taint->effect,
                                        " is not tolerated by spec.placement.localTolerations");
    }
    if (nc.excluded_reason.empty()) result.total_workers += nc.workers;
    result.nodes.push_back(std::move(nc));
  }
  return result;
}

}  // namespace sluice::op
