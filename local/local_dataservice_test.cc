// The local process supervisor with real sluice-dispatcher and sluice-worker processes (from the
// build's bin/) and a real C++ client: starting, listing, stopping, killing and restarting
// workers; CPU limits; several threads at once; and DrainAndStopWorkers, which must lose no
// element of a job that is being read.
#include "local/local_dataservice.h"

#include <sched.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "dataplane/client/data_service_client.h"
#include "dataplane/pipeline/spec_parser.h"
#include "testing/test_util.h"

namespace sluice::local {
namespace {

LocalDataServiceOptions Options() {
  LocalDataServiceOptions options;
  options.bin_dir = sluice::testing::BinaryDir() + "/bin";
  options.heartbeat_interval_ms = 100;
  options.worker_timeout_ms = 30000;  // only deregistrations remove workers in these tests
  return options;
}

std::unique_ptr<LocalDataService> Start(int workers, LocalDataServiceOptions options = Options()) {
  auto service = std::make_unique<LocalDataService>(std::move(options));
  absl::Status started = service->StartDispatcher();
  INFO(started.ToString());
  REQUIRE(started.ok());
  if (workers > 0) {
    auto added = service->AddWorkers(workers);
    INFO(added.status().ToString());
    REQUIRE(added.ok());
  }
  absl::Status registered = service->WaitForWorkers(workers, absl::Seconds(60));
  INFO(registered.ToString() << "\n" << service->Logs());
  REQUIRE(registered.ok());
  return service;
}

std::set<std::string> RegisteredAddresses(const LocalDataService& service) {
  auto state = service.GetState();
  REQUIRE(state.ok());
  std::set<std::string> out;
  for (const auto& w : state->workers()) out.insert(w.address());
  return out;
}

std::vector<std::string> ServingNames(const LocalDataService& service) {
  std::vector<std::string> out;
  for (const WorkerStatus& w : service.ListWorkers()) {
    if (w.serving()) out.push_back(w.name);
  }
  return out;
}

// Reads a dynamically sharded range job on a thread of its own, keeping every value.
class Reader {
 public:
  Reader(const std::string& dispatcher, int64_t n, int64_t split_size) {
    client::DataServiceClientOptions o;
    o.dispatcher_address = dispatcher;
    auto def = pipeline::ParsePipelineSpec(
        absl::StrCat("source: {range: {stop: ", n, ", split_size: ", split_size, "}}\n"), "<test>");
    REQUIRE(def.ok());
    o.pipeline = *def;
    o.sharding = service::SHARDING_DYNAMIC;
    o.heartbeat_interval = absl::Milliseconds(100);
    o.initial_backoff = absl::Milliseconds(20);
    o.max_backoff = absl::Milliseconds(500);
    auto created = client::DataServiceClient::Create(o);
    INFO(created.status().ToString());
    REQUIRE(created.ok());
    client_ = *std::move(created);
    thread_ = std::thread([this] { Loop(); });
  }
  ~Reader() {
    client_->Cancel();
    thread_.join();
  }
  // Waits until at least `n` values were read (or the reading ended).
  int64_t WaitFor(int64_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_ || static_cast<int64_t>(values_.size()) >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(90));
    return static_cast<int64_t>(values_.size());
  }
  // Waits for the end of the job; returns every value read.
  std::vector<int64_t> Join() {
    absl::MutexLock lock(&mu_);
    auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_; };
    mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(90));
    return values_;
  }
  std::string error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }
  bool job_finished() const { return client_->stats().job_finished; }

 private:
  void Loop() {
    while (true) {
      auto next = client_->GetNext(absl::Seconds(60));
      absl::MutexLock lock(&mu_);
      if (!next.ok()) {
        error_ = next.status().ToString();
        ended_ = true;
        return;
      }
      if (!next->has_value()) {
        ended_ = true;
        return;
      }
      auto value = (*next)->Get("value");
      if (!value.ok() || !(*value)->AsInt64().ok()) {
        error_ = "an element without an int64 'value'";
        ended_ = true;
        return;
      }
      values_.push_back(*(*value)->AsInt64());
    }
  }

  std::unique_ptr<client::DataServiceClient> client_;
  absl::Mutex mu_;
  std::vector<int64_t> values_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Values in [0, n) not seen exactly once, and values outside it (empty: each exactly once).
