#include "autoscaler/controller/autoscaling_plan.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/quantity.h"

namespace sluice::autoscaler {

using json = nlohmann::json;

namespace {

constexpr size_t kMaxMessage = 1024;
constexpr size_t kMaxRecommendations = 64;

std::string Cut(std::string s, size_t n = kMaxMessage) {
  if (s.size() > n) {
    s.resize(n - 3);
    s += "...";
  }
  return s;
}

std::optional<absl::Time> TimeField(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return std::nullopt;
  auto t = op::ParseKubeTime(j[key].get<std::string>());
  if (!t.ok()) return std::nullopt;
  return *t;
}

std::optional<double> NumberField(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

void PutNumber(json& out, const char* key, const std::optional<double>& v) {
  if (v && std::isfinite(*v)) out[key] = *v;
}

void PutMeasurement(json& out, const char* key, const Measurement& m, std::vector<std::string>& missing) {
  if (m.known()) {
    out[key] = *m;
  } else {
    missing.push_back(absl::StrCat(key, ": ", m.missing.empty() ? "unknown" : m.missing));
  }
}

// Conditions keep their lastTransitionTime while their status does not change.
class Conditions {
 public:
  Conditions(const json& previous, absl::Time now) : now_(now) {
    if (previous.is_array()) {
      for (const json& c : previous) {
        if (c.is_object() && c.contains("type") && c["type"].is_string()) prev_[c["type"].get<std::string>()] = c;
      }
    }
  }
  void Set(const std::string& type, bool status, const std::string& reason, const std::string& message) {
    json c = {{"type", type},
              {"status", status ? "True" : "False"},
              {"reason", reason},
              {"message", Cut(message)},
              {"lastTransitionTime", op::FormatKubeTime(now_)}};
    auto it = prev_.find(type);
    if (it != prev_.end() && it->second.value("status", "") == c["status"] && it->second.contains("lastTransitionTime")) {
      c["lastTransitionTime"] = it->second["lastTransitionTime"];
    }
    changed_[type] = it == prev_.end() || it->second.value("status", "") != c["status"] ||
                     it->second.value("reason", "") != reason;
    out_.push_back(std::move(c));
  }
  // True when `type` was set to another status or reason than before.
  bool Changed(const std::string& type) const {
    auto it = changed_.find(type);
    return it != changed_.end() && it->second;
  }
  json ToJson() const { return out_; }

 private:
  absl::Time now_;
  std::map<std::string, json> prev_;
  std::map<std::string, bool> changed_;
  json out_ = json::array();
};

// Managers other than the autoscaler that own spec.workers.replicas (from managedFields).
std::vector<std::string> OtherReplicasOwners(const json& object) {
  std::vector<std::string> out;
  const json* managed = nullptr;
  if (object.contains("metadata") && object["metadata"].contains("managedFields")) {
    managed = &object["metadata"]["managedFields"];
  }
  if (managed == nullptr || !managed->is_array()) return out;
  for (const json& entry : *managed) {
    if (!entry.is_object() || entry.value("subresource", "") != "") continue;
    const std::string manager = entry.value("manager", "");
    if (manager == kFieldManager) continue;
    const json* f = entry.contains("fieldsV1") ? &entry["fieldsV1"] : nullptr;
    for (const char* key : {"f:spec", "f:workers", "f:replicas"}) {
      if (f == nullptr || !f->is_object() || !f->contains(key)) {
        f = nullptr;
        break;
      }
      f = &(*f)[key];
    }
    if (f != nullptr) out.push_back(absl::StrCat(manager, " (", entry.value("operation", "?"), ")"));
  }
  return out;
}

Target TargetFor(const op::DataService& ds, const std::vector<WorkerPod>& pods) {
  Target t;
  t.replicas = static_cast<int32_t>(ds.spec.workers.replicas);
  int32_t local_pods = 0;
  std::set<std::string> local_nodes;
  for (const WorkerPod& p : pods) {
    if (p.terminating) continue;
    if (p.local) {
      ++local_pods;
      if (!p.node.empty()) local_nodes.insert(p.node);
    }
    t.workers.push_back({p.name, p.local, p.ready, 0, p.created});
  }
  t.local = ds.spec.workers.local ? static_cast<int32_t>(*ds.spec.workers.local) : local_pods;
  if (ds.spec.placement.policy == op::PlacementPolicy::kHybrid) {
    t.local_capacity = static_cast<int32_t>(ds.status.local_capacity);
  }
  t.consumer_nodes = std::max<int32_t>(1, static_cast<int32_t>(local_nodes.size()));
  return t;
}

json ArithmeticJson(const Decision& d) {
  const Arithmetic& a = d.arithmetic;
  json out = json::object();
  PutNumber(out, "trueDemand", a.true_demand);
  PutNumber(out, "supplyPerWorker", a.supply_per_worker);
  PutNumber(out, "utilization", a.utilization);
  PutNumber(out, "capacityPerWorker", a.capacity_per_worker);
  if (!a.capacity_source.empty()) out["capacitySource"] = a.capacity_source;
  PutNumber(out, "neededExact", a.needed_exact);
  out["recommended"] = a.raw;
  out["stabilized"] = a.stabilized;
  out["limited"] = a.limited;
  PutNumber(out, "interferenceSlowdown", a.interference_slowdown);
  out["split"] = {{"local", d.local}, {"remote", d.remote}, {"reason", SplitReasonName(d.split.reason)},
                  {"message", Cut(d.split.why)}};
  return out;
}

}  // namespace

json SpecWrite::ApplyBody(const std::string& name, const std::string& ns) const {
  json workers = {{"replicas", replicas}};
  if (local) workers["local"] = *local;
  if (!workers_to_delete.empty()) workers["workersToDelete"] = workers_to_delete;
  return {{"apiVersion", "sluice.dev/v1alpha1"},
          {"kind", "DataService"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"workers", workers}}}};
}

