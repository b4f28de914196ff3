#include "kube/apply.h"

#include "absl/strings/str_cat.h"
#include "kube/errors.h"

namespace sluice::kube {

using nlohmann::json;

absl::StatusOr<json> ServerSideApply(Client& client, const ResourceRef& ref, absl::string_view ns,
                                     const json& object, absl::string_view field_manager, bool force,
                                     absl::string_view subresource) {
  std::string name = NameOf(object);
  if (name.empty()) return absl::InvalidArgumentError("server-side apply: metadata.name is required");
  if (!object.contains("apiVersion") || !object.contains("kind")) {
    return absl::InvalidArgumentError("server-side apply: apiVersion and kind are required");
  }
  if (field_manager.empty()) return absl::InvalidArgumentError("server-side apply: fieldManager is required");
  WriteOptions options;
  options.field_manager = std::string(field_manager);
  options.force = force;
  return client.Patch(ref, ns, name, PatchType::kApply, object, options, subresource);
}

absl::StatusOr<json> ReplaceStatus(Client& client, const ResourceRef& ref, absl::string_view ns, const json& object) {
  std::string name = NameOf(object);
  if (name.empty()) return absl::InvalidArgumentError("replace status: metadata.name is required");
  return client.Replace(ref, ns, name, object, {}, "status");
}

absl::StatusOr<json> PatchStatus(Client& client, const ResourceRef& ref, absl::string_view ns,
                                 absl::string_view name, const json& status) {
  return client.Patch(ref, ns, name, PatchType::kMerge, json{{"status", status}}, {}, "status");
}

std::string JsonPointerEscape(absl::string_view segment) {
  std::string out;
  for (char c : segment) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out.push_back(c);
  }
  return out;
}

json JsonPatchTest(absl::string_view path, const json& value) {
  return json{{"op", "test"}, {"path", std::string(path)}, {"value", value}};
}

absl::StatusOr<json> JsonPatchWithGuards(Client& client, const ResourceRef& ref, absl::string_view ns,
                                         absl::string_view name, const json& guards, const json& ops) {
  if (!guards.is_array() || !ops.is_array()) {
    return absl::InvalidArgumentError("guarded json patch: guards and ops must be JSON arrays");
  }
  json patch = guards;
  for (const json& op : ops) patch.push_back(op);
  auto result = client.Patch(ref, ns, name, PatchType::kJsonPatch, patch);
  if (!result.ok() && KubeHttpCode(result.status()) == 422) {
    // The API server answers a failed `test` with a bare 422 Invalid; report it as the lost race it is.
    absl::Status status = absl::AbortedError(
        absl::StrCat("guarded patch of ", ref.ObjectPath(ns, name), " not applied (a guard failed: the object "
                     "changed): ", result.status().message()));
    return WithKubeDetails(status, KubeReason(result.status()), 422);
  }
  return result;
}

absl::StatusOr<json> GuardedJsonPatch(Client& client, const ResourceRef& ref, absl::string_view ns,
                                      absl::string_view name, absl::string_view expected_resource_version,
                                      const json& ops) {
  json guards = json::array({JsonPatchTest("/metadata/resourceVersion", std::string(expected_resource_version))});
  return JsonPatchWithGuards(client, ref, ns, name, guards, ops);
}

json ControllerOwnerReference(const json& owner) {
  return json{{"apiVersion", GetString(owner, "apiVersion")},
              {"kind", GetString(owner, "kind")},
              {"name", NameOf(owner)},
              {"uid", UidOf(owner)},
              {"controller", true},
              {"blockOwnerDeletion", true}};
}

void SetControllerReference(json& object, const json& owner) {
  if (!object.is_object()) object = json::object();
  if (!object.contains("metadata") || !object["metadata"].is_object()) object["metadata"] = json::object();
  json& meta = object["metadata"];
  json refs = meta.contains("ownerReferences") && meta["ownerReferences"].is_array() ? meta["ownerReferences"]
                                                                                      : json::array();
  json kept = json::array();
  std::string uid = UidOf(owner);
  for (const json& ref : refs) {
    if (ref.is_object() && (GetBool(ref, "controller") || GetString(ref, "uid") == uid)) continue;
    kept.push_back(ref);
  }
  kept.push_back(ControllerOwnerReference(owner));
  meta["ownerReferences"] = std::move(kept);
}

std::optional<json> ControllerOf(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return std::nullopt;
  const json& meta = object["metadata"];
  if (!meta.contains("ownerReferences") || !meta["ownerReferences"].is_array()) return std::nullopt;
  for (const json& ref : meta["ownerReferences"]) {
    if (GetBool(ref, "controller")) return ref;
  }
  return std::nullopt;
}

bool IsControlledBy(const json& object, absl::string_view owner_uid) {
  auto ref = ControllerOf(object);
  return ref && GetString(*ref, "uid") == owner_uid;
}

}  // namespace sluice::kube
