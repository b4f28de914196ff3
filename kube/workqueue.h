// WorkQueue: client-go's rate-limited, de-duplicating work queue of string keys.
//
//  - A key added many times before a worker takes it is processed once (dirty set).
//  - A key is never handed to two workers at once: a key added while being processed is queued
//    again only when the worker calls Done (processing set).
//  - AddAfter parks a key until a time on the injected Clock; AddRateLimited uses the RateLimiter
//    (default: max of per-item exponential 5 ms * 2^n capped at 1000 s, and an overall token bucket
//    of 10 qps / burst 100). Forget clears a key's failure history.
//  - ShutDown stops accepting keys; keys already queued are still handed out (drain) and Get
//    returns nullopt once the queue is empty; delayed keys are dropped. ShutDownWithDrain also
//    waits until every handed-out key is Done.
//
// Threading: all methods are thread-safe. Get blocks; every key Get returns must be passed to
// Done exactly once.
#ifndef SLUICE_KUBE_WORKQUEUE_H_
#define SLUICE_KUBE_WORKQUEUE_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/clock.h"
#include "kube/rate_limit.h"

namespace sluice::kube {

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  // How long `key` should wait before its next try (and records the try).
  virtual absl::Duration When(const std::string& key) = 0;
  virtual void Forget(const std::string& key) = 0;
  virtual int NumRequeues(const std::string& key) = 0;
};

// base * 2^failures, capped at max (defaults 5 ms and 1000 s).
class ItemExponentialRateLimiter final : public RateLimiter {
 public:
  ItemExponentialRateLimiter(absl::Duration base = absl::Milliseconds(5), absl::Duration max = absl::Seconds(1000));
  absl::Duration When(const std::string& key) override;
  void Forget(const std::string& key) override;
  int NumRequeues(const std::string& key) override;

 private:
  const absl::Duration base_, max_;
  absl::Mutex mu_;
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
};

// One shared token bucket for all keys (defaults 10 qps, burst 100).
class BucketRateLimiter final : public RateLimiter {
 public:
  BucketRateLimiter(double qps = 10, int burst = 100, Clock* clock = Clock::Real());
  absl::Duration When(const std::string& key) override;
  void Forget(const std::string&) override {}
  int NumRequeues(const std::string&) override { return 0; }

 private:
  TokenBucket bucket_;
};

// The longest of several limiters' answers.
class MaxOfRateLimiter final : public RateLimiter {
 public:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters);
  absl::Duration When(const std::string& key) override;
  void Forget(const std::string& key) override;
  int NumRequeues(const std::string& key) override;

 private:
  std::vector<std::unique_ptr<RateLimiter>> limiters_;
};

// client-go's DefaultControllerRateLimiter.
std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock = Clock::Real());

class WorkQueue {
 public:
  // `limiter` defaults to DefaultControllerRateLimiter(clock).
  explicit WorkQueue(Clock* clock = Clock::Real(), std::unique_ptr<RateLimiter> limiter = nullptr);
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key);

  // Blocks until a key is ready; nullopt once shut down and empty.
  std::optional<std::string> Get();
  void Done(const std::string& key);

  void ShutDown();
  void ShutDownWithDrain();
  bool ShuttingDown() const;

  size_t Len() const;            // ready keys
  size_t NumWaiting() const;     // keys parked by AddAfter
  size_t NumProcessing() const;  // keys handed out and not yet Done

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MoveReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  std::unique_ptr<RateLimiter> limiter_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> waiting_ ABSL_GUARDED_BY(mu_);  // key -> ready time
  // The same, by ready time: moving the ready keys and finding the next deadline touch only the
  // keys that are due (a controller parking a thousand keys for its period scanned them all on
  // every Get).
  std::set<std::pair<absl::Time, std::string>> by_time_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_WORKQUEUE_H_
