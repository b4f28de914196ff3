// Expectations: the creates and deletes the operator has issued but not yet seen in its informer
// cache, per DataService. While some are outstanding the reconciler issues no further creates or
// deletes, so a stale cache can never make it create a pod twice or delete one pod too many.
//
// Pure bookkeeping with time passed in; not thread-safe: the controller owns one instance and
// guards it with its own mutex. The reconciler never sees this class, only a PendingOperations
// snapshot, and re-checks every entry against the objects it observes.
#ifndef SLUICE_OPERATOR_EXPECTATIONS_H_
#define SLUICE_OPERATOR_EXPECTATIONS_H_

#include <map>
#include <set>
#include <string>

#include "absl/time/time.h"

namespace sluice::op {

// "Pod/<name>", "Service/<name>", "PersistentVolumeClaim/<name>".
std::string ObjectKey(const std::string& kind, const std::string& name);

// Outstanding operations of one DataService.
struct PendingOperations {
  std::set<std::string> creates;  // object keys created but not yet observed
  std::set<std::string> deletes;  // object keys deleted but still observed (and not terminating)
  absl::Time recorded_at = absl::InfinitePast();  // when the newest entry was recorded

  bool empty() const { return creates.empty() && deletes.empty(); }
  bool operator==(const PendingOperations&) const = default;
};

class Expectations {
 public:
  // Records operations about to be issued for the DataService `ds_key` (namespace/name).
  void ExpectCreate(const std::string& ds_key, const std::string& object_key, absl::Time now);
  void ExpectDelete(const std::string& ds_key, const std::string& object_key, absl::Time now);

  // From informer events: the object appeared / disappeared (or got a deletionTimestamp).
  void CreationObserved(const std::string& ds_key, const std::string& object_key);
  void DeletionObserved(const std::string& ds_key, const std::string& object_key);

  // The API call failed, so the object will never be observed: stop waiting for it.
  void CreateFailed(const std::string& ds_key, const std::string& object_key) { CreationObserved(ds_key, object_key); }
  void DeleteFailed(const std::string& ds_key, const std::string& object_key) { DeletionObserved(ds_key, object_key); }

  // Snapshot for the reconciler (empty when nothing is outstanding).
  PendingOperations Pending(const std::string& ds_key) const;
  // Drops everything recorded for the DataService (after the reconciler found them satisfied or
  // expired, and when the DataService is gone).
  void Forget(const std::string& ds_key);

  size_t size() const { return pending_.size(); }

 private:
  std::map<std::string, PendingOperations> pending_;
};

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_EXPECTATIONS_H_