std::string CountProblems(const std::vector<int64_t>& values, int64_t n) {
  std::map<int64_t, int> counts;
  for (int64_t v : values) ++counts[v];
  std::string out;
  int shown = 0;
  for (int64_t v = 0; v < n && shown < 20; ++v) {
    auto it = counts.find(v);
    const int c = it == counts.end() ? 0 : it->second;
    if (c != 1) {
      absl::StrAppend(&out, v, "x", c, " ");
      ++shown;
    }
  }
  for (const auto& [v, c] : counts) {
    if (v < 0 || v >= n) absl::StrAppend(&out, "outside:", v, " ");
  }
  return out;
}

TEST_CASE("Workers by index and name: add, list, SIGTERM, kill -9, restart on the same address") {
  auto service = Start(2);
  CHECK(service->num_workers() == 2);
  CHECK(ServingNames(*service) == std::vector<std::string>{"worker-0", "worker-1"});
  CHECK(service->WorkerIndex("worker-1") == 1);
  CHECK(!service->WorkerIndex("worker-7").has_value());
  CHECK(!service->WorkerIndex("worker-01").has_value());
  const std::string address0 = service->worker(0).address;
  CHECK(RegisteredAddresses(*service) == std::set<std::string>{address0, service->worker(1).address});

  // SIGTERM: the worker deregisters and exits 0; it stays listed, stopped.
  REQUIRE(service->StopWorker(1).ok());
  CHECK(RegisteredAddresses(*service) == std::set<std::string>{address0});
  auto listed = service->ListWorkers();
  REQUIRE(listed.size() == 2);
  CHECK(listed[1].state == WorkerState::kStopped);
  CHECK(listed[1].exited);
  CHECK(listed[1].exit_status == "exit 0");
  CHECK(ServingNames(*service) == std::vector<std::string>{"worker-0"});

  // kill -9: it exits with signal 9; restarted, it comes back under the same address.
  service->KillWorker(0);
  REQUIRE(service->worker(0).process->Wait(absl::Seconds(30)).ok());
  CHECK(service->ListWorkers()[0].exit_status == "signal 9");
  CHECK(ServingNames(*service).empty());
  REQUIRE(service->RestartWorker(0).ok());
  CHECK(service->worker(0).address == address0);
  CHECK(service->ListWorkers()[0].runs == 2);
  CHECK(absl::IsFailedPrecondition(service->RestartWorker(0)));  // it runs
  REQUIRE(service->RestartWorker(1).ok());
  REQUIRE(service->WaitForWorkers(2, absl::Seconds(60)).ok());
  CHECK(ServingNames(*service) == std::vector<std::string>{"worker-0", "worker-1"});
  CHECK(absl::StrContains(service->Logs(), "--- worker-0 (" + address0 + ") (earlier run) ---"));

  CHECK(absl::IsNotFound(service->StopWorker(5)));
  CHECK(absl::IsNotFound(service->RestartWorker(5)));
  CHECK_THROWS_AS(service->worker(5), std::out_of_range);
  CHECK(service->StopGracefully().ok());
}

