// Accounts the accelerator-stall signal: time a trainer spends blocked waiting for data versus the
// time of its training steps. Pure bookkeeping over timestamps handed in by the caller (no clock of
// its own), so it is unit-tested without threads or servers.
//
// Two modes:
//  - implicit (until BeginStep() is first called): a step is the interval between two consecutive
//    deliveries (GetNext() returning an element or the end); the first step starts when the first
//    wait starts. So step time = compute time between deliveries + the waits.
//  - explicit (after the first BeginStep()): steps are what BeginStep()/EndStep() bracket. Waits
//    inside a step are part of that step already; waits outside any step are added to step time
//    too, so step time = bracketed time + waits outside steps, and wait <= step always holds
//    whether the trainer fetches its batch inside or outside the bracket.
// Not thread-safe: the owner serialises calls (the client holds its mutex).
#ifndef SLUICE_DATAPLANE_CLIENT_STALL_METER_H_
#define SLUICE_DATAPLANE_CLIENT_STALL_METER_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace sluice::client {

class StallMeter {
 public:
  struct Snapshot {
    double wait_seconds = 0;  // time blocked waiting for data
    double step_seconds = 0;  // time of steps, including the steps' waits (live step included)
    int64_t steps = 0;        // completed steps (explicit or implicit)
    bool explicit_steps = false;
  };

  // How a wait ended: with an element, with the end of the data, or with nothing (a timeout or an
  // error; the caller will wait again).
  enum class Outcome { kElement, kEnd, kNothing };

  // A wait (one GetNext call, or part of one) lasted from `start` to `end`.
  void RecordWait(absl::Time start, absl::Time end, Outcome outcome);
  // Marks a training step. BeginStep while a step is open closes it first; EndStep without an
  // open step is ignored.
  void BeginStep(absl::Time now);
  void EndStep(absl::Time now);
  bool in_step() const { return step_begin_.has_value(); }

  // Totals as of `now`; an open explicit step counts up to `now` so wait <= step at any instant.
  Snapshot Snap(absl::Time now) const;

 private:
  absl::Duration wait_ = absl::ZeroDuration();
  absl::Duration step_ = absl::ZeroDuration();
  int64_t steps_ = 0;
  bool explicit_ = false;
  // Explicit mode: start of the open step.
  std::optional<absl::Time> step_begin_;
  // Implicit mode: end of the last delivery, and whether the compute gap after it was counted.
  std::optional<absl::Time> last_delivery_;
  bool gap_counted_ = false;
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_STALL_METER_H_
