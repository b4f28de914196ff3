// Exponential backoff with jitter for reconnecting to a restarted dispatcher or worker: the delay
// doubles from `initial` up to `max`, each delay scaled by a random factor in [0.8, 1.2] so many
// clients do not retry in lockstep. Not thread-safe (one per retry loop).
#ifndef SLUICE_DATAPLANE_CLIENT_BACKOFF_H_
#define SLUICE_DATAPLANE_CLIENT_BACKOFF_H_

#include <cstdint>

#include "absl/random/random.h"
#include "absl/time/time.h"

namespace sluice::client {

class Backoff {
 public:
  Backoff(absl::Duration initial, absl::Duration max);
  // The delay before the next attempt.
  absl::Duration Next();
  // After a success: the next failure waits `initial` again.
  void Reset();
  int64_t attempts() const { return attempts_; }

 private:
  absl::Duration initial_, max_, current_;
  int64_t attempts_ = 0;
  absl::BitGen gen_;
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_BACKOFF_H_
