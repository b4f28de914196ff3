// Failures with real processes: kill -9 of a worker and of the dispatcher mid-epoch, a worker added
// mid-job, SIGTERM of a worker mid-stream. Dynamic sharding promises: never a duplicate; the epoch
// completes; what is lost is bounded by what the dead worker held.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "dataplane/rpc/shm_ring.h"
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

// One look at a worker's /metrics.
struct WorkerLook {
  double busy = 0;      // sluice_worker_busy_seconds_total: advanced by every heartbeat, just before the gauges
  double buffered = 0;  // sluice_worker_buffered_elements: the buffer at the latest heartbeat
  double produced = 0;  // sluice_worker_elements_produced_total: live (counted before the element is buffered)
};

WorkerLook LookAt(const local::LocalDataService& service, int worker) {
  auto samples = service.ScrapeWorker(worker);
  INFO(samples.status().ToString());
  REQUIRE(samples.ok());
  return WorkerLook{local::SumSamples(*samples, "sluice_worker_busy_seconds_total"),
                    local::SumSamples(*samples, "sluice_worker_buffered_elements"),
                    local::SumSamples(*samples, "sluice_worker_elements_produced_total")};
}

// Waits until `worker`, one task with a buffer of `capacity` elements, is stalled by a client that
// reads nothing: a heartbeat taken after an anchor look reported the buffer full, and production did
// not move from the anchor to the look that saw that heartbeat. A full buffer blocks the producer;
// only the task's stream can empty it, and it cannot while the client reads nothing (the transport
// holds what the flow-control windows allow and no window update comes without reads). The
// condition is checked on what the worker reports, not on elapsed time: the anchor moves whenever
// production moves, and "after the anchor" is counted in heartbeats (two advances of the busy
// counter: the second heartbeat began after the first one ended, which was after the anchor).
// Returns the worker's production at the stall (nullopt if it did not stall within `timeout`).
// With `capacity` nullopt, a stall needs no full buffer (production capped by
// --max_undelivered_elements stops short of it).
std::optional<double> WaitForBackpressureStall(const local::LocalDataService& service, int worker,
                                               std::optional<double> capacity,
                                               absl::Duration timeout = absl::Seconds(60)) {
  WorkerLook anchor = LookAt(service, worker);
  double last_busy = anchor.busy;
  int heartbeats = 0;
  std::optional<double> stalled;
  PollUntil(
      [&] {
        const WorkerLook now = LookAt(service, worker);
        if (now.produced != anchor.produced) {  // still producing: start again from here
          anchor = now;
          last_busy = now.busy;
          heartbeats = 0;
          return false;
        }
        // With two heartbeats counted before this look, its gauge comes from a heartbeat that began
        // after the anchor.
        if (heartbeats >= 2 && (!capacity.has_value() || now.buffered == *capacity)) stalled = now.produced;
        if (now.busy != last_busy) {
          ++heartbeats;
          last_busy = now.busy;
        }
        return stalled.has_value();
      },
      timeout);
  return stalled;
}

