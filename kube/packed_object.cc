#include "kube/packed_object.h"

#include <string>
#include <utility>

namespace sluice::kube {

using nlohmann::json;

namespace {

constexpr char kPacked[] = "packed";

void CopyString(const json& from, json& to, const char* key) {
  auto it = from.find(key);
  if (it != from.end() && it->is_string()) to[key] = *it;
}

}  // namespace

bool IsPacked(const json& object) {
  if (!object.is_object()) return false;
  auto it = object.find(kPacked);
  return it != object.end() && it->is_string();
}

json PackObject(json&& object) {
  if (!object.is_object()) return std::move(object);
  json meta = json::object();
  auto m = object.find("metadata");
  if (m != object.end() && m->is_object()) {
    for (const char* key : {"name", "namespace", "resourceVersion"}) CopyString(*m, meta, key);
    auto owners = m->find("ownerReferences");
    if (owners != m->end() && owners->is_array()) {
      for (const json& ref : *owners) {
        auto controller = ref.is_object() ? ref.find("controller") : ref.end();
        if (controller == ref.end() || !controller->is_boolean() || !controller->get<bool>()) continue;
        auto text = [&](const char* key) {
          auto it = ref.find(key);
          return it != ref.end() && it->is_string() ? it->get<std::string>() : std::string();
        };
        std::string kind = text("kind"), name = text("name"), uid = text("uid");
        if (kind.find('/') != std::string::npos || name.find('/') != std::string::npos) break;  // not a valid ref
        meta["controllerRef"] = kind + "/" + name + "/" + uid;
        break;
      }
    }
  }
  json out = json::object();
  out["packed"] = object.dump();
  out["metadata"] = std::move(meta);
  return out;
}

std::optional<PackedController> PackedControllerOf(const json& object) {
  if (!IsPacked(object)) return std::nullopt;
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return std::nullopt;
  auto ref = m->find("controllerRef");
  if (ref == m->end() || !ref->is_string()) return std::nullopt;
  const std::string& text = ref->get_ref<const std::string&>();
  auto first = text.find('/');
  auto second = first == std::string::npos ? std::string::npos : text.find('/', first + 1);
  if (second == std::string::npos) return std::nullopt;
  return PackedController{text.substr(0, first), text.substr(first + 1, second - first - 1), text.substr(second + 1)};
}

json UnpackObject(const json& object) {
  if (!IsPacked(object)) return object;
  return json::parse(object[kPacked].get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace sluice::kube
