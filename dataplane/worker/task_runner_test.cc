// Task runners: buffering, job sharing, sharding policies, epochs, coordinated rounds (including
// skipped rounds) and cross-job sharing through a shared pipeline run.
#include "dataplane/worker/task_runner.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "dataplane/worker/worker_test_util.h"
#include "testing/test_util.h"

namespace sluice::worker {
namespace {

using testing::FakeDispatcher;
using testing::MakeTask;
using testing::WaitUntil;

int64_t ValueOf(const EncodedElementPtr& element) {
  service::ElementData data;
  REQUIRE(FillElementData(std::make_shared<EncodedElement>(*element), std::nullopt, &data).ok());
  return testing::DecodeInt(data);
}

std::vector<int64_t> ReadAll(TaskRunner& runner, size_t max_elements = 7) {
  std::vector<int64_t> out;
  while (true) {
    auto batch = runner.GetNextBatch(max_elements, 1 << 20, nullptr);
    REQUIRE(batch.ok());
    for (const auto& e : batch->elements) out.push_back(ValueOf(e));
    if (batch->end_of_sequence) return out;
    REQUIRE(batch->elements.size() <= max_elements);
  }
}

std::vector<int64_t> Iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

TaskRunnerEnv Env(WorkerMetrics* metrics = nullptr) {
  TaskRunnerEnv env;
  env.options.buffer_elements = 16;
  env.options.buffer_bytes = 1 << 20;
  env.options.round_timeout = absl::Milliseconds(20);
  env.options.splits.initial_backoff = absl::Milliseconds(1);
  env.options.splits.max_backoff = absl::Milliseconds(4);
  env.worker_address = "w:1";
  env.metrics = metrics;
  return env;
}

WorkerMetrics NewMetrics() { return WorkerMetrics(nullptr, {{"worker", "w:1"}}); }

// Produces 0, 1, 2, ... (field `value`) up to `total`, but only as far as Release allows.
class GatedProducer : public ElementProducer {
 public:
  explicit GatedProducer(int64_t total) : total_(total) {}
  void Release(int64_t n) {
    absl::MutexLock lock(&mu_);
    allowed_ += n;
  }
  int64_t produced() {
    absl::MutexLock lock(&mu_);
    return produced_;
  }
  absl::StatusOr<std::optional<EncodedElementPtr>> Next() override {
    absl::MutexLock lock(&mu_);
    auto go = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || produced_ == total_ || allowed_ > produced_;
    };
    mu_.Await(absl::Condition(&go));
    if (cancelled_) return absl::CancelledError("gated producer cancelled");
    if (produced_ == total_) return std::optional<EncodedElementPtr>();
    pipeline::Element e;
    e.Set("value", pipeline::Tensor::Scalar(produced_++));
    auto encoded = EncodeForWire(e, service::COMPRESSION_NONE);
    REQUIRE(encoded.ok());
    return std::optional<EncodedElementPtr>(*encoded);
  }
  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