absl::StatusOr<AutoscalingSettings> SettingsFor(const op::DataService& ds, const GlobalSettings& global) {
  const op::AutoscalingSpec& a = ds.spec.autoscaling;
  AutoscalingSettings s;
  PolicyConfig& p = s.policy;
  p.mode = a.mode == "Recommend" ? Mode::kRecommend : Mode::kAuto;
  p.target_stall_ratio = a.target_stall_ratio;
  p.headroom = a.headroom;
  p.tolerance = a.tolerance;
  p.min_replicas = static_cast<int32_t>(std::max<int64_t>(1, ds.spec.workers.min_replicas));
  p.max_replicas = static_cast<int32_t>(ds.spec.workers.max_replicas);
  if (p.max_replicas < p.min_replicas) {
    return absl::InvalidArgumentError(absl::StrCat("spec.workers.maxReplicas ", p.max_replicas,
                                                   " is below the autoscaler's minimum ", p.min_replicas,
                                                   " (minReplicas, at least 1): raise maxReplicas"));
  }
  if (a.scale_up.stabilization_window_seconds) p.scale_up.stabilization_window = absl::Seconds(*a.scale_up.stabilization_window_seconds);
  if (a.scale_up.max_step) p.scale_up.max_step = static_cast<int32_t>(*a.scale_up.max_step);
  if (a.scale_down.stabilization_window_seconds) p.scale_down.stabilization_window = absl::Seconds(*a.scale_down.stabilization_window_seconds);
  if (a.scale_down.max_step) p.scale_down.max_step = static_cast<int32_t>(*a.scale_down.max_step);
  p.max_signal_age = global.max_signal_age;
  p.settle_time = global.settle_time;
  if (a.fallback_failure_threshold) {
    p.fallback.failure_threshold = static_cast<int32_t>(*a.fallback_failure_threshold);
    p.fallback.replicas = static_cast<int32_t>(std::min<int64_t>(a.fallback_replicas.value_or(0), p.max_replicas));
  }
  switch (ds.spec.placement.policy) {
    case op::PlacementPolicy::kHybrid: p.placement.policy = Placement::kHybrid; break;
    case op::PlacementPolicy::kLocalOnly: p.placement.policy = Placement::kLocalOnly; break;
    case op::PlacementPolicy::kRemoteOnly: p.placement.policy = Placement::kRemoteOnly; break;
  }
  p.placement.interference_tolerance = a.interference_tolerance;
  p.placement.worker_cpus = static_cast<double>(op::WorkerCpuMillis(ds.spec.workers)) / 1000.0;
  if (a.accelerator_hourly) {
    if (!std::isfinite(*a.accelerator_hourly) || *a.accelerator_hourly > global.max_accelerator_hourly) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.autoscaling.cost.acceleratorHourly ", *a.accelerator_hourly, " is not a plausible hourly price of one "
          "accelerator node (at most ", global.max_accelerator_hourly, "): give the price per node and hour"));
    }
    p.placement.cost.accelerator_hourly = a.accelerator_hourly;
  }
  if (a.remote_cpu_hourly) {
    if (!std::isfinite(*a.remote_cpu_hourly) || *a.remote_cpu_hourly > global.max_remote_cpu_hourly) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.autoscaling.cost.remoteCpuHourly ", *a.remote_cpu_hourly, " is not a plausible hourly price of one "
          "CPU core (at most ", global.max_remote_cpu_hourly, "): give the price per core and hour"));
    }
    p.placement.cost.remote_cpu_hourly = a.remote_cpu_hourly;
  }
  if (a.accelerator_hourly && a.remote_cpu_hourly && *a.remote_cpu_hourly > *a.accelerator_hourly &&
      *a.accelerator_hourly > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.autoscaling.cost: remoteCpuHourly ", *a.remote_cpu_hourly, " per core exceeds acceleratorHourly ",
        *a.accelerator_hourly, " per accelerator node: the two are probably swapped"));
  }
  s.prometheus_url = a.prometheus_url ? a.prometheus_url : global.prometheus_url;
  s.queries = a.prometheus_queries;
  for (const auto& [name, query] : s.queries) {
    const auto& names = SignalQueryNames();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.autoscaling.metrics.prometheus.queries: unknown query name '",
                                                     name, "'; the names are ", absl::StrJoin(names, ", ")));
    }
    if (query.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.autoscaling.metrics.prometheus.queries.", name, " is empty"));
    }
  }
  return s;
}

