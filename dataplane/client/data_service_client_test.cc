// DataServiceClient against in-test fake Dispatcher and Worker gRPC services.
#include "dataplane/client/data_service_client.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <set>
#include <thread>
#include <type_traits>

#include "absl/synchronization/mutex.h"
#include "dataplane/client/testing/fake_dispatcher.h"
#include "dataplane/client/testing/fake_worker.h"
#include "dataplane/pipeline/element_codec.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::client {
namespace {

using testing::FakeDispatcher;
using testing::FakeWorker;
using testing::MakeTask;
using testing::TestServer;
using testing::WaitUntil;

pipeline::Element Num(int64_t v, size_t payload_bytes = 0) {
  pipeline::Element e;
  e.Set("v", pipeline::Tensor::Scalar(v));
  if (payload_bytes > 0) {
    pipeline::Tensor t = pipeline::Tensor::Allocate(pipeline::DType::kUInt8, {static_cast<int64_t>(payload_bytes)});
    for (size_t i = 0; i < payload_bytes; ++i) t.mutable_raw()[i] = static_cast<uint8_t>((i / 64) % 3);
    e.Set("payload", std::move(t));
  }
  e.set_key(static_cast<uint64_t>(v));
  return e;
}

int64_t V(const pipeline::Element& e, const std::string& field = "v") { return *e.Find(field)->AsInt64(); }

// A fake data service: one dispatcher and `n` workers, each on its own port.
struct Harness {
  explicit Harness(int num_workers) {
    dispatcher_server = TestServer::Start({&dispatcher});
    REQUIRE(dispatcher_server != nullptr);
    for (int i = 0; i < num_workers; ++i) {
      workers.push_back(std::make_unique<FakeWorker>());
      worker_servers.push_back(TestServer::Start({workers.back().get()}));
      REQUIRE(worker_servers.back() != nullptr);
    }
  }
  ~Harness() {
    for (auto& w : workers) w->Shutdown();
    for (auto& s : worker_servers) {
      if (s) s->Stop();
    }
  }
  std::string worker_address(int i) const { return worker_servers[static_cast<size_t>(i)]->address(); }

  DataServiceClientOptions Options() const {
    DataServiceClientOptions o;
    o.dispatcher_address = dispatcher_server->address();
    auto def = pipeline::ParsePipelineSpec("source:\n  range: {stop: 10}\n", "test.yaml");
    REQUIRE(def.ok());
    o.pipeline = *def;
    o.heartbeat_interval = absl::Milliseconds(10);
    o.initial_backoff = absl::Milliseconds(5);
    o.max_backoff = absl::Milliseconds(50);
    o.create_timeout = absl::Seconds(10);
    o.rpc_timeout = absl::Seconds(10);
    o.client_host = "trainer-host";
    return o;
  }

  // The job finishes once every listed task has sent its end.
  void FinishWhenEnded(const std::vector<std::pair<int, int64_t>>& worker_tasks) {
    dispatcher.SetJobFinishedFunction([this, worker_tasks](int64_t) {
      for (const auto& [w, task] : worker_tasks) {
        if (!workers[static_cast<size_t>(w)]->EndSent(task)) return false;
      }
      return true;
    });
  }

  FakeDispatcher dispatcher;
  std::unique_ptr<TestServer> dispatcher_server;
  std::vector<std::unique_ptr<FakeWorker>> workers;
  std::vector<std::unique_ptr<TestServer>> worker_servers;
};

std::vector<int64_t> Drain(DataServiceClient& client, const std::string& field = "v") {
  std::vector<int64_t> out;
  while (true) {
    auto next = client.GetNext();
    REQUIRE(next.ok());
    if (!next->has_value()) break;
    out.push_back(V(**next, field));
  }
  return out;
}

std::unique_ptr<DataServiceClient> MustCreate(DataServiceClientOptions o) {
  auto c = DataServiceClient::Create(std::move(o));
  REQUIRE(c.ok());
  return *std::move(c);
}

// A clock the test moves by hand, for exact stall metrics.
class FakeClock {
 public:
  absl::Time Now() const {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ = absl::UnixEpoch() + absl::Seconds(100);
};

TEST_CASE("client_reads: one concurrent stream per task, every element once, per-task order kept") {
  Harness h(3);
  for (int w = 0; w < 3; ++w) {
    const int64_t task = w + 1;
    h.dispatcher.AddTask(MakeTask(task, h.worker_address(w)));
    for (int i = 0; i < 20; ++i) h.workers[static_cast<size_t>(w)]->PushElement(task, Num(task * 1000 + i));
  }
  h.FinishWhenEnded({{0, 1}, {1, 2}, {2, 3}});
  auto client = MustCreate(h.Options());
  // All three streams are open at the same time before any task ends.
  REQUIRE(WaitUntil([&] {
    return h.workers[0]->active_streams() == 1 && h.workers[1]->active_streams() == 1 &&
           h.workers[2]->active_streams() == 1;
  }));
  for (int w = 0; w < 3; ++w) h.workers[static_cast<size_t>(w)]->PushEnd(w + 1);
  std::vector<int64_t> got = Drain(*client);
  REQUIRE(got.size() == 60);
  std::map<int64_t, std::vector<int64_t>> by_task;
  for (int64_t v : got) by_task[v / 1000].push_back(v % 1000);
  for (int64_t task = 1; task <= 3; ++task) {
    std::vector<int64_t> want(20);
    for (int i = 0; i < 20; ++i) want[static_cast<size_t>(i)] = i;
    CHECK(by_task[task] == want);
  }
  CHECK_FALSE(client->GetNext()->has_value());  // the end is sticky
  for (int w = 0; w < 3; ++w) {
    auto reqs = h.workers[static_cast<size_t>(w)]->stream_requests();
    REQUIRE(reqs.size() == 1);
    CHECK(reqs[0].task_id() == w + 1);
    CHECK(reqs[0].job_client_id() == client->job_client_id());
    CHECK(reqs[0].consumer_index() == -1);
  }
  auto jobs = h.dispatcher.job_requests();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].client_host() == "trainer-host");
  CHECK(jobs[0].spec().dataset_id() == client->dataset_id());
  CHECK(jobs[0].spec().num_epochs() == 1);
  CHECK(client->dataset_id() == pipeline::Fingerprint(*h.Options().pipeline));
  auto stats = client->stats();
  CHECK(stats.elements_total == 60);
  CHECK(stats.buffered_bytes == 0);
  CHECK(stats.job_finished);
}

