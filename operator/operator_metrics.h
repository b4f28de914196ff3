// OperatorMetrics: the Prometheus metrics of sluice-operator, served on /metrics by common/AdminServer.
//
//   sluice_operator_reconciles_total{result="success|error"}   reconciles finished
//   sluice_operator_reconcile_errors_total                      reconciles that returned an error
//   sluice_operator_reconcile_duration_seconds                  histogram of reconcile latency
//   sluice_operator_workqueue_depth                             keys ready to be reconciled
//   sluice_operator_workqueue_delayed                           keys parked until a requeue time
//   sluice_operator_watch_restarts_total{resource}              watches re-opened after the first
//   sluice_operator_relists_total{resource}                     lists after the first (410 Gone, errors)
//   sluice_operator_api_errors_total{operation}                 failed API calls while executing actions
//   sluice_operator_drain_rpcs_total{result="success|error"}    DrainWorkers/GetState rounds with a dispatcher
//   sluice_operator_scale_down_drains_total{outcome="drained|timed_out"}  worker pods deleted after a scale-down drain
//   sluice_operator_leader                                      1 while this replica acts (leader or no election)
//
// Gauges and the per-resource counters that mirror other objects' counters (queue, reflectors) are
// refreshed from registered sources each time the registry is collected, so /metrics is always current
// without a polling thread.
//
// Thread-safe: every method may be called from any thread; sources are called on the scraping thread
// and must be thread-safe themselves.
#ifndef SLUICE_OPERATOR_OPERATOR_METRICS_H_
#define SLUICE_OPERATOR_OPERATOR_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace sluice::op {

class OperatorMetrics {
 public:
  using CountSource = std::function<int64_t()>;

  OperatorMetrics();
  OperatorMetrics(const OperatorMetrics&) = delete;
  OperatorMetrics& operator=(const OperatorMetrics&) = delete;

  // What AdminServer serves; collecting it refreshes the sourced metrics first.
  std::shared_ptr<prometheus::Registry> registry() const;

  void ObserveReconcile(absl::Duration latency, bool ok);
  void CountApiError(const std::string& operation);
  void CountDrainRpc(bool ok);
  // A worker pod deleted after its scale-down drain: drained, or at the drain deadline.
  void CountScaleDownDrain(bool drained);
  void SetLeader(bool leader);

  // Sources read at collection time. Registering a resource twice replaces its sources.
  void SetQueueSources(CountSource depth, CountSource delayed);
  void SetReflectorSources(const std::string& resource, CountSource watch_restarts, CountSource relists);
  // Drops every source (call before the objects they read are destroyed).
  void ClearSources();

  // Current values, for tests and logs.
  int64_t reconciles() const;
  int64_t reconcile_errors() const;

 private:
  class RefreshingRegistry;
  void Refresh();

  std::shared_ptr<RefreshingRegistry> registry_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Counter& reconciles_ok_;
  prometheus::Counter& reconciles_failed_;
  prometheus::Counter& reconcile_errors_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& queue_delayed_;
  prometheus::Family<prometheus::Counter>& watch_restarts_;
  prometheus::Family<prometheus::Counter>& relists_;
  prometheus::Family<prometheus::Counter>& api_errors_;
  prometheus::Family<prometheus::Counter>& drain_rpcs_;
  prometheus::Counter& drain_ok_;
  prometheus::Counter& drain_failed_;
  prometheus::Family<prometheus::Counter>& scale_down_drains_;
  prometheus::Counter& scale_down_drained_;
  prometheus::Counter& scale_down_timed_out_;
  prometheus::Gauge& leader_;

  struct ReflectorSource {
    CountSource watch_restarts;
    CountSource relists;
    double reported_restarts = 0;
    double reported_relists = 0;
  };
  absl::Mutex mu_;
  CountSource queue_depth_source_ ABSL_GUARDED_BY(mu_);
  CountSource queue_delayed_source_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ReflectorSource> reflectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_OPERATOR_METRICS_H_