json HistoryToJson(const PolicyHistory& h) {
  json out = json::object();
  json recs = json::array();
  size_t first = h.recommendations.size() > kMaxRecommendations ? h.recommendations.size() - kMaxRecommendations : 0;
  for (size_t i = first; i < h.recommendations.size(); ++i) {
    recs.push_back({{"time", op::FormatKubeTime(h.recommendations[i].at)}, {"replicas", h.recommendations[i].replicas}});
  }
  out["recommendations"] = recs;
  if (h.last_change != absl::InfinitePast()) out["lastChange"] = op::FormatKubeTime(h.last_change);
  out["failuresInARow"] = h.failures_in_a_row;
  PutNumber(out, "capacityPerWorker", h.capacity_per_worker);
  PutNumber(out, "cpuCapacityPerWorker", h.cpu_capacity_per_worker);
  if (h.surge_extra > 0) {
    out["surgeExtra"] = h.surge_extra;
    out["surgeTotal"] = h.surge_total;
  }
  const InterferenceState& i = h.interference;
  json inter = json::object();
  PutNumber(inter, "referenceCompute", i.reference_compute);
  if (i.reference_compute) inter["referenceLocal"] = i.reference_local;
  PutNumber(inter, "baselineCompute", i.Baseline());
  inter["probesConfirmed"] = i.probes_confirmed;
  if (i.probe_local) {
    inter["probeLocal"] = *i.probe_local;
    inter["probeStarted"] = op::FormatKubeTime(i.probe_started);
  }
  PutNumber(inter, "slowdownPerWorker", i.slowdown_per_worker);
  if (i.slowdown_per_worker) inter["weight"] = i.weight;
  if (i.cap) inter["cap"] = *i.cap;
  if (i.learnt_at != absl::InfinitePast()) inter["learntAt"] = op::FormatKubeTime(i.learnt_at);
  out["interference"] = inter;
  return out;
}

