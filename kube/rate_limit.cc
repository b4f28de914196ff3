#include "kube/rate_limit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace sluice::kube {

TokenBucket::TokenBucket(double qps, int burst, Clock* clock)
    : qps_(qps), burst_(std::max(burst, 1)), clock_(clock), tokens_(std::max(burst, 1)),
      last_(clock->Now()) {}

absl::Duration TokenBucket::Reserve() {
  if (qps_ <= 0) return absl::ZeroDuration();
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  if (now > last_) {
    tokens_ = std::min<double>(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
  tokens_ -= 1.0;
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

bool TokenBucket::Acquire(std::stop_token stop) {
  absl::Duration wait = Reserve();
  if (wait <= absl::ZeroDuration()) return !stop.stop_requested();
  return clock_->SleepFor(wait, stop);
}

Backoff::Backoff(BackoffPolicy policy, uint64_t seed) : policy_(policy), rng_(seed) {}

absl::Duration Backoff::Next() {
  double base = absl::ToDoubleSeconds(policy_.initial) * std::pow(policy_.factor, attempt_);
  double cap = absl::ToDoubleSeconds(policy_.max);
  base = std::min(base, cap);
  ++attempt_;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double delay = std::min(cap, base * (1.0 + policy_.jitter * unit(rng_)));
  return absl::Seconds(delay);
}

bool IsIdempotentMethod(absl::string_view method) {
  return method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE" ||
         method == "OPTIONS";
}

std::optional<absl::Duration> RetryDelay(const RetryOptions& options, absl::string_view method,
                                         int http_code, absl::string_view retry_after,
                                         int attempts_made, double random01) {
  if (attempts_made >= options.max_attempts) return std::nullopt;
  bool retryable = false;
  if (http_code == 429) {
    retryable = true;
  } else if (http_code == 0 || (http_code >= 500 && http_code <= 599 && http_code != 501)) {
    // A 5xx that says when to come back (Retry-After: an overloaded or starting API server that
    // did not process the request, as client-go also assumes) is retried for every verb; other 5xx
    // and broken connections only for idempotent verbs, whose repetition is harmless.
    retryable = IsIdempotentMethod(method) || (http_code != 0 && !absl::StripAsciiWhitespace(retry_after).empty());
  }
  if (!retryable) return std::nullopt;
  double base = absl::ToDoubleSeconds(options.initial_backoff) * std::pow(2.0, attempts_made - 1);
  base = std::min(base, absl::ToDoubleSeconds(options.max_backoff));
  absl::Duration delay = absl::Seconds(base * (0.5 + 0.5 * random01));
  int seconds = 0;
  std::string trimmed(absl::StripAsciiWhitespace(retry_after));
  if (!trimmed.empty() && absl::SimpleAtoi(trimmed, &seconds) && seconds >= 0) {
    delay = std::min(absl::Seconds(seconds), options.max_retry_after);
  }
  return delay;
}

}  // namespace sluice::kube
