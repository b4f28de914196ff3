// A stop signal shared by the owner of a loop and the blocking work the loop does: a call in
// flight (its gRPC context is cancelled), a wait for room in the element queue, a backoff sleep.
// Blocking code registers a wake-up callback for the duration of its wait, so Cancel() interrupts
// it at once instead of being noticed by polling. Once cancelled, a token stays cancelled: each
// loop of the client (the session, a task reader, the round reader) has its own.
//
// The same contract as the worker's CancelToken (dataplane/worker/cancel_token.h); the client does
// not depend on the worker's library, so it has its own.
//
// Thread-safe. Callbacks run under the token's mutex, inside Cancel() (or inside Register when the
// token is already cancelled): a callback may lock other mutexes, but code holding such a mutex
// must not call Cancel/Register/Unregister (lock order: token, then others).
#ifndef SLUICE_DATAPLANE_CLIENT_CANCEL_TOKEN_H_
#define SLUICE_DATAPLANE_CLIENT_CANCEL_TOKEN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::client {

class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  // Cancels once and runs the registered callbacks; later calls do nothing.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Runs `fn` on Cancel (at once if already cancelled). Returns a handle for Unregister. After
  // Unregister returns, `fn` is not running and never will.
  int64_t Register(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  void Unregister(int64_t handle) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until cancelled or `timeout` passed; returns cancelled().
  bool WaitFor(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

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

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_CANCEL_TOKEN_H_
