#include "operator/operator_metrics.h"

#include <utility>

namespace sluice::op {

// A registry that refreshes the sourced metrics before every collection.
class OperatorMetrics::RefreshingRegistry : public prometheus::Registry {
 public:
  void SetOwner(OperatorMetrics* owner) { owner_ = owner; }
  std::vector<prometheus::MetricFamily> Collect() const override {
    if (owner_ != nullptr) owner_->Refresh();
    return prometheus::Registry::Collect();
  }

 private:
  OperatorMetrics* owner_ = nullptr;
};

namespace {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

}  // namespace

OperatorMetrics::OperatorMetrics()
    : registry_(std::make_shared<RefreshingRegistry>()),
      reconciles_(prometheus::BuildCounter()
                      .Name("sluice_operator_reconciles_total")
                      .Help("DataService reconciles finished, by result")
                      .Register(*registry_)),
      reconciles_ok_(reconciles_.Add({{"result", "success"}})),
      reconciles_failed_(reconciles_.Add({{"result", "error"}})),
      reconcile_errors_(prometheus::BuildCounter()
                            .Name("sluice_operator_reconcile_errors_total")
                            .Help("DataService reconciles that returned an error (retried with backoff)")
                            .Register(*registry_)
                            .Add({})),
      reconcile_duration_(prometheus::BuildHistogram()
                              .Name("sluice_operator_reconcile_duration_seconds")
                              .Help("Time one DataService reconcile took, API calls included")
                              .Register(*registry_)
                              .Add({}, LatencyBuckets())),
      queue_depth_(prometheus::BuildGauge()
                       .Name("sluice_operator_workqueue_depth")
                       .Help("DataService keys waiting to be reconciled")
                       .Register(*registry_)
                       .Add({})),
      queue_delayed_(prometheus::BuildGauge()
                         .Name("sluice_operator_workqueue_delayed")
                         .Help("DataService keys parked until their requeue time")
                         .Register(*registry_)
                         .Add({})),
      watch_restarts_(prometheus::BuildCounter()
                          .Name("sluice_operator_watch_restarts_total")
                          .Help("Watches re-opened after the first one, by resource")
                          .Register(*registry_)),
      relists_(prometheus::BuildCounter()
                   .Name("sluice_operator_relists_total")
                   .Help("Lists after the first one (after 410 Gone or errors), by resource")
                   .Register(*registry_)),
      api_errors_(prometheus::BuildCounter()
                      .Name("sluice_operator_api_errors_total")
                      .Help("Failed Kubernetes API calls while executing reconcile actions, by operation")
                      .Register(*registry_)),
      drain_rpcs_(prometheus::BuildCounter()
                      .Name("sluice_operator_drain_rpcs_total")
                      .Help("Drain rounds (DrainWorkers + GetState) with a dispatcher, by result")
                      .Register(*registry_)),
      drain_ok_(drain_rpcs_.Add({{"result", "success"}})),
      drain_failed_(drain_rpcs_.Add({{"result", "error"}})),
      scale_down_drains_(prometheus::BuildCounter()
                             .Name("sluice_operator_scale_down_drains_total")
                             .Help("Worker pods deleted after a scale-down drain, by outcome (drained, or "
                                   "timed_out: deleted undrained at --scale-down-drain-timeout-seconds)")
                             .Register(*registry_)),
      scale_down_drained_(scale_down_drains_.Add({{"outcome", "drained"}})),
      scale_down_timed_out_(scale_down_drains_.Add({{"outcome", "timed_out"}})),
      leader_(prometheus::BuildGauge()
                  .Name("sluice_operator_leader")
                  .Help("1 while this replica reconciles (holds the leader Lease, or runs without election)")
                  .Register(*registry_)
                  .Add({})) {
  registry_->SetOwner(this);
}

std::shared_ptr<prometheus::Registry> OperatorMetrics::registry() const { return registry_; }

void OperatorMetrics::ObserveReconcile(absl::Duration latency, bool ok) {
  (ok ? reconciles_ok_ : reconciles_failed_).Increment();
  if (!ok) reconcile_errors_.Increment();
  reconcile_duration_.Observe(absl::ToDoubleSeconds(latency));
}

void OperatorMetrics::CountApiError(const std::string& operation) {
  api_errors_.Add({{"operation", operation}}).Increment();
}

void OperatorMetrics::CountDrainRpc(bool ok) { (ok ? drain_ok_ : drain_failed_).Increment(); }
void OperatorMetrics::CountScaleDownDrain(bool drained) {
  (drained ? scale_down_drained_ : scale_down_timed_out_).Increment();
}

void OperatorMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }

void OperatorMetrics::SetQueueSources(CountSource depth, CountSource delayed) {
  absl::MutexLock lock(&mu_);
  queue_depth_source_ = std::move(depth);
  queue_delayed_source_ = std::move(delayed);
}

void OperatorMetrics::SetReflectorSources(const std::string& resource, CountSource watch_restarts,
                                          CountSource relists) {
  absl::MutexLock lock(&mu_);
  ReflectorSource& s = reflectors_[resource];
  s.watch_restarts = std::move(watch_restarts);
  s.relists = std::move(relists);
  s.reported_restarts = 0;  // a new source counts from zero; the counter keeps what was reported before
  s.reported_relists = 0;
  watch_restarts_.Add({{"resource", resource}});
  relists_.Add({{"resource", resource}});
}

void OperatorMetrics::ClearSources() {
  Refresh();  // keep what the sources counted so far
  absl::MutexLock lock(&mu_);
  queue_depth_source_ = nullptr;
  queue_delayed_source_ = nullptr;
  for (auto& [resource, s] : reflectors_) {
    s.watch_restarts = nullptr;
    s.relists = nullptr;
  }
  queue_depth_.Set(0);
  queue_delayed_.Set(0);
}

void OperatorMetrics::Refresh() {
  absl::MutexLock lock(&mu_);
  if (queue_depth_source_) queue_depth_.Set(static_cast<double>(queue_depth_source_()));
  if (queue_delayed_source_) queue_delayed_.Set(static_cast<double>(queue_delayed_source_()));
  for (auto& entry : reflectors_) {
    // Not a structured binding: clang 14 cannot capture one in a lambda.
    const std::string& resource = entry.first;
    auto& s = entry.second;
    auto advance = [&](const CountSource& source, double* reported, prometheus::Family<prometheus::Counter>& family) {
      if (!source) return;
      double now = static_cast<double>(source());
      if (now > *reported) {
        family.Add({{"resource", resource}}).Increment(now - *reported);
        *reported = now;
      }
    };
    advance(s.watch_restarts, &s.reported_restarts, watch_restarts_);
    advance(s.relists, &s.reported_relists, relists_);
  }
}

int64_t OperatorMetrics::reconciles() const {
  return static_cast<int64_t>(reconciles_ok_.Value() + reconciles_failed_.Value());
}

int64_t OperatorMetrics::reconcile_errors() const { return static_cast<int64_t>(reconcile_errors_.Value()); }

}  // namespace sluice::op
