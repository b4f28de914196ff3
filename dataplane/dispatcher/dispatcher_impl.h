// DispatcherService: the logic behind every Dispatcher RPC, free of gRPC. It owns the
// DispatcherState and the soft state that is not journaled (heartbeat times, per-client metric
// totals, the tasks each worker last listed, the highest coordinated-read round seen), and writes
// every change through the journal.
//
// Write path, and why the state lock covers the journal append: each change is validated
// (DispatcherState::Check), queued with Journal::Append and then applied, all under mu_, so the
// journal's record order is exactly the Apply order. Append is an in-memory queue push (no I/O,
// never an RPC), so the lock is never held across a disk write or an RPC. The I/O happens in
// Journal::Sync(seq), called after mu_ is released and before the RPC returns (group commit: one
// caller writes and fsyncs for all waiting ones). Every RPC — reads too — waits until everything it
// observed is durable, so no response reveals a change that a crash could still undo.
//
// Slow work stays outside mu_: canonicalizing a pipeline and listing its splits (file I/O) in
// RegisterDataset, writing snapshots in Tick.
//
// Time comes from the injected Clock; Tick() does the periodic work (worker and client timeouts,
// job garbage collection, compaction, gauges) and is driven by the binary's timer thread or by tests.
//
// Threading: every method is thread-safe.
#ifndef SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_IMPL_H_
#define SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_IMPL_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/dispatcher/clock.h"
#include "dataplane/dispatcher/delivery_tracker.h"
#include "dataplane/dispatcher/dispatcher_metrics.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataplane/pipeline/autoorder/auto_order.h"
#include "dataplane/dispatcher/journal.h"
#include "dataplane/dispatcher/split_limit.h"
#include "absl/status/statusor.h"
#include "dataservice.pb.h"
#include "pipeline.pb.h"

namespace sluice::dispatcher {

struct DispatcherOptions {
  absl::Duration worker_timeout = absl::Seconds(5);       // no heartbeat for this long: the worker is removed
  absl::Duration heartbeat_interval = absl::Milliseconds(500);  // told to workers
  absl::Duration client_timeout = absl::Seconds(60);      // no heartbeat for this long: the client is released
  absl::Duration job_gc_grace = absl::Minutes(5);         // a job without clients finishes after this long
  int64_t snapshot_every = 10000;                          // compact after this many updates (0: never)
  int32_t max_splits_per_request = 256;                    // GetSplits.max_splits is clamped to this
  int64_t max_dataset_splits = kDefaultMaxDatasetSplits;  // a dataset with more splits is refused (split_limit.h)
  int64_t finished_jobs_retained = 1000;                   // older finished jobs are forgotten (see Tick)
  absl::Duration unused_dataset_retention = absl::Hours(1); // a dataset no job uses is forgotten after this
  std::string dataservice;                                 // metrics label
  // Plugins: a registered pipeline may name only plugins inside these directories (symlinks and ".."
  // resolved, see pipeline::CheckPluginPath); empty: every pipeline naming a plugin is refused.
  std::vector<std::string> plugin_dirs;
  // --sharing: SHARDING_OFF jobs (not coordinated) whose request leaves cross_job_sharing unset
  // are cross-job shared.
  bool default_cross_job_sharing = false;
  // AutoOrder (docs/autoorder.md): a newly registered pipeline is reordered once, before it is
  // journaled; what it did is kept with the dataset (GetState) and counted in the metrics.
  pipeline::AutoOrderOptions auto_order;  // mode off by default
};

// Coordinated reads: a late worker's task starts this many rounds after the highest round seen
// (the first proposal; doubled each time a client passes the proposed round before holding it).
inline constexpr int64_t kStartingRoundMargin = 8;
inline constexpr int64_t kMaxStartingRoundMargin = int64_t{1} << 20;
// Coordinated reads: the journaled round watermark runs this far ahead of the highest round seen.
inline constexpr int64_t kRoundWatermarkLookahead = 64;

class DispatcherService {
 public:
  // `journal` may be null (state kept in memory only); `metrics` may be null.
  DispatcherService(DispatcherOptions options, const Clock* clock, Journal* journal, DispatcherMetrics* metrics);

