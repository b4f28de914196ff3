// Failures with real processes: kill -9 of a worker and of the dispatcher mid-epoch, a worker added
// mid-job, SIGTERM of a worker mid-stream. Dynamic sharding promises: never a duplicate; the epoch
// completes; what is lost is bounded by what the dead worker held.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"

namespace sluice::e2e {
namespace {

using client::DataServiceClient;

// 4 KiB elements: large enough that a client which stops reading soon stalls the workers (the
// streams' flow-control windows hold a few MiB), so the failures below really happen mid-epoch.
constexpr int64_t kElements = 6000;
constexpr int64_t kSplitSize = 50;
constexpr int64_t kPadLength = 512;

// The worker's position leases in these tests: a lost worker loses at most this many elements past
// what it produced, per split it was reading (the pipelines read one split at a time).
constexpr int64_t kMaxLease = 8;
const std::vector<std::string> kLeaseFlags = {"--split_lease_elements=4",
                                              absl::StrCat("--split_lease_max_elements=", kMaxLease)};

// Elements of one split (a range split holds [k*size, (k+1)*size)) are produced in order by the
// worker that reads it; if that worker is lost, the remainder past its lease is read by another.
// So the values received from each split form a prefix of it, or a prefix and a suffix (the
// remainder). Returns the splits that break this.
std::string BadSplitShapes(const std::map<int64_t, int>& counts, int64_t split_size) {
  std::map<int64_t, std::vector<int64_t>> by_split;
  for (const auto& [v, n] : counts) by_split[v / split_size].push_back(v);
  std::string problems;
  for (const auto& [split, values] : by_split) {
    const int64_t first = split * split_size;
    const int64_t last = first + split_size - 1;
    int runs = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i == 0 || values[i] != values[i - 1] + 1) ++runs;
    }
    const bool prefix_ok = values.front() == first || (runs == 1 && values.back() == last);
    if (runs > 2 || !prefix_ok || (runs == 2 && values.back() != last)) {
      absl::StrAppend(&problems, "split ", split, " received ", values.size(), " values in ", runs,
                      " runs, not a prefix and a remainder; ");
    }
  }
  return problems;
}

std::string Duplicates(const std::map<int64_t, int>& counts) {
  std::string problems;
  for (const auto& [v, n] : counts) {
    if (n > 1 && problems.size() < 400) absl::StrAppend(&problems, v, " x", n, "; ");
  }
  return problems;
}

client::DataServiceClientOptions DynamicClient(const local::LocalDataService& service) {
  auto o = ClientOptions(service.dispatcher_address(), PaddedRangePipeline(kElements, kSplitSize, kPadLength),
                         service::SHARDING_DYNAMIC);
  o.compression = service::COMPRESSION_NONE;  // padded elements would compress to almost nothing
  // A small client buffer, so that a client that stops reading stalls the workers quickly.
  o.max_buffered_bytes = 32 << 10;
  o.max_elements_per_response = 16;
  return o;
}

