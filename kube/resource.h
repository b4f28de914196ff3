// Addressing Kubernetes resources: ResourceRef names a resource type (group, version, plural,
// namespaced) and builds request paths; option structs become query strings. Pure; thread-safe.
#ifndef SLUICE_KUBE_RESOURCE_H_
#define SLUICE_KUBE_RESOURCE_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace sluice::kube {

struct ResourceRef {
  std::string group{};  // "" for the core group
  std::string version{};
  std::string plural{};
  bool namespaced = true;

  // "v1" or "group/version".
  std::string ApiVersion() const;
  // "/api/v1" for the core group, "/apis/group/version" otherwise.
  std::string ApiPrefix() const;
  // Collection path; `ns` is ignored for cluster-scoped resources and may be empty for
  // "all namespaces" on namespaced ones.
  std::string CollectionPath(absl::string_view ns) const;
  // Object path, with an optional subresource ("status", "scale", "binding").
  std::string ObjectPath(absl::string_view ns, absl::string_view name, absl::string_view subresource = "") const;
};

// Common resources.
namespace resources {
ResourceRef Pods();
ResourceRef Services();
ResourceRef Nodes();
ResourceRef Namespaces();
ResourceRef CoreEvents();
ResourceRef Events();  // events.k8s.io/v1
ResourceRef Leases();  // coordination.k8s.io/v1
ResourceRef ConfigMaps();
ResourceRef Secrets();
ResourceRef Deployments();
ResourceRef CustomResourceDefinitions();
}  // namespace resources

using QueryParams = std::vector<std::pair<std::string, std::string>>;

// Percent-encodes a query or path component.
std::string UrlEncode(absl::string_view text);
// "?a=b&c=d" (empty string when there are no parameters).
std::string BuildQuery(const QueryParams& params);

struct ListOptions {
  std::string label_selector{};
  std::string field_selector{};
  int64_t limit = 0;  // 0 = no pagination
  std::string continue_token{};
  std::optional<std::string> resource_version{};  // unset = consistent read from etcd
  std::string resource_version_match{};           // "NotOlderThan" / "Exact"
  QueryParams ToQuery() const;
};

struct WatchOptions {
  std::string label_selector{};
  std::string field_selector{};
  std::string resource_version{};
  int timeout_seconds = 0;  // 0 = server default
  bool allow_bookmarks = true;
  QueryParams ToQuery() const;
};

struct DeleteOptions {
  std::string propagation_policy;  // "Foreground", "Background", "Orphan" or "" (server default)
  std::optional<int64_t> grace_period_seconds{};
  std::string precondition_uid{};
  std::string precondition_resource_version{};
  bool dry_run = false;
  // The meta/v1 DeleteOptions body ("null" JSON when nothing is set).
  nlohmann::json ToBody() const;
};

enum class PatchType { kMerge, kJsonPatch, kStrategicMerge, kApply };
absl::string_view PatchContentType(PatchType type);

struct WriteOptions {
  std::string field_manager{};
  bool force = false;  // server-side apply only
  bool dry_run = false;
  QueryParams ToQuery() const;
};

// Exception-free field access: the value of `key` in `object` if both have the right types,
// else the fallback.
std::string GetString(const nlohmann::json& object, absl::string_view key, absl::string_view fallback = "");
bool GetBool(const nlohmann::json& object, absl::string_view key, bool fallback = false);

// Object helpers.
std::string NamespaceOf(const nlohmann::json& object);
std::string NameOf(const nlohmann::json& object);
std::string UidOf(const nlohmann::json& object);
std::string ResourceVersionOf(const nlohmann::json& object);
// "namespace/name" or "name" for cluster-scoped objects.
std::string ObjectKey(const nlohmann::json& object);
// Splits "namespace/name" (or "name") back.
std::pair<std::string, std::string> SplitObjectKey(absl::string_view key);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_RESOURCE_H_