TEST_CASE("client_backpressure: buffered bytes stay bounded while the trainer is slow") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  constexpr int kCount = 100;
  constexpr size_t kPayload = 10 << 10;
  for (int i = 0; i < kCount; ++i) h.workers[0]->PushElement(1, Num(i, kPayload));
  h.workers[0]->PushEnd(1);
  h.FinishWhenEnded({{0, 1}});
  const int64_t element_bytes = static_cast<int64_t>(pipeline::EncodeElement(Num(0, kPayload)).size());
  auto o = h.Options();
  o.max_elements_per_response = 1;
  o.compression = service::COMPRESSION_NONE;

  SECTION("byte bound") {
    o.max_buffered_bytes = 5 * element_bytes;
    auto client = MustCreate(o);
    REQUIRE(WaitUntil([&] { return client->stats().backpressure_waits >= 1; }));
    auto paused = client->stats();
    CHECK(paused.buffered_bytes >= o.max_buffered_bytes);
    CHECK(paused.buffered_bytes <= o.max_buffered_bytes + element_bytes);
    CHECK(paused.elements_total == 0);
    std::vector<int64_t> got = Drain(*client);
    REQUIRE(got.size() == kCount);
    for (int i = 0; i < kCount; ++i) CHECK(got[static_cast<size_t>(i)] == i);
    auto stats = client->stats();
    CHECK(stats.peak_buffered_bytes <= o.max_buffered_bytes + element_bytes);
    CHECK(stats.bytes_total == kCount * element_bytes);
  }
  SECTION("outstanding request bound") {
    o.max_outstanding_requests = 3;
    auto client = MustCreate(o);
    REQUIRE(WaitUntil([&] { return client->stats().backpressure_waits >= 1; }));
    CHECK(client->stats().outstanding_requests == 3);
    CHECK(client->stats().buffered_elements == 3);
    std::vector<int64_t> got = Drain(*client);
    CHECK(got.size() == kCount);
    CHECK(client->stats().peak_outstanding_requests == 3);
  }
}

TEST_CASE("client_backpressure: max_outstanding_requests is bounded by default") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  constexpr int kCount = 3 * kDefaultMaxOutstandingRequests;
  for (int i = 0; i < kCount; ++i) h.workers[0]->PushElement(1, Num(i, 64));
  h.workers[0]->PushEnd(1);
  h.FinishWhenEnded({{0, 1}});
  auto o = h.Options();
  o.max_elements_per_response = 1;  // one response message per element
  REQUIRE(o.max_outstanding_requests == kDefaultMaxOutstandingRequests);
  REQUIRE(kDefaultMaxOutstandingRequests > 0);
  auto client = MustCreate(o);
  // The trainer reads nothing yet: the reader stops at the default bound, far below the byte bound.
  REQUIRE(WaitUntil([&] { return client->stats().backpressure_waits >= 1; }));
  CHECK(client->stats().outstanding_requests == kDefaultMaxOutstandingRequests);
  CHECK(client->stats().buffered_elements == kDefaultMaxOutstandingRequests);
  CHECK(client->stats().buffered_bytes < o.max_buffered_bytes / 1000);
  std::vector<int64_t> got = Drain(*client);
  CHECK(got.size() == kCount);
  CHECK(client->stats().peak_outstanding_requests == kDefaultMaxOutstandingRequests);

  SECTION("0 still means no count bound") {
    Harness h2(1);
    h2.dispatcher.AddTask(MakeTask(1, h2.worker_address(0)));
    for (int i = 0; i < kCount; ++i) h2.workers[0]->PushElement(1, Num(i, 64));
    h2.workers[0]->PushEnd(1);
    h2.FinishWhenEnded({{0, 1}});
    auto unbounded = h2.Options();
    unbounded.max_elements_per_response = 1;
    unbounded.max_outstanding_requests = 0;
    auto c2 = MustCreate(unbounded);
    REQUIRE(WaitUntil([&] { return c2->stats().buffered_elements == kCount; }));
    CHECK(c2->stats().backpressure_waits == 0);
    CHECK(Drain(*c2).size() == kCount);
  }
}

TEST_CASE("client_iterator: a range-for reads every element, then status() tells the end from an error") {
  Harness h(2);
  for (int w = 0; w < 2; ++w) {
    const int64_t task = w + 1;
    h.dispatcher.AddTask(MakeTask(task, h.worker_address(w)));
    for (int i = 0; i < 10; ++i) h.workers[static_cast<size_t>(w)]->PushElement(task, Num(task * 100 + i));
    h.workers[static_cast<size_t>(w)]->PushEnd(task);
  }
  h.FinishWhenEnded({{0, 1}, {1, 2}});
  auto client = MustCreate(h.Options());
  std::multiset<int64_t> got;
  for (const pipeline::Element& e : *client) got.insert(V(e));
  CHECK(got.size() == 20);
  CHECK(got.count(105) == 1);
  CHECK(got.count(209) == 1);
  CHECK(client->status().ok());
  CHECK(client->stats().elements_total == 20);
  CHECK(client->begin() == client->end());  // the end is sticky
  // Standard algorithms work on the range (input iterators).
  static_assert(std::is_same_v<std::iterator_traits<ElementIterator>::iterator_category, std::input_iterator_tag>);

  SECTION("an error ends the loop early; status() holds it") {
    Harness bad(1);
    bad.dispatcher.AddTask(MakeTask(1, bad.worker_address(0)));
    bad.workers[0]->PushElement(1, Num(1));
    bad.workers[0]->PushError(1, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "corrupt input file"));
    auto c = MustCreate(bad.Options());
    int n = 0;
    for (const pipeline::Element& e : *c) {
      CHECK(V(e) == 1);
      ++n;
    }
    CHECK(n == 1);
    CHECK(c->status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(c->status().message()), Catch::Contains("corrupt input file"));
  }
  SECTION("Cancel ends it with CANCELLED") {
    Harness idle(1);
    idle.dispatcher.AddTask(MakeTask(1, idle.worker_address(0)));
    idle.workers[0]->AddTask(1);
    auto c = MustCreate(idle.Options());
    std::thread canceller([&] {
      WaitUntil([&] { return c->stats().waiting_consumers == 1; });
      c->Cancel();
    });
    int n = 0;
    for (const pipeline::Element& e : *c) n += static_cast<int>(V(e) >= 0);
    canceller.join();
    CHECK(n == 0);
    CHECK(c->status().code() == absl::StatusCode::kCancelled);
  }
}