TEST_CASE("Errors before anything runs name what is missing") {
  LocalDataServiceOptions options = Options();
  LocalDataService no_dispatcher(options);
  auto early = no_dispatcher.AddWorker();
  CHECK(absl::IsFailedPrecondition(early.status()));
  CHECK(no_dispatcher.dispatcher().process == nullptr);
  CHECK(absl::IsFailedPrecondition(no_dispatcher.ScrapeDispatcher().status()));

  options.bin_dir = "/nonexistent/bin";
  LocalDataService missing(options);
  absl::Status started = missing.StartDispatcher();
  CHECK(absl::IsNotFound(started));
  CHECK(absl::StrContains(started.message(), "/nonexistent/bin/sluice-dispatcher"));

  // A worker that exits at once (a bad flag) fails its start with its output; no index is used up.
  auto service = Start(0);
  auto bad = service->AddWorker({"--placement=orbit"});
  REQUIRE(!bad.ok());
  CHECK(absl::StrContains(bad.status().message(), "worker-0 did not start"));
  CHECK(absl::StrContains(bad.status().message(), "orbit"));
  CHECK(service->num_workers() == 0);
  // Bad requests are refused before anything starts.
  WorkerOptions negative;
  negative.cpus = -0.5;
  auto refused = service->AddWorker(negative);
  CHECK(absl::IsInvalidArgument(refused.status()));
  CHECK(absl::StrContains(refused.status().message(), "-0.5"));
  CHECK(absl::IsInvalidArgument(service->AddWorkers(-1).status()));
  CHECK(service->num_workers() == 0);
  CHECK(service->AddWorker().value() == 0);
}

TEST_CASE("One thread adds, drains and stops workers while another lists them") {
  auto service = Start(1);
  std::atomic<bool> done{false};
  std::atomic<int64_t> lists{0};
  std::string bad_view;
  std::thread ui([&] {
    while (!done.load()) {
      for (const WorkerStatus& w : service->ListWorkers()) {
        if (w.name != absl::StrCat("worker-", w.index) || w.pid <= 0 || w.address.empty()) bad_view = w.name;
      }
      ++lists;
    }
  });
  // The "actuator": its own thread, like the autoscaler's controller.
  absl::Status actuator_status;
  std::thread actuator([&] {
    auto added = service->AddWorkers(3);
    if (!added.ok()) {
      actuator_status = added.status();
      return;
    }
    if (absl::Status s = service->WaitForWorkers(4, absl::Seconds(60)); !s.ok()) {
      actuator_status = s;
      return;
    }
    actuator_status = service->DrainAndStopWorkers({"worker-1", "worker-3"}, absl::Seconds(60));
  });
  actuator.join();
  done = true;
  ui.join();
  INFO(actuator_status.ToString() << "\n" << service->Logs());
  REQUIRE(actuator_status.ok());
  CHECK(bad_view.empty());
  CHECK(lists.load() > 0);
  CHECK(ServingNames(*service) == std::vector<std::string>{"worker-0", "worker-2"});
  CHECK(RegisteredAddresses(*service) ==
        std::set<std::string>{service->worker(0).address, service->worker(2).address});
  // The children started on the actuator thread outlived it (the supervisor's spawner forked them).
  for (const WorkerStatus& w : service->ListWorkers()) {
    if (w.index == 0 || w.index == 2) CHECK(!w.exited);
  }
}

TEST_CASE("DrainAndStopWorkers in the middle of a job: the chosen workers go, no element is lost or doubled") {
  constexpr int64_t kElements = 400000;
  auto service = Start(3);
  Reader reader(service->dispatcher_address(), kElements, 500);
  REQUIRE(reader.WaitFor(20000) >= 20000);
  const std::set<std::string> keep = {service->worker(0).address};
  const absl::Time began = absl::Now();
  absl::Status drained = service->DrainAndStopWorkers({"worker-1", "worker-2"}, absl::Seconds(60));
  const bool finished_before = reader.job_finished();
  const std::vector<int64_t> values = reader.Join();
  INFO(drained.ToString() << "\n" << service->Logs());
  REQUIRE(drained.ok());
  std::cout << "drain-and-stop of 2 of 3 workers took " << absl::FormatDuration(absl::Now() - began)
            << (finished_before ? " (the job had finished meanwhile)" : " (the job was still running)") << std::endl;
  CHECK(reader.error() == "");
  CHECK(CountProblems(values, kElements) == "");
  for (int i : {1, 2}) {
    const WorkerStatus w = service->ListWorkers()[static_cast<size_t>(i)];
    CHECK(w.state == WorkerState::kStopped);
    CHECK(w.exit_status == "exit 0");  // a clean SIGTERM shutdown
  }
  CHECK(RegisteredAddresses(*service) == keep);
  CHECK(ServingNames(*service) == std::vector<std::string>{"worker-0"});
}

