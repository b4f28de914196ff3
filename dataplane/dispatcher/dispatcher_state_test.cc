#include "dataplane/dispatcher/dispatcher_state.h"

#include <catch2/catch.hpp>

#include <random>

#include "absl/strings/str_cat.h"

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
Update RegisterWorker(const std::string& address, const std::string& host = "h1",
                      service::Placement placement = service::PLACEMENT_REMOTE) {
  Update u;
  u.mutable_register_worker()->set_worker_address(address);
  u.mutable_register_worker()->set_worker_host(host);
  u.mutable_register_worker()->set_placement(placement);
  return u;
}
Update RemoveWorker(const std::string& address) {
  Update u;
  u.mutable_remove_worker()->set_worker_address(address);
  u.mutable_remove_worker()->set_reason("heartbeat timeout");
  return u;
}
Update DrainWorker(const std::string& address) {
  Update u;
  u.mutable_drain_worker()->set_worker_address(address);
  return u;
}
Update CreateJob(int64_t id, const std::string& dataset, service::ShardingPolicy sharding, int64_t num_epochs = 1,
                 const std::string& name = "", std::vector<std::string> static_workers = {}) {
  Update u;
  auto* c = u.mutable_create_job();
  c->set_job_id(id);
  c->mutable_spec()->set_dataset_id(dataset);
  c->mutable_spec()->set_sharding(sharding);
  c->mutable_spec()->set_num_epochs(num_epochs);
  c->mutable_spec()->set_job_name(name);
  for (auto& w : static_workers) c->add_static_workers(w);
  return u;
}
Update CreateTask(int64_t id, int64_t job, const std::string& worker, int index = 0, int n = 0, int64_t round = 0) {
  Update u;
  auto* c = u.mutable_create_task();
  c->set_task_id(id);
  c->set_job_id(job);
  c->set_worker_address(worker);
  c->set_worker_index(index);
  c->set_num_workers(n);
  c->set_starting_round(round);
  return u;
}
Update FinishTask(int64_t id) {
  Update u;
  u.mutable_finish_task()->set_task_id(id);
  return u;
}
Update FinishJob(int64_t id) {
  Update u;
  u.mutable_finish_job()->set_job_id(id);
  u.mutable_finish_job()->set_reason("test");
  return u;
}
Update Acquire(int64_t client, int64_t job, const std::string& host = "h1") {
  Update u;
  u.mutable_acquire_job_client()->set_job_client_id(client);
  u.mutable_acquire_job_client()->set_job_id(job);
  u.mutable_acquire_job_client()->set_client_host(host);
  return u;
}
Update Release(int64_t client, int64_t time_ms) {
  Update u;
  u.mutable_release_job_client()->set_job_client_id(client);
  u.mutable_release_job_client()->set_time_ms(time_ms);
  return u;
}
Update Assign(int64_t job, int64_t task, std::vector<uint64_t> indices, int64_t epoch = 0) {
  Update u;
  auto* a = u.mutable_assign_splits();
  a->set_job_id(job);
  a->set_task_id(task);
  a->set_epoch(epoch);
  for (auto i : indices) a->add_split_indices(i);
  return u;
}
Update Start(int64_t job, int64_t task, std::vector<uint64_t> indices, int64_t epoch = 0) {
  Update u;
  auto* a = u.mutable_start_splits();
  a->set_job_id(job);
  a->set_task_id(task);
  a->set_epoch(epoch);
  for (auto i : indices) a->add_split_indices(i);
  return u;
}
Update EpochEnd(int64_t job, int64_t task, int64_t epoch) {
  Update u;
  u.mutable_task_epoch_end()->set_job_id(job);
  u.mutable_task_epoch_end()->set_task_id(task);
  u.mutable_task_epoch_end()->set_epoch(epoch);
  return u;
}
Update Watermark(int64_t job, int64_t round) {
  Update u;
  u.mutable_round_watermark()->set_job_id(job);
  u.mutable_round_watermark()->set_round(round);
  return u;
}

struct ProgressEntry {
  uint64_t index;
  int64_t lease_end;
  bool finished;
};
Update Progress(int64_t job, int64_t task, std::vector<ProgressEntry> entries, int64_t epoch = 0) {
  Update u;
  auto* p = u.mutable_split_progress();
  p->set_job_id(job);
  p->set_task_id(task);
  p->set_epoch(epoch);
  for (const auto& e : entries) {
    auto* entry = p->add_progress();
    entry->set_index(e.index);
    entry->set_epoch(epoch);
    entry->set_lease_end(e.lease_end);
    entry->set_finished(e.finished);
  }
  return u;
}

Update Released(int64_t job, int64_t task, uint64_t index, int64_t position, int64_t epoch = 0) {
  Update u;
  auto* p = u.mutable_split_progress();
  p->set_job_id(job);
  p->set_task_id(task);
  p->set_epoch(epoch);
  auto* entry = p->add_progress();
  entry->set_index(index);
  entry->set_epoch(epoch);
  entry->set_lease_end(position);
  entry->set_released(true);
  return u;
}
Update Return(int64_t job, int64_t task, std::vector<uint64_t> indices, int64_t epoch = 0) {
  Update u;
  auto* r = u.mutable_return_splits();
  r->set_job_id(job);
  r->set_task_id(task);
  r->set_epoch(epoch);
  for (auto i : indices) r->add_split_indices(i);
  return u;
}

void MustApply(DispatcherState& state, const Update& u) {
  absl::Status s = state.Apply(u);
  INFO(u.ShortDebugString());
  INFO(s.ToString());
  REQUIRE(s.ok());
}

