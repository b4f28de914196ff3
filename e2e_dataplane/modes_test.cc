// Real sluice-dispatcher and sluice-worker processes with the real C++ client: every sharding
// policy, job sharing, cross-job sharing and coordinated reads, each checked element by element.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"

namespace sluice::e2e {
namespace {

using client::DataServiceClient;

TEST_CASE("SHARDING_OFF: every worker runs the whole dataset (parallel epochs)") {
  auto service = StartService(2, TestServiceOptions());
  auto client = MakeClient(ClientOptions(service->dispatcher_address(), RangePipeline(600, 50), service::SHARDING_OFF));
  const std::vector<int64_t> values = ReadAll(*client);
  INFO(service->Logs());
  CHECK(values.size() == 1200);
  CHECK(CountProblems(Counts(values), 600, 2) == "");
  CHECK(client->stats().job_finished);
}

TEST_CASE("SHARDING_DYNAMIC: each element exactly once per epoch, two epochs") {
  auto service = StartService(2, TestServiceOptions());
  auto options = ClientOptions(service->dispatcher_address(), RangePipeline(3000, 25), service::SHARDING_DYNAMIC);
  options.num_epochs = 2;
  auto client = MakeClient(options);
  const std::vector<int64_t> values = ReadAll(*client);
  INFO(service->Logs());
  CHECK(values.size() == 6000);
  CHECK(CountProblems(Counts(values), 3000, 2) == "");
  CHECK(WorkerMetric(*service, 0, "sluice_worker_elements_produced_total") +
            WorkerMetric(*service, 1, "sluice_worker_elements_produced_total") ==
        6000);
  // The dispatcher served every split of both epochs, each once.
  auto state = service->GetState();
  REQUIRE(state.ok());
  REQUIRE(state->jobs_size() == 1);
  CHECK(state->jobs(0).splits_served() == 2 * 120);
  CHECK(state->jobs(0).finished());
}

TEST_CASE("A pipeline ending in cache and repeat is replayed from encoded elements: every pass, in order") {
  auto service = StartService(1, TestServiceOptions());
  auto options = ClientOptions(service->dispatcher_address(),
                               Pipeline("source: {range: {stop: 300, split_size: 50}}\n"
                                        "steps:\n  - map: {ops: [{reshape: {field: value, shape: [1]}}]}\n"
                                        "  - cache: {}\n  - repeat: {count: 3}\n"),
                               service::SHARDING_OFF);
  options.compression = service::COMPRESSION_LZ4;
  auto client = MakeClient(options);
  const std::vector<int64_t> values = ReadAll(*client);
  const std::string logs = service->Logs();
  INFO(logs);
  std::vector<int64_t> expected;
  for (int pass = 0; pass < 3; ++pass) {
    for (int64_t v = 0; v < 300; ++v) expected.push_back(v);
  }
  CHECK(values == expected);
  // The worker served passes 2 and 3 from what it encoded in pass 1 (docs/dataservice-worker.md).
  CHECK(logs.find("msg=\"task cache kept encoded\"") != std::string::npos);
  CHECK(logs.find("elements=300") != std::string::npos);
  CHECK(WorkerMetric(*service, 0, "sluice_worker_elements_produced_total") == 900);
  CHECK(client->stats().job_finished);
}

TEST_CASE("SHARDING_FILE: worker i reads splits i, i+n, ... - every element exactly once") {
  auto service = StartService(3, TestServiceOptions());
  auto client = MakeClient(ClientOptions(service->dispatcher_address(), RangePipeline(1000, 64), service::SHARDING_FILE));
  const std::vector<int64_t> values = ReadAll(*client);
  INFO(service->Logs());
  CHECK(values.size() == 1000);
  CHECK(CountProblems(Counts(values), 1000, 1) == "");
  // 16 splits over 3 workers: worker 0 reads splits 0, 3, ..., 15 (the last holds 40 values),
  // workers 1 and 2 five full splits each.
  std::multiset<double> produced;
  for (int w = 0; w < 3; ++w) produced.insert(WorkerMetric(*service, w, "sluice_worker_elements_produced_total"));
  CHECK(produced == std::multiset<double>{5 * 64, 5 * 64, 5 * 64 + 40});
}

TEST_CASE("SHARDING_DATA: worker i keeps positions i mod n - every element exactly once") {
  auto service = StartService(2, TestServiceOptions());
  auto client = MakeClient(ClientOptions(service->dispatcher_address(), RangePipeline(1001, 100), service::SHARDING_DATA));
  const std::vector<int64_t> values = ReadAll(*client);
  INFO(service->Logs());
  CHECK(values.size() == 1001);
  CHECK(CountProblems(Counts(values), 1001, 1) == "");
  std::multiset<double> produced;
  for (int w = 0; w < 2; ++w) produced.insert(WorkerMetric(*service, w, "sluice_worker_elements_produced_total"));
  CHECK(produced == std::multiset<double>{500, 501});
}

TEST_CASE("Job sharing: two clients of one job name split one epoch without overlap") {
  auto service = StartService(2, TestServiceOptions());
  // 4 KiB elements: the first client's streams (flow-control windows of a few MiB) cannot swallow
  // the whole epoch before the second client reads.
  auto options =
      ClientOptions(service->dispatcher_address(), PaddedRangePipeline(6000, 50, 512), service::SHARDING_DYNAMIC);
  options.compression = service::COMPRESSION_NONE;
  options.job_name = "shared-train";
  options.max_buffered_bytes = 16 << 10;
  options.max_outstanding_requests = 1;
  options.max_elements_per_response = 1;
  auto a = MakeClient(options);
  auto b = MakeClient(options);
  REQUIRE(a->job_id() == b->job_id());
  REQUIRE(a->job_client_id() != b->job_client_id());
  // Alternate the two consumers on one thread: each GetNext blocks until that client has an
  // element, so both take part whatever the scheduling.
  std::vector<int64_t> from_a, from_b;
  ReadBothToEnd(*a, *b, &from_a, &from_b);
  INFO(service->Logs());
  CHECK(!from_a.empty());
  CHECK(!from_b.empty());
  std::vector<int64_t> all = from_a;
  all.insert(all.end(), from_b.begin(), from_b.end());
  CHECK(all.size() == 6000);
  CHECK(CountProblems(Counts(all), 6000, 1) == "");
  auto state = service->GetState();
  REQUIRE(state.ok());
  CHECK(state->jobs_size() == 1);
}

TEST_CASE("Cross-job sharing: two jobs see every element - each worker ran the pipeline once") {
  // The sharing window holds the whole dataset, so the second job joins the first one's run
  // whenever its task arrives; the clients read at most a few elements ahead (tiny buffers).
  // Both workers are registered before the jobs exist, so each job gets a task on each of them:
  // a job under SHARDING_OFF ends once the tasks it has have produced everything (here into the
  // sharing window, within a fraction of a second), so a worker registering later would serve
  // neither job (seen on a loaded machine when the jobs came first).
  auto options = TestServiceOptions();
  options.worker_flags = {"--sharing_window_elements=4096", "--buffer_elements=4"};
  auto service = StartService(0, options);
  for (int w = 0; w < 2; ++w) REQUIRE(service->AddWorker().ok());
  REQUIRE(service->WaitForWorkers(2, absl::Seconds(30)).ok());
  const auto def = RangePipeline(1500, 100);
  auto job_options = ClientOptions(service->dispatcher_address(), def, service::SHARDING_OFF);
  job_options.cross_job_sharing = true;
  job_options.max_outstanding_requests = 1;
  job_options.max_elements_per_response = 1;
  job_options.job_name = "model-a";
  auto a = MakeClient(job_options);
  job_options.job_name = "model-b";
  auto b = MakeClient(job_options);
  REQUIRE(a->job_id() != b->job_id());
  std::vector<int64_t> from_a, from_b;
  ReadBothToEnd(*a, *b, &from_a, &from_b);
  INFO(service->Logs());
  // SHARDING_OFF: each job gets every element from each of the 2 workers.
  CHECK(CountProblems(Counts(from_a), 1500, 2) == "");
  CHECK(CountProblems(Counts(from_b), 1500, 2) == "");
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    CHECK(WorkerMetric(*service, w, "sluice_worker_pipeline_runs_total") == 1);
    CHECK(WorkerMetric(*service, w, "sluice_worker_elements_produced_total") == 1500);
  }
}

// Coordinated reads. Every worker runs the same spec, whose jsonl source path is relative: each
// worker runs in its own directory holding a file of its own (WriteWorkerData), so an element
// names the worker that produced it ({"w": worker index, "i": position in that worker's file}).

// Coordinated consumers reading to the end, each on a thread of its own as trainers would.
// `record(c, element)` keeps what the test needs of consumer c's element (calls for one consumer
// come from its thread only) and returns an error text, or "" to go on. Join() returns each
// consumer's error ("" when it read to the end).
class ConsumerThreads {
 public:
  using Record = std::function<std::string(int, const pipeline::Element&)>;
  ConsumerThreads(std::vector<std::unique_ptr<DataServiceClient>>& consumers, Record record)
      : errors_(consumers.size()) {
    for (size_t c = 0; c < consumers.size(); ++c) {
      threads_.emplace_back([this, &consumers, record, c] {
        while (true) {
          auto next = consumers[c]->GetNext(absl::Seconds(60));
          if (!next.ok()) {
            errors_[c] = next.status().ToString();
            return;
          }
          if (!next->has_value()) return;
          errors_[c] = record(static_cast<int>(c), **next);
          if (!errors_[c].empty()) return;
        }
      });
    }
  }
  ~ConsumerThreads() { Join(); }
  std::vector<std::string> Join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    return errors_;
  }