 private:
  absl::Mutex mu_;
  const int64_t total_;
  int64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t produced_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

service::TaskDef Coordinated(int64_t task_id, int32_t num_consumers, int64_t starting_round = 0) {
  service::TaskDef task = MakeTask(task_id, "source: {range: {stop: 1}}\n");
  task.set_num_consumers(num_consumers);
  task.set_starting_round(starting_round);
  return task;
}

TEST_CASE("worker_task_runner buffers ahead of readers, bounded, then serves everything in order") {
  WorkerMetrics metrics = NewMetrics();
  auto runner = CreateTaskRunner(MakeTask(1, "source: {range: {stop: 1000, split_size: 100}}\n"), Env(&metrics));
  REQUIRE(WaitUntil([&] { return runner->Progress().buffered_elements == 16; }));
  CHECK(runner->Progress().elements_produced == 16);  // the producer waits at the bound
  CHECK_FALSE(runner->Progress().finished);
  CHECK(ReadAll(*runner) == Iota(0, 1000));
  auto progress = runner->Progress();
  CHECK(progress.finished);
  runner->Stop(absl::NotFoundError("deleted"));  // deleting a finished task: readers still see the end
  auto end = runner->GetNextBatch(1, 1, nullptr);
  REQUIRE(end.ok());
  CHECK(end->end_of_sequence);
  CHECK(progress.elements_produced == 1000);
  CHECK(metrics.elements_produced() == 1000);
  CHECK(metrics.pipeline_runs() == 1);
}

TEST_CASE("worker_task_runner max_undelivered_elements: production pauses at the cap until clients report receipt") {
  TaskRunnerEnv env = Env();
  env.options.buffer_elements = 100;
  env.options.max_undelivered_elements = 5;
  auto runner = CreateTaskRunner(MakeTask(1, "source: {range: {stop: 12, split_size: 100}}\n"), env);
  REQUIRE(WaitUntil([&] { return runner->Progress().elements_produced == 5; }));
  // Popping does not count as delivered: only what the clients reported does.
  auto batch = runner->GetNextBatch(100, 1 << 20, nullptr);
  REQUIRE(batch.ok());
  CHECK(batch->elements.size() == 5);
  CHECK(runner->Progress().elements_produced == 5);
  runner->SetDelivered(3);
  REQUIRE(WaitUntil([&] { return runner->Progress().elements_produced == 8; }));
  runner->SetDelivered(2);  // older reports do not shrink it
  runner->SetDelivered(12);
  std::vector<int64_t> rest = ReadAll(*runner);
  CHECK(rest == Iota(5, 12));
  CHECK(runner->Progress().finished);
  // A producer waiting at the cap is woken by a drain: what it buffered is served, then UNAVAILABLE.
  auto capped = CreateTaskRunner(MakeTask(2, "source: {range: {stop: 100}}\n"), env);
  REQUIRE(WaitUntil([&] { return capped->Progress().elements_produced == 5; }));
  capped->BeginDrain();
  auto drained = capped->GetNextBatch(100, 1 << 20, nullptr);
  REQUIRE(drained.ok());
  CHECK(drained->elements.size() == 5);
  CHECK(absl::IsUnavailable(capped->GetNextBatch(100, 1 << 20, nullptr).status()));
  // And by Stop (the destructor joins the producer thread).
  auto stopped = CreateTaskRunner(MakeTask(3, "source: {range: {stop: 100}}\n"), env);
  REQUIRE(WaitUntil([&] { return stopped->Progress().elements_produced == 5; }));
  stopped->Stop(absl::NotFoundError("deleted"));
  stopped.reset();
}

TEST_CASE("worker_task_runner job sharing: concurrent readers get each element exactly once") {
  auto runner = CreateTaskRunner(MakeTask(1, "source: {range: {stop: 3000, split_size: 100}}\n"), Env());
  std::vector<int64_t> a, b, c;
  std::thread ta([&] { a = ReadAll(*runner, 3); });
  std::thread tb([&] { b = ReadAll(*runner, 5); });
  c = ReadAll(*runner, 1);
  ta.join();
  tb.join();
  std::vector<int64_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  std::sort(all.begin(), all.end());
  CHECK(all == Iota(0, 3000));
  for (const auto* part : {&a, &b, &c}) CHECK(std::is_sorted(part->begin(), part->end()));
}

TEST_CASE("worker_task_runner DATA sharding keeps positions i mod n, FILE sharding keeps splits i mod n") {
  const std::string spec = "source: {range: {stop: 40, split_size: 10}}\n";
  std::vector<int64_t> data_all;
  for (int index = 0; index < 3; ++index) {
    service::TaskDef task = MakeTask(1, spec, service::SHARDING_DATA);
    task.set_num_workers(3);
    task.set_worker_index(index);
    auto runner = CreateTaskRunner(task, Env());
    std::vector<int64_t> got = ReadAll(*runner);
    for (int64_t v : got) CHECK(v % 3 == index);
    data_all.insert(data_all.end(), got.begin(), got.end());
  }
  std::sort(data_all.begin(), data_all.end());
  CHECK(data_all == Iota(0, 40));

  service::TaskDef task = MakeTask(2, spec, service::SHARDING_FILE);
  task.set_num_workers(2);
  task.set_worker_index(1);
  auto runner = CreateTaskRunner(task, Env());
  std::vector<int64_t> expected = Iota(10, 20);
  for (int64_t v : Iota(30, 40)) expected.push_back(v);
  CHECK(ReadAll(*runner) == expected);
}

TEST_CASE("worker_task_runner repeats epochs (num_epochs) and counts pipeline passes") {
  WorkerMetrics metrics = NewMetrics();
  service::TaskDef task = MakeTask(1, "source: {range: {stop: 5}}\n");
  task.set_num_epochs(3);
  auto runner = CreateTaskRunner(task, Env(&metrics));
  std::vector<int64_t> expected;
  for (int e = 0; e < 3; ++e) {
    for (int64_t v : Iota(0, 5)) expected.push_back(v);
  }
  CHECK(ReadAll(*runner) == expected);
  CHECK(metrics.pipeline_runs() == 3);

  service::TaskDef empty = MakeTask(2, "source: {range: {stop: 0}}\n");
  empty.set_num_epochs(-1);  // an empty input must end, not spin
  CHECK(ReadAll(*CreateTaskRunner(empty, Env())).empty());
}

// Every element a streaming task hands out, as it was encoded.
std::vector<EncodedElementPtr> ReadEncoded(TaskRunner& runner) {
  std::vector<EncodedElementPtr> out;
  while (true) {
    auto batch = runner.GetNextBatch(7, 1 << 20, nullptr);
    REQUIRE(batch.ok());
    out.insert(out.end(), batch->elements.begin(), batch->elements.end());
    if (batch->end_of_sequence) return out;
  }
}

// An element's ElementData: its bytes and codec as a client receives them.
std::string WireOf(const EncodedElementPtr& element) {
  service::ElementData data;
  REQUIRE(FillElementData(element, std::nullopt, &data).ok());
  return absl::StrCat(data.compression(), ":", data.uncompressed_size(), ":", data.data());
}

TEST_CASE("worker_task_runner serves a trailing cache from encoded elements, exactly as the pipeline's own cache") {
  // `max_bytes` far above the data keeps the pipeline's own cache (encoded_cache.h), which never
  // gives up here: the reference output.
  struct Case {
    std::string name;
    std::string steps;  // before the cache
    std::string tail;   // the repeats after it
    service::ShardingPolicy sharding = service::SHARDING_OFF;
    int num_epochs = 1;
    service::Compression compression = service::COMPRESSION_NONE;
    size_t expected = 0;
  };
  const std::string shuffled = "  - shuffle: {buffer: 8}\n  - map: {ops: [{reshape: {field: value, shape: [1]}}]}\n";
  const std::vector<Case> cases = {
      {"repeat 3", "", "  - repeat: {count: 3}\n", service::SHARDING_OFF, 1, service::COMPRESSION_NONE, 60},
      {"repeats 2 x 3, two task epochs", "", "  - repeat: {count: 2}\n  - repeat: {count: 3}\n", service::SHARDING_OFF,
       2, service::COMPRESSION_NONE, 240},
      {"no repeat, three task epochs", "", "", service::SHARDING_OFF, 3, service::COMPRESSION_NONE, 60},
      {"repeat 0", "", "  - repeat: {count: 0}\n", service::SHARDING_OFF, 2, service::COMPRESSION_NONE, 0},
      {"a seeded shuffle and a map before the cache", shuffled, "  - repeat: {count: 2}\n", service::SHARDING_OFF, 2,
       service::COMPRESSION_NONE, 80},
      {"FILE sharding", "", "  - repeat: {count: 2}\n", service::SHARDING_FILE, 1, service::COMPRESSION_NONE, 20},
      {"lz4", "", "  - repeat: {count: 2}\n", service::SHARDING_OFF, 1, service::COMPRESSION_LZ4, 40},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    auto task_of = [&](int64_t id, const std::string& cache) {
      service::TaskDef task = MakeTask(id,
                                       "source: {range: {stop: 20, split_size: 5}}\noptions: {seed: 7}\nsteps:\n" +
                                           c.steps + "  - cache: " + cache + "\n" + c.tail,
                                       c.sharding);
      if (c.sharding == service::SHARDING_FILE) {
        task.set_num_workers(2);
        task.set_worker_index(1);
      }
      task.set_num_epochs(c.num_epochs);
      task.set_compression(c.compression);
      return task;
    };
    WorkerMetrics encoded_metrics = NewMetrics();
    WorkerMetrics reference_metrics = NewMetrics();
    std::vector<EncodedElementPtr> encoded = ReadEncoded(*CreateTaskRunner(task_of(1, "{}"), Env(&encoded_metrics)));
    std::vector<EncodedElementPtr> reference =
        ReadEncoded(*CreateTaskRunner(task_of(2, "{max_bytes: 1000000000}"), Env(&reference_metrics)));
    REQUIRE(encoded.size() == c.expected);
    REQUIRE(reference.size() == c.expected);
    for (size_t i = 0; i < encoded.size(); ++i) {
      INFO("element " << i);
      REQUIRE(WireOf(encoded[i]) == WireOf(reference[i]));
    }
    CHECK(encoded_metrics.pipeline_runs() == reference_metrics.pipeline_runs());
    CHECK(encoded_metrics.elements_produced() == reference_metrics.elements_produced());
    CHECK(encoded_metrics.bytes_produced() == reference_metrics.bytes_produced());
    // The replays are the first pass's elements themselves: encoded once, handed out again.
    const size_t first_pass = c.sharding == service::SHARDING_FILE ? 10 : 20;
    for (size_t i = first_pass; i < encoded.size(); ++i) {
      INFO("element " << i);
      CHECK(encoded[i].get() == encoded[i % first_pass].get());
      CHECK(reference[i].get() != reference[i % first_pass].get());
    }
  }
}

TEST_CASE("worker_task_runner: a shuffle before a served cache is seeded as in the pipeline, not sorted") {
  service::TaskDef task =
      MakeTask(1, "source: {range: {stop: 20}}\noptions: {seed: 7}\nsteps:\n  - shuffle: {buffer: 8}\n  - cache: {}\n  - repeat: {count: 2}\n");
  std::vector<int64_t> got = ReadAll(*CreateTaskRunner(task, Env()));
  REQUIRE(got.size() == 40);
  const std::vector<int64_t> first(got.begin(), got.begin() + 20);
  CHECK(first != Iota(0, 20));
  std::vector<int64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == Iota(0, 20));
  CHECK(std::vector<int64_t>(got.begin() + 20, got.end()) == first);
}

TEST_CASE("worker_task_runner DYNAMIC sharding: two workers' tasks split the data, every epoch") {
  const std::string spec = "source: {range: {stop: 200, split_size: 5}}\n";
  FakeDispatcher fake;
  fake.SetSplits(testing::SplitsOf(spec), /*num_epochs=*/2);
  TaskRunnerEnv env = Env();
  env.dispatcher = &fake;
  service::TaskDef t1 = MakeTask(1, spec, service::SHARDING_DYNAMIC);
  service::TaskDef t2 = MakeTask(2, spec, service::SHARDING_DYNAMIC);
  t1.set_num_epochs(2);
  t2.set_num_epochs(2);
  auto r1 = CreateTaskRunner(t1, env);
  env.worker_address = "w:2";
  auto r2 = CreateTaskRunner(t2, env);
  std::vector<int64_t> a;
  std::thread reader([&] { a = ReadAll(*r1); });
  std::vector<int64_t> b = ReadAll(*r2);
  reader.join();
  std::multiset<int64_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  std::multiset<int64_t> expected;
  for (int64_t v : Iota(0, 200)) expected.insert({v, v});
  CHECK(all == expected);  // each element once per epoch: no split read twice or lost
  // Batched: a call that hands out splits brings at least 6 (max_splits 8, refill at 2 queued),
  // except one per task and epoch when the queue runs out. 40 splits per epoch, 2 epochs.
  CHECK(fake.calls_with_splits() <= 2 * (40 / 6 + 1 + 2));
}

TEST_CASE("worker_task_runner rejects a bad task def, naming the field, to every reader") {
  service::TaskDef task = MakeTask(9, "source: {range: {stop: 5}}\n", service::SHARDING_FILE);
  task.set_num_workers(2);
  task.set_worker_index(2);
  auto runner = CreateTaskRunner(task, Env());
  auto batch = runner->GetNextBatch(1, 1 << 20, nullptr);
  REQUIRE_FALSE(batch.ok());
  CHECK_THAT(std::string(batch.status().message()), Catch::Contains("task_id 9") && Catch::Contains("worker_index 2"));
  CHECK(runner->Progress().finished);

  service::TaskDef sharing = MakeTask(10, "source: {range: {stop: 5}}\n", service::SHARDING_DYNAMIC);
  sharing.set_cross_job_sharing(true);
  CHECK_THAT(std::string(CreateTaskRunner(sharing, Env())->GetNextBatch(1, 1, nullptr).status().message()),
             Catch::Contains("cross_job_sharing needs sharding SHARDING_OFF"));

  service::TaskDef bad_pipeline = MakeTask(11, "source: {range: {stop: 5}}\n");
  bad_pipeline.mutable_pipeline()->mutable_source()->set_kind("no_such_source");
  CHECK_THAT(std::string(CreateTaskRunner(bad_pipeline, Env())->GetNextBatch(1, 1, nullptr).status().message()),
             Catch::Contains("task_id 11"));
}

TEST_CASE("worker_task_runner refuses a pipeline naming a plugin outside --plugin_dir, to every reader") {
  sluice::testing::TempDir allowed;
  sluice::testing::TempDir outside;
  for (const auto* dir : {&allowed, &outside}) {
    std::filesystem::copy_file(sluice::testing::BinaryDir() + "/dataplane/pipeline/libsluice_test_plugin.so",
                               dir->File("libops.so"));
  }
  service::TaskDef task = MakeTask(12, "source: {range: {stop: 5}}\n");
  task.mutable_pipeline()->add_plugins()->set_path(outside.File("libops.so"));
  TaskRunnerEnv env = Env();
  // No --plugin_dir: every plugin is refused.
  auto batch = CreateTaskRunner(task, env)->GetNextBatch(1, 1, nullptr);
  REQUIRE_FALSE(batch.ok());
  CHECK(batch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(batch.status().message()),
             Catch::Contains("task_id 12") && Catch::Contains(outside.File("libops.so")) && Catch::Contains("--plugin_dir"));
  // Outside the allowed directory (also through ..): refused; inside: the pipeline runs.
  env.options.plugin_dirs = {allowed.path().string()};
  auto outside_runner = CreateTaskRunner(task, env);
  CHECK(outside_runner->GetNextBatch(1, 1, nullptr).status().code() == absl::StatusCode::kFailedPrecondition);
  task.mutable_pipeline()->mutable_plugins(0)->set_path(allowed.File("../") + outside.path().filename().string() +
                                                        "/libops.so");
  CHECK(CreateTaskRunner(task, env)->GetNextBatch(1, 1, nullptr).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  task.mutable_pipeline()->mutable_plugins(0)->set_path(allowed.File("libops.so"));
  auto runner = CreateTaskRunner(task, env);
  CHECK(ReadAll(*runner) == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("worker_task_runner Stop wakes readers with the reason") {
  auto producer = std::make_unique<GatedProducer>(100);
  StreamingTaskRunner runner(MakeTask(1, "source: {range: {stop: 1}}\n"), std::move(producer), Env().options);
  absl::Status status;
  std::thread reader([&] { status = runner.GetNextBatch(1, 1 << 20, nullptr).status(); });
  runner.Stop(absl::NotFoundError("task_id 1 was deleted"));
  reader.join();
  CHECK(absl::IsNotFound(status));
  CHECK_FALSE(runner.Progress().finished);
}

TEST_CASE("worker_task_runner drain serves what is buffered, then UNAVAILABLE") {
  auto producer = std::make_unique<GatedProducer>(100);
  GatedProducer* gate = producer.get();
  StreamingTaskRunner runner(MakeTask(1, "source: {range: {stop: 1}}\n"), std::move(producer), Env().options);
  gate->Release(5);
  REQUIRE(WaitUntil([&] { return runner.Progress().buffered_elements == 5; }));
  runner.BeginDrain();
  auto batch = runner.GetNextBatch(100, 1 << 20, nullptr);
  REQUIRE(batch.ok());
  CHECK(batch->elements.size() == 5);
  auto after = runner.GetNextBatch(100, 1 << 20, nullptr);
  CHECK(absl::IsUnavailable(after.status()));
  CHECK_FALSE(runner.Progress().finished);  // drained by shutdown, not finished
}

TEST_CASE("worker_round_robin serves round r's c-th element to consumer c, from starting_round") {
  auto runner = CreateTaskRunner(
      [] {
        service::TaskDef t = MakeTask(1, "source: {range: {stop: 8}}\n");
        t.set_num_consumers(3);
        t.set_starting_round(5);
        return t;
      }(),
      Env());
  auto get = [&](int64_t round, int64_t consumer) { return runner->GetRoundElement(round, consumer, false, nullptr); };
  auto early = get(4, 0);
  CHECK(absl::IsFailedPrecondition(early.status()));
  CHECK_THAT(std::string(early.status().message()), Catch::Contains("starting_round 5"));
  auto bad_consumer = get(5, 3);
  CHECK(absl::IsInvalidArgument(bad_consumer.status()));
  CHECK_THAT(std::string(bad_consumer.status().message()), Catch::Contains("consumer_index 3") && Catch::Contains("num_consumers 3"));
  CHECK(absl::IsInvalidArgument(get(-1, 0).status()));

  for (int64_t c : {2, 0}) {
    auto r = get(5, c);
    REQUIRE(r.ok());
    CHECK(ValueOf(r->element) == c);
  }
  auto again = get(5, 0);  // a retried request gets the same element
  REQUIRE(again.ok());
  CHECK(ValueOf(again->element) == 0);
  auto last = get(5, 1);
  REQUIRE(last.ok());
  CHECK(ValueOf(last->element) == 1);
  CHECK(absl::IsFailedPrecondition(get(5, 0).status()));  // round 5 is complete

  // Round 9 (rounds 6-8 are other workers'): the next prepared data.
  for (int64_t c : {0, 1, 2}) {
    auto r = get(9, c);
    REQUIRE(r.ok());
    CHECK(ValueOf(r->element) == 3 + c);
  }
  // Two elements are left: not a full round. The partial round is dropped.
  auto end = get(10, 1);
  REQUIRE(end.ok());
  CHECK(end->end_of_sequence);
  CHECK(runner->Progress().finished);
  CHECK(runner->GetNextBatch(1, 1, nullptr).status().code() == absl::StatusCode::kFailedPrecondition);
  runner->Stop(absl::NotFoundError("deleted"));  // deleting a finished task: readers still see the end
  auto after = get(11, 0);
  REQUIRE(after.ok());
  CHECK(after->end_of_sequence);
}

TEST_CASE("worker_round_robin skips a round that is not ready in time, for every consumer") {
  auto producer = std::make_unique<GatedProducer>(100);
  GatedProducer* gate = producer.get();
  TaskRunnerOptions options = Env().options;
  RoundRobinTaskRunner runner(Coordinated(1, 2), std::move(producer), options);
  // No data can exist for round 0: the gate is closed.
  auto first = runner.GetRoundElement(0, 0, /*allow_skip=*/true, nullptr);
  REQUIRE(first.ok());
  CHECK(first->round_skipped);
  auto second = runner.GetRoundElement(0, 1, /*allow_skip=*/false, nullptr);
  REQUIRE(second.ok());
  CHECK(second->round_skipped);  // skipped for all consumers, even those not allowing it
  // A consumer that does not allow skipping waits for the data.
  absl::StatusOr<RoundElement> waited;
  std::thread waiter([&] { waited = runner.GetRoundElement(1, 0, false, nullptr); });
  gate->Release(2);
  waiter.join();
  REQUIRE(waited.ok());
  CHECK_FALSE(waited->round_skipped);
  CHECK(ValueOf(waited->element) == 0);
  auto other = runner.GetRoundElement(1, 1, true, nullptr);
  REQUIRE(other.ok());
  CHECK(ValueOf(other->element) == 1);
  CHECK(runner.WaitForRoundToComplete(absl::InfiniteFuture()));
}

TEST_CASE("worker_round_robin: a consumer ahead waits for the bound round to complete, cancellation ends the wait") {
  auto producer = std::make_unique<GatedProducer>(100);
  GatedProducer* gate = producer.get();
  RoundRobinTaskRunner runner(Coordinated(1, 2), std::move(producer), Env().options);
  gate->Release(4);
  auto c0 = runner.GetRoundElement(0, 0, false, nullptr);
  REQUIRE(c0.ok());
  CHECK_FALSE(runner.WaitForRoundToComplete(absl::Now()));  // consumer 1 has not taken round 0
  CancelToken token;
  absl::Status cancelled;
  std::thread ahead([&] { cancelled = runner.GetRoundElement(1, 0, false, &token).status(); });
  token.Cancel();
  ahead.join();
  CHECK(absl::IsCancelled(cancelled));
  absl::StatusOr<RoundElement> next;
  std::thread ahead2([&] { next = runner.GetRoundElement(1, 0, false, nullptr); });
  REQUIRE(runner.GetRoundElement(0, 1, false, nullptr).ok());
  ahead2.join();
  REQUIRE(next.ok());
  CHECK(ValueOf(next->element) == 2);
}

TEST_CASE("worker_round_robin: a token cancelled beforehand makes a non-blocking attempt") {
  auto producer = std::make_unique<GatedProducer>(100);
  GatedProducer* gate = producer.get();
  RoundRobinTaskRunner runner(Coordinated(1, 2), std::move(producer), Env().options);
  CancelToken no_wait;
  no_wait.Cancel();
  CHECK(absl::IsCancelled(runner.GetRoundElement(0, 0, false, &no_wait).status()));  // no data yet
  gate->Release(2);
  REQUIRE(WaitUntil([&] { return runner.Progress().buffered_elements == 2; }));
  auto ready = runner.GetRoundElement(0, 0, false, &no_wait);
  REQUIRE(ready.ok());
  CHECK(ValueOf(ready->element) == 0);
  // Round 1 has to wait for consumer 1 to take round 0.
  CHECK(absl::IsCancelled(runner.GetRoundElement(1, 0, false, &no_wait).status()));
  // A skip deadline starts with the first attempt, blocking or not.
  auto skipped = runner.GetRoundElement(1, 0, true, &no_wait);
  CHECK(absl::IsCancelled(skipped.status()));
}

TEST_CASE("worker_round_robin drain: the bound round is finished, no new round starts") {
  auto producer = std::make_unique<GatedProducer>(100);
  GatedProducer* gate = producer.get();
  RoundRobinTaskRunner runner(Coordinated(1, 2), std::move(producer), Env().options);
  gate->Release(6);
  REQUIRE(runner.GetRoundElement(0, 0, false, nullptr).ok());
  runner.BeginDrain();
  auto rest = runner.GetRoundElement(0, 1, false, nullptr);
  REQUIRE(rest.ok());
  CHECK(ValueOf(rest->element) == 1);
  CHECK(runner.WaitForRoundToComplete(absl::InfiniteFuture()));
  CHECK(absl::IsUnavailable(runner.GetRoundElement(1, 0, false, nullptr).status()));
}

TEST_CASE("worker_shared_pipeline: the producer waits for the slowest reader, everyone sees every element") {
  WorkerMetrics metrics = NewMetrics();
  SharedPipelineRegistry registry(4, {}, &metrics);
  const auto def = testing::Spec("source: {range: {stop: 30}}\n");
  auto a = registry.Join("ds", def);
  auto b = registry.Join("ds", def);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->run == b->run);
  for (int i = 0; i < 4; ++i) {
    auto e = a->run->Next(a->reader, nullptr);
    REQUIRE(e.ok());
    CHECK(ValueOf(**e) == i);
  }
  // The window holds 4 and b has read none: a's fifth read must wait.
  CancelToken token;
  absl::Status blocked;
  std::thread reader([&] { blocked = a->run->Next(a->reader, &token).status(); });
  token.Cancel();
  reader.join();
  CHECK(absl::IsCancelled(blocked));
  CHECK(a->run->produced() == 4);
  auto b0 = b->run->Next(b->reader, nullptr);
  REQUIRE(b0.ok());
  CHECK(ValueOf(**b0) == 0);
  auto a4 = a->run->Next(a->reader, nullptr);  // room again
  REQUIRE(a4.ok());
  CHECK(ValueOf(**a4) == 4);
  // Element 0 is gone now: a new job starts a new run.
  REQUIRE(WaitUntil([&] { return a->run->window_size() == 4 && a->run->produced() == 5; }));
  auto c = registry.Join("ds", def);
  REQUIRE(c.ok());
  CHECK(c->run != a->run);
  CHECK(metrics.pipeline_runs() == 2);
  c->run->RemoveReader(c->reader);
  a->run->RemoveReader(a->reader);
  b->run->RemoveReader(b->reader);
}

TEST_CASE("worker_task_runner cross-job sharing: two jobs see every element, the pipeline runs once") {
  WorkerMetrics metrics = NewMetrics();
  TaskRunnerEnv env = Env(&metrics);
  // A window holding the whole run: the second job joins before anything can be evicted, whatever
  // the threads' timing (the window bound itself is tested above).
  SharedPipelineRegistry registry(1000, {}, &metrics);
  env.sharing = &registry;
  const std::string spec = "source: {range: {stop: 500, split_size: 50}}\n";
  service::TaskDef job1 = MakeTask(1, spec);
  service::TaskDef job2 = MakeTask(2, spec);
  job1.set_cross_job_sharing(true);
  job2.set_cross_job_sharing(true);
  job2.set_compression(service::COMPRESSION_ZSTD);  // per-job settings do not split the run
  auto r1 = CreateTaskRunner(job1, env);
  auto r2 = CreateTaskRunner(job2, env);
  std::vector<int64_t> a;
  std::thread reader([&] { a = ReadAll(*r1, 3); });
  std::vector<int64_t> b = ReadAll(*r2, 11);
  reader.join();
  CHECK(a == Iota(0, 500));
  CHECK(b == Iota(0, 500));
  CHECK(metrics.pipeline_runs() == 1);
  CHECK(metrics.elements_produced() == 500);
}

}  // namespace
}  // namespace sluice::worker