// Applies `u`, expects `code` and a message containing `text`, and checks nothing changed.
void MustFail(DispatcherState& state, const Update& u, absl::StatusCode code, const std::string& text) {
  const std::string before = state.DebugString();
  absl::Status s = state.Apply(u);
  INFO(u.ShortDebugString());
  INFO(s.ToString());
  CHECK(s.code() == code);
  CHECK(std::string(s.message()).find(text) != std::string::npos);
  CHECK(state.DebugString() == before);
}

std::vector<uint64_t> Queue(const DispatcherState& state, int64_t job) {
  const auto& q = state.FindJob(job)->splits->queue;
  return {q.begin(), q.end()};
}

DispatcherState Rebuild(const DispatcherState& state) {
  DispatcherState rebuilt;
  for (const Update& u : state.ToSnapshotUpdates()) MustApply(rebuilt, u);
  return rebuilt;
}

// A state with dataset "ds" (n splits), workers w1 and w2 and dynamic job 1 with tasks 1 (w1), 2 (w2).
DispatcherState DynamicJob(int num_splits = 6, int64_t num_epochs = 1) {
  DispatcherState s;
  MustApply(s, RegisterDataset("ds", num_splits));
  MustApply(s, RegisterWorker("w1:1"));
  MustApply(s, RegisterWorker("w2:1", "h2"));
  MustApply(s, CreateJob(1, "ds", service::SHARDING_DYNAMIC, num_epochs, "train"));
  MustApply(s, CreateTask(1, 1, "w1:1"));
  MustApply(s, CreateTask(2, 1, "w2:1"));
  MustApply(s, Acquire(1, 1));
  return s;
}

TEST_CASE("datasets register once with ordered splits") {
  DispatcherState s;
  MustApply(s, RegisterDataset("ds", 3));
  REQUIRE(s.FindDataset("ds") != nullptr);
  CHECK(s.FindDataset("ds")->splits.size() == 3);
  MustFail(s, RegisterDataset("ds", 3), absl::StatusCode::kAlreadyExists, "register_dataset.dataset_id 'ds'");
  MustFail(s, RegisterDataset("", 1), absl::StatusCode::kInvalidArgument, "dataset_id is empty");
  Update bad = RegisterDataset("other", 3);
  bad.mutable_register_dataset()->mutable_splits(1)->set_index(7);
  MustFail(s, bad, absl::StatusCode::kInvalidArgument, "register_dataset.splits[1].index is 7; expected 1");
}

TEST_CASE("empty and unknown updates are rejected") {
  DispatcherState s;
  MustFail(s, Update(), absl::StatusCode::kInvalidArgument, "no known kind");
}

TEST_CASE("every update kind names the unknown id it refers to") {
  DispatcherState s = DynamicJob();
  MustFail(s, CreateJob(5, "nope", service::SHARDING_OFF), absl::StatusCode::kNotFound, "create_job.spec.dataset_id 'nope'");
  MustFail(s, Acquire(9, 42), absl::StatusCode::kNotFound, "acquire_job_client.job_id 42 is not known");
  MustFail(s, Release(77, 1), absl::StatusCode::kNotFound, "release_job_client.job_client_id 77 is not known");
  MustFail(s, RemoveWorker("x:1"), absl::StatusCode::kNotFound, "remove_worker.worker_address 'x:1' is not known");
  MustFail(s, DrainWorker("x:1"), absl::StatusCode::kNotFound, "drain_worker.worker_address 'x:1' is not known");
  MustFail(s, CreateTask(9, 42, "w1:1"), absl::StatusCode::kNotFound, "create_task.job_id 42 is not known");
  MustFail(s, CreateTask(9, 1, "x:1"), absl::StatusCode::kNotFound, "create_task.worker_address 'x:1' is not known");
  MustFail(s, FinishTask(99), absl::StatusCode::kNotFound, "finish_task.task_id 99 is not known");
  MustFail(s, Assign(42, 1, {0}), absl::StatusCode::kNotFound, "assign_splits.job_id 42 is not known");
  MustFail(s, Assign(1, 99, {0}), absl::StatusCode::kNotFound, "assign_splits.task_id 99 is not known");
  MustFail(s, Start(42, 1, {0}), absl::StatusCode::kNotFound, "start_splits.job_id 42 is not known");
  MustFail(s, Start(1, 99, {0}), absl::StatusCode::kNotFound, "start_splits.task_id 99 is not known");
  MustFail(s, FinishJob(42), absl::StatusCode::kNotFound, "finish_job.job_id 42 is not known");
  MustFail(s, EpochEnd(42, 1, 0), absl::StatusCode::kNotFound, "task_epoch_end.job_id 42 is not known");
  MustFail(s, EpochEnd(1, 99, 0), absl::StatusCode::kNotFound, "task_epoch_end.task_id 99 is not known");
  MustFail(s, Watermark(42, 5), absl::StatusCode::kNotFound, "round_watermark.job_id 42 is not known");
  MustFail(s, Return(42, 1, {0}), absl::StatusCode::kNotFound, "return_splits.job_id 42 is not known");
  MustFail(s, Return(1, 99, {0}), absl::StatusCode::kNotFound, "return_splits.task_id 99 is not known");
  Update restore;
  restore.mutable_restore_job()->set_job_id(42);
  MustFail(s, restore, absl::StatusCode::kNotFound, "restore_job.job_id 42 is not known");
}