TEST_CASE("kill -9 of a worker mid-epoch (dynamic): no duplicates, the epoch completes, loss is bounded") {
  auto options = TestServiceOptions(/*worker_timeout_ms=*/2000);
  options.worker_flags = {"--buffer_elements=8"};
  options.worker_flags.insert(options.worker_flags.end(), kLeaseFlags.begin(), kLeaseFlags.end());
  auto service = StartService(2, options);
  const auto client_options = DynamicClient(*service);
  auto client = MakeClient(client_options);

  std::vector<int64_t> values = ReadSome(*client, 1500);
  REQUIRE(values.size() == 1500);
  // Stop reading until the workers stall: the client's buffer is full (its readers pause), the
  // streams fill up, then the workers' buffers, and production stops. A stall shows as production
  // counters that no longer move (three looks, a worker heartbeat apart). If a starved worker only
  // looked stalled, it can have gone on within its current lease only: the bound below allows
  // that lease twice.
  auto produced_by = [&](int w) { return WorkerMetric(*service, w, "sluice_worker_elements_produced_total"); };
  double last[2] = {-1, -1};
  int unchanged = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (unchanged < 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(120));  // a poll interval, not a timing assumption
    const double now[2] = {produced_by(0), produced_by(1)};
    const bool paused = client->stats().buffered_bytes >= client_options.max_buffered_bytes;
    unchanged = (paused && now[0] == last[0] && now[1] == last[1]) ? unchanged + 1 : 0;
    last[0] = now[0];
    last[1] = now[1];
  }
  REQUIRE(unchanged == 3);
  const int64_t produced_by_victim = static_cast<int64_t>(last[0]);
  // The stalled workers' gauges (refreshed at each heartbeat) show a full buffer and their task.
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    double buffered = 0;
    const absl::Time gauge_deadline = absl::Now() + absl::Seconds(30);
    while ((buffered = WorkerMetric(*service, w, "sluice_worker_buffered_elements")) == 0 && absl::Now() < gauge_deadline) {
      absl::SleepFor(absl::Milliseconds(50));  // a poll interval
    }
    CHECK(buffered > 0);
    CHECK(buffered <= 8);  // --buffer_elements=8: one task
    CHECK(WorkerMetric(*service, w, "sluice_worker_active_tasks") == 1);
    CHECK(WorkerMetric(*service, w, "sluice_worker_busy_seconds_total") > 0);
    CHECK(WorkerMetric(*service, w, "sluice_worker_bytes_produced_total") >=
          WorkerMetric(*service, w, "sluice_worker_elements_produced_total") * kPadLength * 8);
  }

  service->KillWorker(0);
  std::vector<int64_t> rest = ReadAll(*client);
  values.insert(values.end(), rest.begin(), rest.end());
  const auto counts = Counts(values);
  const int64_t lost = kElements - static_cast<int64_t>(counts.size());
  INFO(service->Logs());
  // The survivor's elements all arrived (it lives to the end of the job), so the rest came from the
  // victim; what the victim had produced but not delivered died with it.
  const int64_t from_survivor = static_cast<int64_t>(produced_by(1));
  const int64_t from_victim = static_cast<int64_t>(counts.size()) - from_survivor;
  const int64_t undelivered = produced_by_victim - from_victim;
  INFO("received " << values.size() << ", distinct " << counts.size() << ", lost " << lost << "; the victim produced "
                   << produced_by_victim << " and delivered " << from_victim << "; missing "
                   << MissingRanges(counts, kElements));
  CHECK(Duplicates(counts) == "");
  CHECK(BadSplitShapes(counts, kSplitSize) == "");
  CHECK(undelivered >= 0);
  // Lost: what the victim held (its buffer and its stream) plus what it had leased of the split it
  // was reading but not read. The rest of that split (a remainder) was read by the survivor. (With
  // no remainders, the unread rest of the split would be lost too: up to kSplitSize.)
  CHECK(lost <= undelivered + 2 * kMaxLease);
  CHECK(lost >= undelivered);
  CHECK(client->stats().job_finished);
  auto removals = service->ScrapeDispatcher();
  REQUIRE(removals.ok());
  CHECK(local::SumSamples(*removals, "sluice_dispatcher_worker_removals_total", {{"reason", "heartbeat timeout"}}) == 1);
  // The victim stalled mid-split (its source blocked on a full buffer), so at least that split's
  // rest came back as a remainder.
  CHECK(local::SumSamples(*removals, "sluice_dispatcher_split_remainders_total", {}) >= 1);
}

