// Focused tests of the dispatcher's pieces on their own (dispatcher_service_test covers them
// together, through the RPC handlers): locality, job creation, the split service, round joins,
// drain, client metrics, retention and the journaled commit. States are built with updates.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "absl/synchronization/mutex.h"
#include "dataplane/dispatcher/client_metrics.h"
#include "dataplane/dispatcher/drain.h"
#include "dataplane/dispatcher/job_creation.h"
#include "dataplane/dispatcher/journaled_state.h"
#include "dataplane/dispatcher/locality.h"
#include "dataplane/dispatcher/retention.h"
#include "dataplane/dispatcher/round_joins.h"
#include "dataplane/dispatcher/split_service.h"
#include "dataplane/dispatcher/task_placement.h"

namespace sluice::dispatcher {
namespace {

using service::Update;

Update RegisterDataset(const std::string& id, int num_splits) {
  Update u;
  auto* r = u.mutable_register_dataset();
  r->set_dataset_id(id);
  r->mutable_pipeline()->mutable_source()->set_kind("range");
  for (int i = 0; i < num_splits; ++i) {
    auto* s = r->add_splits();
    s->set_index(i);
    s->set_path("range");
    s->set_begin(i * 10);
    s->set_end(i * 10 + 10);
  }
  return u;
}
Update RegisterWorker(const std::string& address, const std::string& host) {
  Update u;
  u.mutable_register_worker()->set_worker_address(address);
  u.mutable_register_worker()->set_worker_host(host);
  u.mutable_register_worker()->set_placement(service::PLACEMENT_REMOTE);
  return u;
}
Update CreateJob(int64_t id, service::ShardingPolicy sharding, int32_t num_consumers = 0, const std::string& name = "") {
  Update u;
  auto* c = u.mutable_create_job();
  c->set_job_id(id);
  c->mutable_spec()->set_dataset_id("d");
  c->mutable_spec()->set_sharding(sharding);
  c->mutable_spec()->set_num_epochs(1);
  c->mutable_spec()->set_num_consumers(num_consumers);
  c->mutable_spec()->set_job_name(name);
  return u;
}
Update Acquire(int64_t client, int64_t job, const std::string& host,
               service::TargetWorkers target = service::TARGET_WORKERS_AUTO, int32_t consumer_index = 0) {
  Update u;
  auto* a = u.mutable_acquire_job_client();
  a->set_consumer_index(consumer_index);
  a->set_job_client_id(client);
  a->set_job_id(job);
  a->set_client_host(host);
  a->set_target_workers(target);
  return u;
}
Update CreateTaskUpdate(int64_t id, int64_t job, const std::string& worker) {
  Update u;
  u.mutable_create_task()->set_task_id(id);
  u.mutable_create_task()->set_job_id(job);
  u.mutable_create_task()->set_worker_address(worker);
  return u;
}
Update FinishJob(int64_t id) {
  Update u;
  u.mutable_finish_job()->set_job_id(id);
  u.mutable_finish_job()->set_reason("test");
  return u;
}

// A JournaledState without a journal; Apply commits under its lock.
struct Fixture {
  JournaledState js{nullptr};
  void Apply(const Update& u) {
    absl::MutexLock lock(&js.mu);
    REQUIRE(js.Commit(u).ok());
  }
  // Dataset "d" (4 splits), workers a:1 on host "a" and b:1 on host "b".
  Fixture() {
    Apply(RegisterDataset("d", 4));
    Apply(RegisterWorker("a:1", "a"));
    Apply(RegisterWorker("b:1", "b"));
  }
};

TEST_CASE("locality: host of an address, same host, and which workers a client reads") {
  CHECK(HostOf("w1:5000") == "w1");
  CHECK(HostOf("[::1]:5000") == "::1");
  CHECK(HostOf("noport") == "noport");
  CHECK_FALSE(SameHost("", ""));
  CHECK(SameHost("a", "a"));

  Fixture f;
  absl::MutexLock lock(&f.js.mu);
  const DispatcherState& state = f.js.state();
  const DispatcherState::Worker& a = *state.FindWorker("a:1");
  const DispatcherState::Worker& b = *state.FindWorker("b:1");
  // AUTO under SHARDING_OFF: only the local worker when the client's host has one.
  CHECK(ClientWantsWorker(state, service::SHARDING_OFF, service::TARGET_WORKERS_AUTO, "a", a));
  CHECK_FALSE(ClientWantsWorker(state, service::SHARDING_OFF, service::TARGET_WORKERS_AUTO, "a", b));
  CHECK(ClientWantsWorker(state, service::SHARDING_OFF, service::TARGET_WORKERS_AUTO, "elsewhere", b));
  CHECK(ClientWantsWorker(state, service::SHARDING_DYNAMIC, service::TARGET_WORKERS_AUTO, "a", b));
  CHECK_FALSE(ClientWantsWorker(state, service::SHARDING_DYNAMIC, service::TARGET_WORKERS_LOCAL, "a", b));
  CHECK(ClientWantsWorker(state, service::SHARDING_OFF, service::TARGET_WORKERS_ANY, "a", b));
}

TEST_CASE("locality: a LOCAL client reads only its host's tasks, a coordinated consumer reads all") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_DYNAMIC));
  f.Apply(Acquire(1, 1, "a", service::TARGET_WORKERS_LOCAL));
  f.Apply(CreateTaskUpdate(1, 1, "a:1"));
  f.Apply(CreateTaskUpdate(2, 1, "b:1"));
  f.Apply(CreateJob(2, service::SHARDING_OFF, /*num_consumers=*/2));
  f.Apply(Acquire(2, 2, "a"));
  f.Apply(CreateTaskUpdate(3, 2, "a:1"));
  f.Apply(CreateTaskUpdate(4, 2, "b:1"));
  absl::MutexLock lock(&f.js.mu);
  const DispatcherState& state = f.js.state();
  auto local = TasksReadBy(state, *state.FindJob(1), *state.FindJobClient(1));
  REQUIRE(local.size() == 1);
  CHECK(local[0]->id == 1);
  CHECK(TasksReadBy(state, *state.FindJob(2), *state.FindJobClient(2)).size() == 2);
  CHECK(JobWantsWorker(state, *state.FindJob(1), *state.FindWorker("a:1")));
  CHECK_FALSE(JobWantsWorker(state, *state.FindJob(1), *state.FindWorker("b:1")));
}