TEST_CASE("job specs and ids are validated") {
  DispatcherState s = DynamicJob();
  MustFail(s, CreateJob(1, "ds", service::SHARDING_OFF), absl::StatusCode::kAlreadyExists, "create_job.job_id 1 exists");
  MustFail(s, CreateJob(0, "ds", service::SHARDING_OFF), absl::StatusCode::kInvalidArgument, "must be > 0");
  MustFail(s, CreateJob(2, "ds", static_cast<service::ShardingPolicy>(17)), absl::StatusCode::kInvalidArgument,
           "create_job.spec.sharding 17");
  MustFail(s, CreateJob(2, "ds", service::SHARDING_OFF, -2), absl::StatusCode::kInvalidArgument, "num_epochs is -2");
  Update consumers = CreateJob(2, "ds", service::SHARDING_OFF);
  consumers.mutable_create_job()->mutable_spec()->set_num_consumers(-1);
  MustFail(s, consumers, absl::StatusCode::kInvalidArgument, "num_consumers is -1");
  MustFail(s, CreateJob(2, "ds", service::SHARDING_FILE), absl::StatusCode::kInvalidArgument, "static_workers is empty");
  MustFail(s, CreateJob(2, "ds", service::SHARDING_OFF, 1, "", {"w1:1"}), absl::StatusCode::kInvalidArgument,
           "only for SHARDING_FILE");
  MustFail(s, CreateJob(2, "ds", service::SHARDING_DATA, 1, "", {"w1:1", "w1:1"}), absl::StatusCode::kInvalidArgument,
           "static_workers[1]");
  // Ids are never reused, even for a job id that was skipped.
  MustApply(s, CreateJob(5, "ds", service::SHARDING_OFF));
  MustFail(s, CreateJob(3, "ds", service::SHARDING_OFF), absl::StatusCode::kFailedPrecondition, "was used before");
  CHECK(s.next_job_id() == 6);
  // num_epochs 0 means 1.
  CHECK(s.FindJob(5)->spec.num_epochs() == 1);
}

TEST_CASE("tasks: one per job and worker, none on draining workers, static slots fixed") {
  DispatcherState s = DynamicJob();
  MustFail(s, CreateTask(3, 1, "w1:1"), absl::StatusCode::kAlreadyExists, "already has task 1 of job 1");
  MustFail(s, CreateTask(2, 1, "w1:1"), absl::StatusCode::kAlreadyExists, "create_task.task_id 2 exists");
  MustApply(s, RegisterWorker("w3:1"));
  MustApply(s, DrainWorker("w3:1"));
  MustFail(s, DrainWorker("w3:1"), absl::StatusCode::kFailedPrecondition, "already draining");
  MustFail(s, CreateTask(3, 1, "w3:1"), absl::StatusCode::kFailedPrecondition, "is draining");
  MustFail(s, CreateTask(3, 1, "w2:1"), absl::StatusCode::kAlreadyExists, "already has task 2 of job 1");
  MustApply(s, CreateJob(2, "ds", service::SHARDING_FILE, 1, "", {"w1:1", "w2:1"}));
  MustFail(s, CreateTask(3, 2, "w1:1", 1, 2), absl::StatusCode::kInvalidArgument, "belongs to worker 'w2:1'");
  MustFail(s, CreateTask(3, 2, "w1:1", 0, 3), absl::StatusCode::kInvalidArgument, "do not fit");
  MustFail(s, CreateTask(3, 1, "x", 0, 0), absl::StatusCode::kNotFound, "x");
  MustApply(s, CreateTask(3, 2, "w1:1", 0, 2));
  MustApply(s, CreateTask(4, 2, "w2:1", 1, 2));
  MustFail(s, CreateTask(5, 1, "w3:1", 1, 2), absl::StatusCode::kFailedPrecondition, "draining");
  MustApply(s, RegisterWorker("w4:1"));
  MustFail(s, CreateTask(5, 1, "w4:1", 0, 0, -1), absl::StatusCode::kInvalidArgument, "starting_round -1");
  MustFail(s, CreateTask(5, 1, "w4:1", 1, 2), absl::StatusCode::kInvalidArgument, "only for static sharding");
}

TEST_CASE("dynamic sharding hands out the queue front and never re-queues a started split") {
  DispatcherState s = DynamicJob(6);
  CHECK(Queue(s, 1) == std::vector<uint64_t>{0, 1, 2, 3, 4, 5});
  MustFail(s, Assign(1, 1, {1}), absl::StatusCode::kFailedPrecondition, "assign_splits.split_indices[0] is 1");
  MustFail(s, Assign(1, 1, {0}, 3), absl::StatusCode::kFailedPrecondition, "assign_splits.epoch 3");
  MustFail(s, Assign(1, 1, {}), absl::StatusCode::kInvalidArgument, "split_indices is empty");
  MustApply(s, Assign(1, 1, {0, 1, 2}));
  MustApply(s, Assign(1, 2, {3, 4}));
  CHECK(s.FindJob(1)->splits_served == 5);
  MustFail(s, Start(1, 2, {0}), absl::StatusCode::kFailedPrecondition, "not assigned to task 2");
  MustFail(s, Start(1, 1, {0, 0}), absl::StatusCode::kFailedPrecondition, "repeated");
  MustApply(s, Start(1, 1, {0}));
  MustApply(s, Start(1, 2, {3}));
  MustFail(s, Start(1, 1, {0}), absl::StatusCode::kFailedPrecondition, "not assigned");
  CHECK(s.UnstartedSplitsOf(*s.FindJob(1), 1) == std::vector<uint64_t>{1, 2});
  // Worker w1 dies: its unstarted splits 1 and 2 go to the front, in order; started 0 is gone for good.
  MustApply(s, RemoveWorker("w1:1"));
  CHECK(s.FindTask(1) == nullptr);
  CHECK(s.FindJob(1)->tasks == std::set<int64_t>{2});
  CHECK(Queue(s, 1) == std::vector<uint64_t>{1, 2, 5});
  CHECK(s.FindJob(1)->splits->assigned.size() == 1);  // split 4 on task 2
  MustApply(s, Assign(1, 2, {1, 2, 5}));
  MustApply(s, Start(1, 2, {4, 1, 2, 5}));
  CHECK(s.FindJob(1)->splits->num_started == 6);
  CHECK(s.FindJob(1)->splits_served == 8);
}

