#include "operator/expectations.h"

#include "absl/strings/str_cat.h"

namespace sluice::op {

std::string ObjectKey(const std::string& kind, const std::string& name) { return absl::StrCat(kind, "/", name); }

void Expectations::ExpectCreate(const std::string& ds_key, const std::string& object_key, absl::Time now) {
  PendingOperations& p = pending_[ds_key];
  p.creates.insert(object_key);
  p.recorded_at = now;
}

void Expectations::ExpectDelete(const std::string& ds_key, const std::string& object_key, absl::Time now) {
  PendingOperations& p = pending_[ds_key];
  p.deletes.insert(object_key);
  p.recorded_at = now;
}

void Expectations::CreationObserved(const std::string& ds_key, const std::string& object_key) {
  auto it = pending_.find(ds_key);
  if (it == pending_.end()) return;
  it->second.creates.erase(object_key);
  if (it->second.empty()) pending_.erase(it);
}

void Expectations::DeletionObserved(const std::string& ds_key, const std::string& object_key) {
  auto it = pending_.find(ds_key);
  if (it == pending_.end()) return;
  it->second.deletes.erase(object_key);
  if (it->second.empty()) pending_.erase(it);
}

PendingOperations Expectations::Pending(const std::string& ds_key) const {
  auto it = pending_.find(ds_key);
  return it == pending_.end() ? PendingOperations{} : it->second;
}

void Expectations::Forget(const std::string& ds_key) { pending_.erase(ds_key); }

}  // namespace sluice::op
