#include "dataplane/client/cancel_token.h"

#include <utility>

namespace sluice::client {

void CancelToken::Cancel() {
  absl::MutexLock lock(&mu_);
  if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
  for (auto& [handle, fn] : callbacks_) fn();
}

int64_t CancelToken::Register(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_acquire)) {
    fn();
    return 0;
  }
  const int64_t handle = next_handle_++;
  callbacks_.emplace(handle, std::move(fn));
  return handle;
}

void CancelToken::Unregister(int64_t handle) {
  absl::MutexLock lock(&mu_);
  callbacks_.erase(handle);
}

bool CancelToken::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto is_cancelled = [this] { return cancelled_.load(std::memory_order_acquire); };
  mu_.AwaitWithTimeout(absl::Condition(&is_cancelled), timeout);
  return cancelled();
}

}  // namespace sluice::client