PolicyHistory HistoryFromJson(const json& j) {
  PolicyHistory h;
  if (!j.is_object()) return h;
  if (j.contains("recommendations") && j["recommendations"].is_array()) {
    for (const json& r : j["recommendations"]) {
      auto at = TimeField(r, "time");
      if (!at || !r.contains("replicas") || !r["replicas"].is_number_integer()) continue;
      h.recommendations.push_back({*at, r["replicas"].get<int32_t>()});
    }
  }
  if (auto t = TimeField(j, "lastChange")) h.last_change = *t;
  if (j.contains("failuresInARow") && j["failuresInARow"].is_number_integer()) {
    h.failures_in_a_row = std::max(0, j["failuresInARow"].get<int32_t>());
  }
  h.capacity_per_worker = NumberField(j, "capacityPerWorker");
  h.cpu_capacity_per_worker = NumberField(j, "cpuCapacityPerWorker");
  if (j.contains("surgeExtra") && j["surgeExtra"].is_number_integer() && j.contains("surgeTotal") &&
      j["surgeTotal"].is_number_integer()) {
    h.surge_extra = std::max(0, j["surgeExtra"].get<int32_t>());
    h.surge_total = std::max(0, j["surgeTotal"].get<int32_t>());
  }
  if (j.contains("interference") && j["interference"].is_object()) {
    const json& i = j["interference"];
    h.interference.reference_compute = NumberField(i, "referenceCompute");
    if (i.contains("referenceLocal") && i["referenceLocal"].is_number_integer()) {
      h.interference.reference_local = std::max(0, i["referenceLocal"].get<int32_t>());
    }
    if (i.contains("probeLocal") && i["probeLocal"].is_number_integer()) {
      h.interference.probe_local = std::max(0, i["probeLocal"].get<int32_t>());
      if (auto t = TimeField(i, "probeStarted")) h.interference.probe_started = *t;
    }
    if (i.contains("probesConfirmed") && i["probesConfirmed"].is_number_integer()) {
      h.interference.probes_confirmed = std::max(0, i["probesConfirmed"].get<int32_t>());
    }
    h.interference.slowdown_per_worker = NumberField(i, "slowdownPerWorker");
    h.interference.weight = std::max(0.0, NumberField(i, "weight").value_or(0));
    if (i.contains("cap") && i["cap"].is_number_integer()) h.interference.cap = i["cap"].get<int32_t>();
    if (auto t = TimeField(i, "learntAt")) h.interference.learnt_at = *t;
  }
  return h;
}

