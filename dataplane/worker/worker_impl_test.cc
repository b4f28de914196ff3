// WorkerImpl against the in-memory fake dispatcher: registration through heartbeats, task
// creation and deletion, progress and split acknowledgements, dispatcher restarts, element
// streaming and its validation, coordinated reads, draining and deregistration.
#include "dataplane/worker/worker_impl.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include "absl/synchronization/notification.h"

#include "dataplane/worker/worker_test_util.h"

namespace sluice::worker {
namespace {

using testing::FakeDispatcher;
using testing::MakeTask;
using testing::WaitUntil;

WorkerConfig Config(const std::string& address = "127.0.0.1:7000") {
  WorkerConfig config;
  config.worker_address = address;
  config.worker_host = "127.0.0.1";
  config.placement = service::PLACEMENT_LOCAL;
  config.heartbeat_interval = absl::Milliseconds(20);
  config.unknown_task_wait = absl::Milliseconds(30);
  config.runner.buffer_elements = 64;
  config.runner.splits.initial_backoff = absl::Milliseconds(1);
  return config;
}

struct Collected {
  std::vector<service::GetElementsResponse> responses;
  std::vector<int64_t> values;
};

absl::Status Stream(WorkerImpl& worker, const service::GetElementsRequest& request, Collected* out,
                    CancelToken* cancel = nullptr) {
  return worker.StreamElements(request, cancel, [out](ElementsResponse& response) {
    // The bytes the gRPC adapter sends, read back as the client's protobuf code reads them.
    service::GetElementsResponse r;
    REQUIRE(r.ParseFromString(EncodeElementsResponse(response).Flatten()));
    for (const auto& e : r.elements()) out->values.push_back(testing::DecodeInt(e));
    out->responses.push_back(r);
    return true;
  });
}

service::GetElementsRequest ReadRequest(int64_t task_id, int32_t max_elements = 0) {
  service::GetElementsRequest request;
  request.set_task_id(task_id);
  request.set_consumer_index(-1);
  request.set_max_elements(max_elements);
  return request;
}

TEST_CASE("worker_impl registers by heartbeat, runs assigned tasks and streams them") {
  FakeDispatcher fake;
  WorkerImpl worker(Config(), &fake);
  CHECK_FALSE(worker.registered());
  fake.AssignTask("127.0.0.1:7000", MakeTask(3, "source: {range: {stop: 300}}\n"));
  REQUIRE(worker.Heartbeat().ok());
  CHECK(worker.registered());
  CHECK(worker.num_tasks() == 1);
  auto first = fake.heartbeats().at(0);
  CHECK(first.worker_address() == "127.0.0.1:7000");
  CHECK(first.worker_host() == "127.0.0.1");
  CHECK(first.placement() == service::PLACEMENT_LOCAL);
  CHECK_FALSE(first.draining());

  auto runner = worker.FindTask(3, nullptr);
  REQUIRE(runner.ok());
  REQUIRE(WaitUntil([&] { return (*runner)->Progress().buffered_elements == 64; }));
  Collected got;
  REQUIRE(Stream(worker, ReadRequest(3), &got).ok());
  std::vector<int64_t> expected(300);
  for (int i = 0; i < 300; ++i) expected[i] = i;
  CHECK(got.values == expected);
  CHECK(got.responses.back().end_of_sequence());
  // Small elements are packed: the first response carries everything that was buffered.
  CHECK(got.responses.front().elements_size() == 64);

  // Progress reaches the dispatcher: finished, elements produced, worker stats.
  REQUIRE(worker.Heartbeat().ok());
  auto last = fake.heartbeats().back();
  REQUIRE(last.tasks_size() == 1);
  CHECK(last.tasks(0).task_id() == 3);
  CHECK(last.tasks(0).finished());
  CHECK(last.tasks(0).elements_produced() == 300);
  CHECK(last.stats().elements_produced() == 300);
  CHECK(last.stats().bytes_produced() > 0);
  CHECK(last.stats().busy_cpu_seconds() > 0);

  // Deletion by the dispatcher.
  fake.DeleteTask("127.0.0.1:7000", 3);
  REQUIRE(worker.Heartbeat().ok());
  CHECK(worker.num_tasks() == 0);
  auto gone = worker.FindTask(3, nullptr);
  CHECK(absl::IsNotFound(gone.status()));
  CHECK_THAT(std::string(gone.status().message()), Catch::Contains("task_id 3"));
}

TEST_CASE("worker_impl honours max_elements per response") {
  FakeDispatcher fake;
  WorkerImpl worker(Config(), &fake);
  fake.AssignTask("127.0.0.1:7000", MakeTask(1, "source: {range: {stop: 23}}\n"));
  REQUIRE(worker.Heartbeat().ok());
  Collected got;
  REQUIRE(Stream(worker, ReadRequest(1, 5), &got).ok());
  CHECK(got.values.size() == 23);
  for (const auto& r : got.responses) CHECK(r.elements_size() <= 5);
}

TEST_CASE("worker_impl acknowledges started splits through heartbeats, and keeps them across a failed one") {
  const std::string spec = "source: {range: {stop: 60, split_size: 10}}\n";
  FakeDispatcher fake;
  fake.SetSplits(testing::SplitsOf(spec));
  WorkerImpl worker(Config(), &fake);
  fake.AssignTask("127.0.0.1:7000", MakeTask(1, spec, service::SHARDING_DYNAMIC));
  REQUIRE(worker.Heartbeat().ok());
  Collected got;
  REQUIRE(Stream(worker, ReadRequest(1), &got).ok());
  CHECK(got.values.size() == 60);
  // Some starts went with GetSplits; the last ones wait for a heartbeat. A failed heartbeat
  // (dispatcher restarting) must not lose them.
  fake.FailHeartbeats(true);
  CHECK_FALSE(worker.Heartbeat().ok());
  fake.FailHeartbeats(false);
  REQUIRE(worker.Heartbeat().ok());
  std::multiset<uint64_t> expected = {0, 1, 2, 3, 4, 5};
  CHECK(fake.started() == expected);
}

TEST_CASE("worker_impl re-registers after a dispatcher restart and keeps its running tasks") {
  FakeDispatcher fake;
  WorkerImpl worker(Config(), &fake);
  fake.AssignTask("127.0.0.1:7000", MakeTask(1, "source: {range: {stop: 1000000}}\n"));
  worker.Start();
  REQUIRE(WaitUntil([&] { return worker.num_tasks() == 1; }));
  auto before = worker.FindTask(1, nullptr);
  REQUIRE(before.ok());
  fake.FailHeartbeats(true);
  const size_t seen = fake.heartbeats().size();
  REQUIRE(WaitUntil([&] { return fake.heartbeats().size() >= seen + 3; }));  // keeps retrying
  fake.FailHeartbeats(false);
  // The restarted dispatcher knows the task; a real one re-sends it, which must not restart it.
  fake.AssignTask("127.0.0.1:7000", MakeTask(1, "source: {range: {stop: 1000000}}\n"));
  const size_t restarted = fake.heartbeats().size();
  REQUIRE(WaitUntil([&] { return fake.heartbeats().size() >= restarted + 2; }));
  auto after = worker.FindTask(1, nullptr);
  REQUIRE(after.ok());
  CHECK(before->get() == after->get());
  worker.Stop();
}

TEST_CASE("worker_impl validates requests, naming the field") {
  FakeDispatcher fake;
  WorkerImpl worker(Config(), &fake);
  fake.AssignTask("127.0.0.1:7000", MakeTask(1, "source: {range: {stop: 10}}\n"));
  service::TaskDef coordinated = MakeTask(2, "source: {range: {stop: 10}}\n");
  coordinated.set_num_consumers(2);
  fake.AssignTask("127.0.0.1:7000", coordinated);
  REQUIRE(worker.Heartbeat().ok());

  auto message = [](const absl::Status& s) { return std::string(s.message()); };
  Collected ignored;
  absl::Status unknown = Stream(worker, ReadRequest(999), &ignored);
  CHECK(absl::IsNotFound(unknown));
  CHECK_THAT(message(unknown), Catch::Contains("task_id 999"));

  absl::Status negative = Stream(worker, ReadRequest(1, -4), &ignored);
  CHECK(absl::IsInvalidArgument(negative));
  CHECK_THAT(message(negative), Catch::Contains("max_elements"));

  service::GetElementsRequest bad_codec = ReadRequest(1);
  bad_codec.set_compression(static_cast<service::Compression>(99));
  absl::Status codec = Stream(worker, bad_codec, &ignored);
  CHECK(absl::IsInvalidArgument(codec));
  CHECK_THAT(message(codec), Catch::Contains("compression"));

  absl::Status stream_coordinated = Stream(worker, ReadRequest(2), &ignored);
  CHECK(absl::IsFailedPrecondition(stream_coordinated));
  CHECK_THAT(message(stream_coordinated), Catch::Contains("GetElement"));

  service::GetElementsRequest one;
  one.set_task_id(2);
  one.set_consumer_index(2);
  auto out_of_range = worker.GetElement(one, nullptr);
  CHECK(absl::IsInvalidArgument(out_of_range.status()));
  CHECK_THAT(message(out_of_range.status()), Catch::Contains("consumer_index 2") && Catch::Contains("num_consumers 2"));
  one.set_consumer_index(-1);
  CHECK(absl::IsInvalidArgument(worker.GetElement(one, nullptr).status()));
  one.set_consumer_index(0);
  one.set_round(-3);
  CHECK_THAT(message(worker.GetElement(one, nullptr).status()), Catch::Contains("round"));
  one.set_round(0);
  one.set_task_id(1);
  CHECK(absl::IsFailedPrecondition(worker.GetElement(one, nullptr).status()));
  one.set_task_id(12345);
  CHECK(absl::IsNotFound(worker.GetElement(one, nullptr).status()));

  one.set_task_id(2);
  auto element = worker.GetElement(one, nullptr);
  REQUIRE(element.ok());
  REQUIRE(element->elements_size() == 1);
  CHECK(element->elements(0).round() == 0);
  CHECK(testing::DecodeInt(element->elements(0)) == 0);
}

TEST_CASE("worker_impl waits briefly for a task the dispatcher has not delivered yet") {
  FakeDispatcher fake;
  WorkerConfig config = Config();
  config.unknown_task_wait = absl::Seconds(20);  // a hang guard: the heartbeat brings the task first
  WorkerImpl worker(config, &fake);
  worker.Start();
  REQUIRE(WaitUntil([&] { return worker.registered(); }));
  fake.AssignTask("127.0.0.1:7000", MakeTask(8, "source: {range: {stop: 4}}\n"));
  Collected got;
  REQUIRE(Stream(worker, ReadRequest(8), &got).ok());
  CHECK(got.values == std::vector<int64_t>{0, 1, 2, 3});
  worker.Stop();
}

TEST_CASE("worker_impl keeps heartbeating while a task's pipeline takes long to build") {
  // The build of task 8 waits until the test lets it go (a pipeline that takes long to build: a
  // whole IDX data set parsed under a small CPU quota took 7 s with `sluice up --trainer`). The
  // heartbeat thread once built tasks itself, went silent meanwhile and got the worker timed out.
  absl::Notification let_go;
  FakeDispatcher fake;
  WorkerConfig config = Config();
  config.before_task_build = [&](int64_t task_id) {
    if (task_id == 8) let_go.WaitForNotificationWithTimeout(absl::Seconds(30));
  };
  WorkerImpl worker(config, &fake);
  worker.Start();
  REQUIRE(WaitUntil([&] { return worker.registered(); }));
  fake.AssignTask("127.0.0.1:7000", MakeTask(8, "source: {range: {stop: 3}}\n"));
  REQUIRE(WaitUntil([&] { return fake.heartbeats().size() >= 2; }));  // the task went out
  const int64_t before = worker.heartbeats_sent();
  CHECK(WaitUntil([&] { return worker.heartbeats_sent() >= before + 5; }, absl::Seconds(10)));
  // A reader of the task waits for its build (past unknown_task_wait), then gets its elements.
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(100));  // not a timing assertion: the read must wait either way
    let_go.Notify();
  });
  Collected got;
  absl::Status status = Stream(worker, ReadRequest(8), &got);
  release.join();
  CHECK(status.ok());
  CHECK(got.values == std::vector<int64_t>{0, 1, 2});
  worker.Stop();
}

