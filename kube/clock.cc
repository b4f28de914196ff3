#include "kube/clock.h"

#include <algorithm>
#include <stop_token>

namespace sluice::kube {

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();
  return clock;
}

absl::Time RealClock::Now() const { return absl::Now(); }

bool RealClock::SleepUntil(absl::Time deadline, std::stop_token stop) {
  absl::Mutex mu;
  absl::CondVar cv;
  bool stopped = false;
  std::stop_callback on_stop(stop, [&] {
    absl::MutexLock lock(&mu);
    stopped = true;
    cv.SignalAll();
  });
  absl::MutexLock lock(&mu);
  while (!stopped && absl::Now() < deadline) cv.WaitWithDeadline(&mu, deadline);
  return !stopped;
}

bool RealClock::WaitWithDeadline(absl::Mutex* mu, absl::CondVar* cv, absl::Time deadline) {
  return cv->WaitWithDeadline(mu, deadline);
}

FakeClock::FakeClock(absl::Time start) : now_(start) {}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

bool FakeClock::SleepUntil(absl::Time deadline, std::stop_token stop) {
  absl::MutexLock lock(&mu_);
  sleepers_.push_back(deadline);
  bool reached = false;
  while (true) {
    if (now_ >= deadline) {
      reached = true;
      break;
    }
    if (stop.stop_requested()) break;
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(1));
  }
  sleepers_.erase(std::find(sleepers_.begin(), sleepers_.end(), deadline));
  return reached;
}

bool FakeClock::WaitWithDeadline(absl::Mutex* mu, absl::CondVar* cv, absl::Time deadline) {
  if (Now() >= deadline) return true;
  cv->WaitWithTimeout(mu, absl::Milliseconds(1));
  return Now() >= deadline;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
  cv_.SignalAll();
}

void FakeClock::SetTime(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = t;
  cv_.SignalAll();
}

std::vector<absl::Time> FakeClock::SleeperDeadlines() const {
  absl::MutexLock lock(&mu_);
  return sleepers_;
}

bool FakeClock::AwaitSleepers(size_t n, absl::Duration real_timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sleepers_.size() >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), real_timeout);
}

}  // namespace sluice::kube

namespace sluice::kube {

std::optional<absl::Time> FakeClock::AwaitSleepBeyond(absl::Time after, absl::Duration real_timeout) const {
  absl::MutexLock lock(&mu_);
  auto beyond = [this, after]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (absl::Time t : sleepers_) {
      if (t > after) return true;
    }
    return false;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&beyond), real_timeout)) return std::nullopt;
  absl::Time earliest = absl::InfiniteFuture();
  for (absl::Time t : sleepers_) {
    if (t > after) earliest = std::min(earliest, t);
  }
  return earliest;
}

}  // namespace sluice::kube
