#include "kube/rate_limit.h"

#include <catch2/catch.hpp>

#include "kube/clock.h"

namespace sluice::kube {
namespace {

TEST_CASE("token bucket: burst is free / then one token per 1/qps") {
  FakeClock clock;
  TokenBucket bucket(50, 100, &clock);
  for (int i = 0; i < 100; ++i) REQUIRE(bucket.Reserve() == absl::ZeroDuration());
  CHECK(bucket.Reserve() == absl::Milliseconds(20));
  CHECK(bucket.Reserve() == absl::Milliseconds(40));  // reservations queue up
  clock.Advance(absl::Seconds(1));                    // 50 tokens refill, 2 owed
  for (int i = 0; i < 48; ++i) REQUIRE(bucket.Reserve() == absl::ZeroDuration());
  CHECK(bucket.Reserve() == absl::Milliseconds(20));
}

TEST_CASE("token bucket refills no further than burst") {
  FakeClock clock;
  TokenBucket bucket(10, 3, &clock);
  clock.Advance(absl::Hours(1));
  for (int i = 0; i < 3; ++i) REQUIRE(bucket.Reserve() == absl::ZeroDuration());
  CHECK(bucket.Reserve() == absl::Milliseconds(100));
}

TEST_CASE("token bucket Acquire sleeps on the clock and honours stop") {
  FakeClock clock;
  TokenBucket bucket(1, 1, &clock);
  REQUIRE(bucket.Acquire());
  std::stop_source stop;
  std::atomic<int> result{-1};
  std::thread waiter([&] { result = bucket.Acquire(stop.get_token()) ? 1 : 0; });
  REQUIRE(clock.AwaitSleepers(1));
  CHECK(clock.SleeperDeadlines()[0] == clock.Now() + absl::Seconds(1));
  stop.request_stop();
  waiter.join();
  CHECK(result == 0);
}

TEST_CASE("unlimited bucket never waits") {
  TokenBucket bucket(0, 1);
  for (int i = 0; i < 1000; ++i) REQUIRE(bucket.Reserve() == absl::ZeroDuration());
}

TEST_CASE("watch backoff: 0.8 s doubling to 30 s with bounded jitter / reset starts over") {
  Backoff backoff(BackoffPolicy{}, 42);
  double base = 0.8;
  for (int i = 0; i < 12; ++i) {
    double expected = std::min(base, 30.0);
    double got = absl::ToDoubleSeconds(backoff.Next());
    INFO("attempt " << i << " got " << got);
    CHECK(got >= expected);
    CHECK(got <= std::min(30.0, expected * 1.25) + 1e-9);
    base *= 2;
  }
  CHECK(absl::ToDoubleSeconds(backoff.Next()) == Approx(30.0));
  backoff.Reset();
  double first = absl::ToDoubleSeconds(backoff.Next());
  CHECK(first >= 0.8);
  CHECK(first <= 1.0);
}

TEST_CASE("retry policy: 429 and 5xx with Retry-After for every verb / other 5xx only when idempotent / bounded") {
  RetryOptions options;
  options.max_attempts = 4;
  CHECK(RetryDelay(options, "POST", 429, "3", 1, 0.0) == absl::Seconds(3));
  CHECK(RetryDelay(options, "PATCH", 429, "", 1, 0.0).has_value());
  CHECK(RetryDelay(options, "GET", 429, "1000", 1, 0.0) == options.max_retry_after);
  CHECK(RetryDelay(options, "GET", 503, "", 1, 0.0).has_value());
  CHECK(RetryDelay(options, "PUT", 500, "", 1, 0.0).has_value());
  CHECK(RetryDelay(options, "DELETE", 0, "", 1, 0.0).has_value());  // broken connection
  CHECK_FALSE(RetryDelay(options, "POST", 503, "", 1, 0.0).has_value());
  CHECK(RetryDelay(options, "POST", 503, "2", 1, 0.0) == absl::Seconds(2));  // the server asks to come back
  CHECK(RetryDelay(options, "PATCH", 500, "1", 1, 0.0) == absl::Seconds(1));
  CHECK_FALSE(RetryDelay(options, "PATCH", 0, "", 1, 0.0).has_value());
  CHECK_FALSE(RetryDelay(options, "GET", 404, "", 1, 0.0).has_value());
  CHECK_FALSE(RetryDelay(options, "GET", 409, "", 1, 0.0).has_value());
  CHECK_FALSE(RetryDelay(options, "GET", 501, "", 1, 0.0).has_value());
  CHECK_FALSE(RetryDelay(options, "GET", 503, "", 4, 0.0).has_value());  // attempts exhausted
  // Exponential with jitter in [50%, 100%] of 200 ms * 2^(n-1), capped at max_backoff.
  CHECK(*RetryDelay(options, "GET", 503, "", 1, 0.0) == absl::Milliseconds(100));
  CHECK(*RetryDelay(options, "GET", 503, "", 3, 0.999999) <= absl::Milliseconds(800));
  CHECK(*RetryDelay(options, "GET", 503, "", 3, 0.0) == absl::Milliseconds(400));
  options.max_attempts = 100;
  CHECK(*RetryDelay(options, "GET", 503, "", 60, 0.999999) <= options.max_backoff);
  CHECK(RetryDelay(options, "GET", 503, "garbage", 1, 0.0) == absl::Milliseconds(100));
}

}  // namespace
}  // namespace sluice::kube