TEST_CASE("kill -9 of a worker mid-epoch (dynamic): no duplicates, the epoch completes, loss is bounded") {
  constexpr int kBufferElements = 8;
  auto options = TestServiceOptions(/*worker_timeout_ms=*/2000);
  options.worker_flags = {absl::StrCat("--buffer_elements=", kBufferElements)};
  options.worker_flags.insert(options.worker_flags.end(), kLeaseFlags.begin(), kLeaseFlags.end());
  auto service = StartService(2, options);
  const auto client_options = DynamicClient(*service);
  auto client = MakeClient(client_options);

  std::vector<int64_t> values = ReadSome(*client, 1500);
  REQUIRE(values.size() == 1500);
  // Stop reading. The client's buffer fills (its readers pause), then the streams, then the
  // workers' buffers, and production stops. Each worker is then stalled mid-split, holding one
  // element it read but could not buffer.
  const bool paused = PollUntil([&] { return client->stats().buffered_bytes >= client_options.max_buffered_bytes; });
  REQUIRE(paused);
  std::optional<double> stalled[2];
  for (int w = 0; w < 2; ++w) {
    stalled[w] = WaitForBackpressureStall(*service, w, kBufferElements);
    INFO("worker " << w << "\n" << service->Logs());
    REQUIRE(stalled[w].has_value());
  }
  const int64_t produced_by_victim = static_cast<int64_t>(*stalled[0]);
  auto produced_by = [&](int w) { return WorkerMetric(*service, w, "sluice_worker_elements_produced_total"); };
  // The stalled workers' gauges (refreshed at each heartbeat) show a full buffer and their task.
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    CHECK(WorkerMetric(*service, w, "sluice_worker_buffered_elements") == kBufferElements);
    CHECK(WorkerMetric(*service, w, "sluice_worker_active_tasks") == 1);
    CHECK(WorkerMetric(*service, w, "sluice_worker_busy_seconds_total") > 0);
    CHECK(WorkerMetric(*service, w, "sluice_worker_bytes_produced_total") >=
          WorkerMetric(*service, w, "sluice_worker_elements_produced_total") * kPadLength * 8);
  }
  REQUIRE(produced_by(0) == produced_by_victim);  // still stalled at the kill

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
  std::cout << "worker kill -9: received " << values.size() << ", distinct " << counts.size() << ", lost " << lost
            << "; the victim produced " << produced_by_victim << " and delivered " << from_victim
            << " (undelivered " << undelivered << ")" << std::endl;
  INFO("received " << values.size() << ", distinct " << counts.size() << ", lost " << lost << "; the victim produced "
                   << produced_by_victim << " and delivered " << from_victim << "; missing "
                   << MissingRanges(counts, kElements));
  CHECK(Duplicates(counts) == "");
  CHECK(BadSplitShapes(counts, kSplitSize) == "");
  CHECK(undelivered >= 0);
  // docs/dataservice.md: a lost worker takes with it what it had produced but not delivered (its
  // buffer, its stream, the element it held) plus, for the one split it was reading, the part of
  // its lease it had not read (at most --split_lease_max_elements). The rest of that split (a
  // remainder) was read by the survivor. (With no remainders, the unread rest of the split would be
  // lost too: up to kSplitSize.)
  CHECK(lost <= undelivered + kMaxLease);
  CHECK(lost >= undelivered);
  CHECK(client->stats().job_finished);
  auto removals = service->ScrapeDispatcher();
  REQUIRE(removals.ok());
  CHECK(local::SumSamples(*removals, "sluice_dispatcher_worker_removals_total", {{"reason", "heartbeat timeout"}}) == 1);
  // The victim stalled mid-split (its source blocked on a full buffer), so at least that split's
  // rest came back as a remainder.
  CHECK(local::SumSamples(*removals, "sluice_dispatcher_split_remainders_total", {}) >= 1);
}

