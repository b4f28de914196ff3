#include "autoscaler/controller/autoscaler_metrics.h"

namespace sluice::autoscaler {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using Labels = std::map<std::string, std::string>;

namespace {
const char* kHoldReasons[] = {"missing_metrics", "stale_metrics", "churn"};
}  // namespace

AutoscalerMetrics::AutoscalerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      decisions_(BuildCounter().Name("sluice_autoscaler_decisions_total").Help("Autoscaling decisions by outcome").Register(*registry_)),
      actions_(BuildCounter().Name("sluice_autoscaler_actions_total").Help("Decisions carried out (spec applied)").Register(*registry_)),
      holding_(BuildGauge().Name("sluice_autoscaler_holding").Help("1 while the autoscaler holds a DataService's size, by reason").Register(*registry_)),
      desired_(BuildGauge().Name("sluice_autoscaler_desired_workers").Help("Workers the last decision wants, by placement").Register(*registry_)),
      stall_(BuildGauge().Name("sluice_autoscaler_stall_ratio").Help("Stall ratio seen by the last decision").Register(*registry_)),
      target_(BuildGauge().Name("sluice_autoscaler_target_stall_ratio").Help("spec.autoscaling.targetStallRatio").Register(*registry_)),
      metric_errors_(BuildCounter().Name("sluice_autoscaler_metric_errors_total").Help("Observations with metric errors").Register(*registry_)),
      conflicts_(BuildCounter().Name("sluice_autoscaler_apply_conflicts_total").Help("Spec applies refused because another manager owns the field").Register(*registry_)),
      reconciles_(BuildCounter().Name("sluice_autoscaler_reconciles_total").Help("Reconciles by result").Register(*registry_)),
      leader_(BuildGauge().Name("sluice_autoscaler_leader").Help("1 while this replica acts").Register(*registry_).Add({})) {
  reconciles_.Add({{"result", "success"}});
  reconciles_.Add({{"result", "error"}});
}

void AutoscalerMetrics::Record(const std::string& ns, const std::string& name, const Outcome& o) {
  Labels base = {{"namespace", ns}, {"dataservice", name}};
  auto with = [&base](const char* key, const std::string& value) {
    Labels l = base;
    l[key] = value;
    return l;
  };
  decisions_.Add(with("direction", o.direction)).Increment();
  if (o.acted) actions_.Add(with("direction", o.direction)).Increment();
  for (const char* reason : kHoldReasons) {
    holding_.Add(with("reason", reason)).Set(o.holding_reason == reason ? 1 : 0);
  }
  desired_.Add(with("placement", "local")).Set(o.local);
  desired_.Add(with("placement", "remote")).Set(o.remote);
  if (o.stall_ratio) stall_.Add(base).Set(*o.stall_ratio);
  target_.Add(base).Set(o.target_stall_ratio);
  if (o.metric_error) metric_errors_.Add(with("source", o.source)).Increment();
}

void AutoscalerMetrics::CountConflict(const std::string& ns, const std::string& name) {
  conflicts_.Add({{"namespace", ns}, {"dataservice", name}}).Increment();
}

void AutoscalerMetrics::CountReconcile(bool ok) { reconciles_.Add({{"result", ok ? "success" : "error"}}).Increment(); }

void AutoscalerMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }

double AutoscalerMetrics::decisions(const std::string& ns, const std::string& name, const std::string& direction) const {
  Labels l = {{"namespace", ns}, {"dataservice", name}, {"direction", direction}};
  if (!decisions_.Has(l)) return 0;
  return const_cast<prometheus::Family<prometheus::Counter>&>(decisions_).Add(l).Value();
}

void AutoscalerMetrics::Forget(const std::string& ns, const std::string& name) {
  Labels base = {{"namespace", ns}, {"dataservice", name}};
  auto remove = [&](auto& family, const char* key, std::initializer_list<const char*> values) {
    for (const char* v : values) {
      Labels l = base;
      l[key] = v;
      if (family.Has(l)) family.Remove(&family.Add(l));
    }
  };
  remove(decisions_, "direction", {"up", "down", "shift", "none"});
  remove(actions_, "direction", {"up", "down", "shift", "none"});
  remove(holding_, "reason", {"missing_metrics", "stale_metrics", "churn"});
  remove(desired_, "placement", {"local", "remote"});
  remove(metric_errors_, "source", {"prometheus", "scrape"});
  for (auto* family : {&stall_, &target_}) {
    if (family->Has(base)) family->Remove(&family->Add(base));
  }
  if (conflicts_.Has(base)) conflicts_.Remove(&conflicts_.Add(base));
}

}  // namespace sluice::autoscaler