TEST_CASE("client_default_pipeline: neither pipeline nor dataset_id reads the dispatcher's default") {
  Harness h(1);
  auto def = pipeline::ParsePipelineSpec("source:\n  range: {stop: 3}\n", "default.yaml");
  REQUIRE(def.ok());
  const std::string id = h.dispatcher.SetDefaultPipeline(*def);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.workers[0]->PushElement(1, Num(7));
  h.workers[0]->PushEnd(1);
  h.FinishWhenEnded({{0, 1}});
  auto o = h.Options();
  o.pipeline.reset();
  o.job_name = "default";
  REQUIRE(ValidateOptions(o).ok());
  auto client = MustCreate(o);
  CHECK(client->dataset_id() == id);  // learned from the dispatcher's answer
  CHECK(h.dispatcher.register_requests().empty());
  auto jobs = h.dispatcher.job_requests();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].spec().dataset_id().empty());
  CHECK(!jobs[0].spec().has_cross_job_sharing());  // unset: the dispatcher's --sharing decides
  CHECK(Drain(*client) == std::vector<int64_t>{7});

  Harness none(0);
  auto o2 = none.Options();
  o2.pipeline.reset();
  auto refused = DataServiceClient::Create(o2);
  REQUIRE(!refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("serves no default pipeline"));
}

TEST_CASE("client_backpressure: a task with nothing to send does not starve the others of read slots") {
  // Task 1's worker has nothing yet; task 2's has elements. With one slot for two readers, the
  // reader of task 1 could hold it while blocked in Read, and task 2 would never be read (under
  // dynamic sharding task 1's end can wait for task 2's splits: a deadlock). Each reader always
  // gets a slot of its own.
  Harness h(2);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.workers[0]->AddTask(1);
  auto o = h.Options();
  o.max_outstanding_requests = 1;
  auto client = MustCreate(o);
  // The reader of task 1 took the only slot and waits in Read; then task 2 appears.
  // (The worker may see the stream a moment before the reader counts its slot.)
  REQUIRE(WaitUntil([&] { return h.workers[0]->active_streams() == 1; }));
  REQUIRE(WaitUntil([&] { return client->stats().outstanding_requests == 1; }));
  for (int i = 0; i < 5; ++i) h.workers[1]->PushElement(2, Num(i));
  h.workers[1]->PushEnd(2);
  h.dispatcher.AddTask(MakeTask(2, h.worker_address(1)));
  for (int i = 0; i < 5; ++i) {
    auto next = client->GetNext(absl::Seconds(30));
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    CHECK(V(**next) == i);
  }
  h.workers[0]->PushEnd(1);
  h.FinishWhenEnded({{0, 1}, {1, 2}});
  CHECK(Drain(*client).empty());
  CHECK(client->stats().peak_outstanding_requests <= 2);
}

TEST_CASE("client_finish: a finished job's open streams still deliver their last elements") {
  // The dispatcher lists no tasks once a job finished, but the elements its tasks handed out may
  // still be on their way (here: held back by the client's full buffer). They must arrive.
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  constexpr int kCount = 40;
  for (int i = 0; i < kCount; ++i) h.workers[0]->PushElement(1, Num(i, 64 << 10));
  h.workers[0]->PushEnd(1);
  auto o = h.Options();
  o.compression = service::COMPRESSION_NONE;
  o.max_buffered_bytes = 128 << 10;
  auto client = MustCreate(o);
  REQUIRE(WaitUntil([&] { return client->stats().backpressure_waits >= 1; }));
  // Most elements are now in the stream (HTTP/2 buffers), not in the client's buffer.
  h.dispatcher.RemoveTask(1);
  h.dispatcher.SetJobFinished(true);
  REQUIRE(WaitUntil([&] { return client->stats().job_finished; }));
  std::vector<int64_t> got = Drain(*client);
  CHECK(got.size() == kCount);
}

TEST_CASE("client_metrics: the final counts reach the dispatcher when the client is destroyed") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  for (int i = 0; i < 7; ++i) h.workers[0]->PushElement(1, Num(i));
  auto o = h.Options();
  o.heartbeat_interval = absl::Hours(1);  // only the first heartbeat, at start, and the last one
  auto client = MustCreate(o);
  for (int i = 0; i < 7; ++i) {
    auto next = client->GetNext(absl::Seconds(30));
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
  }
  client.reset();
  CHECK(h.dispatcher.last_heartbeat().metrics().elements_total() == 7);
  CHECK(h.dispatcher.released().size() == 1);
}

TEST_CASE("client_compression: the requested codec is used on the wire and decoded") {
  const std::pair<service::Compression, service::Compression> cases[] = {
      {service::COMPRESSION_LZ4, service::COMPRESSION_LZ4},
      {service::COMPRESSION_ZSTD, service::COMPRESSION_ZSTD},
      {service::COMPRESSION_NONE, service::COMPRESSION_NONE},
      {service::COMPRESSION_AUTO, service::COMPRESSION_LZ4},  // 64 KiB of a repetitive pattern
  };
  for (const auto& [requested, on_wire] : cases) {
    Harness h(1);
    h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
    for (int i = 0; i < 4; ++i) h.workers[0]->PushElement(1, Num(i, 64 << 10));
    h.workers[0]->PushEnd(1);
    h.FinishWhenEnded({{0, 1}});
    auto o = h.Options();
    o.compression = requested;
    auto client = MustCreate(o);
    int count = 0;
    while (true) {
      auto next = client->GetNext();
      REQUIRE(next.ok());
      if (!next->has_value()) break;
      const pipeline::Tensor* payload = (*next)->Find("payload");
      REQUIRE(payload != nullptr);
      REQUIRE(payload->nbytes() == (64 << 10));
      CHECK(payload->raw()[64 * 5] == 2);  // (320 / 64) % 3
      ++count;
    }
    CHECK(count == 4);
    CHECK(h.workers[0]->codecs_sent()[on_wire] == 4);
    CHECK(h.workers[0]->stream_requests()[0].compression() == requested);
    CHECK(h.dispatcher.job_requests()[0].spec().compression() == requested);
  }
}