TEST_CASE("job creation: malformed requests are refused with the field named") {
  auto refused = [](const service::GetOrCreateJobRequest& r) { return std::string(CheckJobRequest(r).message()); };
  service::GetOrCreateJobRequest r;
  CHECK(CheckJobRequest(r).ok());
  r.mutable_spec()->set_sharding(static_cast<service::ShardingPolicy>(99));
  CHECK_THAT(std::string(refused(r)), Catch::Contains("spec.sharding 99"));
  r = {};
  r.mutable_spec()->set_num_epochs(-2);
  CHECK_THAT(std::string(refused(r)), Catch::Contains("spec.num_epochs is -2"));
  r = {};
  r.mutable_spec()->set_num_consumers(65537);
  CHECK_THAT(std::string(refused(r)), Catch::Contains("spec.num_consumers is 65537"));
  r = {};
  r.mutable_spec()->set_num_consumers(2);
  r.mutable_spec()->set_sharding(service::SHARDING_DYNAMIC);
  CHECK_THAT(std::string(refused(r)), Catch::Contains("needs sharding SHARDING_OFF"));
  r = {};
  r.set_iteration(3);
  CHECK_THAT(std::string(refused(r)), Catch::Contains("with a spec.job_name"));
  r = {};
  r.mutable_spec()->set_num_consumers(2);
  r.set_consumer_index(2);
  CHECK_THAT(std::string(refused(r)), Catch::Contains("consumer_index is 2"));
  r = {};
  r.mutable_spec()->set_cross_job_sharing(true);
  r.mutable_spec()->set_sharding(service::SHARDING_FILE);
  CHECK(CheckJobRequest(r).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("job creation: --sharing applies to plain SHARDING_OFF jobs that leave it unset") {
  service::JobSpec spec;
  CHECK(NormalizedJobSpec(spec, true).cross_job_sharing());
  CHECK_FALSE(NormalizedJobSpec(spec, false).cross_job_sharing());
  CHECK(NormalizedJobSpec(spec, true).num_epochs() == 1);
  spec.set_cross_job_sharing(false);
  CHECK_FALSE(NormalizedJobSpec(spec, true).cross_job_sharing());
  service::JobSpec coordinated;
  coordinated.set_num_consumers(2);
  CHECK_FALSE(NormalizedJobSpec(coordinated, true).cross_job_sharing());
}

TEST_CASE("job creation: a named job's iterations are joined, created, or over") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_OFF, 0, "train"));
  absl::MutexLock lock(&f.js.mu);
  service::JobSpec spec;
  spec.set_job_name("train");
  JobLookup running = FindJobFor(f.js.state(), spec, 1);
  CHECK(running.job != nullptr);
  CHECK_FALSE(running.over);
  JobLookup next = FindJobFor(f.js.state(), spec, 2);
  CHECK(next.job == nullptr);
  CHECK_FALSE(next.over);
  REQUIRE(f.js.Commit(FinishJob(1)).ok());
  CHECK(FindJobFor(f.js.state(), spec, 1).over);
  CHECK(FindJobFor(f.js.state(), spec, 0).job == nullptr);  // a finished job's name is reused
  spec.set_job_name("");
  CHECK(FindJobFor(f.js.state(), spec, 0).job == nullptr);
}

