// Write helpers on top of Client: server-side apply, status subresource writes, guarded JSON
// patches (a `test` op on resourceVersion or any field, so a concurrent change makes the patch
// fail instead of being overwritten), and controller ownerReferences.
//
// Threading: free functions; thread-safe as the Client is.
#ifndef SLUICE_KUBE_APPLY_H_
#define SLUICE_KUBE_APPLY_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

// PATCH application/apply-patch+yaml (the JSON body is valid YAML) with fieldManager and force.
// `object` must carry apiVersion, kind and metadata.name. A conflict with another manager (409,
// without force) is IsConflict; the message lists the conflicting fields.
absl::StatusOr<nlohmann::json> ServerSideApply(Client& client, const ResourceRef& ref, absl::string_view ns,
                                               const nlohmann::json& object, absl::string_view field_manager,
                                               bool force = false, absl::string_view subresource = "");

// PUT the status subresource (object must carry metadata.resourceVersion for optimistic locking).
absl::StatusOr<nlohmann::json> ReplaceStatus(Client& client, const ResourceRef& ref, absl::string_view ns,
                                             const nlohmann::json& object);
// Merge-patch the status subresource with {"status": status}.
absl::StatusOr<nlohmann::json> PatchStatus(Client& client, const ResourceRef& ref, absl::string_view ns,
                                           absl::string_view name, const nlohmann::json& status);

// JSON-pointer escaping of one path segment ("~" -> "~0", "/" -> "~1").
std::string JsonPointerEscape(absl::string_view segment);
// {"op":"test","path":path,"value":value}
nlohmann::json JsonPatchTest(absl::string_view path, const nlohmann::json& value);

// Applies `ops` (a JSON array of patch operations) guarded by a leading test op on
// /metadata/resourceVersion == expected_resource_version. A failed guard (the server's 422 for
// a failed test) is reported as Aborted, so IsConflict() is true: re-read and retry.
absl::StatusOr<nlohmann::json> GuardedJsonPatch(Client& client, const ResourceRef& ref, absl::string_view ns,
                                                absl::string_view name, absl::string_view expected_resource_version,
                                                const nlohmann::json& ops);
// Same, with arbitrary guards (test ops) placed before `ops`.
absl::StatusOr<nlohmann::json> JsonPatchWithGuards(Client& client, const ResourceRef& ref, absl::string_view ns,
                                                   absl::string_view name, const nlohmann::json& guards,
                                                   const nlohmann::json& ops);

// An ownerReference to `owner` with controller=true and blockOwnerDeletion=true.
nlohmann::json ControllerOwnerReference(const nlohmann::json& owner);
// Adds (or replaces) the controller ownerReference on `object`'s metadata.
void SetControllerReference(nlohmann::json& object, const nlohmann::json& owner);
// The controller ownerReference of `object`, if any.
std::optional<nlohmann::json> ControllerOf(const nlohmann::json& object);
bool IsControlledBy(const nlohmann::json& object, absl::string_view owner_uid);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_APPLY_H_
