#include "dataplane/dispatcher/dispatcher_metrics.h"

namespace sluice::dispatcher {
namespace {

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& registry, const std::string& name,
                                                       const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}
prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& registry, const std::string& name,
                                                   const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

}  // namespace

DispatcherMetrics::DispatcherMetrics(prometheus::Registry& registry, std::string dataservice)
    : dataservice_(std::move(dataservice)),
      client_wait_(CounterFamily(registry, "sluice_client_wait_seconds_total",
                                 "Seconds the job's clients spent blocked waiting for data")),
      client_step_(CounterFamily(registry, "sluice_client_step_seconds_total",
                                 "Seconds of the job's clients' training steps, waits included")),
      client_elements_(CounterFamily(registry, "sluice_client_elements_total", "Elements the job's clients consumed")),
      client_bytes_(CounterFamily(registry, "sluice_client_bytes_total", "Bytes the job's clients consumed")),
      splits_served_(CounterFamily(registry, "sluice_dispatcher_splits_served_total",
                                   "Splits handed to workers under dynamic sharding")),
      split_remainders_(CounterFamily(registry, "sluice_dispatcher_split_remainders_total",
                                      "Splits a lost worker was reading under a lease, queued again from the lease's end")),
      elements_lost_(CounterFamily(registry, "sluice_dispatcher_elements_lost_estimate_total",
                                   "Elements lost workers had produced that the job's clients never received "
                                   "(estimated at removal from the workers' and clients' heartbeats)")),
      worker_removals_(CounterFamily(registry, "sluice_dispatcher_worker_removals_total",
                                     "Workers removed, by reason (heartbeat timeout, deregistered, restarted)")),
      snapshots_(CounterFamily(registry, "sluice_dispatcher_snapshots_total", "Journal snapshots written")
                     .Add({{"dataservice", dataservice_}})),
      autoorder_plans_(CounterFamily(registry, "sluice_dispatcher_autoorder_plans_total",
                                     "Pipelines AutoOrder planned at registration, by outcome (applied, unchanged, refused, failed)")),
      autoorder_speedup_(GaugeFamily(registry, "sluice_dispatcher_autoorder_speedup",
                                     "Measured speed-up (CPU per element of the reordered part) of the last AutoOrder rewrite applied; 0 before one")
                             .Add({{"dataservice", dataservice_}})),
      autoorder_planning_seconds_(CounterFamily(registry, "sluice_dispatcher_autoorder_planning_seconds_total",
                                                "CPU seconds AutoOrder spent sampling, measuring and verifying pipelines")
                                      .Add({{"dataservice", dataservice_}})),
      jobs_(GaugeFamily(registry, "sluice_dispatcher_jobs", "Jobs not finished").Add({{"dataservice", dataservice_}})),
      workers_(GaugeFamily(registry, "sluice_dispatcher_workers", "Registered workers by placement")),
      workers_local_(workers_.Add({{"dataservice", dataservice_}, {"placement", "local"}})),
      workers_remote_(workers_.Add({{"dataservice", dataservice_}, {"placement", "remote"}})),
      journal_bytes_(GaugeFamily(registry, "sluice_dispatcher_journal_bytes", "Bytes of the journal's live files")
                         .Add({{"dataservice", dataservice_}})),
      job_workers_(GaugeFamily(registry, "sluice_dispatcher_job_workers",
                               "Workers with a task of the job, by placement (unfinished jobs)")) {
  for (const char* outcome : {"applied", "unchanged", "refused", "failed"}) {
    autoorder_plans_.Add({{"dataservice", dataservice_}, {"outcome", outcome}});
  }
}

void DispatcherMetrics::AddAutoOrderPlan(const pipeline::AutoOrderReport& report) {
  autoorder_plans_.Add({{"dataservice", dataservice_}, {"outcome", report.outcome()}}).Increment();
  autoorder_planning_seconds_.Increment(report.planning_cpu_seconds());
  if (report.outcome() == "applied") autoorder_speedup_.Set(report.measured_speedup());
}

prometheus::Labels DispatcherMetrics::JobLabels(const std::string& job) const {
  return {{"dataservice", dataservice_}, {"job", job}};
}

void DispatcherMetrics::AddClientMetrics(const std::string& job, const service::ClientMetrics& delta) {
  const prometheus::Labels labels = JobLabels(job);
  client_wait_.Add(labels).Increment(delta.wait_seconds_total());
  client_step_.Add(labels).Increment(delta.step_seconds_total());
  client_elements_.Add(labels).Increment(static_cast<double>(delta.elements_total()));
  client_bytes_.Add(labels).Increment(static_cast<double>(delta.bytes_total()));
  elements_lost_.Add(labels);  // the job's loss counter exists (at 0) from its first client heartbeat
}

void DispatcherMetrics::AddSplitsServed(const std::string& job, int64_t n) {
  splits_served_.Add(JobLabels(job)).Increment(static_cast<double>(n));
}

void DispatcherMetrics::AddSplitRemainders(const std::string& job, int64_t n) {
  split_remainders_.Add(JobLabels(job)).Increment(static_cast<double>(n));
}

void DispatcherMetrics::AddElementsLostEstimate(const std::string& job, int64_t n) {
  elements_lost_.Add(JobLabels(job)).Increment(static_cast<double>(n));
}

void DispatcherMetrics::AddWorkerRemoval(const std::string& reason) {
  worker_removals_.Add({{"dataservice", dataservice_}, {"reason", reason}}).Increment();
}

void DispatcherMetrics::AddSnapshot() { snapshots_.Increment(); }
void DispatcherMetrics::SetJobs(int64_t active_jobs) { jobs_.Set(static_cast<double>(active_jobs)); }
void DispatcherMetrics::SetWorkers(int64_t local, int64_t remote) {
  workers_local_.Set(static_cast<double>(local));
  workers_remote_.Set(static_cast<double>(remote));
}
void DispatcherMetrics::SetJournalBytes(int64_t bytes) { journal_bytes_.Set(static_cast<double>(bytes)); }

void DispatcherMetrics::RemoveJobSeries(const std::string& job) {
  const prometheus::Labels labels = JobLabels(job);
  for (prometheus::Family<prometheus::Counter>* family :
       {&client_wait_, &client_step_, &client_elements_, &client_bytes_, &splits_served_, &split_remainders_,
        &elements_lost_}) {
    if (family->Has(labels)) family->Remove(&family->Add(labels));
  }
}

void DispatcherMetrics::SetJobWorkers(const std::map<std::string, std::pair<int64_t, int64_t>>& per_job) {
  absl::MutexLock lock(&job_workers_mu_);
  for (auto it = job_worker_gauges_.begin(); it != job_worker_gauges_.end();) {
    if (per_job.count(it->first)) {
      ++it;
      continue;
    }
    job_workers_.Remove(it->second.first);
    job_workers_.Remove(it->second.second);
    it = job_worker_gauges_.erase(it);
  }
  for (const auto& [job, counts] : per_job) {
    auto [it, created] = job_worker_gauges_.try_emplace(job);
    if (created) {
      prometheus::Labels labels = JobLabels(job);
      labels["placement"] = "local";
      it->second.first = &job_workers_.Add(labels);
      labels["placement"] = "remote";
      it->second.second = &job_workers_.Add(labels);
    }
    it->second.first->Set(static_cast<double>(counts.first));
    it->second.second->Set(static_cast<double>(counts.second));
  }
}

}  // namespace sluice::dispatcher