TEST_CASE("kill -9 of a worker under --max_undelivered_elements: the loss stays within the cap, both sides report it") {
  // The buffer (256 elements) would let the victim hold far more; the cap holds it to kCap.
  constexpr int64_t kCap = 64;
  auto options = TestServiceOptions(/*worker_timeout_ms=*/2000);
  options.worker_flags = {absl::StrCat("--max_undelivered_elements=", kCap)};
  options.worker_flags.insert(options.worker_flags.end(), kLeaseFlags.begin(), kLeaseFlags.end());
  auto service = StartService(2, options);
  const auto client_options = DynamicClient(*service);
  auto client = MakeClient(client_options);

  std::vector<int64_t> values = ReadSome(*client, 1500);
  REQUIRE(values.size() == 1500);
  // Stop reading: the client's buffer fills and it receives nothing more. Two heartbeats later
  // (the second began after the first ended) the dispatcher has its final receipts.
  const bool paused = PollUntil([&] { return client->stats().buffered_bytes >= client_options.max_buffered_bytes; });
  REQUIRE(paused);
  const int64_t heartbeats_at_pause = client->stats().heartbeats_ok;
  REQUIRE(PollUntil([&] { return client->stats().heartbeats_ok >= heartbeats_at_pause + 2; }));
  // Each worker then produces up to kCap beyond what the client reported, and stops.
  std::optional<double> stalled[2];
  for (int w = 0; w < 2; ++w) {
    stalled[w] = WaitForBackpressureStall(*service, w, std::nullopt);
    INFO("worker " << w << "\n" << service->Logs());
    REQUIRE(stalled[w].has_value());
    CHECK(WorkerMetric(*service, w, "sluice_worker_buffered_elements") < 256);  // the cap stopped it, not the buffer
  }
  const int64_t produced_by_victim = static_cast<int64_t>(*stalled[0]);
  auto produced_by = [&](int w) { return WorkerMetric(*service, w, "sluice_worker_elements_produced_total"); };
  REQUIRE(produced_by(0) == produced_by_victim);
  // The cap at work: together the stalled workers ran at most kCap each beyond what the paused
  // client had received (the rest of their 256-element buffers stayed empty).
  int64_t received_at_stall = 0;
  for (const auto& [task, n] : client->stats().elements_received_by_task) received_at_stall += n;
  const int64_t ahead = static_cast<int64_t>(produced_by(0) + produced_by(1)) - received_at_stall;
  std::cout << "--max_undelivered_elements=" << kCap << ": at the stall the workers ran " << ahead
            << " elements ahead of the client's receipts" << std::endl;
  CHECK(ahead >= 0);
  CHECK(ahead <= 2 * kCap);

  service->KillWorker(0);
  std::vector<int64_t> rest = ReadAll(*client);
  values.insert(values.end(), rest.begin(), rest.end());
  const auto counts = Counts(values);
  const int64_t lost = kElements - static_cast<int64_t>(counts.size());
  INFO(service->Logs());
  const int64_t from_survivor = static_cast<int64_t>(produced_by(1));
  const int64_t from_victim = static_cast<int64_t>(counts.size()) - from_survivor;
  const int64_t undelivered = produced_by_victim - from_victim;
  auto dispatcher = service->ScrapeDispatcher();
  REQUIRE(dispatcher.ok());
  const double estimate = local::SumSamples(*dispatcher, "sluice_dispatcher_elements_lost_estimate_total", {});
  const client::ClientStats stats = client->stats();
  std::cout << "worker kill -9 with --max_undelivered_elements=" << kCap << ": lost " << lost << " (bound "
            << kCap + kMaxLease << "); the victim produced " << produced_by_victim << " and delivered " << from_victim
            << " (undelivered " << undelivered << "); dispatcher estimate " << estimate << ", client's "
            << stats.elements_lost_estimate << std::endl;
  INFO("lost " << lost << ", undelivered " << undelivered << ", estimate " << estimate << "; missing "
               << MissingRanges(counts, kElements));
  CHECK(Duplicates(counts) == "");
  CHECK(BadSplitShapes(counts, kSplitSize) == "");
  CHECK(stats.job_finished);
  // The bound the user chose: what the victim produced beyond the client's receipts, plus the
  // unread part of the lease of the split it was reading.
  CHECK(undelivered >= 0);
  CHECK(undelivered <= kCap);
  CHECK(lost >= undelivered);
  CHECK(lost <= kCap + kMaxLease);
  // The estimate is exactly the victim's produced-but-never-received elements; the client reads it
  // from its heartbeat answers.
  CHECK(estimate == static_cast<double>(undelivered));
  CHECK(stats.elements_lost_estimate == undelivered);
  int64_t received = 0;
  for (const auto& [task, n] : stats.elements_received_by_task) received += n;
  CHECK(received == static_cast<int64_t>(values.size()));
  CHECK(stats.elements_received_by_task.size() == 2);
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
  auto client_options = DynamicClient(*service);
  auto client = MakeClient(client_options);
  std::vector<int64_t> values = ReadSome(*client, 1500);
  REQUIRE(values.size() == 1500);
  CHECK(static_cast<int64_t>(values.size()) < kElements);
  // The client stops reading, so the job cannot end before the restart: its workers stall with
  // elements left, and the dispatcher lists the job unfinished.
  REQUIRE(PollUntil([&] { return client->stats().buffered_bytes >= client_options.max_buffered_bytes; }));
  auto before = service->GetState();
  REQUIRE(before.ok());
  REQUIRE(before->jobs_size() == 1);
  const int64_t job_id = before->jobs(0).job_id();
  CHECK(job_id == client->job_id());
  CHECK_FALSE(before->jobs(0).finished());
  CHECK_FALSE(client->stats().job_finished);
  const int64_t failures_before = client->stats().heartbeat_failures;

  service->KillDispatcher();
  // While it is down, the client's and every worker's heartbeats fail.
  const bool client_noticed = PollUntil([&] { return client->stats().heartbeat_failures > failures_before; });
  bool workers_noticed = true;
  for (int w = 0; w < 2; ++w) {
    workers_noticed &= PollUntil(
        [&] { return service->worker(w).process->CountLines("heartbeat to the dispatcher failed") > 0; });
  }
  INFO(service->Logs());
  REQUIRE(client_noticed);
  REQUIRE(workers_noticed);

  REQUIRE(service->StartDispatcher().ok());
  auto replayed = service->dispatcher().process->WaitForLine("msg=\"journal replayed\"", absl::Seconds(10));
  REQUIRE(replayed.ok());
  // Reconnected: each worker says so, the client's heartbeats succeed again, and the restarted
  // dispatcher knows the same unfinished job and both workers.
  // (The client's wait is reported, not asserted: about 0.1 s since its retries wait for the
  // channel to connect; 5-15 s before, when only gRPC's backup poller drove the reconnection.)
  const int64_t ok_at_restart = client->stats().heartbeats_ok;
  const absl::Time restarted = absl::Now();
  CHECK(PollUntil([&] { return client->stats().heartbeats_ok > ok_at_restart; }, absl::Seconds(90)));
  std::cout << "dispatcher kill -9: the client's heartbeats succeeded again " << absl::FormatDuration(absl::Now() - restarted)
            << " after the restart" << std::endl;
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    CHECK(PollUntil([&] {
      return service->worker(w).process->CountLines("dispatcher reachable again; re-registered") > 0;
    }));
  }
  absl::StatusOr<service::GetStateResponse> after;
  CHECK(PollUntil([&] { return (after = service->GetState()).ok(); }));
  INFO(after.status().ToString());
  REQUIRE(after.ok());
  REQUIRE(after->jobs_size() == 1);
  CHECK(after->jobs(0).job_id() == job_id);
  CHECK_FALSE(after->jobs(0).finished());
  CHECK(after->workers_size() == 2);

  std::vector<int64_t> rest = ReadAll(*client);
  values.insert(values.end(), rest.begin(), rest.end());
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