TEST_CASE("DrainAndStopWorkers waits while a client holds the worker's elements unread, and resumes") {
  constexpr int64_t kElements = 1000;
  auto service = Start(2);
  // A client that creates the job and reads nothing. The elements are 64 KiB and not compressed, so
  // the streams' flow control windows (a few MiB) fill and each worker keeps elements in its own
  // buffer. (Small elements would sit in the transport instead; the dispatcher's delivery receipts
  // count those as not received too: see docs/local-supervisor.md.)
  client::DataServiceClientOptions o;
  o.dispatcher_address = service->dispatcher_address();
  auto def = pipeline::ParsePipelineSpec(
      absl::StrCat("source: {range: {stop: ", kElements, ", split_size: 50}}\n",
                   "steps:\n  - map: {parallelism: 1, ops: [{reshape: {field: value, shape: [1]}}, "
                   "{pad: {field: value, length: 8192}}]}\n"),
      "<test>");
  REQUIRE(def.ok());
  o.pipeline = *def;
  o.sharding = service::SHARDING_DYNAMIC;
  o.compression = service::COMPRESSION_NONE;
  // Over the socket: with same-host shared memory the stream could also hold up to a ring (32 MiB,
  // about this worker's whole share) in transit, and the worker's buffer might never hold any.
  o.shared_memory = false;
  o.heartbeat_interval = absl::Milliseconds(100);
  o.max_outstanding_requests = 1;
  o.max_buffered_bytes = 1;  // the client's own buffer holds about one response per worker
  auto created = client::DataServiceClient::Create(o);
  REQUIRE(created.ok());
  std::unique_ptr<client::DataServiceClient> idle = *std::move(created);
  // Wait until worker-1 holds elements nobody took.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  double buffered = 0;
  while (absl::Now() < deadline && buffered == 0) {
    auto samples = service->ScrapeWorker(1);
    if (samples.ok()) buffered = SumSamples(*samples, "sluice_worker_buffered_elements");
    if (buffered == 0) absl::SleepFor(absl::Milliseconds(20));  // the gauge moves with heartbeats
  }
  REQUIRE(buffered > 0);

  // However long we wait, the drain cannot complete: the worker holds elements nobody read.
  absl::Status held = service->DrainAndStopWorkers({"worker-1"}, absl::Seconds(3));
  INFO(held.ToString());
  CHECK(absl::IsDeadlineExceeded(held));
  CHECK(absl::StrContains(held.message(), "worker-1"));
  if (!absl::StrContains(held.message(), "no answer yet")) {  // (a loaded machine may not answer in 3 s)
    // The dispatcher's verdict: elements produced and not received, or splits still held.
    CHECK((absl::StrContains(held.message(), "not yet received by clients") ||
           absl::StrContains(held.message(), "not finished") || absl::StrContains(held.message(), "still producing")));
  }
  // Left running and draining: the dispatcher lists it as draining; nothing was lost.
  CHECK(service->ListWorkers()[1].state == WorkerState::kDraining);
  CHECK(!service->ListWorkers()[1].exited);
  auto state = service->GetState();
  REQUIRE(state.ok());
  bool draining = false;
  for (const auto& w : state->workers()) draining |= w.address() == service->worker(1).address && w.draining();
  CHECK(draining);

  // Called again (from another thread, as an actuator would), it keeps waiting; the client now
  // reads everything, so the worker drains and the call completes.
  absl::Status again;
  std::thread second([&] { again = service->DrainAndStopWorkers({"worker-1"}, absl::Seconds(60)); });
  int64_t read = 0;
  while (true) {
    auto next = idle->GetNext(absl::Seconds(60));
    INFO("read " << read << ": " << next.status().ToString());
    REQUIRE(next.ok());
    if (!next->has_value()) break;
    ++read;
  }
  second.join();
  INFO(again.ToString());
  CHECK(again.ok());
  CHECK(read == kElements);
  CHECK(service->ListWorkers()[1].state == WorkerState::kStopped);
  CHECK(absl::IsFailedPrecondition(service->DrainAndStopWorkers({"worker-1"}, absl::Seconds(1))));
}