TEST_CASE("client_job_finished: the end needs both drained tasks and a finished job") {
  Harness h(2);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.dispatcher.AddTask(MakeTask(2, h.worker_address(1)));
  h.workers[0]->PushElement(1, Num(1));
  h.workers[0]->PushEnd(1);
  h.workers[1]->PushElement(2, Num(2));
  auto client = MustCreate(h.Options());
  std::set<int64_t> got;
  for (int i = 0; i < 2; ++i) {
    auto next = client->GetNext();
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    got.insert(V(**next));
  }
  CHECK(got == std::set<int64_t>{1, 2});
  REQUIRE(WaitUntil([&] { return h.workers[0]->EndSent(1); }));
  // Task 2 never ends; its worker goes away and the dispatcher stops listing it.
  auto pending = client->GetNext(absl::Milliseconds(20));
  CHECK(pending.status().code() == absl::StatusCode::kDeadlineExceeded);
  h.workers[1]->Shutdown();
  h.worker_servers[1]->Stop();
  h.dispatcher.RemoveTask(2);
  // Not finished yet: both tasks done, but the dispatcher has not declared the job finished.
  REQUIRE(WaitUntil([&] { return client->stats().active_readers == 0; }));
  CHECK(client->GetNext(absl::Milliseconds(20)).status().code() == absl::StatusCode::kDeadlineExceeded);
  h.dispatcher.SetJobFinished(true);
  auto end = client->GetNext();
  REQUIRE(end.ok());
  CHECK_FALSE(end->has_value());
  CHECK_FALSE(client->GetNext()->has_value());
}

TEST_CASE("client_shared_job: two clients of one named job split a task's elements") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.workers[0]->AddTask(1);
  auto o = h.Options();
  o.job_name = "train";
  auto a = MustCreate(o);
  auto b = MustCreate(o);
  CHECK(a->job_id() == b->job_id());
  CHECK(a->job_client_id() != b->job_client_id());
  REQUIRE(WaitUntil([&] { return h.workers[0]->active_streams() == 2; }));
  for (int i = 0; i < 50; ++i) h.workers[0]->PushElement(1, Num(i));
  h.workers[0]->PushEnd(1);
  h.workers[0]->PushEnd(1);  // the end for the second stream
  h.dispatcher.SetJobFinished(true);
  // Both streams read concurrently in the background; drain one client, then the other.
  std::vector<int64_t> all = Drain(*a);
  auto got_b = Drain(*b);
  all.insert(all.end(), got_b.begin(), got_b.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> want(50);
  for (int i = 0; i < 50; ++i) want[static_cast<size_t>(i)] = i;
  CHECK(all == want);  // each element went to exactly one of the two clients

  auto other = h.Options();
  other.job_name = "train";
  other.sharding = service::SHARDING_DYNAMIC;
  auto mismatch = DataServiceClient::Create(other);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(mismatch.status().message()), Catch::Contains("sharding"));
}

FakeWorker::RoundReply RoundElement(int64_t task, int64_t round, int64_t consumer) {
  pipeline::Element e;
  e.Set("task", pipeline::Tensor::Scalar(task));
  e.Set("round", pipeline::Tensor::Scalar(round));
  e.Set("consumer", pipeline::Tensor::Scalar(consumer));
  FakeWorker::RoundReply r;
  r.element = std::move(e);
  return r;
}

TEST_CASE("client_coordinated: round-robin rounds, skipped rounds and a late worker") {
  Harness h(3);
  const std::set<int64_t> skipped = {3, 7, 20};
  constexpr int64_t kEnd = 40;
  for (int w = 0; w < 3; ++w) {
    h.workers[static_cast<size_t>(w)]->SetRoundFunction([&skipped](int64_t task, int64_t round, int64_t consumer) {
      FakeWorker::RoundReply r;
      if (round >= kEnd) {
        r.kind = FakeWorker::RoundReply::Kind::kEnd;
      } else if (skipped.count(round)) {
        r.kind = FakeWorker::RoundReply::Kind::kSkip;
      } else {
        r = RoundElement(task, round, consumer);
      }
      return r;
    });
    h.workers[static_cast<size_t>(w)]->SetRoundGate(10);
  }
  h.dispatcher.AddTask(MakeTask(11, h.worker_address(0)));
  h.dispatcher.AddTask(MakeTask(12, h.worker_address(1)));
  auto o = h.Options();
  o.job_name = "coordinated";
  o.num_consumers = 2;
  o.consumer_index = 1;
  auto client = MustCreate(o);
  // The client reaches round 10 (blocked at the gate) and reports it.
  REQUIRE(WaitUntil([&] { return h.dispatcher.max_reported_round() >= 10; }));
  CHECK(h.dispatcher.max_reported_round() == 10);
  // A worker joins: its task starts 8 rounds after the highest round reported.
  const int64_t starting_round = h.dispatcher.max_reported_round() + 8;
  h.dispatcher.AddTask(MakeTask(13, h.worker_address(2), "", starting_round));
  const int64_t seen = h.dispatcher.heartbeats();
  REQUIRE(WaitUntil([&] { return h.dispatcher.heartbeats() >= seen + 2; }));
  for (auto& w : h.workers) w->SetRoundGate(std::numeric_limits<int64_t>::max());

  std::vector<int64_t> rounds;
  while (true) {
    auto next = client->GetNext();
    REQUIRE(next.ok());
    if (!next->has_value()) break;
    const int64_t round = V(**next, "round");
    rounds.push_back(round);
    CHECK(V(**next, "consumer") == 1);
    const int64_t want_task = round < starting_round ? 11 + round % 2 : 11 + round % 3;
    INFO("round " << round);
    CHECK(V(**next, "task") == want_task);
  }
  std::vector<int64_t> want;
  for (int64_t r = 0; r < kEnd; ++r) {
    if (!skipped.count(r)) want.push_back(r);
  }
  CHECK(rounds == want);
  CHECK(client->stats().rounds_skipped == 3);
  // Every request this consumer made asked for its own index, of the worker serving the round.
  for (int w = 0; w < 3; ++w) {
    for (const auto& req : h.workers[static_cast<size_t>(w)]->round_requests()) {
      CHECK(req.consumer == 1);
      CHECK(req.task_id == 11 + w);
    }
  }
  CHECK(h.workers[2]->round_requests().front().round == 20);  // first round >= 18 with 20 % 3 == 2
}

