#include "kube/resource.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

using nlohmann::json;

std::string ResourceRef::ApiVersion() const { return group.empty() ? version : absl::StrCat(group, "/", version); }

std::string ResourceRef::ApiPrefix() const {
  return group.empty() ? absl::StrCat("/api/", version) : absl::StrCat("/apis/", group, "/", version);
}

std::string ResourceRef::CollectionPath(absl::string_view ns) const {
  if (namespaced && !ns.empty()) return absl::StrCat(ApiPrefix(), "/namespaces/", UrlEncode(ns), "/", plural);
  return absl::StrCat(ApiPrefix(), "/", plural);
}

std::string ResourceRef::ObjectPath(absl::string_view ns, absl::string_view name, absl::string_view subresource) const {
  std::string path = absl::StrCat(CollectionPath(ns), "/", UrlEncode(name));
  if (!subresource.empty()) absl::StrAppend(&path, "/", subresource);
  return path;
}

namespace resources {
ResourceRef Pods() { return {"", "v1", "pods", true}; }
ResourceRef Services() { return {"", "v1", "services", true}; }
ResourceRef Nodes() { return {"", "v1", "nodes", false}; }
ResourceRef Namespaces() { return {"", "v1", "namespaces", false}; }
ResourceRef CoreEvents() { return {"", "v1", "events", true}; }
ResourceRef Events() { return {"events.k8s.io", "v1", "events", true}; }
ResourceRef Leases() { return {"coordination.k8s.io", "v1", "leases", true}; }
ResourceRef ConfigMaps() { return {"", "v1", "configmaps", true}; }
ResourceRef Secrets() { return {"", "v1", "secrets", true}; }
ResourceRef Deployments() { return {"apps", "v1", "deployments", true}; }
ResourceRef CustomResourceDefinitions() { return {"apiextensions.k8s.io", "v1", "customresourcedefinitions", false}; }
}  // namespace resources

std::string UrlEncode(absl::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string BuildQuery(const QueryParams& params) {
  std::string out;
  for (const auto& [key, value] : params) {
    absl::StrAppend(&out, out.empty() ? "?" : "&", UrlEncode(key), "=", UrlEncode(value));
  }
  return out;
}

QueryParams ListOptions::ToQuery() const {
  QueryParams q;
  if (!label_selector.empty()) q.emplace_back("labelSelector", label_selector);
  if (!field_selector.empty()) q.emplace_back("fieldSelector", field_selector);
  if (limit > 0) q.emplace_back("limit", absl::StrCat(limit));
  if (!continue_token.empty()) {
    // The server rejects resourceVersion together with continue.
    q.emplace_back("continue", continue_token);
  } else if (resource_version) {
    q.emplace_back("resourceVersion", *resource_version);
    if (!resource_version_match.empty()) q.emplace_back("resourceVersionMatch", resource_version_match);
  }
  return q;
}

QueryParams WatchOptions::ToQuery() const {
  QueryParams q;
  q.emplace_back("watch", "true");
  if (allow_bookmarks) q.emplace_back("allowWatchBookmarks", "true");
  if (!resource_version.empty()) q.emplace_back("resourceVersion", resource_version);
  if (timeout_seconds > 0) q.emplace_back("timeoutSeconds", absl::StrCat(timeout_seconds));
  if (!label_selector.empty()) q.emplace_back("labelSelector", label_selector);
  if (!field_selector.empty()) q.emplace_back("fieldSelector", field_selector);
  return q;
}

json DeleteOptions::ToBody() const {
  json body = json::object();
  if (!propagation_policy.empty()) body["propagationPolicy"] = propagation_policy;
  if (grace_period_seconds) body["gracePeriodSeconds"] = *grace_period_seconds;
  if (!precondition_uid.empty()) body["preconditions"]["uid"] = precondition_uid;
  if (!precondition_resource_version.empty()) body["preconditions"]["resourceVersion"] = precondition_resource_version;
  if (dry_run) body["dryRun"] = json::array({"All"});
  if (body.empty()) return json(nullptr);
  body["apiVersion"] = "v1";
  body["kind"] = "DeleteOptions";
  return body;
}

absl::string_view PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge: return "application/merge-patch+json";
    case PatchType::kJsonPatch: return "application/json-patch+json";
    case PatchType::kStrategicMerge: return "application/strategic-merge-patch+json";
    case PatchType::kApply: return "application/apply-patch+yaml";
  }
  return "application/merge-patch+json";
}

QueryParams WriteOptions::ToQuery() const {
  QueryParams q;
  if (!field_manager.empty()) q.emplace_back("fieldManager", field_manager);
  if (force) q.emplace_back("force", "true");
  if (dry_run) q.emplace_back("dryRun", "All");
  return q;
}

std::string GetString(const json& object, absl::string_view key, absl::string_view fallback) {
  if (!object.is_object()) return std::string(fallback);
  auto it = object.find(std::string(key));
  if (it == object.end() || !it->is_string()) return std::string(fallback);
  return it->get<std::string>();
}

bool GetBool(const json& object, absl::string_view key, bool fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(std::string(key));
  if (it == object.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

namespace {
std::string MetaString(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto it = meta->find(key);
  if (it == meta->end() || !it->is_string()) return "";
  return it->get<std::string>();
}
}  // namespace

std::string NamespaceOf(const json& object) { return MetaString(object, "namespace"); }
std::string NameOf(const json& object) { return MetaString(object, "name"); }
std::string UidOf(const json& object) { return MetaString(object, "uid"); }
std::string ResourceVersionOf(const json& object) { return MetaString(object, "resourceVersion"); }

std::string ObjectKey(const json& object) {
  std::string ns = NamespaceOf(object);
  return ns.empty() ? NameOf(object) : absl::StrCat(ns, "/", NameOf(object));
}

std::pair<std::string, std::string> SplitObjectKey(absl::string_view key) {
  size_t slash = key.find('/');
  if (slash == absl::string_view::npos) return {"", std::string(key)};
  return {std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
}

}  // namespace sluice::kube