TEST_CASE("DrainAndStopWorkers refuses unknown, repeated and stopped workers before doing anything") {
  auto service = Start(2);
  absl::Status unknown = service->DrainAndStopWorkers({"worker-0", "worker-9"}, absl::Seconds(5));
  CHECK(absl::IsNotFound(unknown));
  CHECK(absl::StrContains(unknown.message(), "worker-9"));
  CHECK(absl::IsInvalidArgument(service->DrainAndStopWorkers({"worker-1", "worker-1"}, absl::Seconds(5))));
  CHECK(absl::IsNotFound(service->DrainAndStopWorkers({"dispatcher"}, absl::Seconds(5))));
  // Nothing was drained by the refused calls.
  auto state = service->GetState();
  REQUIRE(state.ok());
  for (const auto& w : state->workers()) CHECK(!w.draining());
  REQUIRE(service->StopWorker(0).ok());
  absl::Status stopped = service->DrainAndStopWorkers({"worker-0"}, absl::Seconds(5));
  CHECK(absl::IsFailedPrecondition(stopped));
  CHECK(absl::StrContains(stopped.message(), "not running"));
  // With no job, draining is immediate: the worker has no task.
  CHECK(service->DrainAndStopWorkers({"worker-1"}, absl::Seconds(30)).ok());
  CHECK(ServingNames(*service).empty());
}

// The cgroup (v1 or v2) path of `pid`'s cpu controller, from /proc/<pid>/cgroup.
std::string CpuCgroupOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cgroup"));
  std::string line, v2;
  while (std::getline(in, line)) {
    // "4:cpu,cpuacct:/path" (v1) or "0::/path" (v2)
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (controllers.empty()) v2 = line.substr(b + 1);
    for (absl::string_view c : absl::StrSplit(controllers, ',')) {
      if (c == "cpu") return line.substr(b + 1);
    }
  }
  return v2;
}

TEST_CASE("Workers under a CPU limit: each in its own cgroup (or pinned to one CPU where cgroups are not writable)") {
  LocalDataServiceOptions options = Options();
  options.cpu_quota_group = absl::StrCat("sluice-local-test-", ::getpid());
  auto service = Start(0, options);
  WorkerOptions limited;
  limited.cpus = 0.25;
  auto added = service->AddWorkers(2, limited);
  REQUIRE(added.ok());
  auto plain = service->AddWorker();
  REQUIRE(plain.ok());
  REQUIRE(service->WaitForWorkers(3, absl::Seconds(60)).ok());
  const CpuQuota* quota = service->cpu_quota();
  REQUIRE(quota != nullptr);
  INFO(quota->Describe());
  for (const auto& note : quota->notes()) INFO(note);
  const auto workers = service->ListWorkers();
  CHECK(workers[0].cpus == 0.25);
  CHECK(workers[2].cpus == 0);
  if (quota->mechanism() == QuotaMechanism::kTaskset) {
    cpu_set_t set;
    REQUIRE(sched_getaffinity(workers[0].pid, sizeof(set), &set) == 0);
    CHECK(CPU_COUNT(&set) == 1);
  } else {
    CHECK(absl::StrContains(CpuCgroupOf(workers[0].pid), absl::StrCat(options.cpu_quota_group, "/w0")));
    CHECK(absl::StrContains(CpuCgroupOf(workers[1].pid), absl::StrCat(options.cpu_quota_group, "/w1")));
    CHECK(!absl::StrContains(CpuCgroupOf(workers[2].pid), options.cpu_quota_group));
  }
  // A restarted limited worker is limited again.
  service->KillWorker(1);
  REQUIRE(service->worker(1).process->Wait(absl::Seconds(30)).ok());
  REQUIRE(service->RestartWorker(1).ok());
  if (quota->mechanism() != QuotaMechanism::kTaskset) {
    CHECK(absl::StrContains(CpuCgroupOf(service->worker(1).process->pid()), absl::StrCat(options.cpu_quota_group, "/w1")));
  }
  REQUIRE(service->StopGracefully().ok());
}

}  // namespace
}  // namespace sluice::local
