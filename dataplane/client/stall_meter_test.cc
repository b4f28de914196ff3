#include "dataplane/client/stall_meter.h"

#include <catch2/catch.hpp>

namespace sluice::client {
namespace {

absl::Time T(double seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }
using Outcome = StallMeter::Outcome;

TEST_CASE("client_stall: implicit steps span delivery to delivery and include the waits") {
  StallMeter m;
  m.RecordWait(T(10), T(12), Outcome::kElement);  // first wait: 2 s
  m.RecordWait(T(15), T(16), Outcome::kElement);  // 3 s of compute, then 1 s wait
  m.RecordWait(T(20), T(20), Outcome::kElement);  // 4 s compute, no wait
  auto s = m.Snap(T(100));
  CHECK(s.wait_seconds == Approx(3.0));
  CHECK(s.step_seconds == Approx(10.0));  // last delivery (20) - first wait start (10)
  CHECK(s.steps == 3);
  CHECK_FALSE(s.explicit_steps);
}

TEST_CASE("client_stall: implicit mode counts timed-out waits once and the gap once") {
  StallMeter m;
  m.RecordWait(T(0), T(1), Outcome::kElement);
  m.RecordWait(T(3), T(4), Outcome::kNothing);  // a timeout: 2 s gap + 1 s wait
  auto mid = m.Snap(T(4));
  CHECK(mid.wait_seconds == Approx(2.0));
  CHECK(mid.step_seconds == Approx(4.0));
  m.RecordWait(T(4), T(6), Outcome::kElement);  // the same wait continued
  auto s = m.Snap(T(6));
  CHECK(s.wait_seconds == Approx(4.0));
  CHECK(s.step_seconds == Approx(6.0));
  CHECK(s.steps == 2);
  m.RecordWait(T(7), T(8), Outcome::kEnd);  // the end: time counts, no step
  CHECK(m.Snap(T(8)).steps == 2);
  CHECK(m.Snap(T(8)).step_seconds == Approx(8.0));
}

TEST_CASE("client_stall: explicit steps with the wait inside the step") {
  StallMeter m;
  m.BeginStep(T(100));
  m.RecordWait(T(100), T(103), Outcome::kElement);
  m.EndStep(T(105));
  auto s = m.Snap(T(200));
  CHECK(s.wait_seconds == Approx(3.0));
  CHECK(s.step_seconds == Approx(5.0));
  CHECK(s.steps == 1);
  CHECK(s.explicit_steps);
}

TEST_CASE("client_stall: explicit steps with the wait outside the step still count it as step time") {
  StallMeter m;
  m.BeginStep(T(0));
  m.EndStep(T(2));
  m.RecordWait(T(2), T(3), Outcome::kElement);  // fetched between steps
  m.BeginStep(T(3));
  m.EndStep(T(5));
  auto s = m.Snap(T(5));
  CHECK(s.wait_seconds == Approx(1.0));
  CHECK(s.step_seconds == Approx(5.0));
  CHECK(s.steps == 2);
}

TEST_CASE("client_stall: an open step counts up to now - stray markers are harmless") {
  StallMeter m;
  m.EndStep(T(1));  // no open step: ignored
  CHECK(m.Snap(T(1)).steps == 0);
  m.BeginStep(T(10));
  m.RecordWait(T(10), T(14), Outcome::kElement);
  auto live = m.Snap(T(15));
  CHECK(live.step_seconds == Approx(5.0));
  CHECK(live.wait_seconds <= live.step_seconds);
  m.BeginStep(T(16));  // closes the open step first
  CHECK(m.Snap(T(16)).steps == 1);
  CHECK(m.Snap(T(16)).step_seconds == Approx(6.0));
  CHECK(m.in_step());
}

TEST_CASE("client_stall: switching from implicit to explicit keeps what was measured") {
  StallMeter m;
  m.RecordWait(T(0), T(1), Outcome::kElement);
  m.BeginStep(T(5));
  m.EndStep(T(7));
  auto s = m.Snap(T(7));
  CHECK(s.wait_seconds == Approx(1.0));
  CHECK(s.step_seconds == Approx(3.0));  // 1 s implicit + 2 s explicit; the gap before BeginStep is not a step
}

}  // namespace
}  // namespace sluice::client
