#include "dataplane/client/retry_policy.h"

#include <catch2/catch.hpp>

namespace sluice::client {
namespace {

using C = absl::StatusCode;
using Peer = RetryPolicy::Peer;

TEST_CASE("client_retry_policy: which failures each peer retries") {
  // Create: only a dispatcher that is not up yet, or busy.
  for (C c : {C::kUnavailable, C::kDeadlineExceeded, C::kResourceExhausted, C::kAborted}) {
    CHECK(RetryPolicy::Retriable(Peer::kDispatcherAtCreate, c));
  }
  for (C c : {C::kNotFound, C::kFailedPrecondition, C::kInvalidArgument, C::kInternal, C::kCancelled}) {
    CHECK_FALSE(RetryPolicy::Retriable(Peer::kDispatcherAtCreate, c));
  }
  // Heartbeats: everything but the permanent codes and a forgotten client.
  for (C c : {C::kUnavailable, C::kDeadlineExceeded, C::kResourceExhausted, C::kAborted, C::kInternal, C::kUnknown,
              C::kCancelled}) {
    CHECK(RetryPolicy::Retriable(Peer::kDispatcherSession, c));
  }
  for (C c : {C::kNotFound, C::kInvalidArgument, C::kFailedPrecondition, C::kPermissionDenied, C::kUnauthenticated,
              C::kUnimplemented, C::kOutOfRange, C::kDataLoss}) {
    CHECK_FALSE(RetryPolicy::Retriable(Peer::kDispatcherSession, c));
  }
  // Workers: transport trouble and a restarted worker; not the worker's own answers.
  for (Peer p : {Peer::kWorkerStream, Peer::kWorkerRound}) {
    for (C c : {C::kUnavailable, C::kCancelled, C::kDeadlineExceeded, C::kAborted, C::kNotFound, C::kInternal,
                C::kUnknown}) {
      CHECK(RetryPolicy::Retriable(p, c));
    }
    for (C c : {C::kInvalidArgument, C::kFailedPrecondition, C::kDataLoss, C::kResourceExhausted,
                C::kPermissionDenied, C::kOutOfRange}) {
      CHECK_FALSE(RetryPolicy::Retriable(p, c));
    }
  }
}

TEST_CASE("client_retry_policy: ambiguous worker errors are retried a few times in a row, progress starts over") {
  RetryPolicy p(Peer::kWorkerStream, absl::Milliseconds(10), absl::Milliseconds(100));
  for (int i = 0; i < kMaxAmbiguousFailures; ++i) CHECK(p.OnFailure(C::kInternal).retry);
  CHECK_FALSE(p.OnFailure(C::kInternal).retry);

  RetryPolicy q(Peer::kWorkerStream, absl::Milliseconds(10), absl::Milliseconds(100));
  for (int i = 0; i < kMaxAmbiguousFailures; ++i) CHECK(q.OnFailure(C::kUnknown).retry);
  CHECK(q.OnFailure(C::kUnknown, /*progressed=*/true).retry);  // the stream delivered first: counted anew
  q.OnSuccess();
  for (int i = 0; i < kMaxAmbiguousFailures; ++i) CHECK(q.OnFailure(C::kInternal).retry);
  // Transport errors do not count against the limit.
  CHECK(q.OnFailure(C::kUnavailable).retry);

  // The dispatcher's INTERNAL during heartbeats is retried without a limit.
  RetryPolicy h(Peer::kDispatcherSession, absl::Milliseconds(10), absl::Milliseconds(100));
  for (int i = 0; i < 10; ++i) CHECK(h.OnFailure(C::kInternal).retry);
}

TEST_CASE("client_retry_policy: backoff grows and a success or progress starts it over, retries wait for the channel") {
  RetryPolicy p(Peer::kWorkerStream, absl::Milliseconds(100), absl::Milliseconds(400));
  CHECK_FALSE(p.wait_for_ready());  // the first attempt fails fast
  const double want[] = {100, 200, 400, 400};
  for (double w : want) {
    const double got = absl::ToDoubleMilliseconds(p.OnFailure(C::kUnavailable).delay);
    CHECK(got >= 0.8 * w - 1e-9);
    CHECK(got <= 1.2 * w + 1e-9);
  }
  CHECK(p.wait_for_ready());
  CHECK(absl::ToDoubleMilliseconds(p.OnFailure(C::kUnavailable, /*progressed=*/true).delay) <= 120 + 1e-9);
  p.OnSuccess();
  CHECK_FALSE(p.wait_for_ready());
  CHECK(absl::ToDoubleMilliseconds(p.OnFailure(C::kUnavailable).delay) <= 120 + 1e-9);

  // Coordinated rounds re-pick their worker on each retry: they never wait for one channel.
  RetryPolicy r(Peer::kWorkerRound, absl::Milliseconds(100), absl::Milliseconds(400));
  CHECK(r.OnFailure(C::kUnavailable).retry);
  CHECK_FALSE(r.wait_for_ready());
  // A failure that is not retried has no delay.
  CHECK(r.OnFailure(C::kInvalidArgument).delay == absl::ZeroDuration());
}

}  // namespace
}  // namespace sluice::client