TEST_CASE("job creation: a joined job must have the requested spec") {
  service::JobSpec have;
  have.set_job_name("train");
  have.set_dataset_id("d");
  service::JobSpec want = have;
  CHECK(CheckSameJob(have, want).ok());
  want.set_sharding(service::SHARDING_DYNAMIC);
  absl::Status s = CheckSameJob(have, want);
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s.message() == "job 'train' exists with sharding OFF, request has DYNAMIC");
  want = have;
  want.set_compression(service::COMPRESSION_ZSTD);
  CHECK_THAT(std::string(CheckSameJob(have, want).message()), Catch::Contains("compression"));
}

TEST_CASE("job creation: static sharding fixes the workers the client reads, or is unavailable") {
  Fixture f;
  absl::MutexLock lock(&f.js.mu);
  service::GetOrCreateJobRequest request;
  request.set_client_host("a");
  service::JobSpec spec;
  spec.set_dataset_id("d");
  spec.set_sharding(service::SHARDING_FILE);
  spec.set_target_workers(service::TARGET_WORKERS_LOCAL);
  auto create = CreateJobUpdate(f.js.state(), spec, request);
  REQUIRE(create.ok());
  REQUIRE(create->create_job().static_workers_size() == 1);
  CHECK(create->create_job().static_workers(0) == "a:1");
  CHECK(create->create_job().job_id() == f.js.state().next_job_id());
  request.set_client_host("c");
  auto none = CreateJobUpdate(f.js.state(), spec, request);
  CHECK(none.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(none.status().message()), Catch::Contains("no worker on the client's host 'c'"));
}

TEST_CASE("split service: malformed and misdirected requests are refused") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_DYNAMIC));
  f.Apply(CreateTaskUpdate(1, 1, "a:1"));
  f.Apply(CreateJob(2, service::SHARDING_OFF));
  f.Apply(CreateTaskUpdate(2, 2, "a:1"));
  service::GetSplitsRequest r;
  r.set_max_splits(-1);
  CHECK(CheckSplitsArguments(r).code() == absl::StatusCode::kInvalidArgument);
  r.set_max_splits(1);
  r.set_epoch(-1);
  CHECK(CheckSplitsArguments(r).code() == absl::StatusCode::kInvalidArgument);
  absl::MutexLock lock(&f.js.mu);
  r = {};
  r.set_task_id(9);
  CHECK(CheckSplitsRequest(f.js.state(), r).status().code() == absl::StatusCode::kNotFound);
  r.set_task_id(1);
  r.set_worker_address("b:1");
  CHECK(CheckSplitsRequest(f.js.state(), r).status().code() == absl::StatusCode::kFailedPrecondition);
  r.set_worker_address("a:1");
  r.add_started_split_indices(4);
  CHECK_THAT(std::string(CheckSplitsRequest(f.js.state(), r).status().message()),
             Catch::Contains("started_split_indices[0] is 4"));
  r.clear_started_split_indices();
  r.add_progress()->set_lease_end(-2);
  CHECK_THAT(std::string(CheckSplitsRequest(f.js.state(), r).status().message()), Catch::Contains("progress[0]"));
  r.clear_progress();
  auto call = CheckSplitsRequest(f.js.state(), r);
  REQUIRE(call.ok());
  CHECK(call->job_id == 1);
  CHECK(call->worker_address == "a:1");
  r.set_task_id(2);
  CHECK_THAT(std::string(CheckSplitsRequest(f.js.state(), r).status().message()),
             Catch::Contains("GetSplits serves SHARDING_DYNAMIC jobs only"));
}

