#include "dataplane/dispatcher/task_placement.h"

#include <algorithm>
#include <set>
#include <vector>

#include "common/log.h"
#include "dataplane/dispatcher/job_creation.h"
#include "dataplane/dispatcher/locality.h"
#include "dataplane/dispatcher/split_service.h"

namespace sluice::dispatcher {

using service::Update;

bool HasTaskOn(const DispatcherState& state, const DispatcherState::Job& job, const std::string& address) {
  for (int64_t t : job.tasks) {
    if (state.FindTask(t)->worker_address == address) return true;
  }
  return false;
}

void FillTaskDef(const DispatcherState& state, const DispatcherState::Task& task, service::TaskDef* def) {
  const DispatcherState::Job& job = *state.FindJob(task.job_id);
  const DispatcherState::Dataset& dataset = *state.FindDataset(job.spec.dataset_id());
  def->set_task_id(task.id);
  def->set_job_id(job.id);
  def->set_dataset_id(dataset.id);
  *def->mutable_pipeline() = dataset.pipeline;
  def->set_sharding(job.spec.sharding());
  def->set_worker_index(task.worker_index);
  def->set_num_workers(task.num_workers);
  def->set_num_consumers(job.spec.num_consumers());
  def->set_cross_job_sharing(job.spec.cross_job_sharing());
  def->set_num_epochs(job.spec.num_epochs());
  def->set_starting_round(task.starting_round);
  def->set_compression(job.spec.compression());
}

absl::Status CreateTask(JournaledState& js, const DispatcherState::Job& job, const std::string& address,
                        int32_t worker_index, int32_t num_workers, int64_t starting_round) {
  Update u;
  auto* t = u.mutable_create_task();
  t->set_task_id(js.state().next_task_id());
  t->set_job_id(job.id);
  t->set_worker_address(address);
  t->set_worker_index(worker_index);
  t->set_num_workers(num_workers);
  t->set_starting_round(starting_round);
  return js.Commit(u);
}

absl::Status PlaceNewJobTasks(JournaledState& js, int64_t job_id) {
  const DispatcherState::Job& job = *js.state().FindJob(job_id);
  if (IsStaticSharding(job.spec.sharding())) {
    const std::vector<std::string> fixed = job.static_workers;
    for (size_t i = 0; i < fixed.size(); ++i) {
      if (absl::Status s = CreateTask(js, *js.state().FindJob(job_id), fixed[i], static_cast<int32_t>(i),
                                      static_cast<int32_t>(fixed.size()), /*starting_round=*/0);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (job.spec.num_consumers() > 0) {
    std::vector<std::string> workers;
    for (const auto& [address, w] : js.state().workers()) {
      if (!w.draining) workers.push_back(address);
    }
    for (const std::string& address : workers) {
      if (absl::Status s = CreateTask(js, *js.state().FindJob(job_id), address, 0, 0, /*starting_round=*/0); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  return AddWantedTasks(js, job_id);
}

absl::Status AddWantedTasks(JournaledState& js, int64_t job_id) {
  const DispatcherState& state = js.state();
  const DispatcherState::Job* job = state.FindJob(job_id);
  if (job == nullptr || job->finished || IsStaticSharding(job->spec.sharding()) || job->spec.num_consumers() > 0) {
    return absl::OkStatus();
  }
  std::vector<std::string> wanted;
  for (const auto& [address, w] : state.workers()) {
    if (!w.draining && JobWantsWorker(state, *job, w) && !HasTaskOn(state, *job, address)) wanted.push_back(address);
  }
  for (const std::string& address : wanted) {
    if (absl::Status s = CreateTask(js, *state.FindJob(job_id), address, 0, 0, /*starting_round=*/0); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CreateTasksForWorker(JournaledState& js, RoundJoins& joins, const std::string& address) {
  const DispatcherState& state = js.state();
  std::vector<int64_t> join_jobs;
  for (const auto& [job_id, job] : state.jobs()) {
    if (job.finished || HasTaskOn(state, job, address)) continue;
    // Tasks follow readers: a job gets a task on this worker only if one of its clients reads it.
    if (!IsStaticSharding(job.spec.sharding()) && !JobWantsWorker(state, job, *state.FindWorker(address))) continue;
    int32_t worker_index = 0;
    int32_t num_workers = 0;
    if (IsStaticSharding(job.spec.sharding())) {
      // Only the workers fixed at job creation; one that comes back gets its shard again.
      auto it = std::find(job.static_workers.begin(), job.static_workers.end(), address);
      if (it == job.static_workers.end()) continue;
      worker_index = static_cast<int32_t>(it - job.static_workers.begin());
      num_workers = static_cast<int32_t>(job.static_workers.size());
    }
    if (job.spec.num_consumers() > 0 && !job.tasks.empty() && !job.clients.empty()) {
      // Coordinated reads of a running job: the consumers must agree on the round the new task
      // starts at before any of them reaches it.
      joins.AddWorker(job, address, worker_index, num_workers);
      join_jobs.push_back(job_id);
      continue;
    }
    if (absl::Status s = CreateTask(js, job, address, worker_index, num_workers, joins.StartingRound(job)); !s.ok()) {
      return s;
    }
  }
  for (int64_t job_id : join_jobs) {
    if (absl::Status s = joins.CompleteIfAgreed(js, job_id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FinishUnreadTasks(JournaledState& js, int64_t job_id) {
  const DispatcherState& state = js.state();
  const DispatcherState::Job* job = state.FindJob(job_id);
  if (job == nullptr || job->finished || job->clients.empty() || job->spec.sharding() != service::SHARDING_DYNAMIC) {
    return absl::OkStatus();
  }
  std::set<int64_t> read;
  for (int64_t c : job->clients) {
    for (const DispatcherState::Task* t : TasksReadBy(state, *job, *state.FindJobClient(c))) read.insert(t->id);
  }
  std::vector<int64_t> unread;
  for (int64_t t : job->tasks) {
    if (!read.count(t) && !state.FindTask(t)->finished) unread.push_back(t);
  }
  for (int64_t t : unread) {
    Update u;
    u.mutable_finish_task()->set_task_id(t);
    if (absl::Status s = js.Commit(u); !s.ok()) return s;
    SLUICE_LOG(Info, "task finished: no client reads it any more (its splits go to the other tasks)")
        .With("job_id", job_id)
        .With("task_id", t);
  }
  return FinishJobIfDone(js, job_id);
}

absl::Status FinishJobIfDone(JournaledState& js, int64_t job_id) {
  const DispatcherState& state = js.state();
  const DispatcherState::Job* job = state.FindJob(job_id);
  if (job == nullptr || job->finished || job->tasks.empty()) return absl::OkStatus();
  std::set<int64_t> considered = job->tasks;
  if (job->spec.sharding() == service::SHARDING_OFF && job->spec.num_consumers() == 0 && !job->clients.empty()) {
    // Under SHARDING_OFF every task produces the whole dataset: the job is done when the tasks
    // its clients read are (AUTO reads only the local ones when there are some; the others may
    // never be read to their end).
    std::set<int64_t> read;
    for (int64_t c : job->clients) {
      for (const DispatcherState::Task* t : TasksReadBy(state, *job, *state.FindJobClient(c))) read.insert(t->id);
    }
    if (read.empty()) return absl::OkStatus();
    considered = std::move(read);
  }
  for (int64_t t : considered) {
    if (!state.FindTask(t)->finished) return absl::OkStatus();
  }
  Update u;
  u.mutable_finish_job()->set_job_id(job_id);
  u.mutable_finish_job()->set_reason("all tasks finished");
  if (absl::Status s = js.Commit(u); !s.ok()) return s;
  SLUICE_LOG(Info, "job finished").With("job_id", job_id).With("reason", "all tasks finished");
  return absl::OkStatus();
}

absl::Status ApplyTaskReports(JournaledState& js, const std::string& address,
                              const google::protobuf::RepeatedPtrField<service::TaskProgress>& reports,
                              service::WorkerHeartbeatResponse* response) {
  const DispatcherState& state = js.state();
  std::set<int64_t> finished_jobs_to_check;
  for (const service::TaskProgress& progress : reports) {
    const DispatcherState::Task* task = state.FindTask(progress.task_id());
    if (task == nullptr || task->worker_address != address) {
      response->add_tasks_to_delete(progress.task_id());  // finished job, removed task, or not this worker's
      continue;
    }
    const DispatcherState::Job& job = *state.FindJob(task->job_id);
    if (progress.started_split_indices_size() > 0 && job.splits && !task->finished) {
      if (absl::Status s = StartSplits(js, job.id, task->id, progress.started_split_indices()); !s.ok()) return s;
    }
    if (progress.finished() && !task->finished) {
      Update u;
      u.mutable_finish_task()->set_task_id(task->id);
      if (absl::Status s = js.Commit(u); !s.ok()) return s;
      finished_jobs_to_check.insert(job.id);
    }
  }
  for (int64_t job_id : finished_jobs_to_check) {
    if (absl::Status s = FinishJobIfDone(js, job_id); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace sluice::dispatcher