TEST_CASE("worker_impl drain: says draining, takes no new task, serves the buffer, then UNAVAILABLE, deregisters") {
  FakeDispatcher fake;
  WorkerImpl worker(Config(), &fake);
  fake.AssignTask("127.0.0.1:7000", MakeTask(1, "source: {range: {stop: 1000000}}\n"));
  REQUIRE(worker.Heartbeat().ok());
  auto runner = worker.FindTask(1, nullptr);
  REQUIRE(runner.ok());
  REQUIRE(WaitUntil([&] { return (*runner)->Progress().buffered_elements == 64; }));
  worker.BeginDrain();
  fake.AssignTask("127.0.0.1:7000", MakeTask(2, "source: {range: {stop: 10}}\n"));
  REQUIRE(worker.Heartbeat().ok());
  CHECK(fake.heartbeats().back().draining());
  CHECK(worker.num_tasks() == 1);
  Collected got;
  absl::Status status = Stream(worker, ReadRequest(1), &got);
  CHECK(absl::IsUnavailable(status));
  CHECK(got.values.size() >= 64);  // the buffered elements (and any in hand) were delivered
  for (size_t i = 0; i < got.values.size(); ++i) CHECK(got.values[i] == static_cast<int64_t>(i));
  CHECK(worker.WaitForInFlightRounds(absl::Now()));
  worker.Start();
  REQUIRE(WaitUntil([&] { return worker.heartbeats_sent() >= 4; }));
  worker.StopHeartbeats(absl::Now() + absl::Seconds(5));
  const size_t heartbeats = fake.heartbeats().size();
  REQUIRE(worker.Deregister(absl::Now() + absl::Seconds(5)).ok());
  CHECK(fake.heartbeats().size() == heartbeats);  // the loop has ended
  worker.Start();                                 // and does not start again
  CHECK(fake.heartbeats().size() == heartbeats);
  CHECK(fake.deregistered() == std::vector<std::string>{"127.0.0.1:7000"});
  worker.Stop();
  worker.Stop();  // idempotent
}

TEST_CASE("worker_impl: a cancelled stream ends promptly") {
  FakeDispatcher fake;
  WorkerImpl worker(Config(), &fake);
  service::TaskDef task = MakeTask(1, "source: {range: {stop: 10}}\n");
  task.set_num_epochs(-1);
  fake.AssignTask("127.0.0.1:7000", task);
  REQUIRE(worker.Heartbeat().ok());
  CancelToken token;
  int writes = 0;
  absl::Status status = worker.StreamElements(ReadRequest(1), &token, [&](ElementsResponse&) {
    if (++writes == 3) token.Cancel();
    return true;
  });
  CHECK(absl::IsCancelled(status));
  CHECK(writes == 3);
  int refused = 0;
  absl::Status gone = worker.StreamElements(ReadRequest(1), nullptr, [&](ElementsResponse&) {
    ++refused;
    return false;  // the client went away
  });
  CHECK(absl::IsCancelled(gone));
  CHECK(refused == 1);
}

}  // namespace
}  // namespace sluice::worker