TEST_CASE("split service: one task reads an epoch to its end") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_DYNAMIC));
  f.Apply(CreateTaskUpdate(1, 1, "a:1"));
  absl::MutexLock lock(&f.js.mu);
  service::GetSplitsRequest r;
  r.set_task_id(1);
  SplitsCall call = *CheckSplitsRequest(f.js.state(), r);
  service::GetSplitsRequest ahead = r;
  ahead.set_epoch(2);  // the job is at epoch 0
  service::GetSplitsResponse refused;
  CHECK(ServeSplits(f.js, call, ahead, 3, nullptr, &refused).code() == absl::StatusCode::kInvalidArgument);
  service::GetSplitsResponse first;
  REQUIRE(ServeSplits(f.js, call, r, /*max_splits=*/3, nullptr, &first).ok());
  REQUIRE(first.splits_size() == 3);
  CHECK(first.splits(0).index() == 0);
  CHECK_FALSE(first.end_of_splits());
  // Nothing is handed out with max_splits 0, and the end is not told while splits are unstarted.
  service::GetSplitsResponse none;
  REQUIRE(ServeSplits(f.js, call, r, 0, nullptr, &none).ok());
  CHECK(none.splits_size() == 0);
  CHECK_FALSE(none.end_of_splits());
  service::GetSplitsResponse last;
  REQUIRE(ServeSplits(f.js, call, r, 3, nullptr, &last).ok());
  REQUIRE(last.splits_size() == 1);
  CHECK(last.splits(0).index() == 3);
  for (uint64_t i = 0; i < 4; ++i) r.add_started_split_indices(i);
  service::GetSplitsResponse end;
  REQUIRE(ServeSplits(f.js, call, r, 3, nullptr, &end).ok());
  CHECK(end.splits_size() == 0);
  CHECK(end.end_of_splits());
}

TEST_CASE("split service: a draining worker's task gets no splits") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_DYNAMIC));
  f.Apply(CreateTaskUpdate(1, 1, "a:1"));
  absl::MutexLock lock(&f.js.mu);
  REQUIRE(MarkDraining(f.js, "a:1", /*requested=*/true).ok());
  service::GetSplitsRequest r;
  r.set_task_id(1);
  service::GetSplitsResponse response;
  REQUIRE(ServeSplits(f.js, *CheckSplitsRequest(f.js.state(), r), r, 3, nullptr, &response).ok());
  CHECK(response.splits_size() == 0);
  CHECK_FALSE(response.end_of_splits());
}

TEST_CASE("round joins: a late worker joins once every consumer holds the proposed round") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_OFF, /*num_consumers=*/2));
  f.Apply(Acquire(1, 1, "a"));
  f.Apply(Acquire(2, 1, "b", service::TARGET_WORKERS_AUTO, /*consumer_index=*/1));
  f.Apply(CreateTaskUpdate(1, 1, "a:1"));
  RoundJoins joins;
  absl::MutexLock lock(&f.js.mu);
  const DispatcherState::Job& job = *f.js.state().FindJob(1);
  std::optional<int64_t> block;
  REQUIRE(joins.OnClientHeartbeat(f.js, job, 1, /*current_round=*/100, /*acked=*/0, &block).ok());
  CHECK_FALSE(block.has_value());  // no join pending
  CHECK(f.js.state().FindJob(1)->round_watermark == 100 + kRoundWatermarkLookahead);
  CHECK(joins.StartingRound(job) == 100 + kStartingRoundMargin);

  joins.AddWorker(job, "b:1", 0, 0);
  REQUIRE(joins.CompleteIfAgreed(f.js, 1).ok());
  CHECK_FALSE(HasTaskOn(f.js.state(), job, "b:1"));  // nobody holds the round yet
  const int64_t proposed = 100 + kStartingRoundMargin;
  REQUIRE(joins.OnClientHeartbeat(f.js, job, 1, 101, proposed, &block).ok());
  REQUIRE(block.has_value());
  CHECK(*block == proposed);
  CHECK_FALSE(HasTaskOn(f.js.state(), job, "b:1"));
  block.reset();
  REQUIRE(joins.OnClientHeartbeat(f.js, job, 2, 102, proposed, &block).ok());
  CHECK_FALSE(block.has_value());  // the join completed
  REQUIRE(HasTaskOn(f.js.state(), job, "b:1"));
  for (int64_t t : job.tasks) {
    if (f.js.state().FindTask(t)->worker_address == "b:1") CHECK(f.js.state().FindTask(t)->starting_round == proposed);
  }
  CHECK(joins.PendingJobs().empty());
}

