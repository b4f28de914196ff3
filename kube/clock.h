// Clock: the source of time for every timed decision in kube/ (backoff, rate limits, delayed
// requeues, leases), so tests can drive time by hand instead of sleeping.
//
// Threading: RealClock and FakeClock are thread-safe. SleepUntil may be called from any number
// of threads at once; it returns early (false) when the stop token is triggered.
#ifndef SLUICE_KUBE_CLOCK_H_
#define SLUICE_KUBE_CLOCK_H_

#include <optional>
#include <stop_token>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::kube {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Blocks until Now() >= deadline (returns true) or `stop` is requested (returns false).
  virtual bool SleepUntil(absl::Time deadline, std::stop_token stop = {}) = 0;
  // Waits on `cv` (caller holds `mu`) until signalled, or until Now() >= deadline. May wake
  // spuriously; callers re-check their condition. Returns true when the deadline has passed.
  virtual bool WaitWithDeadline(absl::Mutex* mu, absl::CondVar* cv, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  bool SleepFor(absl::Duration d, std::stop_token stop = {}) { return SleepUntil(Now() + d, stop); }

  // The process-wide real clock.
  static Clock* Real();
};

// Wall-clock time (absl::Now) and real condition-variable waits.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override;
  bool SleepUntil(absl::Time deadline, std::stop_token stop = {}) override;
  bool WaitWithDeadline(absl::Mutex* mu, absl::CondVar* cv, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

// A clock that only moves when Advance() is called. Sleepers are tracked so tests can wait until
// a component is parked in a sleep (AwaitSleepers) and inspect when it wants to wake
// (SleeperDeadlines) before moving time. Waits poll the fake time every millisecond of real time,
// which keeps the implementation free of lock-order coupling with callers' mutexes.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000));
  absl::Time Now() const override;
  bool SleepUntil(absl::Time deadline, std::stop_token stop = {}) override;
  bool WaitWithDeadline(absl::Mutex* mu, absl::CondVar* cv, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  void Advance(absl::Duration d);
  void SetTime(absl::Time t);
  // Deadlines of the threads currently inside SleepUntil.
  std::vector<absl::Time> SleeperDeadlines() const;
  // Waits (real time, up to `real_timeout`) until at least `n` threads are inside SleepUntil.
  bool AwaitSleepers(size_t n, absl::Duration real_timeout = absl::Seconds(10)) const;
  // Waits (real time) until some thread sleeps until a time later than `after` (i.e. a sleep that
  // began after the clock last moved past `after`); returns that deadline, or nullopt on timeout.
  std::optional<absl::Time> AwaitSleepBeyond(absl::Time after,
                                             absl::Duration real_timeout = absl::Seconds(10)) const;

 private:
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> sleepers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_CLOCK_H_
