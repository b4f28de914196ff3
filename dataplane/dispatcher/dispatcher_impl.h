// DispatcherService: the handler behind every Dispatcher RPC, free of gRPC. Each handler checks
// its request, takes the lock, delegates to the piece that owns the protocol, and waits until what
// it changed or observed is durable:
//
//   journaled_state.h       the lock, DispatcherState, Commit (Check, journal Append, Apply), compaction
//   dataset_registration.h  RegisterDataset: plugin checks, canonical form, AutoOrder, split listing
//   job_creation.h          GetOrCreateJob: request checks, spec defaults, name/iteration lookup, CreateJob
//   locality.h              which workers a client reads (tasks follow readers)
//   task_placement.h        where tasks go and when tasks and jobs finish; workers' task reports
//   split_service.h         GetSplits: splits, acknowledgements, leases, epochs (SHARDING_DYNAMIC)
//   round_joins.h           coordinated reads: round watermark, late workers joining at an agreed round
//   drain.h                 DrainWorkers and draining heartbeats
//   client_metrics.h        client metric totals turned into per-job increments
//   retention.h             what Tick removes: timed-out workers and clients, abandoned and old jobs, unused datasets
//
// This class keeps the liveness soft state (heartbeat times, the tasks each worker last listed,
// worker stats), the default dataset, and the two removals that span pieces (a worker, a client).
//
// Write path, and why the state lock covers the journal append: each change is validated
// (DispatcherState::Check), queued with Journal::Append and then applied, all under the lock, so the
// journal's record order is exactly the Apply order. Append is an in-memory queue push (no I/O,
// never an RPC), so the lock is never held across a disk write or an RPC. The I/O happens in
// Journal::Sync(seq), called after the lock is released and before the RPC returns (group commit:
// one caller writes and fsyncs for all waiting ones). Every RPC — reads too — waits until
// everything it observed is durable, so no response reveals a change that a crash could still undo.
//
// Slow work stays outside the lock: canonicalizing a pipeline and listing its splits (file I/O) in
// RegisterDataset, writing snapshots in Tick.
//
// Time comes from the injected Clock; Tick() does the periodic work (worker and client timeouts,
// job garbage collection, compaction, gauges) and is driven by the binary's timer thread or by tests.
//
// Threading: every method is thread-safe. One mutex (JournaledState::mu) guards everything; the
// pieces are thread-compatible and called under it.
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
#include "dataplane/dispatcher/client_metrics.h"
#include "dataplane/dispatcher/clock.h"
#include "dataplane/dispatcher/delivery_tracker.h"
#include "dataplane/dispatcher/dispatcher_metrics.h"
#include "dataplane/dispatcher/dispatcher_state.h"
#include "dataplane/dispatcher/journal.h"
#include "dataplane/dispatcher/journaled_state.h"
#include "dataplane/dispatcher/locality.h"
#include "dataplane/dispatcher/retention.h"
#include "dataplane/dispatcher/round_joins.h"
#include "dataplane/dispatcher/split_limit.h"
#include "dataplane/pipeline/autoorder/auto_order.h"
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
  // A known dataset's RegisterDataset answer; its retention period starts over.
  void RespondRegisteredLocked(const std::string& dataset_id, service::RegisterDatasetResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  absl::Status GetOrCreateJobLocked(const service::GetOrCreateJobRequest& request, service::JobSpec spec,
                                    service::GetOrCreateJobResponse* response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  // Coordinated reads: one client per consumer index; a new one replaces the holders (their next
  // heartbeat is told why).
  absl::Status ReplaceConsumerLocked(int64_t job_id, int32_t consumer_index, int64_t new_client_id,
                                     const std::string& client_host) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  // A worker heartbeat from an unknown address registers it (and gives it its tasks unless it is
  // draining); one that stopped listing a live task it listed before restarted and starts over.
  absl::Status RegisterWorkerLocked(const service::WorkerHeartbeatRequest& request, const std::set<int64_t>& listed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  absl::Status RemoveWorkerLocked(const std::string& address, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  absl::Status ReleaseClientLocked(int64_t job_client_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  // Tick's steps.
  void RemoveSilentLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  void FinishAbandonedJobsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  void ForgetOldJobsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  void ForgetUnusedDatasetsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(js_.mu);

  const DispatcherOptions options_;
  const Clock* const clock_;
  DispatcherMetrics* const metrics_;

  JournaledState js_;  // holds the lock, mu
  RoundJoins joins_ ABSL_GUARDED_BY(js_.mu);
  ClientMetricsTotals client_metrics_ ABSL_GUARDED_BY(js_.mu);
  DatasetRetention dataset_retention_ ABSL_GUARDED_BY(js_.mu);
  // Soft state: rebuilt from heartbeats after a restart.
  std::map<std::string, absl::Time> worker_seen_ ABSL_GUARDED_BY(js_.mu);
  std::map<std::string, std::set<int64_t>> worker_listed_tasks_ ABSL_GUARDED_BY(js_.mu);
  std::map<std::string, service::WorkerStats> worker_stats_ ABSL_GUARDED_BY(js_.mu);
  // Heartbeats per worker since its last GetSplits carrying acknowledgements or progress (the
  // drain verdict's freshness of produced counts; absent: 0).
  std::map<std::string, int64_t> heartbeats_since_split_report_ ABSL_GUARDED_BY(js_.mu);
  std::map<int64_t, absl::Time> client_seen_ ABSL_GUARDED_BY(js_.mu);
  // The dataset of --pipeline ("" without one): GetOrCreateJob's default; never forgotten.
  std::string default_dataset_id_ ABSL_GUARDED_BY(js_.mu);
  // Elements produced and received per streaming task; the loss estimated when workers die (soft).
  DeliveryTracker delivery_ ABSL_GUARDED_BY(js_.mu);
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_IMPL_H_
