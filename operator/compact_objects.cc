#include "operator/compact_objects.h"

#include <utility>

#include "absl/strings/match.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

void Move(json& from, json& to, const char* key) {
  auto it = from.find(key);
  if (it != from.end()) to[key] = std::move(*it);
}

// {requests: {cpu}, limits: {cpu}}; other shapes are kept for the parser to report.
json CpuResources(json&& resources) {
  if (!resources.is_object()) return std::move(resources);
  json out = json::object();
  for (const char* part : {"requests", "limits"}) {
    auto it = resources.find(part);
    if (it == resources.end()) continue;
    if (!it->is_object()) {
      out[part] = std::move(*it);
      continue;
    }
    auto cpu = it->find("cpu");
    if (cpu != it->end()) out[part] = json{{"cpu", std::move(*cpu)}};
  }
  return out;
}

json CpuContainers(json&& containers) {
  if (!containers.is_array()) return std::move(containers);
  json out = json::array();
  for (json& c : containers) {
    if (!c.is_object()) {
      out.push_back(std::move(c));
      continue;
    }
    json kept = json::object();
    auto res = c.find("resources");
    if (res != c.end()) kept["resources"] = CpuResources(std::move(*res));
    out.push_back(std::move(kept));
  }
  return out;
}

}  // namespace

json CompactPod(json&& pod) {
  if (!pod.is_object()) return std::move(pod);
  json out = json::object();
  if (auto m = pod.find("metadata"); m != pod.end()) {
    if (!m->is_object()) {
      out["metadata"] = std::move(*m);
    } else {
      json meta = json::object();
      for (const char* key : {"name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                              "labels"}) {
        Move(*m, meta, key);
      }
      if (auto a = m->find("annotations"); a != m->end()) {
        if (!a->is_object()) {
          meta["annotations"] = std::move(*a);
        } else {
          json kept = json::object();
          for (auto it = a->begin(); it != a->end(); ++it) {
            if (absl::StartsWith(it.key(), "sluice.dev/")) kept[it.key()] = std::move(it.value());
          }
          if (!kept.empty()) meta["annotations"] = std::move(kept);
        }
      }
      if (auto owners = m->find("ownerReferences"); owners != m->end()) {
        if (!owners->is_array()) {
          meta["ownerReferences"] = std::move(*owners);
        } else {
          json kept = json::array();
          for (json& o : *owners) {
            auto controller = o.is_object() ? o.find("controller") : o.end();
            if (o.is_object() && (controller == o.end() || (controller->is_boolean() && !controller->get<bool>()))) {
              continue;  // not the controller: never read
            }
            if (o.is_object()) {  // the controller: the fields the parser and the runtime read
              json ref = json::object();
              for (const char* key : {"controller", "kind", "name", "uid"}) Move(o, ref, key);
              kept.push_back(std::move(ref));
            } else {
              kept.push_back(std::move(o));  // malformed: the parser reports it
            }
          }
          if (!kept.empty()) meta["ownerReferences"] = std::move(kept);
        }
      }
      out["metadata"] = std::move(meta);
    }
  }
  if (auto s = pod.find("spec"); s != pod.end()) {
    if (!s->is_object()) {
      out["spec"] = std::move(*s);
    } else {
      json spec = json::object();
      Move(*s, spec, "nodeName");
      Move(*s, spec, "affinity");
      for (const char* list : {"containers", "initContainers"}) {
        if (auto c = s->find(list); c != s->end()) spec[list] = CpuContainers(std::move(*c));
      }
      if (auto o = s->find("overhead"); o != s->end()) {
        if (o->is_object() && o->contains("cpu")) {
          spec["overhead"] = json{{"cpu", std::move((*o)["cpu"])}};
        } else if (!o->is_object()) {
          spec["overhead"] = std::move(*o);
        }
      }
      out["spec"] = std::move(spec);
    }
  }
  if (auto st = pod.find("status"); st != pod.end()) {
    if (!st->is_object()) {
      out["status"] = std::move(*st);
    } else {
      json status = json::object();
      Move(*st, status, "phase");
      Move(*st, status, "podIP");
      if (auto conds = st->find("conditions"); conds != st->end()) {
        if (!conds->is_array()) {
          status["conditions"] = std::move(*conds);
        } else {
          json kept = json::array();
          for (json& c : *conds) {
            if (!c.is_object() || !c.contains("type")) continue;
            if (c["type"] == "Ready") {
              json ready = {{"type", "Ready"}};
              if (c.contains("status")) ready["status"] = std::move(c["status"]);
              kept.push_back(std::move(ready));
            } else if (c["type"] == "PodScheduled" && c.contains("status") && c["status"] == "False") {
              // Why the scheduler cannot place the pod (kept only while it cannot).
              json unscheduled = {{"type", "PodScheduled"}, {"status", "False"}};
              Move(c, unscheduled, "reason");
              Move(c, unscheduled, "message");
              kept.push_back(std::move(unscheduled));
            }
          }
          status["conditions"] = std::move(kept);
        }
      }
      out["status"] = std::move(status);
    }
  }
  return out;
}

json CompactNode(json&& node) {
  if (!node.is_object()) return std::move(node);
  json out = json::object();
  Move(node, out, "apiVersion");
  Move(node, out, "kind");
  if (auto m = node.find("metadata"); m != node.end()) {
    if (!m->is_object()) {
      out["metadata"] = std::move(*m);
    } else {
      json meta = json::object();
      for (const char* key : {"name", "uid", "resourceVersion", "labels"}) Move(*m, meta, key);
      out["metadata"] = std::move(meta);
    }
  }
  if (auto s = node.find("spec"); s != node.end()) {
    if (!s->is_object()) {
      out["spec"] = std::move(*s);
    } else {
      json spec = json::object();
      Move(*s, spec, "taints");
      Move(*s, spec, "unschedulable");
      out["spec"] = std::move(spec);
    }
  }
  if (auto st = node.find("status"); st != node.end()) {
    if (!st->is_object()) {
      out["status"] = std::move(*st);
    } else {
      json status = json::object();
      Move(*st, status, "allocatable");
      out["status"] = std::move(status);
    }
  }
  return out;
}

}  // namespace sluice::op