TEST_CASE("a lost task's leased splits come back as remainders - unleased ones count as read") {
  DispatcherState s = DynamicJob(6);
  MustApply(s, Assign(1, 1, {0, 1}));
  MustApply(s, Start(1, 1, {0, 1}));
  MustApply(s, Progress(1, 1, {{0, 7, false}}));  // split 1: started without a lease
  MustApply(s, Assign(1, 2, {2}));
  MustApply(s, Start(1, 2, {2}));
  MustApply(s, Progress(1, 2, {{2, 5, false}}));
  MustApply(s, Progress(1, 2, {{2, -1, true}}));  // read to its end
  // Malformed progress changes nothing and says what is wrong.
  MustFail(s, Progress(1, 1, {{2, 9, false}}), absl::StatusCode::kFailedPrecondition, "not a split task 1 is reading");
  MustFail(s, Progress(1, 1, {{0, 3, false}}), absl::StatusCode::kFailedPrecondition, "below the split's lease 7");
  MustFail(s, Progress(1, 1, {{0, 8, false}, {0, 9, false}}), absl::StatusCode::kFailedPrecondition, "repeated");
  MustFail(s, Progress(1, 1, {{0, 8, false}}, 1), absl::StatusCode::kFailedPrecondition, "split_progress.epoch 1");
  MustFail(s, Progress(1, 1, {}), absl::StatusCode::kInvalidArgument, "progress is empty");
  MustFail(s, Progress(9, 1, {{0, 8, false}}), absl::StatusCode::kNotFound, "split_progress.job_id 9");
  MustApply(s, Assign(1, 1, {3, 4, 5}));
  MustApply(s, Start(1, 1, {3, 4, 5}));
  // Every split is started, but task 1 reads split 0 under a lease: task 2 is not told the end
  // (if task 1 is lost, task 2 must read the remainder); task 1 itself may be.
  MustFail(s, EpochEnd(1, 2, 0), absl::StatusCode::kFailedPrecondition, "under a lease");
  CHECK(DispatcherState::OtherTaskHoldsLease(*s.FindJob(1), 2));
  CHECK(!DispatcherState::OtherTaskHoldsLease(*s.FindJob(1), 1));
  MustApply(s, EpochEnd(1, 1, 0));
  // Task 1 is lost: split 0 comes back from element 7 on; split 1 (no lease) and 3..5 do not.
  MustApply(s, RemoveWorker("w1:1"));
  CHECK(Queue(s, 1) == std::vector<uint64_t>{0});
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 0) == 7);
  CHECK(s.FindJob(1)->splits->reading.empty());
  CHECK(s.FindJob(1)->splits->num_started == 5);
  CHECK(Rebuild(s).DebugString() == s.DebugString());
  MustFail(s, EpochEnd(1, 2, 0), absl::StatusCode::kFailedPrecondition, "1 splits not started");
  MustApply(s, Assign(1, 2, {0}));
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 0) == 7);  // still a remainder until started
  CHECK(Rebuild(s).DebugString() == s.DebugString());
  MustApply(s, Start(1, 2, {0}));
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 0) == 0);
  MustFail(s, Progress(1, 2, {{0, -2, false}}), absl::StatusCode::kFailedPrecondition, "lease_end -2");
  MustApply(s, Progress(1, 2, {{0, 15, false}}));
  MustApply(s, EpochEnd(1, 2, 0));
  CHECK(!s.FindJob(1)->splits->exhausted);  // split 0 is still read under a lease
  CHECK(Rebuild(s).DebugString() == s.DebugString());
  MustApply(s, Progress(1, 2, {{0, -1, true}}));
  CHECK(s.FindJob(1)->splits->exhausted);
}

TEST_CASE("a draining task hands back unstarted splits whole and read ones from its exact position") {
  DispatcherState s = DynamicJob(6);
  MustApply(s, Assign(1, 1, {0, 1, 2, 3}));
  MustApply(s, Start(1, 1, {0}));
  MustApply(s, Progress(1, 1, {{0, 8, false}}));  // leased up to element 8
  MustApply(s, DrainWorker("w1:1"));
  // Malformed hand-backs change nothing and say what is wrong.
  MustFail(s, Return(1, 1, {0}), absl::StatusCode::kFailedPrecondition, "split_indices[0] 0 is not a split assigned to task 1");
  MustFail(s, Return(1, 2, {1}), absl::StatusCode::kFailedPrecondition, "not a split assigned to task 2");
  MustFail(s, Return(1, 1, {1, 1}), absl::StatusCode::kFailedPrecondition, "repeated");
  MustFail(s, Return(1, 1, {}), absl::StatusCode::kInvalidArgument, "split_indices is empty");
  MustFail(s, Return(1, 1, {1}, 1), absl::StatusCode::kFailedPrecondition, "return_splits.epoch 1");
  MustFail(s, Return(9, 1, {1}), absl::StatusCode::kNotFound, "return_splits.job_id 9");
  MustFail(s, Released(1, 1, 0, -1), absl::StatusCode::kInvalidArgument, "names the reader's position");
  MustFail(s, Released(1, 1, 1, 0), absl::StatusCode::kFailedPrecondition, "not a split task 1 is reading");
  // Unstarted ones go back whole, to the front, in order, ahead of the never-assigned ones.
  MustApply(s, Return(1, 1, {3, 1}));
  CHECK(Queue(s, 1) == std::vector<uint64_t>{1, 3, 4, 5});
  CHECK(s.UnstartedSplitsOf(*s.FindJob(1), 1) == std::vector<uint64_t>{2});
  // The reader of split 0 stopped before element 5 (below its lease of 8): the remainder starts
  // exactly there, so elements 5..7 are neither lost nor read twice.
  MustApply(s, Released(1, 1, 0, 5));
  CHECK(Queue(s, 1) == std::vector<uint64_t>{0, 1, 3, 4, 5});
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 0) == 5);
  CHECK(s.FindJob(1)->splits->reading.empty());
  CHECK(s.FindJob(1)->splits->num_started == 0);
  CHECK(Rebuild(s).DebugString() == s.DebugString());
  // Another task reads the remainder; the epoch ends when every split was read.
  MustApply(s, Return(1, 1, {2}));
  CHECK(Queue(s, 1) == std::vector<uint64_t>{2, 0, 1, 3, 4, 5});
  MustApply(s, Assign(1, 2, {2, 0, 1, 3, 4, 5}));
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 0) == 5);
  MustApply(s, Start(1, 2, {0, 1, 2, 3, 4, 5}));
  MustApply(s, FinishTask(1));  // the drained task ends: nothing of it comes back
  CHECK(Queue(s, 1).empty());
  MustApply(s, EpochEnd(1, 2, 0));
  CHECK(s.FindJob(1)->splits->exhausted);
}