 private:
  std::vector<std::string> errors_;
  std::vector<std::thread> threads_;
};

// Records each element's {"w", "i"} (worker, position in its file) into got[c].
ConsumerThreads::Record RecordWorkerAndIndex(std::vector<std::vector<std::pair<int64_t, int64_t>>>& got) {
  return [&got](int c, const pipeline::Element& e) -> std::string {
    auto w = e.Get("w"), i = e.Get("i");
    if (!w.ok() || !i.ok()) return "element without w or i";
    got[static_cast<size_t>(c)].emplace_back(*(*w)->AsInt64(), *(*i)->AsInt64());
    return "";
  };
}

void RunCoordinatedReads(int num_consumers) {
  sluice::testing::TempDir tmp;
  const int kRoundsPerWorker = 12;
  auto options = TestServiceOptions();
  // Data is always ready here; a long round timeout keeps a loaded machine from skipping rounds.
  options.worker_flags = {"--round_timeout_ms=20000"};
  // The dispatcher lists the splits when the dataset is registered, so it sees a file at that
  // path too (in its own working directory).
  options.dispatcher_working_dir = tmp.File("dispatcher");
  WriteWorkerData(options.dispatcher_working_dir, 0, kRoundsPerWorker * num_consumers);
  auto service = std::make_unique<local::LocalDataService>(options);
  REQUIRE(service->StartDispatcher().ok());
  AddWorkersWithOwnData(*service, tmp.File("worker"), 2, kRoundsPerWorker * num_consumers);
  const auto def = Pipeline("source: {jsonl: {files: data.jsonl}}\n");

  std::vector<std::unique_ptr<DataServiceClient>> consumers;
  for (int c = 0; c < num_consumers; ++c) {
    auto o = ClientOptions(service->dispatcher_address(), def, service::SHARDING_OFF);
    o.job_name = "coordinated";
    o.num_consumers = num_consumers;
    o.consumer_index = c;
    consumers.push_back(MakeClient(o));
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> got(static_cast<size_t>(num_consumers));
  const std::vector<std::string> errors = ConsumerThreads(consumers, RecordWorkerAndIndex(got)).Join();
  INFO(service->Logs());
  for (int c = 0; c < num_consumers; ++c) {
    INFO("consumer " << c);
    CHECK(errors[static_cast<size_t>(c)] == "");
  }
  // Which worker serves round r: the task at position r mod 2 among the job's tasks by task_id.
  auto state = service->GetState();
  REQUIRE(state.ok());
  std::map<int64_t, std::string> task_worker;
  for (const auto& w : state->workers()) {
    for (int64_t t : w.task_ids()) task_worker[t] = w.address();
  }
  REQUIRE(task_worker.size() == 2);
  std::vector<int> serving;  // worker index serving rounds 0, 1 (then alternating)
  for (const auto& [task, address] : task_worker) {
    serving.push_back(address == service->worker(0).address ? 0 : 1);
  }
  REQUIRE(serving[0] != serving[1]);

  // Every consumer got the same number of rounds, and in round r all consumers' elements came from
  // the same worker and the same round of that worker: consumer c holds that round's c-th element.
  const size_t rounds = got[0].size();
  CHECK(rounds >= static_cast<size_t>(2 * kRoundsPerWorker - 1));  // the first worker to run out ends the job
  for (int c = 0; c < num_consumers; ++c) CHECK(got[static_cast<size_t>(c)].size() == rounds);
  for (size_t r = 0; r < rounds; ++r) {
    const int64_t worker = serving[r % 2];
    const int64_t worker_round = static_cast<int64_t>(r / 2);
    for (int c = 0; c < num_consumers; ++c) {
      if (r >= got[static_cast<size_t>(c)].size()) continue;
      INFO("round " << r << " consumer " << c);
      CHECK(got[static_cast<size_t>(c)][r].first == worker);
      CHECK(got[static_cast<size_t>(c)][r].second == worker_round * num_consumers + c);
    }
  }
  for (const auto& consumer : consumers) CHECK(consumer->stats().rounds_skipped == 0);
}

TEST_CASE("Coordinated reads: each round comes from one worker, for 2 and 4 consumers") {
  SECTION("2 consumers") { RunCoordinatedReads(2); }
  SECTION("4 consumers") { RunCoordinatedReads(4); }
}

}  // namespace
}  // namespace sluice::e2e

