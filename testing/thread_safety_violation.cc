// Deliberately wrong: reads and writes a guarded member without its lock. Never built; the test
// thread_safety_check_catches_violation runs scripts/thread_safety_check.py on it and expects the
// two findings, so that a check which silently stopped checking would fail.
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sluice::testing {

class Counter {
 public:
  void Increment() { ++value_; }  // finding 1: writing value_ without mu_
  int Value() const {
    absl::MutexLock lock(&mu_);
    return value_;
  }
  int UnlockedValue() const { return value_; }  // finding 2: reading value_ without mu_

 private:
  mutable absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::testing
