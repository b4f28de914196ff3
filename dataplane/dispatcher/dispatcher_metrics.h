// The dispatcher's Prometheus metrics (names are the autoscaler's contract, see docs/metrics.md):
//   sluice_client_wait_seconds_total, sluice_client_step_seconds_total, sluice_client_elements_total,
//   sluice_client_bytes_total                     {dataservice, job}  summed over the job's clients
//   sluice_dispatcher_splits_served_total         {dataservice, job}
//   sluice_dispatcher_split_remainders_total      {dataservice, job}  leased splits of lost workers re-queued
//   sluice_dispatcher_elements_lost_estimate_total {dataservice, job} elements lost workers produced, never received
//   sluice_dispatcher_jobs                        {dataservice}       jobs not finished
//   sluice_dispatcher_workers                     {dataservice, placement=local|remote}
//   sluice_dispatcher_job_workers                 {dataservice, job, placement}  workers with a task of the job
//   sluice_dispatcher_journal_bytes               {dataservice}
//   sluice_dispatcher_worker_removals_total       {dataservice, reason}
//   sluice_dispatcher_snapshots_total             {dataservice}
//   sluice_dispatcher_autoorder_plans_total       {dataservice, outcome}  pipelines AutoOrder planned
//   sluice_dispatcher_autoorder_speedup           {dataservice}       measured speed-up of the last rewrite applied
//   sluice_dispatcher_autoorder_planning_seconds_total {dataservice}  CPU seconds AutoOrder spent planning
// `job` is the job name, or the job id for anonymous jobs.
//
// Threading: thread-safe (prometheus-cpp metrics are).
#ifndef SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_METRICS_H_
#define SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "dataservice.pb.h"
#include "pipeline.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace sluice::dispatcher {

class DispatcherMetrics {
 public:
  DispatcherMetrics(prometheus::Registry& registry, std::string dataservice);

  // `delta` holds increments (>= 0) of the client counters. Also makes the job's
  // elements-lost counter appear (at 0), so a job without losses shows 0 rather than nothing.
  void AddClientMetrics(const std::string& job, const service::ClientMetrics& delta);
  void AddSplitsServed(const std::string& job, int64_t n);
  void AddSplitRemainders(const std::string& job, int64_t n);
  void AddElementsLostEstimate(const std::string& job, int64_t n);
  void AddWorkerRemoval(const std::string& reason);
  void AddSnapshot();
  // One pipeline AutoOrder planned at registration (docs/autoorder.md).
  void AddAutoOrderPlan(const pipeline::AutoOrderReport& report);
  void SetJobs(int64_t active_jobs);
  void SetWorkers(int64_t local, int64_t remote);
  void SetJournalBytes(int64_t bytes);
  // Per unfinished job (label): its workers by placement (local, remote). Series of jobs no longer
  // listed are removed.
  void SetJobWorkers(const std::map<std::string, std::pair<int64_t, int64_t>>& per_job);
  // Drops every per-job series of `job` (a forgotten job whose label no other job uses).
  void RemoveJobSeries(const std::string& job);

 private:
  prometheus::Labels JobLabels(const std::string& job) const;

  const std::string dataservice_;
  prometheus::Family<prometheus::Counter>& client_wait_;
  prometheus::Family<prometheus::Counter>& client_step_;
  prometheus::Family<prometheus::Counter>& client_elements_;
  prometheus::Family<prometheus::Counter>& client_bytes_;
  prometheus::Family<prometheus::Counter>& splits_served_;
  prometheus::Family<prometheus::Counter>& split_remainders_;
  prometheus::Family<prometheus::Counter>& elements_lost_;
  prometheus::Family<prometheus::Counter>& worker_removals_;
  prometheus::Counter& snapshots_;
  prometheus::Family<prometheus::Counter>& autoorder_plans_;
  prometheus::Gauge& autoorder_speedup_;
  prometheus::Counter& autoorder_planning_seconds_;
  prometheus::Gauge& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Gauge& workers_local_;
  prometheus::Gauge& workers_remote_;
  prometheus::Gauge& journal_bytes_;
  prometheus::Family<prometheus::Gauge>& job_workers_;
  absl::Mutex job_workers_mu_;
  std::map<std::string, std::pair<prometheus::Gauge*, prometheus::Gauge*>> job_worker_gauges_
      ABSL_GUARDED_BY(job_workers_mu_);
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_DISPATCHER_METRICS_H_