Plan PlanAutoscaling(const PlanInput& in, const GlobalSettings& global) {
  Plan plan;
  static const json kNoStatus = json::object();
  const json& previous = in.object.contains("status") && in.object["status"].is_object() &&
                                 in.object["status"].contains("autoscaler") &&
                                 in.object["status"]["autoscaler"].is_object()
                             ? in.object["status"]["autoscaler"]
                             : kNoStatus;
  Conditions conditions(previous.contains("conditions") ? previous["conditions"] : json::array(), in.now);
  json& status = plan.status;
  status = json::object();
  auto finish = [&]() -> Plan& {
    status["conditions"] = conditions.ToJson();
    return plan;
  };

  absl::StatusOr<op::DataService> parsed;
  if (!in.parsed) {
    parsed = op::ParseDataService(in.object);
    if (!parsed.ok()) {
      plan.skipped = std::string(parsed.status().message());
      conditions.Set("ScalingActive", false, "InvalidSpec", plan.skipped);
      return finish();
    }
  }
  const op::DataService& ds = in.parsed ? *in.parsed : *parsed;
  status["observedGeneration"] = ds.metadata.generation;
  if (!ds.spec.autoscaling.enabled) {
    plan.skipped = "spec.autoscaling.enabled is false";
    conditions.Set("ScalingActive", false, "Disabled",
                   "spec.autoscaling.enabled is false: the autoscaler leaves spec.workers as it is");
    return finish();
  }
  if (std::vector<op::FieldError> errors = op::ValidateDataService(ds); !errors.empty()) {
    std::vector<std::string> parts;
    for (const op::FieldError& e : errors) parts.push_back(absl::StrCat(e.field, ": ", e.message));
    plan.skipped = absl::StrJoin(parts, "; ");
    conditions.Set("ScalingActive", false, "InvalidSpec", plan.skipped);
    return finish();
  }
  auto settings = SettingsFor(ds, global);
  if (!settings.ok()) {
    plan.skipped = std::string(settings.status().message());
    conditions.Set("ScalingActive", false, "InvalidAutoscalingConfig", plan.skipped);
    if (conditions.Changed("ScalingActive")) plan.events.push_back({"Warning", "InvalidAutoscalingConfig", plan.skipped});
    return finish();
  }
  plan.settings = *settings;
  PolicyConfig config = settings->policy;
  status["mode"] = ModeName(config.mode);
  status["targetStallRatio"] = config.target_stall_ratio;
  status["source"] = settings->prometheus_url ? absl::StrCat("prometheus ", *settings->prometheus_url) : "direct scrape";

  // Someone else scales this DataService: report, compute, do not act.
  std::vector<std::string> others = in.other_scalers;
  for (const std::string& owner : OtherReplicasOwners(in.object)) {
    others.push_back(absl::StrCat("field manager ", owner, " of spec.workers.replicas"));
  }
  std::string blocked;
  if (!in.other_scalers.empty()) {
    blocked = absl::StrCat("driven by ", absl::StrJoin(in.other_scalers, ", "),
                           ": the autoscaler only recommends; delete the other scaler or set "
                           "spec.autoscaling.enabled false");
    conditions.Set("AbleToScale", false, "DrivenByOther", blocked);
    config.mode = Mode::kRecommend;
  } else if (others.size() > in.other_scalers.size()) {
    blocked = absl::StrCat("spec.workers.replicas is also set by ", absl::StrJoin(OtherReplicasOwners(in.object), ", "),
                           ": drop workers.replicas (and workers.local) from your manifest, as with an HPA, or "
                           "the autoscaler's writes conflict with yours");
    conditions.Set("AbleToScale", true, "SharedOwnership", blocked);
  } else {
    conditions.Set("AbleToScale", true, "ReadyForNewScale", "the autoscaler owns spec.workers.replicas");
  }
  if (conditions.Changed("AbleToScale") && !in.other_scalers.empty()) {
    plan.events.push_back({"Warning", "DrivenByOther", blocked});
  }

  // Metrics.
  Observation obs = in.observation.value_or(Observation{});
  if (!obs.errors.empty()) {
    std::vector<std::string> unique;
    for (const std::string& e : obs.errors) {
      if (std::find(unique.begin(), unique.end(), e) == unique.end()) unique.push_back(e);
    }
    const std::string message = absl::StrJoin(unique, "; ");
    conditions.Set("MetricsAvailable", false, "MetricsError", message);
    if (conditions.Changed("MetricsAvailable")) plan.events.push_back({"Warning", "MetricsError", Cut(message)});
  }

  const PolicyHistory history = HistoryFromJson(previous.contains("history") ? previous["history"] : json());
  const Target target = TargetFor(ds, in.workers);
  DecisionResult result = Decide(config, target, obs.signals, history, in.now);
  Decision& d = result.decision;
  plan.holding = d.holding;

  if (obs.errors.empty()) {
    if (d.missing.empty()) {
      conditions.Set("MetricsAvailable", true, "ValidMetrics", "every signal is known and fresh");
    } else {
      conditions.Set("MetricsAvailable", false, d.Has(Reason::kHeldOnStaleData) ? "StaleMetrics" : "MissingMetrics",
                     absl::StrJoin(d.missing, "; "));
    }
  }
  if (d.holding) {
    conditions.Set("ScalingActive", false, d.Has(Reason::kHeldOnChurn) ? "HeldOnChurn"
                                           : d.Has(Reason::kHeldOnStaleData) ? "HeldOnStaleData"
                                                                             : "HeldOnMissingData",
                   d.Summary());
    if (conditions.Changed("ScalingActive")) plan.events.push_back({"Warning", "Holding", Cut(d.Summary())});
  } else {
    conditions.Set("ScalingActive", true, "ValidMetrics", "the policy sized the DataService from its metrics");
  }
  const bool limited = d.Has(Reason::kTooManyReplicas) || d.Has(Reason::kTooFewReplicas) ||
                       d.Has(Reason::kScaleUpLimited) || d.Has(Reason::kScaleDownLimited);
  conditions.Set("ScalingLimited", limited, limited ? ReasonName(d.Has(Reason::kTooManyReplicas)   ? Reason::kTooManyReplicas
                                                                  : d.Has(Reason::kTooFewReplicas) ? Reason::kTooFewReplicas
                                                                  : d.Has(Reason::kScaleUpLimited) ? Reason::kScaleUpLimited
                                                                                                   : Reason::kScaleDownLimited)
                                                    : "DesiredWithinRange",
                     limited ? d.Summary() : "the desired count is within the bounds and step limits");

  // Inputs and arithmetic.
  json inputs = json::object();
  std::vector<std::string> missing;
  const Signals& s = obs.signals;
  PutMeasurement(inputs, "stallRatio", s.stall_ratio, missing);
  PutMeasurement(inputs, "demand", s.demand, missing);
  PutMeasurement(inputs, "supply", s.supply, missing);
  PutMeasurement(inputs, "workerCpu", s.worker_cpu, missing);
  PutMeasurement(inputs, "computePerElement", s.compute_per_element, missing);
  PutMeasurement(inputs, "buffered", s.buffered, missing);
  PutMeasurement(inputs, "churn", s.churn, missing);
  PutMeasurement(inputs, "workers", s.workers, missing);
  PutMeasurement(inputs, "localWorkers", s.local_workers, missing);
  inputs["windowSeconds"] = absl::ToInt64Seconds(s.window);
  if (s.at != absl::InfinitePast()) inputs["observedAt"] = op::FormatKubeTime(s.at);
  if (target.local_capacity) inputs["localCapacity"] = *target.local_capacity;
  if (!missing.empty()) {
    json m = json::array();
    for (size_t i = 0; i < missing.size() && i < 16; ++i) m.push_back(Cut(missing[i], 256));
    inputs["missing"] = m;
  }
  status["inputs"] = inputs;
  status["arithmetic"] = ArithmeticJson(d);
  if (s.stall_ratio.known()) status["stallRatio"] = *s.stall_ratio;
  if (s.demand.known()) status["demand"] = *s.demand;
  status["desiredReplicas"] = d.replicas;
  status["desiredLocal"] = d.local;
  status["desiredRemote"] = d.remote;

  json reasons = json::array();
  for (const ReasonNote& n : d.reasons) {
    if (reasons.size() >= 16) break;
    reasons.push_back({{"reason", ReasonName(n.reason)}, {"message", Cut(n.message, 512)}});
  }
  json decision = {{"time", op::FormatKubeTime(in.now)},
                   {"direction", DirectionName(d.direction)},
                   {"replicas", d.replicas},
                   {"local", d.local},
                   {"remote", d.remote},
                   {"acted", false},
                   {"reasons", reasons}};
  if (!d.workers_to_delete.empty()) decision["workersToDelete"] = d.workers_to_delete;
  if (!d.learnt.empty()) decision["learnt"] = Cut(absl::StrJoin(d.learnt, "; "));

  // Act.
  const bool can_act = d.act && in.other_scalers.empty();
  if (can_act) {
    SpecWrite w;
    w.replicas = d.replicas;
    if (ds.spec.placement.policy == op::PlacementPolicy::kHybrid) w.local = d.local;
    // Removals named earlier stay named until their pods are gone (the operator may not have acted yet).
    std::set<std::string> names(d.workers_to_delete.begin(), d.workers_to_delete.end());
    for (const std::string& name : ds.spec.workers.workers_to_delete) {
      for (const WorkerPod& p : in.workers) {
        if (p.name == name && !p.terminating) names.insert(name);
      }
    }
    w.workers_to_delete.assign(names.begin(), names.end());
    plan.spec = w;
    decision["acted"] = true;
    status["lastScaleTime"] = op::FormatKubeTime(in.now);
    const char* reason = d.direction == Direction::kUp     ? "ScaledUp"
                         : d.direction == Direction::kDown ? "ScaledDown"
                                                           : "Shifted";
    plan.events.push_back({"Normal", reason, Cut(d.Summary())});
  } else {
    if (previous.contains("lastScaleTime")) status["lastScaleTime"] = previous["lastScaleTime"];
    if (d.direction != Direction::kNone) {
      plan.skipped = blocked.empty() ? "mode Recommend" : blocked;
      // Report a changed recommendation once, not every period.
      if (previous.value("desiredReplicas", -1) != d.replicas || previous.value("desiredLocal", -1) != d.local) {
        plan.events.push_back({"Normal", "Recommended", Cut(d.Summary())});
      }
    }
  }
  status["decision"] = decision;
  status["lastDecision"] = Cut(absl::StrCat(op::FormatKubeTime(in.now), " ", d.Summary()));
  PolicyHistory kept = result.history;
  if (!can_act) kept.last_change = history.last_change;  // nothing changed
  status["history"] = HistoryToJson(kept);
  plan.decision = std::move(d);
  return finish();
}

}  // namespace sluice::autoscaler