TEST_CASE("client_locality: AUTO reads the local worker only, LOCAL waits for one, ANY reads all") {
  Harness h(2);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0), "host-a"));
  h.dispatcher.AddTask(MakeTask(2, h.worker_address(1), "host-b"));
  for (int i = 0; i < 5; ++i) {
    h.workers[0]->PushElement(1, Num(100 + i));
    h.workers[1]->PushElement(2, Num(200 + i));
  }
  h.workers[0]->PushEnd(1);
  h.workers[1]->PushEnd(2);

  SECTION("AUTO on host-a") {
    h.FinishWhenEnded({{0, 1}});
    auto o = h.Options();
    o.client_host = "host-a";
    auto client = MustCreate(o);
    auto got = Drain(*client);
    CHECK(got == std::vector<int64_t>{100, 101, 102, 103, 104});
    CHECK(h.workers[1]->streams_opened() == 0);
  }
  SECTION("AUTO with no local worker falls back to all") {
    h.FinishWhenEnded({{0, 1}, {1, 2}});
    auto o = h.Options();
    o.client_host = "host-z";
    auto client = MustCreate(o);
    CHECK(Drain(*client).size() == 10);
  }
  SECTION("AUTO under dynamic sharding reads all") {
    h.FinishWhenEnded({{0, 1}, {1, 2}});
    auto o = h.Options();
    o.client_host = "host-a";
    o.sharding = service::SHARDING_DYNAMIC;
    auto client = MustCreate(o);
    CHECK(Drain(*client).size() == 10);
  }
  SECTION("LOCAL with no local worker reads nothing until the job finishes") {
    auto o = h.Options();
    o.client_host = "host-z";
    o.target_workers = service::TARGET_WORKERS_LOCAL;
    auto client = MustCreate(o);
    REQUIRE(WaitUntil([&] { return client->stats().heartbeats_ok >= 3; }));
    CHECK(h.workers[0]->streams_opened() + h.workers[1]->streams_opened() == 0);
    h.dispatcher.SetJobFinished(true);
    CHECK(Drain(*client).empty());
  }
  SECTION("ANY reads all; the host comes from SLUICE_CLIENT_HOST when not configured") {
    h.FinishWhenEnded({{0, 1}, {1, 2}});
    setenv("SLUICE_CLIENT_HOST", "host-b", 1);
    auto o = h.Options();
    o.client_host = "";
    o.target_workers = service::TARGET_WORKERS_ANY;
    auto client = MustCreate(o);
    unsetenv("SLUICE_CLIENT_HOST");
    CHECK(client->client_host() == "host-b");
    CHECK(h.dispatcher.job_requests()[0].client_host() == "host-b");
    CHECK(Drain(*client).size() == 10);
  }
}

TEST_CASE("client_locality: AUTO under dynamic sharding reads remote workers only when local ones fall behind") {
  // A local and a remote task, each with plenty to send; the trainer reads one element at a time.
  Harness h(2);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0), "host-a"));
  h.dispatcher.AddTask(MakeTask(2, h.worker_address(1), "host-b"));
  constexpr int kEach = 200;
  constexpr size_t kPayload = 4 << 10;
  for (int i = 0; i < kEach; ++i) {
    h.workers[0]->PushElement(1, Num(1000 + i, kPayload));
    h.workers[1]->PushElement(2, Num(2000 + i, kPayload));
  }
  h.workers[0]->PushEnd(1);
  h.workers[1]->PushEnd(2);
  h.FinishWhenEnded({{0, 1}, {1, 2}});
  const int64_t element_bytes = static_cast<int64_t>(pipeline::EncodeElement(Num(0, kPayload)).size());
  auto o = h.Options();
  o.client_host = "host-a";
  o.sharding = service::SHARDING_DYNAMIC;
  o.max_elements_per_response = 1;
  o.compression = service::COMPRESSION_NONE;
  o.max_buffered_bytes = 16 * element_bytes;
  // Waits for a full buffer, then reads 100 elements one at a time, letting the readers refill
  // before each next step as a trainer's step would; returns how many came from the remote task.
  auto remote_of_100 = [&](DataServiceClient& client) {
    REQUIRE(WaitUntil([&] { return client.stats().buffered_bytes >= o.max_buffered_bytes; }));
    int remote = 0;
    for (int i = 0; i < 100; ++i) {
      auto next = client.GetNext(absl::Seconds(30));
      REQUIRE(next.ok());
      REQUIRE(next->has_value());
      remote += V(**next) >= 2000;
      REQUIRE(WaitUntil([&] { return client.stats().buffered_bytes >= o.max_buffered_bytes - element_bytes; }));
    }
    return remote;
  };
  SECTION("AUTO: while the local worker keeps the buffer a quarter full, the remote one waits") {
    auto client = MustCreate(o);
    const int remote = remote_of_100(*client);
    // At most the first quarter-buffer (4 elements) and a read in flight came from the remote worker.
    CHECK(remote <= 6);
    // Once the local worker is done, the remote one delivers the rest: nothing is lost.
    std::vector<int64_t> rest = Drain(*client);
    CHECK(rest.size() == static_cast<size_t>(2 * kEach - 100));
  }
  SECTION("ANY: both are read alike") {
    o.target_workers = service::TARGET_WORKERS_ANY;
    auto client = MustCreate(o);
    const int remote = remote_of_100(*client);
    CHECK(remote >= 20);
    CHECK(Drain(*client).size() == static_cast<size_t>(2 * kEach - 100));
  }
}

TEST_CASE("client_stall: wait and step seconds are exact with a controlled clock") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  FakeClock clock;
  auto o = h.Options();
  o.clock = [&clock] { return clock.Now(); };
  auto client = MustCreate(o);

  // Step 1: the batch is fetched inside the step and takes 3 s to arrive; 2 s of compute follow.
  client->BeginStep();
  std::atomic<bool> got{false};
  std::thread consumer([&] { got = client->GetNext().value().has_value(); });
  REQUIRE(WaitUntil([&] { return client->stats().waiting_consumers == 1; }));
  clock.Advance(absl::Seconds(3));
  h.workers[0]->PushElement(1, Num(1));
  consumer.join();
  REQUIRE(got);
  clock.Advance(absl::Seconds(2));
  client->EndStep();
  auto s = client->stats();
  CHECK(s.wait_seconds_total == Approx(3.0));
  CHECK(s.step_seconds_total == Approx(5.0));
  CHECK(s.steps_total == 1);

  // Then a batch fetched between steps (1 s wait), and a 2 s step of compute.
  {
    got = false;
    std::thread between([&] { got = client->GetNext().value().has_value(); });
    REQUIRE(WaitUntil([&] { return client->stats().waiting_consumers == 1; }));
    clock.Advance(absl::Seconds(1));
    h.workers[0]->PushElement(1, Num(2));
    between.join();
    REQUIRE(got);
  }
  {
    StepScope step(*client);
    clock.Advance(absl::Seconds(2));
  }
  s = client->stats();
  CHECK(s.wait_seconds_total == Approx(4.0));
  CHECK(s.step_seconds_total == Approx(8.0));
  CHECK(s.steps_total == 2);
  CHECK(s.elements_total == 2);

  // The dispatcher receives the same numbers in heartbeats (a heartbeat sent before the last step
  // ended showed less; the clock no longer moves, so every later one shows the final values).
  REQUIRE(WaitUntil([&] {
    auto hb = h.dispatcher.last_heartbeat().metrics();
    return hb.elements_total() == 2 && hb.step_seconds_total() == Approx(8.0);
  }));
  auto m = h.dispatcher.last_heartbeat().metrics();
  CHECK(m.wait_seconds_total() == Approx(4.0));
  CHECK(m.step_seconds_total() == Approx(8.0));
  CHECK(m.bytes_total() == s.bytes_total);
  CHECK(m.bytes_total() > 0);
}

