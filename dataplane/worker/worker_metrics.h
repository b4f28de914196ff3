// The worker's Prometheus metrics (names are the autoscaler's contract, docs/metrics.md), labelled
// worker, placement and dataservice. Also keeps plain totals for the WorkerStats the heartbeat sends.
//
// Thread-safe: producers, streams and the heartbeat thread update it concurrently.
#ifndef SLUICE_DATAPLANE_WORKER_WORKER_METRICS_H_
#define SLUICE_DATAPLANE_WORKER_WORKER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace sluice::worker {

class WorkerMetrics {
 public:
  // `labels`: worker, placement, dataservice. A null registry gets a private one.
  WorkerMetrics(std::shared_ptr<prometheus::Registry> registry, const std::map<std::string, std::string>& labels);

  // Elements the worker's pipelines produced (encoded bytes).
  void AddProduced(int64_t elements, int64_t bytes);
  // A pass of a pipeline began (one per epoch per task, or one per shared run).
  void AddPipelineRun();
  // Same-host shared memory: elements sent through a ring, and large elements of such streams sent
  // as bytes because the ring was full.
  void AddShm(int64_t elements, int64_t fallbacks);
  void SetBufferedElements(int64_t n);
  void SetActiveTasks(int64_t n);
  // The process's CPU seconds so far; the counter advances by the difference.
  void UpdateBusySeconds(double total_cpu_seconds);

  int64_t elements_produced() const { return elements_.load(); }
  int64_t bytes_produced() const { return bytes_.load(); }
  int64_t pipeline_runs() const { return runs_.load(); }
  double busy_seconds() const;
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* elements_counter_;
  prometheus::Counter* bytes_counter_;
  prometheus::Counter* busy_counter_;
  prometheus::Counter* runs_counter_;
  prometheus::Counter* shm_counter_;
  prometheus::Counter* shm_fallback_counter_;
  prometheus::Gauge* buffered_gauge_;
  prometheus::Gauge* active_tasks_gauge_;
  std::atomic<int64_t> elements_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> runs_{0};
  mutable absl::Mutex busy_mu_;
  double busy_reported_ ABSL_GUARDED_BY(busy_mu_) = 0;
};

// CPU seconds this process has used (all threads).
double ProcessCpuSeconds();

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_WORKER_METRICS_H_
