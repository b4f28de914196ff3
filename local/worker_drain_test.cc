#include "local/worker_drain.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"

namespace sluice::local {
namespace {

constexpr char kAddress[] = "127.0.0.1:5001";

service::GetStateResponse State(bool listed, bool draining, int tasks) {
  service::GetStateResponse state;
  auto* other = state.add_workers();  // another worker, busy: never affects the verdict
  other->set_address("127.0.0.1:5002");
  other->add_task_ids(9);
  if (listed) {
    auto* w = state.add_workers();
    w->set_address(kAddress);
    w->set_draining(draining);
    for (int t = 0; t < tasks; ++t) w->add_task_ids(t);
  }
  return state;
}

WorkerLoad Load(int64_t ms, double buffered, double produced) {
  return WorkerLoad{absl::FromUnixMillis(ms), buffered, produced};
}

const absl::Duration kQuiet = absl::Seconds(1);

TEST_CASE("EvaluateWorkerDrain: what the dispatcher says decides first") {
  auto gone = EvaluateWorkerDrain(State(false, false, 0), kAddress, {}, kQuiet);
  CHECK(gone.drained);
  CHECK(absl::StrContains(gone.reason, "no longer registered"));

  auto not_draining = EvaluateWorkerDrain(State(true, false, 0), kAddress, {Load(0, 0, 5), Load(5000, 0, 5)}, kQuiet);
  CHECK(!not_draining.drained);
  CHECK(absl::StrContains(not_draining.reason, "not list it as draining"));

  auto no_tasks = EvaluateWorkerDrain(State(true, true, 0), kAddress, {}, kQuiet);
  CHECK(no_tasks.drained);
  CHECK(absl::StrContains(no_tasks.reason, "no task left"));
}

TEST_CASE("EvaluateWorkerDrain: a draining worker with tasks needs a quiet period of its own metrics") {
  const auto state = State(true, true, 2);
  auto blind = EvaluateWorkerDrain(state, kAddress, {}, kQuiet);
  CHECK(!blind.drained);
  CHECK(absl::StrContains(blind.reason, "no /metrics"));

  auto buffered = EvaluateWorkerDrain(state, kAddress, {Load(0, 0, 10), Load(2000, 12, 10)}, kQuiet);
  CHECK(!buffered.drained);
  CHECK(absl::StrContains(buffered.reason, "12 elements buffered"));
  CHECK(absl::StrContains(buffered.reason, "2 tasks"));

  // Still producing (its split is being read): not drained, however long nothing is buffered.
  auto producing = EvaluateWorkerDrain(state, kAddress, {Load(0, 0, 10), Load(600, 0, 20), Load(1200, 0, 30)}, kQuiet);
  CHECK(!producing.drained);
  CHECK(absl::StrContains(producing.reason, "quiet for 0"));

  // Quiet, but not long enough yet.
  auto short_quiet = EvaluateWorkerDrain(state, kAddress, {Load(0, 0, 10), Load(400, 0, 30), Load(900, 0, 30)}, kQuiet);
  CHECK(!short_quiet.drained);
  CHECK(absl::StrContains(short_quiet.reason, "quiet for 500ms of 1s"));

  // Quiet for the whole period: drained.
  auto quiet = EvaluateWorkerDrain(state, kAddress, {Load(0, 3, 10), Load(400, 0, 30), Load(1400, 0, 30)}, kQuiet);
  CHECK(quiet.drained);
  CHECK(absl::StrContains(quiet.reason, "idle"));

  // A buffered element in the middle of the streak breaks it.
  auto broken = EvaluateWorkerDrain(state, kAddress, {Load(0, 0, 30), Load(500, 1, 30), Load(1400, 0, 30)}, kQuiet);
  CHECK(!broken.drained);
}

}  // namespace
}  // namespace sluice::local