TEST_CASE("round joins: a client past the proposal moves it further ahead, a removed worker drops out") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_OFF, /*num_consumers=*/1));
  f.Apply(Acquire(1, 1, "a"));
  f.Apply(CreateTaskUpdate(1, 1, "a:1"));
  RoundJoins joins;
  absl::MutexLock lock(&f.js.mu);
  const DispatcherState::Job& job = *f.js.state().FindJob(1);
  std::optional<int64_t> block;
  REQUIRE(joins.OnClientHeartbeat(f.js, job, 1, 10, 0, &block).ok());
  joins.AddWorker(job, "b:1", 0, 0);
  const int64_t first = 10 + kStartingRoundMargin;
  REQUIRE(joins.OnClientHeartbeat(f.js, job, 1, first, 0, &block).ok());
  REQUIRE(block.has_value());
  CHECK(*block == first + 2 * kStartingRoundMargin);
  joins.WorkerRemoved("b:1");
  CHECK(joins.PendingJobs().empty());
  joins.ClientReplaced(7, "replaced");
  REQUIRE(joins.ReplacedReason(7) != nullptr);
  CHECK(*joins.ReplacedReason(7) == "replaced");
  CHECK(joins.ReplacedReason(8) == nullptr);
}

TEST_CASE("task placement: tasks follow readers, and a job finishes with the tasks its clients read") {
  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_OFF));
  f.Apply(Acquire(1, 1, "a"));
  RoundJoins joins;
  absl::MutexLock lock(&f.js.mu);
  REQUIRE(PlaceNewJobTasks(f.js, 1).ok());
  const DispatcherState::Job& job = *f.js.state().FindJob(1);
  CHECK(HasTaskOn(f.js.state(), job, "a:1"));
  CHECK_FALSE(HasTaskOn(f.js.state(), job, "b:1"));  // AUTO/OFF with a local worker: only that one
  REQUIRE(f.js.Commit(RegisterWorker("c:1", "a")).ok());
  REQUIRE(CreateTasksForWorker(f.js, joins, "c:1").ok());
  CHECK(HasTaskOn(f.js.state(), job, "c:1"));
  service::TaskDef def;
  FillTaskDef(f.js.state(), *f.js.state().FindTask(*job.tasks.begin()), &def);
  CHECK(def.dataset_id() == "d");
  CHECK(def.sharding() == service::SHARDING_OFF);
  // The worker reports its tasks finished: the job finishes; a task of another worker is deleted.
  google::protobuf::RepeatedPtrField<service::TaskProgress> reports;
  for (int64_t t : job.tasks) {
    if (f.js.state().FindTask(t)->worker_address == "a:1") {
      auto* p = reports.Add();
      p->set_task_id(t);
      p->set_finished(true);
    }
  }
  reports.Add()->set_task_id(999);
  service::WorkerHeartbeatResponse response;
  REQUIRE(ApplyTaskReports(f.js, "a:1", reports, &response).ok());
  REQUIRE(response.tasks_to_delete_size() == 1);
  CHECK(response.tasks_to_delete(0) == 999);
  CHECK_FALSE(f.js.state().FindJob(1)->finished);  // the client also reads c:1's task
  google::protobuf::RepeatedPtrField<service::TaskProgress> more;
  for (int64_t t : job.tasks) {
    if (f.js.state().FindTask(t)->worker_address == "c:1") {
      auto* p = more.Add();
      p->set_task_id(t);
      p->set_finished(true);
    }
  }
  REQUIRE(ApplyTaskReports(f.js, "c:1", more, &response).ok());
  CHECK(f.js.state().FindJob(1)->finished);
}

TEST_CASE("drain: requests name workers or all of them, each worker is listed once") {
  service::DrainWorkersRequest r;
  CHECK(CheckDrainRequest(r).code() == absl::StatusCode::kInvalidArgument);
  r.set_all_workers(true);
  r.add_worker_addresses("a:1");
  CHECK(CheckDrainRequest(r).code() == absl::StatusCode::kInvalidArgument);
  r.set_all_workers(false);
  r.add_worker_addresses("");
  CHECK_THAT(std::string(CheckDrainRequest(r).message()), Catch::Contains("worker_addresses[1] is empty"));

  Fixture f;
  absl::MutexLock lock(&f.js.mu);
  service::DrainWorkersRequest named;
  named.add_worker_addresses("a:1");
  named.add_worker_addresses("a:1");
  named.add_worker_addresses("gone:1");
  service::DrainWorkersResponse response;
  REQUIRE(DrainWorkers(f.js, named, &response).ok());
  REQUIRE(response.drained_size() == 1);
  CHECK(f.js.state().FindWorker("a:1")->draining);
  CHECK_FALSE(f.js.state().FindWorker("b:1")->draining);
  service::DrainWorkersRequest all;
  all.set_all_workers(true);
  service::DrainWorkersResponse everyone;
  REQUIRE(DrainWorkers(f.js, all, &everyone).ok());
  CHECK(everyone.drained_size() == 2);
}