TEST_CASE("a release at position 0 puts the split back whole, a remainder's keeps its skip") {
  DispatcherState s = DynamicJob(2);
  MustApply(s, Assign(1, 1, {0, 1}));
  MustApply(s, Start(1, 1, {0, 1}));
  MustApply(s, Released(1, 1, 0, 0));
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 0) == 0);
  MustApply(s, Released(1, 1, 1, 3));
  CHECK(Queue(s, 1) == std::vector<uint64_t>{1, 0});  // each hand-back goes to the front
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 1) == 3);
  MustApply(s, Assign(1, 2, {1, 0}));
  MustApply(s, Start(1, 2, {1}));
  MustApply(s, Released(1, 2, 1, 4));  // a remainder released again further on
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 1) == 4);
  CHECK(Rebuild(s).DebugString() == s.DebugString());
}

TEST_CASE("a finished task's unfinished leased split comes back too - a new epoch forgets leases") {
  DispatcherState s = DynamicJob(2, 2);
  MustApply(s, Assign(1, 1, {0, 1}));
  MustApply(s, Start(1, 1, {0, 1}));
  MustApply(s, Progress(1, 1, {{0, 4, false}, {1, 3, false}}));
  MustApply(s, Progress(1, 1, {{0, -1, true}}));
  MustApply(s, FinishTask(1));
  CHECK(Queue(s, 1) == std::vector<uint64_t>{1});
  CHECK(DispatcherState::SkipOf(*s.FindJob(1), 1) == 3);
  MustApply(s, Assign(1, 2, {1}));
  MustApply(s, Start(1, 2, {1}));
  MustApply(s, Progress(1, 2, {{1, 10, true}}));
  MustApply(s, EpochEnd(1, 2, 0));
  CHECK(s.FindJob(1)->splits->epoch == 1);
  CHECK(s.FindJob(1)->splits->reading.empty());
  CHECK(s.FindJob(1)->splits->skip.empty());
  CHECK(Queue(s, 1) == std::vector<uint64_t>{0, 1});
}

TEST_CASE("epochs advance when every live task reached the end - the last epoch exhausts") {
  DispatcherState s = DynamicJob(2, 2);
  MustFail(s, EpochEnd(1, 1, 0), absl::StatusCode::kFailedPrecondition, "2 splits not started");
  MustApply(s, Assign(1, 1, {0}));
  MustApply(s, Assign(1, 2, {1}));
  MustApply(s, Start(1, 1, {0}));
  MustFail(s, EpochEnd(1, 1, 0), absl::StatusCode::kFailedPrecondition, "1 splits not started");
  MustApply(s, Start(1, 2, {1}));
  MustFail(s, EpochEnd(1, 1, 1), absl::StatusCode::kFailedPrecondition, "task_epoch_end.epoch 1");
  MustApply(s, EpochEnd(1, 1, 0));
  MustFail(s, EpochEnd(1, 1, 0), absl::StatusCode::kAlreadyExists, "already reached the end");
  CHECK(s.FindJob(1)->splits->epoch == 0);  // task 2 has not reached the end yet
  MustApply(s, EpochEnd(1, 2, 0));
  CHECK(s.FindJob(1)->splits->epoch == 1);
  CHECK(Queue(s, 1) == std::vector<uint64_t>{0, 1});
  CHECK(s.FindJob(1)->splits->tasks_at_epoch_end.empty());
  MustApply(s, Assign(1, 2, {0, 1}, 1));
  MustApply(s, Start(1, 2, {0, 1}, 1));
  MustApply(s, EpochEnd(1, 2, 1));
  CHECK(!s.FindJob(1)->splits->exhausted);
  // Task 1 finishing (without ever reaching the end) unblocks the epoch: it was the last one.
  MustApply(s, FinishTask(1));
  CHECK(s.FindJob(1)->splits->exhausted);
  CHECK(s.FindJob(1)->splits->epoch == 1);
  MustFail(s, Assign(1, 2, {0}, 1), absl::StatusCode::kFailedPrecondition, "exhausted");
}

TEST_CASE("removing the last task that had not reached the end advances the epoch") {
  DispatcherState s = DynamicJob(1, -1);
  MustApply(s, Assign(1, 1, {0}));
  MustApply(s, Start(1, 1, {0}));
  MustApply(s, EpochEnd(1, 1, 0));
  MustApply(s, RemoveWorker("w2:1"));
  CHECK(s.FindJob(1)->splits->epoch == 1);
  CHECK(Queue(s, 1) == std::vector<uint64_t>{0});
}

