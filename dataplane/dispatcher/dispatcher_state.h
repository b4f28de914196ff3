// DispatcherState: everything the dispatcher knows that must survive a restart — datasets, jobs,
// job clients, workers, tasks, dynamic-sharding split positions and epochs, coordinated-read round
// watermarks, draining flags — and nothing else (no liveness times, no metrics, no I/O, no clock).
//
// It changes ONLY through Apply(update) with the journal's Update messages, so replaying the same
// updates always rebuilds the same state. Check(update) validates an update without changing
// anything; Apply runs the same validation first and changes nothing when it fails, so a rejected
// update never leaves a half-applied state. ToSnapshotUpdates() returns a short sequence of updates
// that rebuilds the current state (journal compaction).
//
// Derived transitions happen inside Apply: returning a removed or finished task's assigned but
// unstarted splits to the front of its job's queue, and the unread rest of each split it was
// reading past its last position lease (a remainder: the split with `skip` set to the lease), moving a dynamic job to its next epoch once
// every split was started and every live task reached the epoch's end, dropping a finished job's
// tasks and split positions.
//
// Threading: not thread-safe; the owner (DispatcherService) serializes access with its mutex.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_STATE_H_
#define SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dataservice.pb.h"
#include "journal.pb.h"
#include "pipeline.pb.h"

namespace sluice::dispatcher {

class DispatcherState {
 public:
  struct Dataset {
    std::string id;
    pipeline::PipelineDef pipeline;
    std::vector<service::Split> splits;  // splits[i].index() == i
    std::optional<pipeline::AutoOrderReport> auto_order;  // set when AutoOrder ran at registration
  };

  // Dynamic sharding: where the job is in its splits. One epoch at a time.
  struct SplitState {
    int64_t epoch = 0;
    std::deque<uint64_t> queue;                 // not yet handed out in this epoch; front first
    std::map<uint64_t, int64_t> assigned;       // split index -> task, handed out but not started
    std::vector<bool> started;                  // per split index, in this epoch
    int64_t num_started = 0;
    std::set<int64_t> tasks_at_epoch_end;       // live tasks told end_of_splits for `epoch`
    bool exhausted = false;                     // every epoch done
    // Position leases: started and not finished splits, with their reader and the end of its
    // lease (-1: none reported). While a task holds a lease, other tasks are not told the end of
    // the epoch: if it is lost they read the remainder.
    struct Reading {
      int64_t task = 0;
      int64_t lease_end = -1;
    };
    std::map<uint64_t, Reading> reading;
    std::vector<bool> finished;                 // per split index, in this epoch: read to its end
    std::map<uint64_t, int64_t> skip;           // remainders not started yet: elements to skip
  };

  struct Job {
    int64_t id = 0;
    service::JobSpec spec;                      // num_epochs normalised: 0 -> 1
    int64_t iteration = 1;                      // of spec.job_name: 1, 2, ... (each run of a named job)
    std::vector<std::string> static_workers;    // FILE/DATA: worker_index -> address
    bool finished = false;
    std::string finish_reason;
    std::set<int64_t> clients;
    int64_t last_client_release_ms = 0;         // when the last client left (0: never)
    std::set<int64_t> tasks;                    // live tasks
    int64_t round_watermark = 0;                // coordinated reads
    int64_t splits_served = 0;                  // splits handed out, all epochs (with re-handouts)
    std::optional<SplitState> splits;           // SHARDING_DYNAMIC and not finished
  };

  struct JobClient {
    int64_t id = 0;
    int64_t job_id = 0;
    std::string client_host;
    service::TargetWorkers target_workers = service::TARGET_WORKERS_AUTO;
    int32_t consumer_index = 0;   // coordinated reads
  };

  struct Worker {
    std::string address;
    std::string host;
    service::Placement placement = service::PLACEMENT_UNSPECIFIED;
    bool draining = false;
    std::set<int64_t> tasks;
  };

  struct Task {
    int64_t id = 0;
    int64_t job_id = 0;
    std::string worker_address;
    int64_t starting_round = 0;
    int32_t worker_index = 0;
    int32_t num_workers = 0;
    bool finished = false;
  };

  // Validates `update` against the current state; changes nothing. Errors name the field and id.
  absl::Status Check(const service::Update& update) const;
  // Check, then change the state. On error nothing changed.
  absl::Status Apply(const service::Update& update);

  // Queries.
  const std::map<std::string, Dataset>& datasets() const { return datasets_; }
  const std::map<int64_t, Job>& jobs() const { return jobs_; }
  const std::map<int64_t, JobClient>& job_clients() const { return job_clients_; }
  const std::map<std::string, Worker>& workers() const { return workers_; }
  const std::map<int64_t, Task>& tasks() const { return tasks_; }
  const Dataset* FindDataset(const std::string& id) const;
  const Job* FindJob(int64_t id) const;
  // The most recently created job with this name (finished or not), or null.
  const Job* FindJobByName(const std::string& name) const;
  const JobClient* FindJobClient(int64_t id) const;
  const Worker* FindWorker(const std::string& address) const;
  const Task* FindTask(int64_t id) const;
  // Splits assigned to `task_id` and not started, ascending.
  std::vector<uint64_t> UnstartedSplitsOf(const Job& job, int64_t task_id) const;
  // Whether a task other than `task_id` holds a position lease on a split it has not finished
  // (a split that comes back as a remainder if that task is lost).
  static bool OtherTaskHoldsLease(const Job& job, int64_t task_id);
  // Elements to skip of split `index` when it is handed out (0 unless it is a remainder).
  static int64_t SkipOf(const Job& job, uint64_t index);