// Reads a client to its end on a thread of its own; the test looks at the progress meanwhile.
class BackgroundReader {
 public:
  explicit BackgroundReader(DataServiceClient* client) : client_(client), thread_([this] { Run(); }) {}
  ~BackgroundReader() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // Waits until `n` elements were read (or the end); returns how many were.
  int64_t WaitFor(int64_t n) {
    absl::MutexLock lock(&mu_);
    auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int64_t>(values_.size()) >= n || done_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(60));
    return static_cast<int64_t>(values_.size());
  }
  std::vector<int64_t> values() {
    absl::MutexLock lock(&mu_);
    return values_;
  }
  std::string error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  void Run() {
    while (true) {
      auto next = client_->GetNext(absl::Seconds(60));
      absl::MutexLock lock(&mu_);
      if (!next.ok()) {
        error_ = next.status().ToString();
        break;
      }
      if (!next->has_value()) break;
      values_.push_back(TryIntField(**next).value_or(-1));
    }
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

  DataServiceClient* const client_;
  absl::Mutex mu_;
  std::vector<int64_t> values_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

TEST_CASE("kill -9 of the dispatcher mid-job - restarted from its journal the job continues") {
  sluice::testing::TempDir tmp;
  auto options = TestServiceOptions();
  options.journal_dir = tmp.File("journal");
  auto service = StartService(2, options);
  auto client = MakeClient(DynamicClient(*service));
  BackgroundReader reader(client.get());
  REQUIRE(reader.WaitFor(1500) >= 1500);

  service->KillDispatcher();
  REQUIRE(service->StartDispatcher().ok());
  auto replayed = service->dispatcher().process->WaitForLine("msg=\"journal replayed\"", absl::Seconds(10));
  REQUIRE(replayed.ok());
  reader.Join();
  const std::vector<int64_t> values = reader.values();
  INFO(service->Logs());
  CHECK(reader.error() == "");
  // No worker failed: every element exactly once.
  CHECK(values.size() == static_cast<size_t>(kElements));
  CHECK(CountProblems(Counts(values), kElements, 1) == "");
  CHECK(client->stats().job_finished);
  auto state = service->GetState();
  REQUIRE(state.ok());
  REQUIRE(state->jobs_size() == 1);
  CHECK(state->jobs(0).finished());
  CHECK(state->workers_size() == 2);
}

TEST_CASE("A worker added mid-job gets a task and contributes elements") {
  auto service = StartService(1, TestServiceOptions());
  auto client = MakeClient(DynamicClient(*service));
  std::vector<int64_t> values = ReadSome(*client, 1000);
  REQUIRE(values.size() == 1000);
  // The client stopped reading, so the first worker stalls with most splits still unassigned.
  auto added = service->AddWorker();
  REQUIRE(added.ok());
  REQUIRE(service->WaitForWorkers(2, absl::Seconds(30)).ok());
  const bool contributes = PollUntil([&] {
    return WorkerMetric(*service, *added, "sluice_worker_elements_produced_total") > 0;
  });
  INFO(service->Logs());
  REQUIRE(contributes);
  auto state = service->GetState();
  REQUIRE(state.ok());
  for (const auto& w : state->workers()) {
    INFO(w.address());
    CHECK(w.task_ids_size() == 1);
  }
  std::vector<int64_t> rest = ReadAll(*client);
  values.insert(values.end(), rest.begin(), rest.end());
  CHECK(CountProblems(Counts(values), kElements, 1) == "");
  CHECK(WorkerMetric(*service, *added, "sluice_worker_elements_produced_total") > 0);
}

TEST_CASE("SIGTERM of a worker mid-stream: it exits within 2 s, deregisters, the client goes on") {
  // A long worker timeout: only a deregistration can remove the worker in time for the checks.
  auto service = StartService(2, TestServiceOptions(/*worker_timeout_ms=*/60000));
  auto client = MakeClient(DynamicClient(*service));

  BackgroundReader reader(client.get());
  const int64_t at_signal = reader.WaitFor(1500);
  REQUIRE(at_signal >= 1500);

  local::ChildProcess& worker = *service->worker(0).process;
  const absl::Time signalled = absl::Now();
  worker.Signal(SIGTERM);
  auto status = worker.Wait(absl::Seconds(30));
  const absl::Duration took = absl::Now() - signalled;
  // Deregistered before exiting: the dispatcher no longer lists it, long before its timeout.
  auto state = service->GetState();
  reader.Join();
  const std::vector<int64_t> values = reader.values();
  INFO(service->Logs());
  REQUIRE(status.ok());
  CHECK(local::DescribeWaitStatus(*status) == "exit 0");
  CHECK(took < absl::Seconds(2));
  REQUIRE(state.ok());
  REQUIRE(state->workers_size() == 1);
  CHECK(state->workers(0).address() == service->worker(1).address);
  auto metrics = service->ScrapeDispatcher();
  REQUIRE(metrics.ok());
  CHECK(local::SumSamples(*metrics, "sluice_dispatcher_worker_removals_total", {{"reason", "deregistered"}}) == 1);

  CHECK(reader.error() == "");
  const auto counts = Counts(values);
  CHECK(Duplicates(counts) == "");
  CHECK(BadSplitShapes(counts, kSplitSize) == "");
  CHECK(static_cast<int64_t>(values.size()) > at_signal);  // the client went on with the other worker
  CHECK(client->stats().job_finished);
}

}  // namespace
}  // namespace sluice::e2e