  // Rebuilds the state from what Journal::Open read. Call once, before serving. Errors name the
  // update that does not apply.
  absl::Status Recover(const JournalContents& contents);

  // Registers `def` as the dispatcher's default dataset (journaled like any RegisterDataset, with
  // the same checks): GetOrCreateJob with an empty dataset_id reads it, and GetState reports it.
  // Call after Recover, before serving. Returns the dataset id.
  absl::StatusOr<std::string> SetDefaultPipeline(const pipeline::PipelineDef& def);

  absl::Status RegisterDataset(const service::RegisterDatasetRequest& request, service::RegisterDatasetResponse* response);
  absl::Status GetOrCreateJob(const service::GetOrCreateJobRequest& request, service::GetOrCreateJobResponse* response);
  absl::Status ClientHeartbeat(const service::ClientHeartbeatRequest& request, service::ClientHeartbeatResponse* response);
  absl::Status ReleaseJobClient(const service::ReleaseJobClientRequest& request,
                                service::ReleaseJobClientResponse* response);
  absl::Status WorkerHeartbeat(const service::WorkerHeartbeatRequest& request, service::WorkerHeartbeatResponse* response);
  absl::Status GetSplits(const service::GetSplitsRequest& request, service::GetSplitsResponse* response);
  absl::Status WorkerDeregister(const service::WorkerDeregisterRequest& request,
                                service::WorkerDeregisterResponse* response);
  absl::Status DrainWorkers(const service::DrainWorkersRequest& request, service::DrainWorkersResponse* response);
  absl::Status GetState(const service::GetStateRequest& request, service::GetStateResponse* response);

  // Periodic work: removes workers whose heartbeats stopped (their unstarted splits go back to the
  // queue front), releases silent clients, finishes jobs without clients after the grace period,
  // compacts the journal when due, refreshes gauges.
  void Tick();
  // Writes a snapshot now if `force` or if snapshot_every updates were made since the last one.
  absl::Status MaybeCompact(bool force = false);

  // Introspection for tests and tools.
  std::string StateDebugString() const;
  int64_t updates_since_snapshot() const;