TEST_CASE("a finished task gives back its unstarted splits") {
  DispatcherState s = DynamicJob(4);
  MustApply(s, Assign(1, 1, {0, 1, 2}));
  MustApply(s, Start(1, 1, {0}));
  MustApply(s, FinishTask(1));
  MustFail(s, FinishTask(1), absl::StatusCode::kFailedPrecondition, "already finished");
  CHECK(Queue(s, 1) == std::vector<uint64_t>{1, 2, 3});
  MustFail(s, Assign(1, 1, {1}), absl::StatusCode::kFailedPrecondition, "is finished");
}

TEST_CASE("a dataset without splits is exhausted at once") {
  DispatcherState s;
  MustApply(s, RegisterDataset("empty", 0));
  MustApply(s, CreateJob(1, "empty", service::SHARDING_DYNAMIC, -1));
  CHECK(s.FindJob(1)->splits->exhausted);
}

TEST_CASE("finishing a job drops its tasks and split positions but keeps its clients") {
  DispatcherState s = DynamicJob();
  MustApply(s, Assign(1, 1, {0}));
  MustApply(s, FinishJob(1));
  const auto* job = s.FindJob(1);
  CHECK(job->finished);
  CHECK(job->finish_reason == "test");
  CHECK(job->tasks.empty());
  CHECK(!job->splits.has_value());
  CHECK(job->splits_served == 1);
  CHECK(s.tasks().empty());
  CHECK(s.FindWorker("w1:1")->tasks.empty());
  CHECK(job->clients == std::set<int64_t>{1});
  MustFail(s, FinishJob(1), absl::StatusCode::kFailedPrecondition, "already finished");
  MustFail(s, Acquire(2, 1), absl::StatusCode::kFailedPrecondition, "is finished");
  MustFail(s, CreateTask(3, 1, "w1:1"), absl::StatusCode::kFailedPrecondition, "is finished");
  MustFail(s, Start(1, 1, {0}), absl::StatusCode::kFailedPrecondition, "finished");
  CHECK(s.FindJobByName("train") == job);
}

TEST_CASE("finished jobs can be forgotten, except a name's latest and jobs with clients") {
  DispatcherState s;
  MustApply(s, RegisterDataset("ds", 2));
  MustApply(s, RegisterWorker("w1:1"));
  MustApply(s, CreateJob(1, "ds", service::SHARDING_OFF, 1, "train"));
  MustApply(s, CreateJob(2, "ds", service::SHARDING_OFF, 1, ""));
  MustApply(s, Acquire(1, 2));
  Update remove;
  remove.mutable_remove_job()->set_job_id(2);
  MustFail(s, remove, absl::StatusCode::kFailedPrecondition, "is not finished, has clients");
  MustApply(s, FinishJob(2));
  MustFail(s, remove, absl::StatusCode::kFailedPrecondition, "has clients");
  MustApply(s, Release(1, 5));
  MustApply(s, remove);
  CHECK(s.FindJob(2) == nullptr);
  // "train" #1 finished, but it is the name's latest: kept (it carries the iteration count).
  MustApply(s, FinishJob(1));
  remove.mutable_remove_job()->set_job_id(1);
  MustFail(s, remove, absl::StatusCode::kFailedPrecondition, "latest job");
  Update second = CreateJob(3, "ds", service::SHARDING_OFF, 1, "train");
  second.mutable_create_job()->set_iteration(2);
  MustApply(s, second);
  MustApply(s, remove);
  CHECK(s.FindJobByName("train")->id == 3);
  CHECK(s.FindJobByName("train")->iteration == 2);
  Update unknown;
  unknown.mutable_remove_job()->set_job_id(1);
  MustFail(s, unknown, absl::StatusCode::kNotFound, "remove_job.job_id 1");
  CHECK(Rebuild(s).DebugString() == s.DebugString());
  CHECK(s.next_job_id() == 4);  // ids are not reused
  // Datasets: removable only when no job (finished or not) refers to them.
  Update remove_dataset;
  remove_dataset.mutable_remove_dataset()->set_dataset_id("ds");
  MustFail(s, remove_dataset, absl::StatusCode::kFailedPrecondition, "is used by a job");
  MustApply(s, RegisterDataset("other", 1));
  remove_dataset.mutable_remove_dataset()->set_dataset_id("other");
  MustApply(s, remove_dataset);
  CHECK(s.FindDataset("other") == nullptr);
  MustFail(s, remove_dataset, absl::StatusCode::kNotFound, "'other' is not known");
  CHECK(Rebuild(s).DebugString() == s.DebugString());
}

TEST_CASE("job clients: acquire, release with time, ids never reused") {
  DispatcherState s = DynamicJob();
  MustApply(s, Acquire(2, 1, "h9"));
  MustFail(s, Acquire(2, 1), absl::StatusCode::kAlreadyExists, "job_client_id 2 exists");
  MustApply(s, Release(1, 1000));
  CHECK(s.FindJob(1)->clients == std::set<int64_t>{2});
  MustFail(s, Release(2, -1), absl::StatusCode::kInvalidArgument, "time_ms -1");
  MustApply(s, Release(2, 2000));
  CHECK(s.FindJob(1)->clients.empty());
  CHECK(s.FindJob(1)->last_client_release_ms == 2000);
  MustFail(s, Acquire(1, 1), absl::StatusCode::kFailedPrecondition, "was used before");
  Update bad = Acquire(3, 1);
  bad.mutable_acquire_job_client()->set_target_workers(static_cast<service::TargetWorkers>(9));
  MustFail(s, bad, absl::StatusCode::kInvalidArgument, "target_workers 9");
}

TEST_CASE("round watermarks only rise") {
  DispatcherState s = DynamicJob();
  MustApply(s, Watermark(1, 16));
  MustFail(s, Watermark(1, 16), absl::StatusCode::kFailedPrecondition, "not above");
  MustApply(s, Watermark(1, 40));
  CHECK(s.FindJob(1)->round_watermark == 40);
}

