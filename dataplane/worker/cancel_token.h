// A cancellation signal shared by a caller and the blocking work it started (a stream, an RPC to
// the dispatcher, a wait for data). Blocking code registers a wake-up callback for the duration of
// its wait, so Cancel() interrupts the wait at once instead of being noticed by polling.
//
// Thread-safe. Callbacks run under the token's mutex, inside Cancel() (or inside Register when the
// token is already cancelled): a callback may lock other mutexes, but code holding such a mutex must
// not call Register/Unregister (lock order: token, then others).
#ifndef SLUICE_DATAPLANE_WORKER_CANCEL_TOKEN_H_
#define SLUICE_DATAPLANE_WORKER_CANCEL_TOKEN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::worker {

class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // Cancels once; runs the registered callbacks. Later calls do nothing.
  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Runs `fn` on Cancel (at once if already cancelled). Returns a handle for Unregister. After
  // Unregister returns, `fn` is not running and never will.
  int64_t Register(std::function<void()> fn);
  void Unregister(int64_t handle);

  // Waits until cancelled or `timeout` passed; returns cancelled().
  bool WaitFor(absl::Duration timeout);

 private:
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  int64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, std::function<void()>> callbacks_ ABSL_GUARDED_BY(mu_);
};

// Registers a callback on a token (may be null) for the lifetime of this object.
class CancelCallback {
 public:
  CancelCallback(CancelToken* token, std::function<void()> fn) : token_(token) {
    if (token_ != nullptr) handle_ = token_->Register(std::move(fn));
  }
  ~CancelCallback() {
    if (token_ != nullptr) token_->Unregister(handle_);
  }
  CancelCallback(const CancelCallback&) = delete;
  CancelCallback& operator=(const CancelCallback&) = delete;

 private:
  CancelToken* token_;
  int64_t handle_ = 0;
};

inline bool IsCancelled(const CancelToken* token) { return token != nullptr && token->cancelled(); }

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_CANCEL_TOKEN_H_
