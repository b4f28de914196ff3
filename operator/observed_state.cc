#include "operator/observed_state.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "operator/json_fields.h"
#include "operator/quantity.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

absl::Status ErrorsToStatus(const FieldReader& r, absl::string_view what, const std::string& name) {
  return absl::InvalidArgumentError(absl::StrCat(what, " \"", name, "\": ", FormatFieldErrors(r.errors())));
}

// Reads metadata fields shared by every kind; returns the controller owner's uid.
void ReadCommonMeta(FieldReader& r, const json& object, std::string* name, std::string* uid,
                    std::string* controller_uid, StringMap* labels = nullptr, StringMap* annotations = nullptr) {
  const json* m = r.Object(object, "", "metadata", /*required=*/true);
  if (m == nullptr) return;
  r.String(*m, "metadata", "name", name, /*required=*/true);
  r.String(*m, "metadata", "uid", uid);
  if (labels != nullptr) r.StringMap(*m, "metadata", "labels", labels);
  if (annotations != nullptr) r.StringMap(*m, "metadata", "annotations", annotations);
  if (const json* owners = r.Array(*m, "metadata", "ownerReferences")) {
    for (size_t i = 0; i < owners->size(); ++i) {
      const json& o = (*owners)[i];
      std::string path = IndexPath("metadata.ownerReferences", i);
      bool controller = false;
      r.Bool(o, path, "controller", &controller);
      if (controller) r.String(o, path, "uid", controller_uid);
    }
  }
}

// CPU request of one container list entry (requests.cpu, else limits.cpu).
int64_t ContainerCpu(FieldReader& r, const json& container, const std::string& path) {
  const json* res = r.Object(container, path, "resources");
  if (res == nullptr) return 0;
  std::string rpath = JoinPath(path, "resources");
  for (absl::string_view part : {"requests", "limits"}) {
    const json* m = r.Object(*res, rpath, part);
    if (m == nullptr) continue;
    std::string text;
    if (r.Quantity(*m, JoinPath(rpath, part), "cpu", &text)) {
      absl::StatusOr<int64_t> millis = ParseQuantityMillis(text);
      return millis.ok() ? *millis : 0;
    }
  }
  return 0;
}

int64_t PodCpu(FieldReader& r, const json& spec) {
  int64_t containers = 0;
  if (const json* list = r.Array(spec, "spec", "containers")) {
    for (size_t i = 0; i < list->size(); ++i) containers += ContainerCpu(r, (*list)[i], IndexPath("spec.containers", i));
  }
  int64_t init_max = 0;
  if (const json* list = r.Array(spec, "spec", "initContainers")) {
    for (size_t i = 0; i < list->size(); ++i) {
      init_max = std::max(init_max, ContainerCpu(r, (*list)[i], IndexPath("spec.initContainers", i)));
    }
  }
  int64_t overhead = 0;
  if (const json* o = r.Object(spec, "spec", "overhead")) {
    std::string text;
    if (r.Quantity(*o, "spec.overhead", "cpu", &text)) overhead = ParseQuantityMillis(text).value_or(0);
  }
  return std::max(containers, init_max) + overhead;
}

