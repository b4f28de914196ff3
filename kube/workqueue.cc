#include "kube/workqueue.h"

#include <algorithm>
#include <cmath>

namespace sluice::kube {

ItemExponentialRateLimiter::ItemExponentialRateLimiter(absl::Duration base, absl::Duration max)
    : base_(base), max_(max) {}

absl::Duration ItemExponentialRateLimiter::When(const std::string& key) {
  absl::MutexLock lock(&mu_);
  int exp = failures_[key]++;
  double seconds = absl::ToDoubleSeconds(base_) * std::pow(2.0, exp);
  if (!std::isfinite(seconds) || seconds > absl::ToDoubleSeconds(max_)) return max_;
  return absl::Seconds(seconds);
}

void ItemExponentialRateLimiter::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  failures_.erase(key);
}

int ItemExponentialRateLimiter::NumRequeues(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

BucketRateLimiter::BucketRateLimiter(double qps, int burst, Clock* clock) : bucket_(qps, burst, clock) {}

absl::Duration BucketRateLimiter::When(const std::string&) { return bucket_.Reserve(); }

MaxOfRateLimiter::MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters)
    : limiters_(std::move(limiters)) {}

absl::Duration MaxOfRateLimiter::When(const std::string& key) {
  absl::Duration longest = absl::ZeroDuration();
  for (auto& limiter : limiters_) longest = std::max(longest, limiter->When(key));
  return longest;
}

void MaxOfRateLimiter::Forget(const std::string& key) {
  for (auto& limiter : limiters_) limiter->Forget(key);
}

int MaxOfRateLimiter::NumRequeues(const std::string& key) {
  int most = 0;
  for (auto& limiter : limiters_) most = std::max(most, limiter->NumRequeues(key));
  return most;
}

std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock) {
  std::vector<std::unique_ptr<RateLimiter>> limiters;
  limiters.push_back(std::make_unique<ItemExponentialRateLimiter>());
  limiters.push_back(std::make_unique<BucketRateLimiter>(10, 100, clock));
  return std::make_unique<MaxOfRateLimiter>(std::move(limiters));
}

WorkQueue::WorkQueue(Clock* clock, std::unique_ptr<RateLimiter> limiter)
    : clock_(clock), limiter_(limiter ? std::move(limiter) : DefaultControllerRateLimiter(clock)) {}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_ || dirty_.count(key) > 0) return;
  dirty_.insert(key);
  if (processing_.count(key) > 0) return;  // re-queued by Done
  queue_.push_back(key);
  cv_.Signal();
}

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  if (delay <= absl::ZeroDuration()) {
    AddLocked(key);
    return;
  }
  absl::Time ready = clock_->Now() + delay;
  auto it = waiting_.find(key);
  if (it != waiting_.end() && ready >= it->second) return;  // already due earlier
  const bool earliest = by_time_.empty() || ready < by_time_.begin()->first;
  if (it != waiting_.end()) {
    by_time_.erase({it->second, key});
    it->second = ready;
  } else {
    waiting_.emplace(key, ready);
  }
  by_time_.emplace(ready, key);
  if (earliest) cv_.SignalAll();  // a Get waits for a later deadline: wake it up earlier
}

void WorkQueue::AddRateLimited(const std::string& key) { AddAfter(key, limiter_->When(key)); }
void WorkQueue::Forget(const std::string& key) { limiter_->Forget(key); }
int WorkQueue::NumRequeues(const std::string& key) { return limiter_->NumRequeues(key); }

void WorkQueue::MoveReadyLocked() {
  if (by_time_.empty()) return;
  absl::Time now = clock_->Now();
  // In order of ready time (then key).
  while (!by_time_.empty() && by_time_.begin()->first <= now) {
    auto node = by_time_.extract(by_time_.begin());
    waiting_.erase(node.value().second);
    AddLocked(node.value().second);
  }
}

std::optional<std::string> WorkQueue::Get() {
  absl::MutexLock lock(&mu_);
  while (true) {
    MoveReadyLocked();
    if (!queue_.empty()) {
      std::string key = std::move(queue_.front());
      queue_.pop_front();
      processing_.insert(key);
      dirty_.erase(key);
      return key;
    }
    if (shutting_down_) return std::nullopt;
    const absl::Time deadline = by_time_.empty() ? absl::InfiniteFuture() : by_time_.begin()->first;
    clock_->WaitWithDeadline(&mu_, &cv_, deadline);
  }
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  if (dirty_.count(key) > 0) {
    queue_.push_back(key);
  }
  cv_.SignalAll();
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  waiting_.clear();
  by_time_.clear();
  cv_.SignalAll();
}

void WorkQueue::ShutDownWithDrain() {
  ShutDown();
  absl::MutexLock lock(&mu_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return processing_.empty() && queue_.empty(); };
  mu_.Await(absl::Condition(&drained));
}

bool WorkQueue::ShuttingDown() const {
  absl::MutexLock lock(&mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

size_t WorkQueue::NumWaiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size();
}

size_t WorkQueue::NumProcessing() const {
  absl::MutexLock lock(&mu_);
  return processing_.size();
}

}  // namespace sluice::kube
