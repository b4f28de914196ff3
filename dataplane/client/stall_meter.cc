#include "dataplane/client/stall_meter.h"

#include <algorithm>

namespace sluice::client {

void StallMeter::RecordWait(absl::Time start, absl::Time end, Outcome outcome) {
  const absl::Duration waited = std::max(end - start, absl::ZeroDuration());
  wait_ += waited;
  if (explicit_) {
    if (!step_begin_) step_ += waited;  // a wait outside any step still belongs to the training time
    return;
  }
  // Implicit: the compute gap since the last delivery joins the step when the next wait begins.
  if (last_delivery_ && !gap_counted_) {
    step_ += std::max(start - *last_delivery_, absl::ZeroDuration());
    gap_counted_ = true;
  }
  step_ += waited;
  if (outcome != Outcome::kNothing) {
    if (outcome == Outcome::kElement) ++steps_;
    last_delivery_ = end;
    gap_counted_ = false;
  }
}

void StallMeter::BeginStep(absl::Time now) {
  if (step_begin_) EndStep(now);
  explicit_ = true;
  last_delivery_.reset();
  step_begin_ = now;
}

void StallMeter::EndStep(absl::Time now) {
  if (!step_begin_) return;
  step_ += std::max(now - *step_begin_, absl::ZeroDuration());
  ++steps_;
  step_begin_.reset();
}

StallMeter::Snapshot StallMeter::Snap(absl::Time now) const {
  absl::Duration step = step_;
  if (step_begin_) step += std::max(now - *step_begin_, absl::ZeroDuration());
  return Snapshot{absl::ToDoubleSeconds(wait_), absl::ToDoubleSeconds(step), steps_, explicit_};
}

}  // namespace sluice::client
