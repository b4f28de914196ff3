#include "dataplane/client/task_readers.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "dataplane/client/testing/fake_dispatcher.h"
#include "dataplane/client/testing/fake_service_rpc.h"

namespace sluice::client {
namespace {

using testing::FakeWorkerRpc;
using testing::MakeTask;
using testing::ValuesResponse;
using testing::WaitUntil;

struct Fixture {
  explicit Fixture(TaskReaderSet::Options o = Options())
      : queue(ElementQueue::Limits{1 << 20, 64}, [] { return absl::Now(); }, [this] { readers->StopAll(); }),
        readers(std::make_unique<TaskReaderSet>(o, &workers, &queue, BufferPool::Create(8, 1 << 20))) {}
  // Joins the readers first: one may still be inside on_fail (StopAll) when the test ends.
  ~Fixture() {
    readers->StopAll();
    readers->JoinAll();
  }

  static TaskReaderSet::Options Options() {
    TaskReaderSet::Options o;
    o.job_client_id = 7;
    o.target_workers = service::TARGET_WORKERS_ANY;
    o.client_host = "trainer";
    o.initial_backoff = absl::Milliseconds(1);
    o.max_backoff = absl::Milliseconds(4);
    return o;
  }

  // Pops until the end or an error; the values, and the status that ended it.
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
  std::unique_ptr<TaskReaderSet> readers;
};

TEST_CASE("client_task_readers: one stream per listed task, the end needs every stream ended and the job finished") {
  Fixture f;
  const std::vector<service::TaskInfo> tasks = {MakeTask(1, "w1:1"), MakeTask(2, "w2:1")};
  f.readers->Update(tasks, false);
  f.workers.Send(1, ValuesResponse({10, 11}));
  f.workers.Send(2, ValuesResponse({20}, /*end_of_sequence=*/true));
  f.workers.Send(1, ValuesResponse({12}, /*end_of_sequence=*/true));
  REQUIRE(WaitUntil([&] { return f.readers->active_readers() == 0; }));
  CHECK(f.workers.streams_opened(1) == 1);
  CHECK(f.workers.streams_opened(2) == 1);
  CHECK(f.queue.stats().buffered_elements == 4);
  std::vector<int64_t> values;
  for (int i = 0; i < 4; ++i) {
    auto next = f.queue.Pop(absl::Seconds(30));
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    values.push_back(*(*next)->Find("v")->AsInt64());
  }
  std::sort(values.begin(), values.end());
  CHECK(values == std::vector<int64_t>{10, 11, 12, 20});
  // Both tasks ended, but the job has not finished: the data has not ended (a task may be added).
  CHECK(f.queue.Pop(absl::Milliseconds(1)).status().code() == absl::StatusCode::kDeadlineExceeded);
  f.readers->Update({}, /*job_finished=*/true);
  auto end = f.queue.Pop(absl::Seconds(30));
  REQUIRE(end.ok());
  CHECK_FALSE(end->has_value());
  CHECK(f.readers->reconnects() == 0);
}

TEST_CASE("client_task_readers: a stream that ends without end_of_sequence is opened again") {
  Fixture f;
  f.readers->Update({MakeTask(1, "w1:1")}, false);
  f.workers.Send(1, ValuesResponse({1}));
  f.workers.Close(1, absl::UnavailableError("worker restarting"));
  f.workers.Send(1, ValuesResponse({2}, true));
  REQUIRE(WaitUntil([&] { return f.readers->active_readers() == 0; }));
  f.readers->Update({}, true);
  auto [values, status] = f.Drain();
  CHECK(status.ok());
  CHECK(values == std::vector<int64_t>{1, 2});
  CHECK(f.workers.streams_opened(1) == 2);
  CHECK(f.readers->reconnects() == 1);
  CHECK(f.workers.stream_wait_for_ready() == std::vector<bool>{false, true});  // the retry waits for the channel
}

TEST_CASE("client_task_readers: a task no longer listed is stopped, its stream cancelled") {
  Fixture f;
  f.readers->Update({MakeTask(1, "w1:1"), MakeTask(2, "w2:1")}, false);
  REQUIRE(WaitUntil([&] { return f.workers.open_streams() == 2; }));
  f.readers->Update({MakeTask(2, "w2:1")}, false);  // joins task 1's reader before returning
  CHECK(f.workers.open_streams() == 1);
  CHECK(f.readers->active_readers() == 1);
}

TEST_CASE("client_task_readers: a finished job stops readers that can receive nothing, open streams run to their end") {
  Fixture f;
  f.readers->Update({MakeTask(1, "w1:1"), MakeTask(2, "w2:1")}, false);
  f.workers.Close(2, absl::UnavailableError("worker gone"));  // task 2 reconnects
  REQUIRE(WaitUntil([&] { return f.workers.streams_opened(2) == 2 && f.workers.open_streams() == 2; }));
  SECTION("the worker's connection is down: the reconnection, which received nothing, is cancelled") {
    f.workers.SetConnected(false);
    f.readers->Update({}, /*job_finished=*/true);
    // Task 1's stream (not a reconnection) stays open for its last elements.
    REQUIRE(WaitUntil([&] { return f.readers->active_readers() == 1; }));
    f.workers.Send(1, ValuesResponse({5}, true));
    auto [values, status] = f.Drain();
    CHECK(status.ok());
    CHECK(values == std::vector<int64_t>{5});
  }
  SECTION("the connection is up: the reconnection may hold the task's last elements and is read to its end") {
    f.readers->Update({}, /*job_finished=*/true);
    f.workers.Send(2, ValuesResponse({9}, true));
    f.workers.Send(1, ValuesResponse({5}, true));
    auto [values, status] = f.Drain();
    CHECK(status.ok());
    std::sort(values.begin(), values.end());
    CHECK(values == std::vector<int64_t>{5, 9});
  }
}

TEST_CASE("client_task_readers: a malformed element is the client's error after the elements before it") {
  Fixture f;
  f.readers->Update({MakeTask(1, "w1:1")}, false);
  service::GetElementsResponse resp = ValuesResponse({1});
  service::ElementData* bad = resp.add_elements();
  bad->set_data("garbage");
  bad->set_uncompressed_size(7);
  bad->set_compression(service::COMPRESSION_NONE);
  f.workers.Send(1, resp);
  auto [values, status] = f.Drain();
  CHECK(values == std::vector<int64_t>{1});
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()), Catch::Contains("worker w1:1 task 1: malformed response (element 1)"));
}

TEST_CASE("client_task_readers: the worker's own error is not retried") {
  Fixture f;
  f.readers->Update({MakeTask(1, "w1:1")}, false);
  f.workers.Close(1, absl::DataLossError("corrupt input file"));
  auto [values, status] = f.Drain();
  CHECK(values.empty());
  CHECK(status.code() == absl::StatusCode::kDataLoss);
  CHECK(status.message() == "worker w1:1 task 1: corrupt input file");
  CHECK(f.workers.streams_opened(1) == 1);
}

TEST_CASE("client_task_readers: AUTO under sharding OFF reads the local task only") {
  auto o = Fixture::Options();
  o.target_workers = service::TARGET_WORKERS_AUTO;
  Fixture f(o);
  f.readers->Update({MakeTask(1, "w1:1", "other-host"), MakeTask(2, "w2:1", "trainer")}, false);
  REQUIRE(WaitUntil([&] { return f.workers.streams_opened(2) == 1; }));
  CHECK(f.workers.streams_opened(1) == 0);
  CHECK(f.readers->active_readers() == 1);
}

}  // namespace
}  // namespace sluice::client