std::string AffinityNode(const json& spec) {
  // spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*]
  //   .matchFields[{key: metadata.name, operator: In, values: [node]}]
  const json* a = FieldReader::Member(spec, "affinity");
  const json* na = a ? FieldReader::Member(*a, "nodeAffinity") : nullptr;
  const json* req = na ? FieldReader::Member(*na, "requiredDuringSchedulingIgnoredDuringExecution") : nullptr;
  const json* terms = req ? FieldReader::Member(*req, "nodeSelectorTerms") : nullptr;
  if (terms == nullptr || !terms->is_array()) return "";
  for (const json& term : *terms) {
    const json* fields = FieldReader::Member(term, "matchFields");
    if (fields == nullptr || !fields->is_array()) continue;
    for (const json& f : *fields) {
      const json* key = FieldReader::Member(f, "key");
      const json* op = FieldReader::Member(f, "operator");
      const json* values = FieldReader::Member(f, "values");
      if (key && key->is_string() && *key == "metadata.name" && op && op->is_string() && *op == "In" && values &&
          values->is_array() && values->size() == 1 && (*values)[0].is_string()) {
        return (*values)[0].get<std::string>();
      }
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<ObservedPod> ObservedPodFromJson(const json& pod) {
  try {
    if (!pod.is_object()) return absl::InvalidArgumentError("a pod must be a JSON object");
    FieldReader r;
    ObservedPod p;
    ReadCommonMeta(r, pod, &p.name, &p.uid, &p.controller_uid, &p.labels, &p.annotations);
    if (const json* m = FieldReader::Member(pod, "metadata")) {
      absl::Time t;
      if (r.Timestamp(*m, "metadata", "creationTimestamp", &t)) p.creation_timestamp = t;
      p.terminating = FieldReader::Member(*m, "deletionTimestamp") != nullptr;
    }
    if (const json* spec = r.Object(pod, "", "spec")) {
      r.String(*spec, "spec", "nodeName", &p.node_name);
      p.cpu_request_millis = PodCpu(r, *spec);
      p.affinity_node = AffinityNode(*spec);
    }
    if (const json* status = r.Object(pod, "", "status")) {
      r.String(*status, "status", "phase", &p.phase);
      r.String(*status, "status", "podIP", &p.pod_ip);
      if (const json* conds = r.Array(*status, "status", "conditions")) {
        for (const json& c : *conds) {
          const json* type = FieldReader::Member(c, "type");
          const json* st = FieldReader::Member(c, "status");
          if (type && type->is_string() && *type == "Ready" && st && st->is_string()) p.ready = *st == "True";
          if (type && type->is_string() && *type == "PodScheduled" && st && st->is_string() && *st == "False") {
            const json* reason = FieldReader::Member(c, "reason");
            const json* message = FieldReader::Member(c, "message");
            p.unschedulable_reason = reason && reason->is_string() ? reason->get<std::string>() : "Unschedulable";
            if (message && message->is_string()) p.unschedulable_message = message->get<std::string>();
          }
        }
      }
    }
    if (!r.ok()) return ErrorsToStatus(r, "pod", p.name);
    return p;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed pod: ", e.what()));
  }
}

absl::StatusOr<ObservedNode> ObservedNodeFromJson(const json& node) {
  try {
    if (!node.is_object()) return absl::InvalidArgumentError("a node must be a JSON object");
    FieldReader r;
    ObservedNode n;
    std::string uid, controller;
    ReadCommonMeta(r, node, &n.name, &uid, &controller, &n.labels);
    if (const json* spec = r.Object(node, "", "spec")) {
      r.Bool(*spec, "spec", "unschedulable", &n.unschedulable);
      if (const json* taints = r.Array(*spec, "spec", "taints")) {
        for (size_t i = 0; i < taints->size(); ++i) {
          Taint t;
          std::string path = IndexPath("spec.taints", i);
          r.String((*taints)[i], path, "key", &t.key, /*required=*/true);
          r.String((*taints)[i], path, "value", &t.value);
          r.String((*taints)[i], path, "effect", &t.effect, /*required=*/true);
          n.taints.push_back(std::move(t));
        }
      }
    }
    if (const json* status = r.Object(node, "", "status")) {
      if (const json* alloc = r.Object(*status, "status", "allocatable")) {
        std::string text;
        if (r.Quantity(*alloc, "status.allocatable", "cpu", &text)) {
          n.allocatable_cpu_millis = ParseQuantityMillis(text).value_or(0);
        }
      }
    }
    if (!r.ok()) return ErrorsToStatus(r, "node", n.name);
    return n;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed node: ", e.what()));
  }
}

absl::StatusOr<ObservedService> ObservedServiceFromJson(const json& service) {
  try {
    if (!service.is_object()) return absl::InvalidArgumentError("a service must be a JSON object");
    FieldReader r;
    ObservedService s;
    ReadCommonMeta(r, service, &s.name, &s.uid, &s.controller_uid);
    if (const json* spec = r.Object(service, "", "spec")) {
      if (const json* ports = r.Array(*spec, "spec", "ports")) {
        for (size_t i = 0; i < ports->size(); ++i) {
          ServicePort p;
          std::string path = IndexPath("spec.ports", i);
          r.String((*ports)[i], path, "name", &p.name);
          r.Int((*ports)[i], path, "port", &p.port, /*required=*/true);
          const json* target = FieldReader::Member((*ports)[i], "targetPort");
          if (target != nullptr && target->is_number_integer()) p.target_port = target->get<int64_t>();
          s.ports.push_back(std::move(p));
        }
      }
    }
    if (!r.ok()) return ErrorsToStatus(r, "service", s.name);
    return s;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed service: ", e.what()));
  }
}

absl::StatusOr<ObservedClaim> ObservedClaimFromJson(const json& claim) {
  try {
    if (!claim.is_object()) return absl::InvalidArgumentError("a persistent volume claim must be a JSON object");
    FieldReader r;
    ObservedClaim c;
    ReadCommonMeta(r, claim, &c.name, &c.uid, &c.controller_uid);
    if (const json* status = r.Object(claim, "", "status")) r.String(*status, "status", "phase", &c.phase);
    if (!r.ok()) return ErrorsToStatus(r, "persistent volume claim", c.name);
    return c;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed persistent volume claim: ", e.what()));
  }
}

std::map<std::string, int64_t> SumCpuRequestsByNode(const std::vector<ObservedPod>& pods) {
  std::map<std::string, int64_t> sums;
  for (const ObservedPod& p : pods) {
    if (p.node_name.empty() || p.Finished()) continue;
    sums[p.node_name] += p.cpu_request_millis;
  }
  return sums;
}

bool SelectorMatches(const LabelSelector& selector, const StringMap& labels) {
  if (!MapSelectorMatches(selector.match_labels, labels)) return false;
  for (const LabelSelectorRequirement& req : selector.match_expressions) {
    auto it = labels.find(req.key);
    bool has = it != labels.end();
    bool in_values = has && std::find(req.values.begin(), req.values.end(), it->second) != req.values.end();
    if (req.op == "In" && !in_values) return false;
    if (req.op == "NotIn" && in_values) return false;
    if (req.op == "Exists" && !has) return false;
    if (req.op == "DoesNotExist" && has) return false;
  }
  return true;
}

bool MapSelectorMatches(const StringMap& selector, const StringMap& labels) {
  for (const auto& [key, value] : selector) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  return true;
}

bool Tolerates(const Toleration& toleration, const Taint& taint) {
  if (!toleration.effect.empty() && toleration.effect != taint.effect) return false;
  if (toleration.op == "Exists") return toleration.key.empty() || toleration.key == taint.key;
  return toleration.key == taint.key && toleration.value == taint.value;
}

std::optional<Taint> FirstUntoleratedTaint(const std::vector<Toleration>& tolerations,
                                           const std::vector<Taint>& taints) {
  for (const Taint& taint : taints) {
    if (taint.effect != "NoSchedule" && taint.effect != "NoExecute") continue;
    bool tolerated = std::any_of(tolerations.begin(), tolerations.end(),
                                 [&](const Toleration& t) { return Tolerates(t, taint); });
    if (!tolerated) return taint;
  }
  return std::nullopt;
}

}  // namespace sluice::op
