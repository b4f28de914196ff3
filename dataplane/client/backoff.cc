#include "dataplane/client/backoff.h"

#include <algorithm>

namespace sluice::client {

Backoff::Backoff(absl::Duration initial, absl::Duration max)
    : initial_(std::max(initial, absl::Milliseconds(1))), max_(std::max(max, initial_)), current_(initial_) {}

absl::Duration Backoff::Next() {
  const absl::Duration base = current_;
  current_ = std::min(current_ * 2, max_);
  ++attempts_;
  return base * absl::Uniform(gen_, 0.8, 1.2);
}

void Backoff::Reset() {
  current_ = initial_;
  attempts_ = 0;
}

}  // namespace sluice::client
