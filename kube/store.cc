#include "kube/store.h"

#include "absl/strings/str_cat.h"
#include "kube/packed_object.h"
#include "kube/resource.h"

namespace sluice::kube {

using nlohmann::json;

IndexFunc IndexByLabel(std::string key) {
  return [key](const json& object) -> std::vector<std::string> {
    const json* labels = nullptr;
    if (object.contains("metadata") && object["metadata"].is_object() && object["metadata"].contains("labels")) {
      labels = &object["metadata"]["labels"];
    }
    if (labels == nullptr || !labels->is_object()) return {};
    auto it = labels->find(key);
    if (it == labels->end() || !it->is_string()) return {};
    return {it->get<std::string>()};
  };
}

namespace {
std::vector<std::string> OwnerUids(const json& object, bool controller_only) {
  std::vector<std::string> out;
  if (IsPacked(object)) {  // only the controller is recorded (kube/packed_object.h)
    if (auto ref = PackedControllerOf(object); ref.has_value() && !ref->uid.empty()) out.push_back(ref->uid);
    return out;
  }
  if (!object.contains("metadata") || !object["metadata"].is_object()) return out;
  const json& meta = object["metadata"];
  if (!meta.contains("ownerReferences") || !meta["ownerReferences"].is_array()) return out;
  for (const json& ref : meta["ownerReferences"]) {
    if (!ref.is_object() || !ref.contains("uid") || !ref["uid"].is_string()) continue;
    if (controller_only && !(ref.contains("controller") && ref["controller"].is_boolean() && ref["controller"].get<bool>())) {
      continue;
    }
    out.push_back(ref["uid"].get<std::string>());
  }
  return out;
}
}  // namespace

IndexFunc IndexByOwnerUid() {
  return [](const json& object) { return OwnerUids(object, false); };
}
IndexFunc IndexByControllerUid() {
  return [](const json& object) { return OwnerUids(object, true); };
}
IndexFunc IndexByNamespace() {
  return [](const json& object) -> std::vector<std::string> { return {NamespaceOf(object)}; };
}

absl::Status Store::AddIndex(const std::string& name, IndexFunc func) {
  absl::MutexLock lock(&mu_);
  if (index_funcs_.count(name) > 0) return absl::AlreadyExistsError(absl::StrCat("store index \"", name, "\" exists"));
  index_funcs_[name] = func;
  auto& index = indexes_[name];
  for (const auto& [key, object] : objects_) {
    for (const std::string& value : func(*object)) index[value].insert(key);
  }
  return absl::OkStatus();
}

ObjectPtr Store::Get(absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second;
}

ObjectPtr Store::Get(absl::string_view ns, absl::string_view name) const {
  return Get(ns.empty() ? std::string(name) : absl::StrCat(ns, "/", name));
}

std::vector<ObjectPtr> Store::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<ObjectPtr> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(object);
  return out;
}

std::vector<std::string> Store::Keys() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [key, object] : objects_) out.push_back(key);
  return out;
}

std::vector<ObjectPtr> Store::ByIndex(absl::string_view index, absl::string_view value) const {
  absl::MutexLock lock(&mu_);
  return ByIndexLocked(index, value);
}

std::vector<std::vector<ObjectPtr>> Store::ByIndexes(
    const std::vector<std::pair<std::string, std::string>>& lookups) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::vector<ObjectPtr>> out;
  out.reserve(lookups.size());
  for (const auto& [index, value] : lookups) out.push_back(ByIndexLocked(index, value));
  return out;
}

std::vector<ObjectPtr> Store::ByIndexLocked(absl::string_view index, absl::string_view value) const {
  std::vector<ObjectPtr> out;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return out;
  auto keys = idx->second.find(value);
  if (keys == idx->second.end()) return out;
  for (const std::string& key : keys->second) {
    auto it = objects_.find(key);
    if (it != objects_.end()) out.push_back(it->second);
  }
  return out;
}

size_t Store::size() const {
  absl::MutexLock lock(&mu_);
  return objects_.size();
}

void Store::IndexLocked(const std::string& key, const json& object) {
  for (const auto& [name, func] : index_funcs_) {
    for (const std::string& value : func(object)) indexes_[name][value].insert(key);
  }
}

void Store::UnindexLocked(const std::string& key, const json& object) {
  for (const auto& [name, func] : index_funcs_) {
    auto& index = indexes_[name];
    for (const std::string& value : func(object)) {
      auto it = index.find(value);
      if (it == index.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) index.erase(it);
    }
  }
}

ObjectPtr Store::Upsert(ObjectPtr object) {
  std::string key = ObjectKey(*object);
  absl::MutexLock lock(&mu_);
  ObjectPtr previous;
  auto it = objects_.find(key);
  if (it != objects_.end()) {
    previous = it->second;
    UnindexLocked(key, *previous);
    it->second = object;
  } else {
    objects_.emplace(key, object);
  }
  IndexLocked(key, *object);
  return previous;
}

ObjectPtr Store::Remove(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return nullptr;
  ObjectPtr previous = it->second;
  UnindexLocked(it->first, *previous);
  objects_.erase(it);
  return previous;
}

ReplaceDelta Store::Replace(std::vector<ObjectPtr> objects) {
  ReplaceDelta delta;
  std::map<std::string, ObjectPtr, std::less<>> next;
  for (ObjectPtr& object : objects) {
    std::string key = ObjectKey(*object);
    next[key] = std::move(object);
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [key, object] : objects_) {
    if (next.find(key) == next.end()) delta.deleted.push_back(object);
  }
  for (const auto& [key, object] : next) {
    auto it = objects_.find(key);
    if (it == objects_.end()) {
      delta.added.push_back(object);
    } else if (ResourceVersionOf(*it->second) != ResourceVersionOf(*object)) {
      delta.updated.emplace_back(it->second, object);
    }
  }
  objects_ = std::move(next);
  for (auto& [name, index] : indexes_) index.clear();
  for (const auto& [key, object] : objects_) IndexLocked(key, *object);
  return delta;
}

}  // namespace sluice::kube
