// What each streaming task's worker produced and what the job's clients received of it, and the
// loss estimated when a worker dies (docs/dataservice.md, "Worker loss").
//
// Soft state, rebuilt from heartbeats after a restart: workers report each task's produced elements
// (TaskProgress.elements_produced), clients the elements they received from each task
// (ClientHeartbeatRequest.received). The sums over a job's clients go back to the workers, which
// may cap what they produced beyond them (--max_undelivered_elements). When a worker is lost,
// each of its tasks' produced-minus-received is the estimate of what died with it: it counts
// elements the worker produced up to its last heartbeat, so elements produced after that are not
// in it (a worker whose production is capped or stalled by backpressure produced none).
//
// Threading: not thread-safe; the dispatcher calls it under its own lock.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DELIVERY_TRACKER_H_
#define SLUICE_DATAPLANE_DISPATCHER_DELIVERY_TRACKER_H_

#include <cstdint>
#include <iterator>
#include <map>

#include "absl/status/status.h"
#include "dataservice.pb.h"

namespace sluice::dispatcher {

// INVALID_ARGUMENT naming the entry when a client's `received` lists a task twice, a task id <= 0
// or a negative count.
absl::Status CheckReceivedReport(const service::ClientHeartbeatRequest& request);

class DeliveryTracker {
 public:
  // A worker's heartbeat: task `task_id` produced `produced` elements so far.
  void WorkerReported(int64_t task_id, int64_t produced);
  // A client's heartbeat: it received `received` elements of `task_id` so far. Counts only grow
  // (an older, smaller report is ignored); negative counts are the caller's to refuse.
  void ClientReported(int64_t client_id, int64_t task_id, int64_t received);
  // Elements of `task_id` received by all clients (released ones included).
  int64_t Received(int64_t task_id) const;
  // max(0, produced - received) of `task_id` (0 for an unknown task).
  int64_t Undelivered(int64_t task_id) const;
  // Task `task_id` of job `job_id` died with its worker: returns max(0, produced - received), adds
  // it to the job's estimate and forgets the task.
  int64_t TaskLost(int64_t job_id, int64_t task_id);
  // Forgets the tasks `keep` says no (ended otherwise: finished, deleted, deregistered cleanly) and
  // the jobs' estimates `keep_job` says no.
  template <typename KeepTask, typename KeepJob>
  void Prune(KeepTask keep, KeepJob keep_job) {
    for (auto it = tasks_.begin(); it != tasks_.end();) it = keep(it->first) ? std::next(it) : tasks_.erase(it);
    for (auto it = job_lost_.begin(); it != job_lost_.end();) it = keep_job(it->first) ? std::next(it) : job_lost_.erase(it);
  }
  // The job's estimate so far (0 for an unknown job).
  int64_t JobLost(int64_t job_id) const;

 private:
  struct Task {
    int64_t produced = 0;
    std::map<int64_t, int64_t> received_by_client;
  };
  Task& TaskOf(int64_t task_id) { return tasks_[task_id]; }
  std::map<int64_t, Task> tasks_;
  std::map<int64_t, int64_t> job_lost_;
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DELIVERY_TRACKER_H_
