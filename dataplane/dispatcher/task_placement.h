// Task placement: which workers get a job's tasks, and when tasks and jobs finish.
//
// Tasks follow readers: a new job gets tasks on the workers its client reads (static jobs on the
// workers fixed at creation, coordinated jobs on every worker); a client from a new host adds tasks
// on its host's workers; a worker that registers gets the tasks of the jobs that read it (joining a
// running coordinated job through RoundJoins). A dynamically sharded task no client reads any more
// is finished (its splits go back to the queue); a job is finished when the tasks its clients read
// are. The worker's own reports (its tasks' started splits and ends) arrive with its heartbeat.
//
// Threading: free functions over a JournaledState; those taking one require its mu (the service
// holds it). They change the state only through JournaledState::Commit.
#ifndef SLUICE_DATAPLANE_DISPATCHER_TASK_PLACEMENT_H_
#define SLUICE_DATAPLANE_DISPATCHER_TASK_PLACEMENT_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataplane/dispatcher/journaled_state.h"
#include "dataplane/dispatcher/round_joins.h"
#include "dataservice.pb.h"

namespace sluice::dispatcher {

// Whether `job` has a live task on the worker at `address`.
bool HasTaskOn(const DispatcherState& state, const DispatcherState::Job& job, const std::string& address);

// The TaskDef a worker gets for `task` (in its heartbeat response).
void FillTaskDef(const DispatcherState& state, const DispatcherState::Task& task, service::TaskDef* def);

absl::Status CreateTask(JournaledState& js, const DispatcherState::Job& job, const std::string& address,
                        int32_t worker_index, int32_t num_workers, int64_t starting_round)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// The first tasks of the job just created: static jobs on their fixed workers, coordinated jobs on
// every registered, non-draining worker, others as AddWantedTasks.
absl::Status PlaceNewJobTasks(JournaledState& js, int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// Creates the tasks of a non-static, non-coordinated job on every registered, non-draining worker
// its clients read and that has none yet (a client from a new host joined).
absl::Status AddWantedTasks(JournaledState& js, int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// A worker registered (not draining): creates the tasks of the running jobs that read it (a static
// job only if the worker is one of its fixed workers: its shard again). A coordinated job with
// clients and tasks gets it through a round join.
absl::Status CreateTasksForWorker(JournaledState& js, RoundJoins& joins, const std::string& address)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// After a client left: a dynamically sharded task no remaining client reads is finished (its
// unstarted splits and lease remainders go back to the queue, so the epoch does not wait for it).
absl::Status FinishUnreadTasks(JournaledState& js, int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// Finishes `job_id` when its tasks are finished (under SHARDING_OFF: the tasks its clients read).
absl::Status FinishJobIfDone(JournaledState& js, int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

// A worker heartbeat's reports on its tasks: started splits are acknowledged, finished tasks
// finished (and their jobs when done); tasks that are not the worker's (finished job, removed task,
// another worker's) go to `response->tasks_to_delete`.
absl::Status ApplyTaskReports(JournaledState& js, const std::string& address,
                              const google::protobuf::RepeatedPtrField<service::TaskProgress>& reports,
                              service::WorkerHeartbeatResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js.mu);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_TASK_PLACEMENT_H_