  // Whether a job may be forgotten (RemoveJobUpdate): finished, without clients, and not the most
  // recent job of its name (which keeps the name's iteration count and metric labels).
  bool Removable(const Job& job) const;
  // Whether any job (finished or not) refers to the dataset.
  bool DatasetInUse(const std::string& dataset_id) const;

  // Ids for new objects: never reused, also not after the object is gone.
  int64_t next_job_id() const { return next_job_id_; }
  int64_t next_task_id() const { return next_task_id_; }
  int64_t next_job_client_id() const { return next_job_client_id_; }

  // A short sequence of updates that, applied to an empty state, rebuilds this one exactly.
  std::vector<service::Update> ToSnapshotUpdates() const;

  // A deterministic text rendering of the whole state (tests compare states with it).
  std::string DebugString() const;

 private:
  absl::Status CheckRegisterDataset(const service::RegisterDatasetUpdate& u) const;
  absl::Status CheckCreateJob(const service::CreateJobUpdate& u) const;
  absl::Status CheckAcquireJobClient(const service::AcquireJobClientUpdate& u) const;
  absl::Status CheckReleaseJobClient(const service::ReleaseJobClientUpdate& u) const;
  absl::Status CheckRegisterWorker(const service::RegisterWorkerUpdate& u) const;
  absl::Status CheckRemoveWorker(const service::RemoveWorkerUpdate& u) const;
  absl::Status CheckCreateTask(const service::CreateTaskUpdate& u) const;
  absl::Status CheckFinishTask(const service::FinishTaskUpdate& u) const;
  absl::Status CheckAssignSplits(const service::AssignSplitsUpdate& u) const;
  absl::Status CheckStartSplits(const service::StartSplitsUpdate& u) const;
  absl::Status CheckFinishJob(const service::FinishJobUpdate& u) const;
  absl::Status CheckDrainWorker(const service::DrainWorkerUpdate& u) const;
  absl::Status CheckTaskEpochEnd(const service::TaskEpochEndUpdate& u) const;
  absl::Status CheckRoundWatermark(const service::RoundWatermarkUpdate& u) const;
  absl::Status CheckRestoreJob(const service::RestoreJobUpdate& u) const;
  absl::Status CheckIdCounters(const service::IdCountersUpdate& u) const;
  absl::Status CheckSplitProgress(const service::SplitProgressUpdate& u) const;
  absl::Status CheckRemoveJob(const service::RemoveJobUpdate& u) const;
  absl::Status CheckRemoveDataset(const service::RemoveDatasetUpdate& u) const;
  absl::Status CheckReturnSplits(const service::ReturnSplitsUpdate& u) const;

  void DoRegisterDataset(const service::RegisterDatasetUpdate& u);
  void DoCreateJob(const service::CreateJobUpdate& u);
  void DoAcquireJobClient(const service::AcquireJobClientUpdate& u);
  void DoReleaseJobClient(const service::ReleaseJobClientUpdate& u);
  void DoRegisterWorker(const service::RegisterWorkerUpdate& u);
  void DoRemoveWorker(const service::RemoveWorkerUpdate& u);
  void DoCreateTask(const service::CreateTaskUpdate& u);
  void DoFinishTask(const service::FinishTaskUpdate& u);
  void DoAssignSplits(const service::AssignSplitsUpdate& u);
  void DoStartSplits(const service::StartSplitsUpdate& u);
  void DoFinishJob(const service::FinishJobUpdate& u);
  void DoDrainWorker(const service::DrainWorkerUpdate& u);
  void DoTaskEpochEnd(const service::TaskEpochEndUpdate& u);
  void DoRoundWatermark(const service::RoundWatermarkUpdate& u);
  void DoRestoreJob(const service::RestoreJobUpdate& u);
  void DoIdCounters(const service::IdCountersUpdate& u);
  void DoSplitProgress(const service::SplitProgressUpdate& u);
  void DoRemoveJob(const service::RemoveJobUpdate& u);
  void DoRemoveDataset(const service::RemoveDatasetUpdate& u);
  void DoReturnSplits(const service::ReturnSplitsUpdate& u);

  // A task leaves its job's dynamic split state: its unstarted splits go back to the queue front,
  // and so do the remainders of the splits it was reading under a lease.
  void ReleaseTaskSplits(Job& job, int64_t task_id);
  void MaybeAdvanceEpoch(Job& job);
  void RefillQueue(Job& job);
  const Dataset& DatasetOf(const Job& job) const;
  Job* MutableJob(int64_t id);

  std::map<std::string, Dataset> datasets_;
  std::map<int64_t, Job> jobs_;
  std::map<std::string, int64_t> job_by_name_;
  std::map<int64_t, JobClient> job_clients_;
  std::map<std::string, Worker> workers_;
  std::map<int64_t, Task> tasks_;
  int64_t next_job_id_ = 1;
  int64_t next_task_id_ = 1;
  int64_t next_job_client_id_ = 1;
};

// The dynamic-sharding epochs of a job: -1 means forever; 0 (unset) means 1.
int64_t NormalizedNumEpochs(int64_t num_epochs);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_STATE_H_
