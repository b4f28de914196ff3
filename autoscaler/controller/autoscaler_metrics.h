// AutoscalerMetrics: the Prometheus metrics of sluice-autoscaler (served on /metrics).
//
//   sluice_autoscaler_decisions_total{namespace,dataservice,direction}  decisions by outcome (up|down|shift|none)
//   sluice_autoscaler_actions_total{namespace,dataservice,direction}    decisions carried out (spec applied)
//   sluice_autoscaler_holding{namespace,dataservice,reason}             1 while holding (missing_metrics|stale_metrics|churn)
//   sluice_autoscaler_desired_workers{namespace,dataservice,placement}  the last decision's workers (local|remote)
//   sluice_autoscaler_stall_ratio{namespace,dataservice}                the stall ratio the last decision saw
//   sluice_autoscaler_target_stall_ratio{namespace,dataservice}         spec.autoscaling.targetStallRatio
//   sluice_autoscaler_metric_errors_total{namespace,dataservice,source} observations with errors (prometheus|scrape)
//   sluice_autoscaler_apply_conflicts_total{namespace,dataservice}      spec applies refused with 409 (another owner)
//   sluice_autoscaler_reconciles_total{result}                          reconciles (success|error)
//   sluice_autoscaler_leader                                            1 while this replica acts
//
// A DataService's series are removed when it is deleted or stops being autoscaled.
// Thread-safe (prometheus-cpp families and metrics are).
#ifndef SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALER_METRICS_H_
#define SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALER_METRICS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace sluice::autoscaler {

class AutoscalerMetrics {
 public:
  AutoscalerMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  struct Outcome {
    std::string direction;          // up|down|shift|none
    bool acted = false;
    std::string holding_reason;     // "" when not holding
    int32_t local = 0, remote = 0;
    std::optional<double> stall_ratio;
    double target_stall_ratio = 0;
    bool metric_error = false;
    std::string source;             // prometheus|scrape
  };
  void Record(const std::string& ns, const std::string& name, const Outcome& outcome);
  void CountConflict(const std::string& ns, const std::string& name);
  void CountReconcile(bool ok);
  void SetLeader(bool leader);
  // Removes every series of a DataService.
  void Forget(const std::string& ns, const std::string& name);

  double decisions(const std::string& ns, const std::string& name, const std::string& direction) const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Counter>& actions_;
  prometheus::Family<prometheus::Gauge>& holding_;
  prometheus::Family<prometheus::Gauge>& desired_;
  prometheus::Family<prometheus::Gauge>& stall_;
  prometheus::Family<prometheus::Gauge>& target_;
  prometheus::Family<prometheus::Counter>& metric_errors_;
  prometheus::Family<prometheus::Counter>& conflicts_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Gauge& leader_;
};

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALER_METRICS_H_