TEST_CASE("client_reconnect: a restarted worker is read again - a restarted dispatcher too") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  for (int i = 0; i < 5; ++i) h.workers[0]->PushElement(1, Num(i));
  auto o = h.Options();
  auto client = MustCreate(o);
  for (int i = 0; i < 5; ++i) {
    auto next = client->GetNext();
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    CHECK(V(**next) == i);
  }
  // The worker process restarts on the same port, with the rest of the task.
  const int port = h.worker_servers[0]->port();
  h.workers[0]->Shutdown();
  h.worker_servers[0]->Stop();
  REQUIRE(WaitUntil([&] { return client->stats().reconnects >= 1; }));
  auto restarted = std::make_unique<FakeWorker>();
  for (int i = 5; i < 10; ++i) restarted->PushElement(1, Num(i));
  restarted->PushEnd(1);
  auto restarted_server = TestServer::Start({restarted.get()}, port);
  REQUIRE(restarted_server != nullptr);

  // The dispatcher restarts too (it recovered the job client from its journal).
  const int dport = h.dispatcher_server->port();
  h.dispatcher_server->Stop();
  REQUIRE(WaitUntil([&] { return client->stats().heartbeat_failures >= 1; }));
  FakeDispatcher dispatcher2;
  dispatcher2.KnowJobClient(client->job_client_id());
  dispatcher2.AddTask(MakeTask(1, h.worker_address(0)));
  FakeWorker* w = restarted.get();
  dispatcher2.SetJobFinishedFunction([w](int64_t) { return w->EndSent(1); });
  auto dispatcher2_server = TestServer::Start({&dispatcher2}, dport);
  REQUIRE(dispatcher2_server != nullptr);

  std::vector<int64_t> rest = Drain(*client);
  CHECK(rest == std::vector<int64_t>{5, 6, 7, 8, 9});
  CHECK(dispatcher2.heartbeats() >= 1);
  client.reset();
  CHECK(dispatcher2.released() == std::vector<int64_t>{1});
  restarted->Shutdown();
  restarted_server->Stop();
  dispatcher2_server->Stop();
}

TEST_CASE("client_reconnect: a job that finishes while a reader waits to reconnect to a dead worker ends") {
  Harness h(2);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.dispatcher.AddTask(MakeTask(2, h.worker_address(1)));
  for (int i = 0; i < 3; ++i) h.workers[0]->PushElement(1, Num(i));
  for (int i = 3; i < 6; ++i) h.workers[1]->PushElement(2, Num(i));
  h.workers[1]->PushEnd(2);
  auto client = MustCreate(h.Options());
  std::set<int64_t> seen;
  for (int i = 0; i < 6; ++i) {
    auto next = client->GetNext(absl::Seconds(30));
    REQUIRE(next.ok());
    REQUIRE(next->has_value());
    seen.insert(V(**next));
  }
  CHECK(seen.size() == 6);
  // Worker 0 dies for good: its reader's stream breaks and the retry waits for a channel to it.
  h.workers[0]->Shutdown();
  h.worker_servers[0]->Stop();
  REQUIRE(WaitUntil([&] { return client->stats().reconnects >= 1; }));
  // The dispatcher finishes the job before it stops listing the dead worker's task (the race seen
  // in e2e_dataplane_failures_test): the waiting reconnection has nothing to deliver, so it is
  // cancelled and the client reaches the end instead of waiting for the worker forever.
  h.dispatcher.SetJobFinished(true);
  auto end = client->GetNext(absl::Seconds(30));
  INFO(end.status().ToString());
  REQUIRE(end.ok());
  CHECK_FALSE(end->has_value());
}

TEST_CASE("client_dispatcher_gone: the end once every task ended, else an error, never a hang") {
  Harness h(2);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.dispatcher.AddTask(MakeTask(2, h.worker_address(1)));
  auto o = h.Options();
  o.dispatcher_timeout = absl::Milliseconds(200);
  SECTION("every task ended: the end, after the elements") {
    for (int i = 0; i < 3; ++i) h.workers[0]->PushElement(1, Num(i));
    h.workers[0]->PushEnd(1);
    h.workers[1]->PushElement(2, Num(3));
    auto client = MustCreate(o);
    std::vector<int64_t> rest = {V(**client->GetNext(absl::Seconds(30)))};
    // The dispatcher is gone for good before it could say the job finished.
    h.dispatcher_server->Stop();
    h.workers[1]->PushEnd(2);
    while (true) {
      auto next = client->GetNext(absl::Seconds(30));  // without the fix: DeadlineExceeded, again and again
      REQUIRE(next.ok());
      if (!next->has_value()) break;
      rest.push_back(V(**next));
    }
    std::sort(rest.begin(), rest.end());
    CHECK(rest == std::vector<int64_t>{0, 1, 2, 3});
    CHECK(client->stats().ended_without_dispatcher);
    CHECK_FALSE(client->stats().job_finished);
    CHECK(client->status().ok());
  }
  SECTION("a task has not ended and nothing arrives: UNAVAILABLE naming the timeout") {
    h.workers[0]->PushElement(1, Num(0));
    h.workers[0]->PushEnd(1);
    h.workers[1]->AddTask(2);  // open, never sends (a worker waiting on the dispatcher for splits)
    auto client = MustCreate(o);
    CHECK(V(**client->GetNext(absl::Seconds(30))) == 0);
    h.dispatcher_server->Stop();
    auto err = client->GetNext(absl::Seconds(30));
    REQUIRE_FALSE(err.ok());
    CHECK(err.status().code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(err.status().message()),
               Catch::Contains("has not answered for") && Catch::Contains("options.dispatcher_timeout 200ms"));
    CHECK_FALSE(client->stats().ended_without_dispatcher);
  }
  SECTION("the dispatcher comes back in time: nothing is decided without it") {
    h.workers[0]->PushElement(1, Num(0));
    h.workers[0]->PushEnd(1);
    h.workers[1]->PushEnd(2);
    o.dispatcher_timeout = absl::InfiniteDuration();
    auto client = MustCreate(o);
    CHECK(V(**client->GetNext(absl::Seconds(30))) == 0);
    REQUIRE(WaitUntil([&] { return client->stats().active_readers == 0; }));
    // Both tasks ended but the job is not finished: without a timeout the client waits for the word.
    CHECK(client->GetNext(absl::Milliseconds(300)).status().code() == absl::StatusCode::kDeadlineExceeded);
    h.dispatcher.SetJobFinished(true);
    auto end = client->GetNext(absl::Seconds(30));
    REQUIRE(end.ok());
    CHECK_FALSE(end->has_value());
    CHECK_FALSE(client->stats().ended_without_dispatcher);
  }
}

