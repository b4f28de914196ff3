// Store: the informer cache. Objects keyed "namespace/name" (or "name"), held as immutable
// shared_ptr<const json> snapshots, with named secondary indexes (e.g. by a label's value or by
// owner uid). The Reflector is its only writer; readers (reconcilers) take snapshots.
//
// Threading: thread-safe; readers never see a half-applied change. Index functions are called
// under the store's lock and must not call back into the store.
#ifndef SLUICE_KUBE_STORE_H_
#define SLUICE_KUBE_STORE_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

using ObjectPtr = std::shared_ptr<const nlohmann::json>;
// Index values of one object (an object may have zero or many).
using IndexFunc = std::function<std::vector<std::string>(const nlohmann::json&)>;

// Index by the value of label `key`.
IndexFunc IndexByLabel(std::string key);
// Index by every ownerReference uid.
IndexFunc IndexByOwnerUid();
// Index by the uid of the controller ownerReference (controller: true) only.
IndexFunc IndexByControllerUid();
// Index by namespace.
IndexFunc IndexByNamespace();

// What a Replace (relist) changed.
struct ReplaceDelta {
  std::vector<ObjectPtr> added{};
  std::vector<std::pair<ObjectPtr, ObjectPtr>> updated;  // (old, new), resourceVersion differs
  std::vector<ObjectPtr> deleted{};                        // present before, missing from the list
};

class Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Adds an index; existing objects are indexed immediately. AlreadyExists if the name is taken.
  absl::Status AddIndex(const std::string& name, IndexFunc func);

  ObjectPtr Get(absl::string_view key) const;
  ObjectPtr Get(absl::string_view ns, absl::string_view name) const;
  std::vector<ObjectPtr> List() const;
  std::vector<std::string> Keys() const;
  // Objects whose index `index` yields `value` (empty if the index does not exist).
  std::vector<ObjectPtr> ByIndex(absl::string_view index, absl::string_view value) const;
  // Several ByIndex lookups (index name, value) answered from one state of the store: no change is
  // applied between them, so objects read through different indexes are consistent with each other
  // (what a reconcile needs when it combines, say, a namespace's pods with the pods on some nodes).
  std::vector<std::vector<ObjectPtr>> ByIndexes(
      const std::vector<std::pair<std::string, std::string>>& lookups) const;
  size_t size() const;

  // Writers (used by the Reflector). Upsert returns the previous object (or null).
  ObjectPtr Upsert(ObjectPtr object);
  ObjectPtr Remove(absl::string_view key);
  // Makes the store hold exactly `objects`, reporting the differences.
  ReplaceDelta Replace(std::vector<ObjectPtr> objects);

 private:
  std::vector<ObjectPtr> ByIndexLocked(absl::string_view index, absl::string_view value) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IndexLocked(const std::string& key, const nlohmann::json& object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnindexLocked(const std::string& key, const nlohmann::json& object) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, ObjectPtr, std::less<>> objects_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, IndexFunc> index_funcs_ ABSL_GUARDED_BY(mu_);
  // index name -> value -> keys
  std::map<std::string, std::map<std::string, std::set<std::string>, std::less<>>, std::less<>> indexes_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_STORE_H_
