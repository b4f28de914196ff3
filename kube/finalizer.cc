#include "kube/finalizer.h"

#include "absl/strings/str_cat.h"
#include "kube/apply.h"

namespace sluice::kube {

using nlohmann::json;

namespace {

const json* Finalizers(const json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) return nullptr;
  const json& meta = object["metadata"];
  if (!meta.contains("finalizers") || !meta["finalizers"].is_array()) return nullptr;
  return &meta["finalizers"];
}

int FinalizerIndex(const json& object, absl::string_view finalizer) {
  const json* list = Finalizers(object);
  if (list == nullptr) return -1;
  for (size_t i = 0; i < list->size(); ++i) {
    if ((*list)[i].is_string() && (*list)[i].get<std::string>() == finalizer) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

bool HasFinalizer(const json& object, absl::string_view finalizer) { return FinalizerIndex(object, finalizer) >= 0; }

bool IsBeingDeleted(const json& object) {
  return object.contains("metadata") && object["metadata"].is_object() &&
         object["metadata"].contains("deletionTimestamp") && !object["metadata"]["deletionTimestamp"].is_null();
}

absl::StatusOr<json> AddFinalizer(Client& client, const ResourceRef& ref, const json& object,
                                  absl::string_view finalizer) {
  const json* list = Finalizers(object);
  json guards, ops;
  if (list == nullptr || list->empty()) {
    guards = json::array({JsonPatchTest("/metadata/finalizers", list == nullptr ? json(nullptr) : *list)});
    ops = json::array({{{"op", "add"}, {"path", "/metadata/finalizers"}, {"value", json::array({std::string(finalizer)})}}});
  } else {
    guards = json::array({JsonPatchTest("/metadata/finalizers", *list)});
    ops = json::array({{{"op", "add"}, {"path", "/metadata/finalizers/-"}, {"value", std::string(finalizer)}}});
  }
  return JsonPatchWithGuards(client, ref, NamespaceOf(object), NameOf(object), guards, ops);
}

absl::StatusOr<json> RemoveFinalizer(Client& client, const ResourceRef& ref, const json& object,
                                     absl::string_view finalizer) {
  int index = FinalizerIndex(object, finalizer);
  if (index < 0) return object;
  std::string path = absl::StrCat("/metadata/finalizers/", index);
  json guards = json::array({JsonPatchTest(path, std::string(finalizer))});
  json ops = json::array({{{"op", "remove"}, {"path", path}}});
  return JsonPatchWithGuards(client, ref, NamespaceOf(object), NameOf(object), guards, ops);
}

absl::StatusOr<ReconcileResult> Finalize(Client& client, const ResourceRef& ref, const json& object,
                                         absl::string_view finalizer, const FinalizerReconcile& reconcile) {
  bool has = HasFinalizer(object, finalizer);
  bool deleting = IsBeingDeleted(object);
  if (has && deleting) {
    absl::StatusOr<ReconcileResult> result = reconcile(FinalizerEvent::kCleanup, object);
    if (!result.ok()) return result;
    auto removed = RemoveFinalizer(client, ref, object, finalizer);
    if (!removed.ok()) return removed.status();
    return result;
  }
  if (has) return reconcile(FinalizerEvent::kApply, object);
  if (deleting) return ReconcileResult{};
  auto added = AddFinalizer(client, ref, object, finalizer);
  if (!added.ok()) return added.status();
  return ReconcileResult{};
}

}  // namespace sluice::kube