TEST_CASE("client_iteration: the pass number is sent, and a pass whose iteration is over is empty") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.dispatcher.SetIterationsOver(2);
  auto o = h.Options();
  o.job_name = "shared";
  o.iteration = 2;  // the other readers finished iteration 2 before this reader's second pass began
  auto client = MustCreate(o);
  CHECK(h.dispatcher.job_requests().back().iteration() == 2);
  CHECK(client->iteration() == 2);
  CHECK(client->job_client_id() == 0);
  auto end = client->GetNext(absl::Seconds(30));
  REQUIRE(end.ok());
  CHECK_FALSE(end->has_value());
  CHECK(client->stats().job_finished);
  CHECK(h.workers[0]->active_streams() == 0);
  client.reset();
  CHECK(h.dispatcher.heartbeats() == 0);   // no client was made: nothing to heartbeat ...
  CHECK(h.dispatcher.released().empty());  // ... or release
  SECTION("an iteration needs a job name") {
    o.job_name.clear();
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()), Catch::Contains("options.iteration"));
  }
}

TEST_CASE("client_reconnect: a dispatcher that forgot the client is a clear error") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  auto client = MustCreate(h.Options());
  const int dport = h.dispatcher_server->port();
  h.dispatcher_server->Stop();
  FakeDispatcher amnesiac;
  auto server = TestServer::Start({&amnesiac}, dport);
  REQUIRE(server != nullptr);
  auto next = client->GetNext();
  REQUIRE_FALSE(next.ok());
  CHECK(next.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(next.status().message()), Catch::Contains("job_client_id 1 is not known"));
  client.reset();
  server->Stop();
}

TEST_CASE("client_worker_errors: transport errors are retried, the worker's own errors surface") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.FinishWhenEnded({{0, 1}});
  h.workers[0]->PushElement(1, Num(0));
  SECTION("unavailable, not found and a single internal error are retried") {
    h.workers[0]->PushError(1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset"));
    h.workers[0]->PushElement(1, Num(1));
    h.workers[0]->PushError(1, grpc::Status(grpc::StatusCode::NOT_FOUND, "task_id 1 is not known yet"));
    h.workers[0]->PushElement(1, Num(2));
    h.workers[0]->PushError(1, grpc::Status(grpc::StatusCode::INTERNAL, "RST_STREAM"));
    h.workers[0]->PushElement(1, Num(3));
    h.workers[0]->PushEnd(1);
    auto client = MustCreate(h.Options());
    CHECK(Drain(*client) == std::vector<int64_t>{0, 1, 2, 3});
    CHECK(client->stats().reconnects == 3);
  }
  SECTION("a pipeline error from the worker is the client's error") {
    h.workers[0]->PushError(1, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "jsonl: rows.jsonl:3: not JSON"));
    auto client = MustCreate(h.Options());
    CHECK(V(**client->GetNext()) == 0);
    auto err = client->GetNext();
    REQUIRE_FALSE(err.ok());
    CHECK(err.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(err.status().message()), Catch::Contains("rows.jsonl:3: not JSON"));
    CHECK_THAT(std::string(err.status().message()), Catch::Contains("task 1"));
  }
  SECTION("internal errors that persist are given up on") {
    for (int i = 0; i < 4; ++i) h.workers[0]->PushError(1, grpc::Status(grpc::StatusCode::INTERNAL, "broken"));
    auto client = MustCreate(h.Options());
    CHECK(V(**client->GetNext()) == 0);
    auto err = client->GetNext();
    REQUIRE_FALSE(err.ok());
    CHECK(err.status().code() == absl::StatusCode::kInternal);
    CHECK(client->stats().reconnects == 3);
  }
}

TEST_CASE("client_hostile: malformed worker responses are errors, not crashes") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.workers[0]->PushElement(1, Num(1));
  h.workers[0]->PushElement(1, Num(2));
  const std::string good = pipeline::EncodeElement(Num(3, 8192));
  service::ElementData bad;
  std::string expect;
  SECTION("corrupt element bytes") {
    bad.set_data("\x01\x02garbage-not-an-element");
    bad.set_uncompressed_size(bad.data().size());
    bad.set_compression(service::COMPRESSION_NONE);
    expect = "bad magic";
  }
  SECTION("lying uncompressed_size") {
    bad.set_data(*pipeline::Compress(good, pipeline::Codec::kLz4));
    bad.set_uncompressed_size(good.size() * 4);
    bad.set_compression(service::COMPRESSION_LZ4);
    expect = "does not match its declared size";
  }
  SECTION("absurd uncompressed_size") {
    bad.set_data(*pipeline::Compress(good, pipeline::Codec::kZstd));
    bad.set_uncompressed_size(uint64_t{1} << 50);
    bad.set_compression(service::COMPRESSION_ZSTD);
    expect = "max_element_bytes";
  }
  SECTION("element header lies about its payload") {
    std::string cut = good.substr(0, good.size() - 4096);
    bad.set_data(cut);
    bad.set_uncompressed_size(cut.size());
    bad.set_compression(service::COMPRESSION_NONE);
    expect = "runs past the end";
  }
  h.workers[0]->PushRaw(1, bad);
  h.workers[0]->PushElement(1, Num(4));
  auto client = MustCreate(h.Options());
  CHECK(V(**client->GetNext()) == 1);
  CHECK(V(**client->GetNext()) == 2);
  auto err = client->GetNext();
  REQUIRE_FALSE(err.ok());
  CHECK(err.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string msg(err.status().message());
  CHECK_THAT(msg, Catch::Contains(expect));
  CHECK_THAT(msg, Catch::Contains("worker " + h.worker_address(0) + " task 1"));
  auto again = client->GetNext();
  REQUIRE_FALSE(again.ok());
  CHECK(again.status() == err.status());
}

