#include "dataplane/worker/worker_metrics.h"

#include <time.h>

namespace sluice::worker {
namespace {

prometheus::Counter* AddCounter(prometheus::Registry& registry, const std::string& name, const std::string& help,
                                const std::map<std::string, std::string>& labels) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Gauge* AddGauge(prometheus::Registry& registry, const std::string& name, const std::string& help,
                            const std::map<std::string, std::string>& labels) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(labels);
}

}  // namespace

WorkerMetrics::WorkerMetrics(std::shared_ptr<prometheus::Registry> registry,
                             const std::map<std::string, std::string>& labels)
    : registry_(registry ? std::move(registry) : std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  elements_counter_ = AddCounter(r, "sluice_worker_elements_produced_total", "Elements produced by the worker's pipelines.", labels);
  bytes_counter_ = AddCounter(r, "sluice_worker_bytes_produced_total", "Encoded bytes of the elements produced.", labels);
  busy_counter_ = AddCounter(r, "sluice_worker_busy_seconds_total", "CPU seconds used by the worker process.", labels);
  runs_counter_ = AddCounter(r, "sluice_worker_pipeline_runs_total",
                             "Pipeline passes started (one per task epoch, or one per shared run).", labels);
  shm_counter_ = AddCounter(r, "sluice_worker_shm_elements_total",
                            "Elements whose payload went to a same-host client through shared memory.", labels);
  shm_fallback_counter_ = AddCounter(r, "sluice_worker_shm_fallback_elements_total",
                                     "Large elements of shared-memory streams sent as bytes: the ring was full.",
                                     labels);
  buffered_gauge_ = AddGauge(r, "sluice_worker_buffered_elements", "Elements produced and waiting to be read.", labels);
  active_tasks_gauge_ = AddGauge(r, "sluice_worker_active_tasks", "Tasks the worker runs that are not finished.", labels);
}

void WorkerMetrics::AddProduced(int64_t elements, int64_t bytes) {
  elements_ += elements;
  bytes_ += bytes;
  elements_counter_->Increment(static_cast<double>(elements));
  bytes_counter_->Increment(static_cast<double>(bytes));
}

void WorkerMetrics::AddPipelineRun() {
  ++runs_;
  runs_counter_->Increment();
}

void WorkerMetrics::AddShm(int64_t elements, int64_t fallbacks) {
  if (elements > 0) shm_counter_->Increment(static_cast<double>(elements));
  if (fallbacks > 0) shm_fallback_counter_->Increment(static_cast<double>(fallbacks));
}

void WorkerMetrics::SetBufferedElements(int64_t n) { buffered_gauge_->Set(static_cast<double>(n)); }
void WorkerMetrics::SetActiveTasks(int64_t n) { active_tasks_gauge_->Set(static_cast<double>(n)); }

void WorkerMetrics::UpdateBusySeconds(double total_cpu_seconds) {
  absl::MutexLock lock(&busy_mu_);
  if (total_cpu_seconds > busy_reported_) {
    busy_counter_->Increment(total_cpu_seconds - busy_reported_);
    busy_reported_ = total_cpu_seconds;
  }
}

double WorkerMetrics::busy_seconds() const {
  absl::MutexLock lock(&busy_mu_);
  return busy_reported_;
}

double ProcessCpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace sluice::worker