namespace sluice::e2e {
namespace {

TEST_CASE("Coordinated reads: a worker added mid-job joins at a round every consumer agreed on") {
  sluice::testing::TempDir tmp;
  constexpr int kConsumers = 2;
  constexpr int kLines = 30000;  // per worker: long enough that the job is still running when the second one joins
  auto options = TestServiceOptions();
  options.worker_flags = {"--round_timeout_ms=20000"};
  options.dispatcher_working_dir = tmp.File("dispatcher");
  WriteWorkerData(options.dispatcher_working_dir, 0, kLines);
  auto service = std::make_unique<local::LocalDataService>(options);
  REQUIRE(service->StartDispatcher().ok());
  const std::string dir0 = tmp.File("worker0");
  WriteWorkerData(dir0, 0, kLines);
  REQUIRE(service->AddWorker({}, dir0).ok());
  REQUIRE(service->WaitForWorkers(1, absl::Seconds(30)).ok());
  const auto def = Pipeline("source: {jsonl: {files: data.jsonl}}\n");
  std::vector<std::unique_ptr<DataServiceClient>> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    auto o = ClientOptions(service->dispatcher_address(), def, service::SHARDING_OFF);
    o.job_name = "joining";
    o.num_consumers = kConsumers;
    o.consumer_index = c;
    consumers.push_back(MakeClient(o));
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> got(kConsumers);
  std::atomic<int64_t> read0{0};
  const ConsumerThreads::Record record = RecordWorkerAndIndex(got);
  ConsumerThreads readers(consumers, [&](int c, const pipeline::Element& e) {
    if (c == 0) read0.fetch_add(1);
    return record(c, e);
  });
  // Mid-job (the consumers are reading): the second worker joins.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (read0.load() < 200 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));  // a poll, not a timing assumption
  const int64_t read_at_join = read0.load();
  const std::string dir1 = tmp.File("worker1");
  WriteWorkerData(dir1, 1, kLines);
  REQUIRE(service->AddWorker({}, dir1).ok());
  const std::vector<std::string> errors = readers.Join();
  INFO(service->Logs());
  for (int c = 0; c < kConsumers; ++c) {
    INFO("consumer " << c);
    CHECK(errors[static_cast<size_t>(c)] == "");
  }
  REQUIRE(read_at_join >= 200);
  const size_t rounds = got[0].size();
  for (int c = 0; c < kConsumers; ++c) CHECK(got[static_cast<size_t>(c)].size() == rounds);
  // Round by round: every consumer's element comes from the same worker and from the same round of
  // that worker (consumer c holds its c-th element); each worker's rounds follow each other.
  int64_t next_worker_round[2] = {0, 0};
  size_t first_round_of_1 = rounds;
  std::string problems;
  for (size_t r = 0; r < rounds && problems.size() < 400; ++r) {
    const int64_t w = got[0][r].first;
    if (w == 1 && first_round_of_1 == rounds) first_round_of_1 = r;
    for (int c = 0; c < kConsumers; ++c) {
      const auto& [wc, ic] = got[static_cast<size_t>(c)][r];
      if (wc != w || ic != next_worker_round[w] * kConsumers + c) {
        absl::StrAppend(&problems, "round ", r, " consumer ", c, " got w=", wc, " i=", ic, " (expected w=", w,
                        " i=", next_worker_round[w] * kConsumers + c, "); ");
      }
    }
    ++next_worker_round[w];
  }
  CHECK(problems == "");
  // The new worker served rounds, from a round after the one consumer 0 had reached at the join.
  CHECK(first_round_of_1 < rounds);
  CHECK(first_round_of_1 >= static_cast<size_t>(read_at_join));
  CHECK(next_worker_round[1] > 0);
  for (const auto& consumer : consumers) CHECK(consumer->stats().rounds_skipped == 0);
}

TEST_CASE("Coordinated reads with bucket_by_length group: each round's batches come from one length bucket") {
  sluice::testing::TempDir tmp;
  constexpr int kConsumers = 2;
  auto options = TestServiceOptions();
  options.worker_flags = {"--round_timeout_ms=20000"};
  // Short (1-4 tokens) and long (9-12 tokens) sequences interleaved, as a text corpus would mix them.
  std::string text;
  for (int k = 0; k < 400; ++k) {
    const int len = k % 2 == 0 ? 1 + k % 4 : 9 + k % 4;
    std::string arr = "[";
    for (int i = 0; i < len; ++i) absl::StrAppend(&arr, i ? "," : "", k);
    absl::StrAppend(&text, "{\"tokens\": ", arr, "]}\n");
  }
  sluice::testing::WriteFile(tmp.File("tokens.jsonl"), text);
  auto service = StartService(1, options);
  const auto def = Pipeline(absl::StrCat("source: {jsonl: {files: '", tmp.File("tokens.jsonl"),
                                         "'}}\nsteps:\n  - bucket_by_length: {field: tokens, boundaries: [6], "
                                         "batch_sizes: [4, 4], group: ", kConsumers, ", drop_remainder: true}\n"));
  std::vector<std::unique_ptr<DataServiceClient>> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    auto o = ClientOptions(service->dispatcher_address(), def, service::SHARDING_OFF);
    o.job_name = "bucketed";
    o.num_consumers = kConsumers;
    o.consumer_index = c;
    consumers.push_back(MakeClient(o));
  }
  std::vector<std::vector<int64_t>> widths(kConsumers);  // padded length of each round's batch
  const std::vector<std::string> errors =
      ConsumerThreads(consumers, [&](int c, const pipeline::Element& e) -> std::string {
        auto tokens = e.Get("tokens");
        if (!tokens.ok() || (*tokens)->rank() != 2) return "batch without a [batch, length] tokens field";
        widths[static_cast<size_t>(c)].push_back((*tokens)->shape()[1]);
        return "";
      }).Join();
  INFO(service->Logs());
  for (int c = 0; c < kConsumers; ++c) CHECK(errors[static_cast<size_t>(c)] == "");
  REQUIRE(widths[0].size() == widths[1].size());
  CHECK(widths[0].size() == 400 / 4 / kConsumers);
  int long_rounds = 0;
  for (size_t r = 0; r < widths[0].size(); ++r) {
    INFO("round " << r << ": widths " << widths[0][r] << " and " << widths[1][r]);
    CHECK((widths[0][r] >= 9) == (widths[1][r] >= 9));  // both long or both short
    long_rounds += widths[0][r] >= 9 ? 1 : 0;
  }
  CHECK(long_rounds == static_cast<int>(widths[0].size()) / 2);
}

}  // namespace
}  // namespace sluice::e2e
