// Rate limiting and backoff arithmetic shared by the REST client, the reflector, the workqueue and
// the leader elector. Pure logic over an injectable Clock; no I/O.
//
// Threading: TokenBucket is thread-safe. Backoff is not (one per loop). RetryDelay is pure.
#ifndef SLUICE_KUBE_RATE_LIMIT_H_
#define SLUICE_KUBE_RATE_LIMIT_H_

#include <cstdint>
#include <optional>
#include <random>
#include <stop_token>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/clock.h"

namespace sluice::kube {

// Token bucket of `burst` tokens refilled at `qps` per second (qps <= 0: unlimited).
class TokenBucket {
 public:
  TokenBucket(double qps, int burst, Clock* clock = Clock::Real());
  // Takes one token now, possibly going into debt; returns how long the caller must wait before
  // acting (zero when a token was available). Reservations are honoured in order.
  absl::Duration Reserve();
  // Reserve() then sleep on the clock. Returns false if `stop` was requested while waiting.
  bool Acquire(std::stop_token stop = {});
  double qps() const { return qps_; }
  int burst() const { return burst_; }

 private:
  const double qps_;
  const int burst_;
  Clock* const clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

struct BackoffPolicy {
  absl::Duration initial = absl::Milliseconds(800);
  absl::Duration max = absl::Seconds(30);
  double factor = 2.0;
  // Each delay is stretched by a random fraction in [0, jitter), then capped at `max`.
  double jitter = 0.25;
};

// Exponential backoff with jitter: initial, initial*factor, ... capped at max; Reset() after a
// healthy period starts over.
class Backoff {
 public:
  explicit Backoff(BackoffPolicy policy = {}, uint64_t seed = std::random_device{}());
  absl::Duration Next();
  void Reset() { attempt_ = 0; }
  int attempt() const { return attempt_; }
  const BackoffPolicy& policy() const { return policy_; }

 private:
  BackoffPolicy policy_;
  int attempt_ = 0;
  std::mt19937_64 rng_;
};

struct RetryOptions {
  // Total attempts including the first; 1 disables retries.
  int max_attempts = 5;
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(10);
  // Upper bound on a server's Retry-After that we honour.
  absl::Duration max_retry_after = absl::Seconds(60);
};

// Verbs that can be repeated safely after a 5xx or a broken connection.
bool IsIdempotentMethod(absl::string_view method);

// Whether and when to retry a request after `attempts_made` attempts that ended in `http_code`
// (0 = the transport failed before an answer). 429 is retried for every verb and honours
// Retry-After (seconds); 5xx with a Retry-After header for every verb too; other 5xx and transport
// errors only for idempotent verbs. Exponential backoff
// with jitter (`random01` in [0,1)). nullopt = do not retry.
std::optional<absl::Duration> RetryDelay(const RetryOptions& options, absl::string_view method,
                                         int http_code, absl::string_view retry_after,
                                         int attempts_made, double random01);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_RATE_LIMIT_H_