TEST_CASE("client_hostile: malformed coordinated responses are errors") {
  Harness h(1);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  std::string expect;
  SECTION("element for the wrong round") {
    h.workers[0]->SetRoundFunction([](int64_t task, int64_t round, int64_t consumer) {
      FakeWorker::RoundReply r;
      r.kind = FakeWorker::RoundReply::Kind::kRaw;
      r.raw.set_data(pipeline::EncodeElement(RoundElement(task, round, consumer).element));
      r.raw.set_uncompressed_size(r.raw.data().size());
      r.raw.set_compression(service::COMPRESSION_NONE);
      r.raw.set_round(round + 5);
      return r;
    });
    expect = "element is for round 5";
  }
  SECTION("no element at all") {
    h.workers[0]->SetRoundFunction([](int64_t, int64_t, int64_t) {
      FakeWorker::RoundReply r;
      r.kind = FakeWorker::RoundReply::Kind::kRaw;
      r.raw.set_data("short");
      r.raw.set_uncompressed_size(5);
      r.raw.set_compression(service::COMPRESSION_NONE);
      return r;
    });
    expect = "bad magic";
  }
  auto o = h.Options();
  o.job_name = "coordinated";
  o.num_consumers = 1;
  o.consumer_index = 0;
  auto client = MustCreate(o);
  auto err = client->GetNext();
  REQUIRE_FALSE(err.ok());
  CHECK(err.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(err.status().message()), Catch::Contains(expect));
  CHECK_THAT(std::string(err.status().message()), Catch::Contains("round 0"));
}

TEST_CASE("client_destruction: never hangs, cancels streams and releases the job client") {
  Harness h(2);
  h.dispatcher.AddTask(MakeTask(1, h.worker_address(0)));
  h.dispatcher.AddTask(MakeTask(2, h.worker_address(1)));
  auto o = h.Options();
  SECTION("streams blocked waiting for data") {
    h.workers[0]->AddTask(1);
    h.workers[1]->AddTask(2);
    auto client = MustCreate(o);
    REQUIRE(WaitUntil([&] { return h.workers[0]->active_streams() == 1 && h.workers[1]->active_streams() == 1; }));
    const int64_t id = client->job_client_id();
    client.reset();
    CHECK(h.dispatcher.released() == std::vector<int64_t>{id});
    CHECK(WaitUntil([&] { return h.workers[0]->active_streams() == 0 && h.workers[1]->active_streams() == 0; }));
  }
  SECTION("a reader paused by backpressure") {
    for (int i = 0; i < 50; ++i) h.workers[0]->PushElement(1, Num(i, 4096));
    h.workers[1]->AddTask(2);
    o.max_buffered_bytes = 8192;
    auto client = MustCreate(o);
    REQUIRE(WaitUntil([&] { return client->stats().backpressure_waits >= 1; }));
    client.reset();
    CHECK(h.dispatcher.released().size() == 1);
  }
  SECTION("the dispatcher is down") {
    h.workers[0]->AddTask(1);
    h.workers[1]->AddTask(2);
    auto client = MustCreate(o);
    h.dispatcher_server->Stop();
    REQUIRE(WaitUntil([&] { return client->stats().heartbeat_failures >= 1; }));
    client.reset();  // the release fails fast; nothing waits on the dead dispatcher
    CHECK(h.dispatcher.released().empty());
  }
  SECTION("a coordinated round in flight") {
    h.workers[0]->SetRoundGate(0);
    h.workers[0]->SetRoundFunction(RoundElement);
    o.job_name = "coordinated";
    o.num_consumers = 2;
    o.consumer_index = 0;
    auto client = MustCreate(o);
    REQUIRE(WaitUntil([&] { return h.workers[0]->round_requests().size() == 1; }));
    client.reset();
    CHECK(h.dispatcher.released().size() == 1);
  }
}

TEST_CASE("client_create: bad options and unreachable dispatchers are clear errors") {
  Harness h(0);
  auto o = h.Options();
  SECTION("num_consumers without job_name") {
    // Each anonymous client is a job of its own: round 1 could never complete (it hung after one element).
    o.num_consumers = 2;
    o.consumer_index = 0;
    auto c = DataServiceClient::Create(o);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(c.status().message()),
               Catch::Contains("options.job_name") && Catch::Contains("num_consumers is 2"));
    CHECK(h.dispatcher.job_requests().empty());
  }
  o.job_name = "coordinated";
  SECTION("consumer_index out of range") {
    o.num_consumers = 2;
    o.consumer_index = 2;
    auto c = DataServiceClient::Create(o);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(c.status().message()), Catch::Contains("options.consumer_index"));
  }
  SECTION("consumer_index without num_consumers") {
    o.consumer_index = 0;
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()), Catch::Contains("num_consumers is 0"));
  }
  SECTION("LOCAL with coordinated reads") {
    o.num_consumers = 2;
    o.consumer_index = 0;
    o.target_workers = service::TARGET_WORKERS_LOCAL;
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()), Catch::Contains("options.target_workers"));
  }
  SECTION("no pipeline, and the dispatcher has no default one") {
    o.pipeline.reset();
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()),
               Catch::Contains("GetOrCreateJob") && Catch::Contains("serves no default pipeline"));
  }
  SECTION("cross-job sharing needs sharding OFF") {
    o.cross_job_sharing = true;
    o.sharding = service::SHARDING_FILE;
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()),
               Catch::Contains("options.cross_job_sharing"));
  }
  SECTION("num_epochs 0") {
    o.num_epochs = 0;
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()), Catch::Contains("options.num_epochs"));
  }
  SECTION("a negative iteration") {
    o.iteration = -1;
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()), Catch::Contains("options.iteration"));
  }
  SECTION("dispatcher_timeout 0") {
    o.dispatcher_timeout = absl::ZeroDuration();
    CHECK_THAT(std::string(DataServiceClient::Create(o).status().message()),
               Catch::Contains("options.dispatcher_timeout") && Catch::Contains("InfiniteDuration"));
  }
  SECTION("unknown dataset_id") {
    o.pipeline.reset();
    o.dataset_id = "nope";
    auto c = DataServiceClient::Create(o);
    CHECK(c.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(c.status().message()), Catch::Contains("GetOrCreateJob"));
  }
  SECTION("dataset_id that contradicts the pipeline") {
    o.dataset_id = "0123";
    CHECK(DataServiceClient::Create(o).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("unreachable dispatcher: retried, then given up") {
    h.dispatcher_server->Stop();
    o.create_timeout = absl::Milliseconds(100);
    auto c = DataServiceClient::Create(o);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(c.status().message()), Catch::Contains("gave up after create_timeout"));
  }
  SECTION("TLS files that do not exist") {
    o.tls.ca_file = "/nonexistent/ca.pem";
    auto c = DataServiceClient::Create(o);
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(std::string(c.status().message()), Catch::Contains("options.tls"));
  }
}

}  // namespace
}  // namespace sluice::client