TEST_CASE("workers: registration, duplicates, placement") {
  DispatcherState s;
  MustApply(s, RegisterWorker("a:1", "a", service::PLACEMENT_LOCAL));
  MustFail(s, RegisterWorker("a:1"), absl::StatusCode::kAlreadyExists, "already registered");
  MustFail(s, RegisterWorker(""), absl::StatusCode::kInvalidArgument, "worker_address is empty");
  MustFail(s, RegisterWorker("b:1", "b", static_cast<service::Placement>(5)), absl::StatusCode::kInvalidArgument,
           "placement 5");
  CHECK(s.FindWorker("a:1")->placement == service::PLACEMENT_LOCAL);
}

TEST_CASE("malformed restore_job updates are rejected") {
  DispatcherState s = DynamicJob(4);
  auto restore = [](std::vector<std::pair<uint64_t, uint64_t>> queued, std::vector<std::pair<uint64_t, uint64_t>> started) {
    Update u;
    auto* r = u.mutable_restore_job();
    r->set_job_id(1);
    for (auto [b, e] : queued) {
      auto* q = r->add_queued();
      q->set_begin(b);
      q->set_end(e);
    }
    for (auto [b, e] : started) {
      auto* q = r->add_started();
      q->set_begin(b);
      q->set_end(e);
    }
    return u;
  };
  MustFail(s, restore({{0, 5}}, {}), absl::StatusCode::kInvalidArgument, "outside [0, 4)");
  MustFail(s, restore({{0, 3}}, {{2, 4}}), absl::StatusCode::kInvalidArgument, "listed twice");
  MustFail(s, restore({{0, 2}}, {}), absl::StatusCode::kInvalidArgument, "cover 2 of 4");
  MustFail(s, restore({{3, 1}}, {}), absl::StatusCode::kInvalidArgument, "range [3, 1)");
  Update bad_task = restore({{0, 3}}, {});
  auto* a = bad_task.mutable_restore_job()->add_assigned();
  a->set_task_id(99);
  a->add_split_indices(3);
  MustFail(s, bad_task, absl::StatusCode::kInvalidArgument, "task 99 is not a live task");
  Update epoch = restore({{0, 4}}, {});
  epoch.mutable_restore_job()->set_epoch(1);
  MustFail(s, epoch, absl::StatusCode::kInvalidArgument, "beyond the job's 1 epochs");
  Update ok = restore({{2, 4}, {0, 1}}, {{1, 2}});
  MustApply(s, ok);
  CHECK(Queue(s, 1) == std::vector<uint64_t>{2, 3, 0});
  Update ids;
  ids.mutable_id_counters()->set_next_job_id(1);
  MustFail(s, ids, absl::StatusCode::kFailedPrecondition, "would reuse ids");
}

TEST_CASE("a snapshot rebuilds every kind of object exactly") {
  DispatcherState s = DynamicJob(10, 3);
  MustApply(s, RegisterWorker("w3:1", "h3", service::PLACEMENT_LOCAL));
  MustApply(s, CreateTask(3, 1, "w3:1"));
  MustApply(s, Assign(1, 1, {0, 1, 2}));
  MustApply(s, Assign(1, 2, {3, 4}));
  MustApply(s, Start(1, 1, {0, 2}));
  MustApply(s, Start(1, 2, {3}));
  MustApply(s, RemoveWorker("w2:1"));  // 4 back to the front
  MustApply(s, DrainWorker("w3:1"));   // keeps its task
  MustApply(s, Watermark(1, 32));
  MustApply(s, Acquire(2, 1, "h2"));
  MustApply(s, Release(1, 12345));
  // A static job, a finished job with a client, an OFF job.
  MustApply(s, CreateJob(2, "ds", service::SHARDING_DATA, 1, "static", {"w1:1", "gone:1"}));
  MustApply(s, CreateTask(4, 2, "w1:1", 0, 2));
  MustApply(s, FinishTask(4));
  MustApply(s, CreateJob(3, "ds", service::SHARDING_OFF, 1, "done"));
  MustApply(s, CreateTask(5, 3, "w1:1"));
  MustApply(s, Acquire(3, 3));
  MustApply(s, FinishJob(3));
  MustApply(s, CreateJob(4, "ds", service::SHARDING_DYNAMIC, 1, "train"));  // rebinds the name "train"
  DispatcherState rebuilt = Rebuild(s);
  CHECK(rebuilt.DebugString() == s.DebugString());
  CHECK(rebuilt.FindJobByName("train")->id == 4);
  CHECK(Queue(rebuilt, 1) == std::vector<uint64_t>{4, 5, 6, 7, 8, 9});
  // The rebuilt state keeps working the same way as the original.
  for (DispatcherState* st : {&s, &rebuilt}) {
    MustApply(*st, Assign(1, 3, {4, 5}));
    MustApply(*st, CreateTask(6, 4, "w1:1"));
  }
  CHECK(rebuilt.DebugString() == s.DebugString());
  // And its own snapshot is identical.
  CHECK(Rebuild(rebuilt).DebugString() == rebuilt.DebugString());
}

