// The dispatcher's source of time, injectable so that timeouts (worker and client heartbeats, job
// garbage collection) are tested by moving a fake clock instead of sleeping.
//
// Threading: both clocks are thread-safe.
#ifndef SLUICE_DATAPLANE_DISPATCHER_CLOCK_H_
#define SLUICE_DATAPLANE_DISPATCHER_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::dispatcher {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Wall-clock time. Journaled times (job client releases) are wall-clock milliseconds so that they
// stay meaningful across a restart.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// Moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_CLOCK_H_
