#include "dataplane/client/round_reader.h"

#include <catch2/catch.hpp>

#include <atomic>

#include "dataplane/client/testing/fake_dispatcher.h"
#include "dataplane/client/testing/fake_service_rpc.h"

namespace sluice::client {
namespace {

using testing::FakeWorkerRpc;
using testing::MakeTask;
using testing::ValuesResponse;
using testing::WaitUntil;

struct Fixture {
  Fixture()
      : queue(ElementQueue::Limits{1 << 20, 64}, [] { return absl::Now(); }, [this] { rounds->Stop(); }),
        rounds(std::make_unique<RoundReader>(Options(), &workers, &queue)) {}
  // Joins the reader first: it may still be inside on_fail (Stop) when the test ends.
  ~Fixture() {
    rounds->Stop();
    rounds->Join();
  }

  static RoundReader::Options Options() {
    RoundReader::Options o;
    o.job_client_id = 3;
    o.consumer_index = 1;
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(4);
    return o;
  }
  static service::ClientHeartbeatResponse Answer(std::vector<service::TaskInfo> tasks, int64_t block_round = 0) {
    service::ClientHeartbeatResponse r;
    for (auto& t : tasks) *r.add_tasks() = t;
    r.set_block_round(block_round);
    return r;
  }
  std::pair<std::vector<int64_t>, absl::Status> Drain() {
    std::vector<int64_t> out;
    while (true) {
      auto next = queue.Pop(absl::Seconds(30));
      if (!next.ok()) return {out, next.status()};
      if (!next->has_value()) return {out, absl::OkStatus()};
      out.push_back(*(*next)->Find("v")->AsInt64());
    }
  }

  FakeWorkerRpc workers;
  ElementQueue queue;
  std::unique_ptr<RoundReader> rounds;
};

service::GetElementsResponse RoundElement(const service::GetElementsRequest& req) {
  service::GetElementsResponse r = ValuesResponse({req.round() * 100 + req.task_id()});
  r.mutable_elements(0)->set_round(req.round());
  return r;
}

TEST_CASE("client_round_reader: rounds go round-robin over the tasks, skipped rounds deliver nothing, then the end") {
  Fixture f;
  f.workers.get_element = [](const service::GetElementsRequest& req) -> absl::StatusOr<service::GetElementsResponse> {
    service::GetElementsResponse r;
    if (req.round() == 2) {
      r.set_round_skipped(true);
    } else if (req.round() == 4) {
      r.set_end_of_sequence(true);
    } else {
      r = RoundElement(req);
    }
    return r;
  };
  f.rounds->Start();
  f.rounds->Update(Fixture::Answer({MakeTask(10, "a:1"), MakeTask(11, "b:1")}));
  auto [values, status] = f.Drain();
  CHECK(status.ok());
  CHECK(values == std::vector<int64_t>{10, 111, 311});  // rounds 0 (task 10), 1 (11), 3 (11); 2 skipped
  CHECK(f.rounds->rounds_skipped() == 1);
  for (const auto& req : f.workers.element_requests()) {
    CHECK(req.consumer_index() == 1);
    CHECK(req.job_client_id() == 3);
    CHECK(req.allow_skip_round());
  }
  CHECK_FALSE(f.rounds->running());
}

TEST_CASE("client_round_reader: a held block stops the rounds at it until an answer without it") {
  Fixture f;
  f.workers.get_element = [](const service::GetElementsRequest& req) -> absl::StatusOr<service::GetElementsResponse> {
    return RoundElement(req);
  };
  // A worker is joining at round 2 before the consumer started: it holds the block.
  CHECK(f.rounds->Update(Fixture::Answer({MakeTask(10, "a:1")}, /*block_round=*/2)));
  service::ClientHeartbeatRequest hb;
  f.rounds->FillHeartbeat(&hb);
  CHECK(hb.acked_block_round() == 2);
  f.rounds->Start();
  for (int64_t want : {10, 110}) {
    auto next = f.queue.Pop(absl::Seconds(30));
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    CHECK(*(*next)->Find("v")->AsInt64() == want);
  }
  REQUIRE(WaitUntil([&] { return f.workers.element_requests().size() == 2; }));
  auto held = f.queue.Pop(absl::Milliseconds(20));
  CHECK(held.status().code() == absl::StatusCode::kDeadlineExceeded);  // round 2 is not asked for
  CHECK(f.workers.element_requests().size() == 2);
  // The new task starts at round 2; the block is lifted.
  CHECK_FALSE(f.rounds->Update(Fixture::Answer({MakeTask(10, "a:1"), MakeTask(12, "c:1", "", 2)})));
  auto next = f.queue.Pop(absl::Seconds(30));
  REQUIRE(next.ok());
  REQUIRE(next->has_value());
  CHECK(*(*next)->Find("v")->AsInt64() == 210);  // round 2: position 0 of tasks {10, 12}
}

TEST_CASE("client_round_reader: transport errors are retried, a malformed answer is the client's error") {
  Fixture f;
  std::atomic<int> calls{0};
  f.workers.get_element = [&](const service::GetElementsRequest& req) -> absl::StatusOr<service::GetElementsResponse> {
    const int n = ++calls;
    if (n == 1) return absl::UnavailableError("worker restarting");
    if (n == 2) return RoundElement(req);
    service::GetElementsResponse wrong = RoundElement(req);
    wrong.mutable_elements(0)->set_round(req.round() + 5);
    return wrong;
  };
  f.rounds->Start();
  f.rounds->Update(Fixture::Answer({MakeTask(10, "a:1")}));
  auto [values, status] = f.Drain();
  CHECK(values == std::vector<int64_t>{10});
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()),
             Catch::Contains("worker a:1 task 10 round 1: malformed response: element is for round 6"));
  CHECK(f.rounds->reconnects() == 1);
}

}  // namespace
}  // namespace sluice::client