 private:
  absl::Status Commit(const service::Update& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the journal holds everything up to `sequence` (0: nothing to wait for).
  absl::Status Durable(int64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t LastSequenceLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status GetSplitsLocked(const service::GetSplitsRequest& request, int max_splits,
                               service::GetSplitsResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CreateTasksForWorkerLocked(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Locality ("tasks follow readers"): whether a client (of a job with `sharding`, reading
  // `target_workers` from `client_host`) reads a task on `worker`. ANY: yes; LOCAL: same host;
  // AUTO: yes, except under SHARDING_OFF when the client's host has a registered, non-draining
  // worker (then only same-host ones).
  bool ClientWantsWorkerLocked(service::ShardingPolicy sharding, service::TargetWorkers target_workers,
                               const std::string& client_host, const DispatcherState::Worker& worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether some client of `job` reads a task on `worker` (coordinated jobs: every worker). A
  // non-coordinated job gets tasks only on the workers its clients read.
  bool JobWantsWorkerLocked(const DispatcherState::Job& job, const DispatcherState::Worker& worker) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates the tasks of a non-static, non-coordinated job on every registered, non-draining
  // worker its clients read and that has none yet (a client from a new host joined).
  absl::Status AddWantedTasksLocked(int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tasks `client` reads, by the clients' own rule (dataplane/client/task_selection.h).
  std::vector<const DispatcherState::Task*> TasksReadByLocked(const DispatcherState::Job& job,
                                                              const DispatcherState::JobClient& client) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a client left: a dynamically sharded task no remaining client reads is finished (its
  // unstarted splits and lease remainders go back to the queue, so the epoch does not wait for it).
  absl::Status FinishUnreadTasksLocked(int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CreateTaskLocked(const DispatcherState::Job& job, const std::string& address, int32_t worker_index,
                                int32_t num_workers, int64_t starting_round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RemoveWorkerLocked(const std::string& address, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FinishJobIfDoneLocked(int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReleaseClientLocked(int64_t job_client_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Coordinated reads: the first round a task added to a running job serves.
  int64_t StartingRoundLocked(const DispatcherState::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Coordinated reads: creates the pending workers' tasks of `job_id` once every client of the job
  // holds the proposed round (or the job has no clients or tasks left); drops the join of a
  // finished job.
  absl::Status CompleteJoinIfAgreedLocked(int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillTaskDefLocked(const DispatcherState::Task& task, service::TaskDef* def) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string JobLabel(const DispatcherState::Job& job) const;

  const DispatcherOptions options_;
  const Clock* const clock_;
  Journal* const journal_;
  DispatcherMetrics* const metrics_;

  mutable absl::Mutex mu_;
  DispatcherState state_ ABSL_GUARDED_BY(mu_);
  int64_t updates_since_snapshot_ ABSL_GUARDED_BY(mu_) = 0;
  bool compacting_ ABSL_GUARDED_BY(mu_) = false;
  // Soft state: rebuilt from heartbeats after a restart.
  std::map<std::string, absl::Time> worker_seen_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<int64_t>> worker_listed_tasks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, service::WorkerStats> worker_stats_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, absl::Time> client_seen_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, service::ClientMetrics> client_metrics_ ABSL_GUARDED_BY(mu_);  // last totals per client
  std::map<int64_t, service::ClientMetrics> job_metrics_ ABSL_GUARDED_BY(mu_);     // summed per job
  std::map<int64_t, int64_t> max_round_seen_ ABSL_GUARDED_BY(mu_);                 // per job, since start
  // Coordinated reads: workers waiting to join a running job. The dispatcher proposes `round`
  // (block_round in client heartbeat answers); a client that has not started it holds it and says
  // so in its next heartbeat (acked_block_round); once every client of the job holds it, the tasks
  // are created with starting_round = round. A client already past it makes the dispatcher propose
  // a later round (margin doubled). Soft state: after a restart the workers' heartbeats start over.
  struct PendingJoin {
    int64_t round = 0;
    int64_t margin = kStartingRoundMargin;
    std::map<std::string, std::pair<int32_t, int32_t>> workers;  // address -> worker_index, num_workers
    std::set<int64_t> acked;                                      // clients holding `round`
  };
  std::map<int64_t, PendingJoin> pending_joins_ ABSL_GUARDED_BY(mu_);
  // Coordinated reads: clients replaced by a newer client with their consumer index -> why (their
  // next heartbeat gets it as FAILED_PRECONDITION). Soft state; a few bytes per replacement.
  std::map<int64_t, std::string> replaced_clients_ ABSL_GUARDED_BY(mu_);
  // Retention: when each dataset was last registered or last used by a job that went (soft state;
  // after a restart every dataset starts its retention period anew).
  std::map<std::string, absl::Time> dataset_last_used_ ABSL_GUARDED_BY(mu_);
  // The dataset of --pipeline ("" without one): GetOrCreateJob's default; never forgotten.
  std::string default_dataset_id_ ABSL_GUARDED_BY(mu_);
  // Elements produced and received per streaming task; the loss estimated when workers die (soft).
  DeliveryTracker delivery_ ABSL_GUARDED_BY(mu_);
};

// True when a client on `client_host` and a worker on `worker_host` share a host (exact match,
// as the clients decide locality).
bool SameHost(const std::string& client_host, const std::string& worker_host);

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_IMPL_H_