TEST_CASE("SIGTERM of a worker mid-stream: it hands its splits back, exits cleanly, deregisters, nothing is lost") {
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
  std::cout << "worker SIGTERM: exited (" << local::DescribeWaitStatus(*status) << ") "
            << absl::FormatDuration(took) << " after the signal" << std::endl;
  // Exit status 0: the drain finished within the worker's 2 s budget (past it, its watchdog exits
  // with status 3).
  CHECK(local::DescribeWaitStatus(*status) == "exit 0");
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
  // Its splits went back at its readers' positions and what it had read was served before it left
  // (the client reads on, within the hand-back budget): every element exactly once.
  INFO("missing: " << MissingRanges(counts, kElements));
  CHECK(static_cast<int64_t>(counts.size()) == kElements);
  CHECK(absl::StrContains(service->Logs(), "input_handed_back=true"));
}

}  // namespace
}  // namespace sluice::e2e

namespace sluice::e2e {
namespace {

// Same-host shared memory (docs/dataservice.md): the client and the workers share a host, so 32 KiB
// elements come through the workers' rings. kill -9 of a worker mid-stream: the client's reader
// reconnects as over the socket, the epoch completes without a duplicate, and the victim's rings
// do not outlive it (unlinked once attached; any other is removed by the next worker's start-up).
TEST_CASE("kill -9 of a worker streaming through shared memory: no duplicates, the epoch completes, no ring left") {
  testing::TempDir shm_dir;
  auto options = TestServiceOptions(/*worker_timeout_ms=*/2000);
  options.worker_flags = {"--buffer_elements=8", absl::StrCat("--shm_dir=", shm_dir.path().string())};
  options.worker_flags.insert(options.worker_flags.end(), kLeaseFlags.begin(), kLeaseFlags.end());
  auto service = StartService(2, options);
  constexpr int64_t kBig = 600;
  auto client_options = ClientOptions(service->dispatcher_address(), PaddedRangePipeline(kBig, 20, 4096),
                                      service::SHARDING_DYNAMIC);
  client_options.compression = service::COMPRESSION_NONE;
  auto client = MakeClient(client_options);
  const int64_t shm_before = rpc::ShmElementsReceived();
  std::vector<int64_t> values = ReadSome(*client, 150);
  REQUIRE(values.size() == 150);
  INFO(service->Logs());
  CHECK(rpc::ShmElementsReceived() > shm_before);  // the rings are in use
  CHECK(WorkerMetric(*service, 1, "sluice_worker_shm_elements_total") > 0);
  const pid_t victim = service->worker(0).process->pid();
  service->KillWorker(0);
  std::vector<int64_t> rest = ReadAll(*client);
  values.insert(values.end(), rest.begin(), rest.end());
  const auto counts = Counts(values);
  INFO("received " << values.size() << ", distinct " << counts.size() << "; missing " << MissingRanges(counts, kBig));
  CHECK(Duplicates(counts) == "");
  CHECK(BadSplitShapes(counts, 20) == "");
  CHECK(client->stats().job_finished);
  // A worker starting on the same directory removes whatever ring the victim left behind.
  auto added = service->AddWorker();  // with every worker's flags: the same --shm_dir
  INFO(added.status().ToString());
  REQUIRE(added.ok());
  for (const auto& f : std::filesystem::directory_iterator(shm_dir.path())) {
    CHECK(f.path().filename().string().rfind(absl::StrCat(rpc::kShmFilePrefix, rpc::ShmPidNamespace(), "-", victim, "-"), 0) != 0);
  }
}

// A trainer holding the elements it received (views into the worker's ring: no copy) pins the
// ring; the worker sends what does not fit as bytes, so the client still receives every element,
// and the held views stay readable after the stream and the client are gone.
TEST_CASE("a client holding shared-memory elements still receives the rest, and held views outlive the client") {
  testing::TempDir shm_dir;
  auto options = TestServiceOptions(/*worker_timeout_ms=*/2000);
  options.worker_flags = {"--buffer_elements=8", absl::StrCat("--shm_dir=", shm_dir.path().string()),
                          "--shm_ring_bytes=1048576"};  // room for 30 elements of 32 KiB
  auto service = StartService(1, options);
  constexpr int64_t kElements = 300;
  auto client_options = ClientOptions(service->dispatcher_address(), PaddedRangePipeline(kElements, 20, 4096),
                                      service::SHARDING_OFF);
  client_options.compression = service::COMPRESSION_NONE;
  auto client = MakeClient(client_options);
  const int64_t held_before = rpc::ShmElementsHeld();
  std::vector<pipeline::Element> kept;  // every element, held to the end
  while (std::optional<pipeline::Element> e = Next(*client)) kept.push_back(*std::move(e));
  INFO(service->Logs());
  REQUIRE(static_cast<int64_t>(kept.size()) == kElements);
  std::vector<int64_t> values;
  int64_t views = 0;
  for (const pipeline::Element& e : kept) {
    values.push_back(IntField(e));
    if (rpc::IsShmRingView(e.Find("value")->buffer().owner)) ++views;
  }
  const auto counts = Counts(values);
  CHECK(CountProblems(counts, kElements, 1) == "");
  INFO(views << " elements held as views");
  CHECK(views > 0);
  CHECK(rpc::ShmElementsHeld() - held_before >= views);
  CHECK(WorkerMetric(*service, 0, "sluice_worker_shm_fallback_elements_total") > 0);  // the ring filled
  client.reset();
  service.reset();
  std::vector<int64_t> again;
  for (const pipeline::Element& e : kept) again.push_back(IntField(e));
  CHECK(again == values);
}

}  // namespace
}  // namespace sluice::e2e
