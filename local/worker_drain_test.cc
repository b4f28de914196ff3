#include "local/worker_drain.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"

namespace sluice::local {
namespace {

constexpr char kAddress[] = "127.0.0.1:5001";

service::GetStateResponse State(bool listed, bool draining, int tasks) {
  service::GetStateResponse state;
  auto* other = state.add_workers();  // another worker, drained: never affects the verdict
  other->set_address("127.0.0.1:5002");
  other->add_task_ids(9);
  other->set_draining(true);
  other->set_drained(true);
  if (listed) {
    auto* w = state.add_workers();
    w->set_address(kAddress);
    w->set_draining(draining);
    for (int t = 0; t < tasks; ++t) w->add_task_ids(t);
  }
  return state;
}

service::WorkerInfo& Mine(service::GetStateResponse& state) { return *state.mutable_workers(state.workers_size() - 1); }

TEST_CASE("EvaluateWorkerDrain: gone, not draining, no task") {
  auto gone = EvaluateWorkerDrain(State(false, false, 0), kAddress);
  CHECK(gone.drained);
  CHECK(absl::StrContains(gone.reason, "no longer registered"));

  auto not_draining_state = State(true, false, 1);
  Mine(not_draining_state).set_drained(true);  // a verdict for a worker not draining is ignored
  auto not_draining = EvaluateWorkerDrain(not_draining_state, kAddress);
  CHECK(!not_draining.drained);
  CHECK(absl::StrContains(not_draining.reason, "not list it as draining"));

  auto no_tasks = EvaluateWorkerDrain(State(true, true, 0), kAddress);
  CHECK(no_tasks.drained);
  CHECK(absl::StrContains(no_tasks.reason, "no task left"));
}

TEST_CASE("EvaluateWorkerDrain: a draining worker with tasks follows the dispatcher's delivery verdict") {
  auto state = State(true, true, 2);
  Mine(state).set_undelivered_elements(12);
  Mine(state).set_drain_blocker("12 elements produced and not yet received by clients");
  auto unread = EvaluateWorkerDrain(state, kAddress);
  CHECK(!unread.drained);
  CHECK(absl::StrContains(unread.reason, "2 tasks"));
  CHECK(absl::StrContains(unread.reason, "12 elements produced and not yet received"));

  auto confirmed = State(true, true, 1);
  Mine(confirmed).set_drained(true);
  auto drained = EvaluateWorkerDrain(confirmed, kAddress);
  CHECK(drained.drained);
  CHECK(absl::StrContains(drained.reason, "received all it produced"));
}

TEST_CASE("EvaluateWorkerDrain: missing or malformed verdicts never drain") {
  // An older dispatcher: draining, tasks, and no verdict fields at all.
  auto old = EvaluateWorkerDrain(State(true, true, 1), kAddress);
  CHECK(!old.drained);
  CHECK(absl::StrContains(old.reason, "no drain verdict"));

  auto negative = State(true, true, 1);
  Mine(negative).set_drained(true);
  Mine(negative).set_undelivered_elements(-3);
  auto n = EvaluateWorkerDrain(negative, kAddress);
  CHECK(!n.drained);
  CHECK(absl::StrContains(n.reason, "negative"));

  auto contradicted = State(true, true, 1);
  Mine(contradicted).set_drained(true);
  Mine(contradicted).set_splits_held(2);
  auto c = EvaluateWorkerDrain(contradicted, kAddress);
  CHECK(!c.drained);
  CHECK(absl::StrContains(c.reason, "not trusted"));
}

}  // namespace
}  // namespace sluice::local