TEST_CASE("client metrics: totals become increments, a client without a baseline starts from its report") {
  service::ClientMetrics bad;
  bad.set_wait_seconds_total(std::numeric_limits<double>::quiet_NaN());
  CHECK_THAT(std::string(CheckClientMetrics(bad).message()), Catch::Contains("metrics.wait_seconds_total"));
  bad = {};
  bad.set_bytes_total(-1);
  CHECK_THAT(std::string(CheckClientMetrics(bad).message()), Catch::Contains("metrics.bytes_total is -1"));

  ClientMetricsTotals totals;
  service::ClientMetrics m;
  m.set_elements_total(100);
  // Recovered client (no StartClient): its first report is the baseline.
  CHECK(totals.Report(1, 7, m).elements_total() == 0);
  m.set_elements_total(130);
  CHECK(totals.Report(1, 7, m).elements_total() == 30);
  m.set_elements_total(120);  // never negative
  CHECK(totals.Report(1, 7, m).elements_total() == 0);
  totals.StartClient(2);
  m.set_elements_total(5);
  CHECK(totals.Report(2, 7, m).elements_total() == 5);
  REQUIRE(totals.JobTotals(7) != nullptr);
  CHECK(totals.JobTotals(7)->elements_total() == 35);
  totals.ForgetJob(7);
  CHECK(totals.JobTotals(7) == nullptr);
}

TEST_CASE("retention: timeouts, abandoned jobs, finished jobs beyond the retained count, unused datasets") {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  std::map<std::string, absl::Time> seen = {{"a", t0}, {"b", t0 + absl::Seconds(10)}};
  CHECK(TimedOut(seen, t0 + absl::Seconds(12), absl::Seconds(5)) == std::vector<std::string>{"a"});

  Fixture f;
  f.Apply(CreateJob(1, service::SHARDING_OFF, 0, "x"));
  f.Apply(CreateJob(2, service::SHARDING_OFF, 0, "x"));
  f.Apply(CreateJob(3, service::SHARDING_OFF, 0, "x"));
  f.Apply(Acquire(1, 3, "a"));
  f.Apply(FinishJob(1));
  f.Apply(FinishJob(2));
  absl::MutexLock lock(&f.js.mu);
  const DispatcherState& state = f.js.state();
  // Jobs 1 and 2 never had a client (release time 0): abandoned long ago, but they are finished.
  CHECK(AbandonedJobs(state, t0, absl::Minutes(5)).empty());
  CHECK(FinishedJobsToForget(state, 0) == std::vector<int64_t>{1, 2});
  CHECK(FinishedJobsToForget(state, 1) == std::vector<int64_t>{1});
  CHECK(FinishedJobsToForget(state, 2).empty());

  REQUIRE(f.js.Commit(RegisterDataset("unused", 1)).ok());
  DatasetRetention retention;
  CHECK(retention.Unused(state, "", t0, absl::Hours(1)).empty());  // first seen unused: the period starts
  CHECK(retention.Unused(state, "", t0 + absl::Minutes(59), absl::Hours(1)).empty());
  CHECK(retention.Unused(state, "", t0 + absl::Hours(1), absl::Hours(1)) == std::vector<std::string>{"unused"});
  CHECK(retention.Unused(state, "unused", t0 + absl::Hours(2), absl::Hours(1)).empty());  // the default stays
  retention.Touch("unused", t0 + absl::Hours(2));
  CHECK(retention.Unused(state, "", t0 + absl::Hours(2), absl::Hours(1)).empty());
}

TEST_CASE("journaled state: an invalid update is INTERNAL and changes nothing") {
  JournaledState js(nullptr);
  absl::MutexLock lock(&js.mu);
  const std::string before = js.state().DebugString();
  absl::Status s = js.Commit(CreateTaskUpdate(1, 42, "nowhere:1"));
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK(js.state().DebugString() == before);
  CHECK(js.LastSequence() == 0);
  CHECK(js.updates_since_snapshot() == 0);
  REQUIRE(js.Commit(RegisterDataset("d", 1)).ok());
  CHECK(js.updates_since_snapshot() == 1);
}

}  // namespace
}  // namespace sluice::dispatcher
