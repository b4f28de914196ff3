#include "dataplane/client/backoff.h"

#include <catch2/catch.hpp>

namespace sluice::client {
namespace {

TEST_CASE("client_backoff: doubles up to the cap with bounded jitter, and resets") {
  Backoff b(absl::Milliseconds(100), absl::Milliseconds(400));
  const double expected[] = {100, 200, 400, 400, 400};
  for (double want : expected) {
    const double got = absl::ToDoubleMilliseconds(b.Next());
    CHECK(got >= 0.8 * want - 1e-9);
    CHECK(got <= 1.2 * want + 1e-9);
  }
  CHECK(b.attempts() == 5);
  b.Reset();
  CHECK(b.attempts() == 0);
  CHECK(absl::ToDoubleMilliseconds(b.Next()) <= 120.0 + 1e-9);
}

}  // namespace
}  // namespace sluice::client