// Drives a state with a pseudo-random mix of valid and invalid updates; replaying only the accepted
// ones (and rebuilding from snapshots at many points) must give the same state.
TEST_CASE("replaying the accepted updates is deterministic, and snapshots agree at every point") {
  std::mt19937_64 rng(12345);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  DispatcherState live;
  std::vector<Update> accepted;
  MustApply(live, RegisterDataset("ds", 12));
  accepted.push_back(RegisterDataset("ds", 12));
  int rejected = 0;
  for (int step = 0; step < 3000; ++step) {
    Update u;
    // Mostly existing ids (so that most updates are valid), sometimes arbitrary ones.
    int64_t job = 1 + pick(live.next_job_id() + 1);
    if (!live.jobs().empty() && pick(4) != 0) {
      job = std::next(live.jobs().begin(), pick(static_cast<int64_t>(live.jobs().size())))->first;
    }
    int64_t task = 1 + pick(live.next_task_id() + 1);
    if (!live.tasks().empty() && pick(4) != 0) {
      task = std::next(live.tasks().begin(), pick(static_cast<int64_t>(live.tasks().size())))->first;
    }
    if (const auto* t = live.FindTask(task); t != nullptr && pick(5) != 0) job = t->job_id;
    // Tasks that can take splits, and tasks holding unstarted ones.
    std::vector<int64_t> can_assign, can_start;
    for (const auto& [id, t] : live.tasks()) {
      const auto& j = live.jobs().at(t.job_id);
      if (!j.splits || t.finished) continue;
      if (!j.splits->queue.empty() && !j.splits->exhausted) can_assign.push_back(id);
      if (!live.UnstartedSplitsOf(j, id).empty()) can_start.push_back(id);
    }
    const std::string worker = absl::StrCat("w", pick(4), ":1");
    // Weighted kinds: mostly split traffic (assign, start, epoch end), some churn.
    static const int kWeights[14] = {5, 2, 1, 8, 2, 2, 11, 11, 11, 6, 2, 3, 8, 2};
    int roll = static_cast<int>(pick(74));
    int kind = 0;
    while (roll >= kWeights[kind]) roll -= kWeights[kind++];
    switch (kind) {
      case 0: u = RegisterWorker(worker); break;
      case 1: u = pick(4) == 0 ? DrainWorker(worker) : RemoveWorker(worker); break;
      case 2: u = CreateJob(live.next_job_id(), "ds", pick(3) ? service::SHARDING_DYNAMIC : service::SHARDING_OFF,
                            pick(3) ? -1 : pick(3), absl::StrCat("j", pick(3)));
        break;
      case 3: {
        std::vector<int64_t> open_jobs;
        for (const auto& [id, j] : live.jobs()) {
          if (!j.finished) open_jobs.push_back(id);
        }
        if (!open_jobs.empty() && pick(4) != 0) job = open_jobs[pick(static_cast<int64_t>(open_jobs.size()))];
        u = CreateTask(live.next_task_id(), job, worker);
        break;
      }
      case 4: u = Acquire(live.next_job_client_id(), job); break;
      case 5: u = Release(1 + pick(10), step); break;
      case 6:
      case 7: {
        if (!can_assign.empty() && pick(5) != 0) {
          task = can_assign[pick(static_cast<int64_t>(can_assign.size()))];
          job = live.FindTask(task)->job_id;
        }
        const auto* j = live.FindJob(job);
        const auto* t = live.FindTask(task);
        if (j && j->splits && t && !j->splits->queue.empty()) {
          std::vector<uint64_t> take(j->splits->queue.begin(),
                                     j->splits->queue.begin() + std::min<size_t>(j->splits->queue.size(), 1 + pick(3)));
          u = Assign(job, task, take, j->splits->epoch);
        } else {
          u = Assign(job, task, {0}, 0);
        }
        break;
      }
      case 8: {
        if (!can_start.empty() && pick(5) != 0) {
          task = can_start[pick(static_cast<int64_t>(can_start.size()))];
          job = live.FindTask(task)->job_id;
        }
        const auto* j = live.FindJob(job);
        const auto* t = live.FindTask(task);
        if (j && t && t->job_id == job) {
          auto unstarted = live.UnstartedSplitsOf(*j, task);
          if (unstarted.size() > 1) unstarted.resize(1 + pick(static_cast<int64_t>(unstarted.size())));
          u = Start(job, task, unstarted, j->splits ? j->splits->epoch : 0);
        } else {
          u = Start(job, task, {static_cast<uint64_t>(pick(12))});
        }
        break;
      }
      case 9: {
        const auto* t = live.FindTask(task);
        const auto* j = t ? live.FindJob(t->job_id) : nullptr;
        u = EpochEnd(t ? t->job_id : job, task, j && j->splits ? j->splits->epoch : 0);
        break;
      }
      case 10: u = pick(8) == 0 ? FinishJob(job) : FinishTask(task); break;
      case 11: u = Watermark(job, pick(100)); break;
      case 12: {
        // A lease or a finish for a split some task reads (or, sometimes, for any split).
        const auto* j = live.FindJob(job);
        if (j && j->splits && !j->splits->reading.empty() && pick(5) != 0) {
          auto it = std::next(j->splits->reading.begin(), pick(static_cast<int64_t>(j->splits->reading.size())));
          u = Progress(job, it->second.task,
                       {{it->first, pick(3) ? it->second.lease_end + 1 + pick(20) : -1, pick(3) == 0}},
                       j->splits->epoch);
        } else {
          u = Progress(job, task, {{static_cast<uint64_t>(pick(12)), pick(20) - 1, pick(2) == 0}});
        }
        break;
      }
      case 13: u.mutable_remove_job()->set_job_id(job); break;
    }
    const std::string before = live.DebugString();
    if (live.Apply(u).ok()) {
      accepted.push_back(u);
    } else {
      ++rejected;
      REQUIRE(live.DebugString() == before);
    }
    if (step % 250 == 0) REQUIRE(Rebuild(live).DebugString() == live.DebugString());
  }
  INFO("accepted " << accepted.size() << " rejected " << rejected);
  CHECK(accepted.size() > 900);
  CHECK(rejected > 300);
  DispatcherState replayed;
  for (const Update& u : accepted) MustApply(replayed, u);
  CHECK(replayed.DebugString() == live.DebugString());
  CHECK(Rebuild(live).DebugString() == live.DebugString());
  // A snapshot is much shorter than the history it replaces.
  CHECK(live.ToSnapshotUpdates().size() < accepted.size() / 3);
}

}  // namespace
}  // namespace sluice::dispatcher
