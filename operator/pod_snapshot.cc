#include "operator/pod_snapshot.h"

#include <algorithm>
#include <utility>

#include "kube/packed_object.h"
#include "operator/compact_objects.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

std::string NodeNameOf(const json& pod) {
  if (!pod.is_object()) return "";
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return "";
  auto node = spec->find("nodeName");
  return node != spec->end() && node->is_string() ? node->get<std::string>() : "";
}

}  // namespace

json PackPod(json&& pod) {
  std::string node = NodeNameOf(pod);
  json packed = kube::PackObject(CompactPod(std::move(pod)));
  if (!node.empty() && packed.is_object()) packed["spec"] = json{{"nodeName", std::move(node)}};
  return packed;
}

kube::IndexFunc IndexByPodNode() {
  return [](const json& pod) -> std::vector<std::string> {
    std::string node = NodeNameOf(pod);
    if (node.empty()) return {};
    return {std::move(node)};
  };
}

PodSnapshot ReadPodSnapshot(const kube::Store& pods, const std::string& ns, const std::string& uid,
                            const std::optional<LabelSelector>& consumers, std::set<std::string>* consumer_nodes) {
  std::set<std::string> guess = *consumer_nodes;
  for (;;) {
    PodSnapshot snap;
    std::vector<std::pair<std::string, std::string>> lookups = {{kPodIndexControllerUid, uid}};
    if (consumers.has_value()) {
      lookups.emplace_back(kPodIndexNamespace, ns);
      for (const std::string& node : guess) lookups.emplace_back(kPodIndexNode, node);
    }
    const std::vector<std::vector<kube::ObjectPtr>> read = pods.ByIndexes(lookups);

    // Each cached object is parsed once, whichever lookups returned it.
    std::map<const json*, std::optional<ObservedPod>> parsed;
    auto parse = [&](const kube::ObjectPtr& o) -> const std::optional<ObservedPod>& {
      auto [it, inserted] = parsed.try_emplace(o.get());
      if (inserted) {
        absl::StatusOr<ObservedPod> p = ObservedPodFromJson(kube::UnpackObject(*o));
        if (p.ok()) {
          it->second = *std::move(p);
        } else {
          snap.malformed.emplace_back(p.status().message());
        }
      }
      return it->second;
    };
    for (const kube::ObjectPtr& o : read[0]) {
      if (const auto& p = parse(o)) snap.owned.push_back(*p);
    }
    if (!consumers.has_value()) {
      consumer_nodes->clear();
      return snap;
    }
    std::set<std::string> needed;
    for (const kube::ObjectPtr& o : read[1]) {
      const auto& p = parse(o);
      if (!p) continue;
      snap.namespace_pods.push_back(*p);
      if (!p->node_name.empty() && SelectorMatches(*consumers, p->labels)) needed.insert(p->node_name);
    }
    if (!std::includes(guess.begin(), guess.end(), needed.begin(), needed.end())) {
      guess.insert(needed.begin(), needed.end());  // a consumer on a node not read: read again with it
      continue;
    }
    size_t i = 2;
    for (const std::string& node : guess) {
      const std::vector<kube::ObjectPtr>& on_node = read[i++];
      if (!needed.count(node)) continue;
      std::vector<ObservedPod> node_pods;
      for (const kube::ObjectPtr& o : on_node) {
        if (const auto& p = parse(o)) node_pods.push_back(*p);
      }
      for (const auto& [name, millis] : SumCpuRequestsByNode(node_pods)) snap.cpu_requested_by_node[name] += millis;
    }
    *consumer_nodes = std::move(needed);
    return snap;
  }
}

}  // namespace sluice::op
