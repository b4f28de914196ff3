#include "operator/dataservice_types.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/quantity.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

std::vector<Toleration> ParseTolerations(FieldReader& r, const json& parent, const std::string& path,
                                         absl::string_view key) {
  std::vector<Toleration> result;
  const json* list = r.Array(parent, path, key);
  if (list == nullptr) return result;
  std::string field = JoinPath(path, key);
  for (size_t i = 0; i < list->size(); ++i) {
    const json& item = (*list)[i];
    std::string item_path = IndexPath(field, i);
    if (!item.is_object()) {
      r.Error(item_path, absl::StrCat("must be an object, got ", JsonTypeName(item)));
      continue;
    }
    Toleration t;
    r.String(item, item_path, "key", &t.key);
    r.Enum(item, item_path, "operator", {"Exists", "Equal"}, &t.op);
    r.String(item, item_path, "value", &t.value);
    r.Enum(item, item_path, "effect", {"NoSchedule", "PreferNoSchedule", "NoExecute"}, &t.effect);
    int64_t seconds = 0;
    if (r.Int(item, item_path, "tolerationSeconds", &seconds)) t.toleration_seconds = seconds;
    result.push_back(std::move(t));
  }
  return result;
}

ResourceRequirements ParseResources(FieldReader& r, const json& resources, const std::string& path) {
  ResourceRequirements result;
  for (absl::string_view part : {"requests", "limits"}) {
    const json* m = r.Object(resources, path, part);
    if (m == nullptr) continue;
    std::string part_path = JoinPath(path, part);
    StringMap& out = part == "requests" ? result.requests : result.limits;
    for (auto it = m->begin(); it != m->end(); ++it) {
      std::string text;
      if (r.Quantity(*m, part_path, it.key(), &text)) out[it.key()] = text;
    }
  }
  return result;
}

LabelSelector ParseLabelSelector(FieldReader& r, const json& selector, const std::string& path) {
  LabelSelector result;
  r.StringMap(selector, path, "matchLabels", &result.match_labels);
  const json* exprs = r.Array(selector, path, "matchExpressions");
  if (exprs == nullptr) return result;
  std::string field = JoinPath(path, "matchExpressions");
  for (size_t i = 0; i < exprs->size(); ++i) {
    const json& item = (*exprs)[i];
    std::string item_path = IndexPath(field, i);
    if (!item.is_object()) {
      r.Error(item_path, absl::StrCat("must be an object, got ", JsonTypeName(item)));
      continue;
    }
    LabelSelectorRequirement req;
    r.String(item, item_path, "key", &req.key, /*required=*/true);
    if (FieldReader::Member(item, "operator") == nullptr) {
      r.Error(JoinPath(item_path, "operator"), "required value");
    } else {
      r.Enum(item, item_path, "operator", {"In", "NotIn", "Exists", "DoesNotExist"}, &req.op);
    }
    r.StringList(item, item_path, "values", &req.values);
    result.match_expressions.push_back(std::move(req));
  }
  return result;
}

void ParsePipeline(FieldReader& r, const json& spec, PipelineSource* out) {
  const json* pipeline = r.Object(spec, "spec", "pipeline");
  if (pipeline == nullptr) return;
  const std::string path = "spec.pipeline";
  if (const json* ref = r.Object(*pipeline, path, "configMapRef")) {
    ConfigMapKeyRef cm;
    std::string ref_path = JoinPath(path, "configMapRef");
    r.String(*ref, ref_path, "name", &cm.name, /*required=*/true);
    r.String(*ref, ref_path, "key", &cm.key);
    out->config_map_ref = std::move(cm);
  }
  std::string text;
  if (r.String(*pipeline, path, "inline", &text)) out->inline_text = std::move(text);
  if (out->config_map_ref.has_value() == out->inline_text.has_value()) {
    r.Error(path, "exactly one of pipeline.configMapRef and pipeline.inline must be set");
  }
}

void ParseDispatcher(FieldReader& r, const json& spec, DispatcherSpec* out) {
  const json* d = r.Object(spec, "spec", "dispatcher", /*required=*/true);
  if (d == nullptr) return;
  const std::string path = "spec.dispatcher";
  r.String(*d, path, "image", &out->image, /*required=*/true);
  r.Enum(*d, path, "imagePullPolicy", {"Always", "IfNotPresent", "Never"}, &out->image_pull_policy);
  if (const json* res = r.Object(*d, path, "resources")) {
    out->resources = ParseResources(r, *res, JoinPath(path, "resources"));
  }
  r.Int(*d, path, "port", &out->port);
  r.Int(*d, path, "metricsPort", &out->metrics_port);
  if (const json* j = r.Object(*d, path, "journal")) {
    JournalSpec journal;
    std::string jpath = JoinPath(path, "journal");
    std::string storage_class;
    if (r.String(*j, jpath, "storageClassName", &storage_class)) {
      journal.storage_class_name = storage_class;
    }
    r.Quantity(*j, jpath, "size", &journal.size);
    out->journal = std::move(journal);
  }
  r.StringMap(*d, path, "nodeSelector", &out->node_selector);
  out->tolerations = ParseTolerations(r, *d, path, "tolerations");
  r.Int(*d, path, "terminationGracePeriodSeconds", &out->termination_grace_period_seconds);
  r.StringList(*d, path, "extraArgs", &out->extra_args);
}

void ParseWorkers(FieldReader& r, const json& spec, WorkersSpec* out) {
  const json* w = r.Object(spec, "spec", "workers", /*required=*/true);
  if (w == nullptr) return;
  const std::string path = "spec.workers";
  r.String(*w, path, "image", &out->image, /*required=*/true);
  r.Enum(*w, path, "imagePullPolicy", {"Always", "IfNotPresent", "Never"}, &out->image_pull_policy);
  if (const json* res = r.Object(*w, path, "resources")) {
    out->resources = ParseResources(r, *res, JoinPath(path, "resources"));
  } else if (FieldReader::Member(*w, "resources") == nullptr) {
    out->resources.requests = {{"cpu", "1"}, {"memory", "1Gi"}};
  }
  r.Int(*w, path, "replicas", &out->replicas);
  r.Int(*w, path, "minReplicas", &out->min_replicas);
  r.Int(*w, path, "maxReplicas", &out->max_replicas);
  int64_t local = 0;
  if (r.Int(*w, path, "local", &local)) out->local = local;
  r.StringList(*w, path, "workersToDelete", &out->workers_to_delete);
  r.Int(*w, path, "port", &out->port);
  r.Int(*w, path, "metricsPort", &out->metrics_port);
  r.Int(*w, path, "maxUnavailable", &out->max_unavailable);
  r.Int(*w, path, "terminationGracePeriodSeconds", &out->termination_grace_period_seconds);
  r.StringList(*w, path, "extraArgs", &out->extra_args);
}

void ParsePlacement(FieldReader& r, const json& spec, PlacementSpec* out) {
  const json* p = r.Object(spec, "spec", "placement");
  if (p == nullptr) return;
  const std::string path = "spec.placement";
  std::string policy;
  if (r.Enum(*p, path, "policy", {"Hybrid", "RemoteOnly", "LocalOnly"}, &policy)) {
    out->policy = policy == "Hybrid"       ? PlacementPolicy::kHybrid
                  : policy == "LocalOnly" ? PlacementPolicy::kLocalOnly
                                          : PlacementPolicy::kRemoteOnly;
  }
  if (const json* sel = r.Object(*p, path, "consumerSelector")) {
    out->consumer_selector = ParseLabelSelector(r, *sel, JoinPath(path, "consumerSelector"));
  }
  r.StringMap(*p, path, "acceleratorNodeSelector", &out->accelerator_node_selector);
  r.StringMap(*p, path, "remoteNodeSelector", &out->remote_node_selector);
  out->tolerations = ParseTolerations(r, *p, path, "tolerations");
  out->local_tolerations = ParseTolerations(r, *p, path, "localTolerations");
  r.Number(*p, path, "localCpuFraction", &out->local_cpu_fraction);
}

void ParseScalingRules(FieldReader& r, const json& behavior, const std::string& path,
                       absl::string_view key, ScalingRules* out) {
  const json* rules = r.Object(behavior, path, key);
  if (rules == nullptr) return;
  std::string rpath = JoinPath(path, key);
  int64_t v = 0;
  if (r.Int(*rules, rpath, "stabilizationWindowSeconds", &v)) out->stabilization_window_seconds = v;
  if (r.Int(*rules, rpath, "maxStep", &v)) out->max_step = v;
}

void ParseAutoscaling(FieldReader& r, const json& spec, AutoscalingSpec* out) {
  const json* a = r.Object(spec, "spec", "autoscaling");
  if (a == nullptr) return;
  const std::string path = "spec.autoscaling";
  r.Bool(*a, path, "enabled", &out->enabled);
  r.Enum(*a, path, "mode", {"Auto", "Recommend"}, &out->mode);
  r.Number(*a, path, "targetStallRatio", &out->target_stall_ratio);
  r.Number(*a, path, "headroom", &out->headroom);
  r.Number(*a, path, "tolerance", &out->tolerance);
  r.Number(*a, path, "interferenceTolerance", &out->interference_tolerance);
  if (const json* f = r.Object(*a, path, "fallback")) {
    std::string fpath = JoinPath(path, "fallback");
    int64_t v = 0;
    if (r.Int(*f, fpath, "failureThreshold", &v)) out->fallback_failure_threshold = v;
    if (r.Int(*f, fpath, "replicas", &v)) out->fallback_replicas = v;
  }
  if (const json* m = r.Object(*a, path, "metrics")) {
    std::string mpath = JoinPath(path, "metrics");
    if (const json* prom = r.Object(*m, mpath, "prometheus")) {
      std::string ppath = JoinPath(mpath, "prometheus");
      std::string url;
      if (r.String(*prom, ppath, "url", &url, /*required=*/true)) out->prometheus_url = url;
      r.StringMap(*prom, ppath, "queries", &out->prometheus_queries);
    }
  }
  if (const json* b = r.Object(*a, path, "behavior")) {
    std::string bpath = JoinPath(path, "behavior");
    ParseScalingRules(r, *b, bpath, "scaleUp", &out->scale_up);
    ParseScalingRules(r, *b, bpath, "scaleDown", &out->scale_down);
  }
  if (const json* c = r.Object(*a, path, "cost")) {
    std::string cpath = JoinPath(path, "cost");
    double v = 0;
    if (r.Number(*c, cpath, "acceleratorHourly", &v)) out->accelerator_hourly = v;
    if (r.Number(*c, cpath, "remoteCpuHourly", &v)) out->remote_cpu_hourly = v;
  }
}

// Status is the operator's own output; a malformed one is dropped rather than failing the parse.
}  // namespace

DataServiceStatus ParseDataServiceStatus(const json& object) {
  FieldReader r;
  DataServiceStatus status;
  const json* s = r.Object(object, "", "status");
  if (s == nullptr) return status;
  const std::string path = "status";
  r.Int(*s, path, "observedGeneration", &status.observed_generation);
  r.String(*s, path, "dispatcherAddress", &status.dispatcher_address);
  r.Int(*s, path, "replicas", &status.replicas);
  r.Int(*s, path, "readyReplicas", &status.ready_replicas);
  r.Int(*s, path, "localReplicas", &status.local_replicas);
  r.Int(*s, path, "remoteReplicas", &status.remote_replicas);
  r.Int(*s, path, "localCapacity", &status.local_capacity);
  r.Int(*s, path, "drainingReplicas", &status.draining_replicas);
  r.String(*s, path, "selector", &status.selector);
  if (const json* ao = r.Object(*s, path, "autoOrder")) {
    AutoOrderStatus a;
    const std::string ao_path = "status.autoOrder";
    r.String(*ao, ao_path, "mode", &a.mode);
    r.String(*ao, ao_path, "outcome", &a.outcome);
    r.String(*ao, ao_path, "originalOrder", &a.original_order);
    r.String(*ao, ao_path, "chosenOrder", &a.chosen_order);
    r.Number(*ao, ao_path, "predictedSpeedup", &a.predicted_speedup);
    r.Number(*ao, ao_path, "measuredSpeedup", &a.measured_speedup);
    r.String(*ao, ao_path, "message", &a.message);
    status.auto_order = std::move(a);
  }
  if (const json* conds = r.Array(*s, path, "conditions")) {
    for (size_t i = 0; i < conds->size(); ++i) {
      const json& item = (*conds)[i];
      std::string item_path = IndexPath("status.conditions", i);
      Condition c;
      if (!item.is_object() || !r.String(item, item_path, "type", &c.type, true) ||
          !r.String(item, item_path, "status", &c.status, true)) {
        r.Error(item_path, "malformed condition");
        continue;
      }
      r.String(item, item_path, "reason", &c.reason);
      r.String(item, item_path, "message", &c.message);
      r.String(item, item_path, "lastTransitionTime", &c.last_transition_time);
      r.Int(item, item_path, "observedGeneration", &c.observed_generation);
      status.conditions.push_back(std::move(c));
    }
  }
  if (!r.ok()) return DataServiceStatus{};
  return status;
}

namespace {

// ---- validation helpers ----

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// DNS-1035 label: lowercase alphanumerics and '-', starts with a letter, ends alphanumeric.
bool IsDns1035Label(absl::string_view s, size_t max_length) {
  if (s.empty() || s.size() > max_length) return false;
  if (!(s.front() >= 'a' && s.front() <= 'z')) return false;
  if (!IsLowerAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
}

// DNS-1123 subdomain: dot-separated DNS-1123 labels, at most 253 characters.
bool IsDns1123Subdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (IsLowerAlnum(c) || c == '-') continue;
    if (c == '.' && i > 0 && IsLowerAlnum(s[i - 1]) && i + 1 < s.size() && IsLowerAlnum(s[i + 1])) continue;
    return false;
  }
  return true;
}

// The name part of a label key, and a label value (which may also be empty).
bool IsLabelName(absl::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool IsLabelKey(absl::string_view key) {
  size_t slash = key.find('/');
  if (slash == absl::string_view::npos) return IsLabelName(key);
  return IsDns1123Subdomain(key.substr(0, slash)) && IsLabelName(key.substr(slash + 1));
}

bool IsLabelValue(absl::string_view value) { return value.empty() || IsLabelName(value); }

void ValidateLabelMap(const StringMap& labels, const std::string& path, std::vector<FieldError>* errors) {
  for (const auto& [key, value] : labels) {
    if (!IsLabelKey(key)) {
      errors->push_back({JoinPath(path, key),
                         "invalid label key: use an optional DNS subdomain prefix and '/', then at most 63 "
                         "alphanumerics, '-', '_' or '.', starting and ending alphanumeric"});
    }
    if (!IsLabelValue(value)) {
      errors->push_back({JoinPath(path, key),
                         absl::StrCat("invalid label value \"", value,
                                      "\": at most 63 alphanumerics, '-', '_' or '.', starting and "
                                      "ending alphanumeric")});
    }
  }
}

void ValidateTolerations(const std::vector<Toleration>& tolerations, const std::string& path,
                         std::vector<FieldError>* errors) {
  for (size_t i = 0; i < tolerations.size(); ++i) {
    const Toleration& t = tolerations[i];
    std::string item_path = IndexPath(path, i);
    if (t.op == "Exists" && !t.value.empty()) {
      errors->push_back({JoinPath(item_path, "value"), "must be empty when operator is Exists"});
    }
    if (t.key.empty() && t.op != "Exists") {
      errors->push_back({JoinPath(item_path, "operator"), "must be Exists when key is empty"});
    }
    if (!t.key.empty() && !IsLabelKey(t.key)) {
      errors->push_back({JoinPath(item_path, "key"), "invalid taint key"});
    }
    if (t.toleration_seconds.has_value() && t.effect != "NoExecute") {
      errors->push_back({JoinPath(item_path, "tolerationSeconds"), "only allowed with effect NoExecute"});
    }
  }
}

// A request above its limit: the API server would refuse every pod built from it (422
// "must be less than or equal to cpu limit"), so the operator refuses the spec instead.
void ValidateRequestsWithinLimits(const ResourceRequirements& r, const std::string& path,
                                  std::vector<FieldError>* errors) {
  for (const auto& [name, request] : r.requests) {
    auto limit = r.limits.find(name);
    if (limit == r.limits.end()) continue;
    absl::StatusOr<int64_t> req = ParseQuantityMillis(request);
    absl::StatusOr<int64_t> lim = ParseQuantityMillis(limit->second);
    if (!req.ok() || !lim.ok() || *req <= *lim) continue;  // unparsable quantities are reported when parsed
    errors->push_back({JoinPath(JoinPath(path, "requests"), name),
                       absl::StrCat(request, " is above the limit ", limit->second, " (", JoinPath(JoinPath(path, "limits"), name),
                                    "); the API server refuses pods whose request exceeds their limit: lower the "
                                    "request or raise the limit")});
  }
}

void ValidateExtraArgs(const std::vector<std::string>& args, const std::vector<std::string>& managed,
                       const std::string& path, std::vector<FieldError>* errors) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "-")) {
      errors->push_back({IndexPath(path, i), absl::StrCat("\"", arg, "\" is not a flag (must start with -)")});
      continue;
    }
    absl::string_view name = arg;
    while (!name.empty() && name.front() == '-') name.remove_prefix(1);
    name = name.substr(0, name.find('='));
    for (const std::string& m : managed) {
      if (name == m) {
        errors->push_back({IndexPath(path, i),
                           absl::StrCat("--", m, " is set by the operator; change the matching spec field instead")});
      }
    }
  }
}

void ValidatePort(int64_t port, const std::string& path, std::vector<FieldError>* errors) {
  if (port < 1 || port > 65535) errors->push_back({path, absl::StrCat("port ", port, " is not in 1..65535")});
}

}  // namespace

bool ObjectMeta::HasFinalizer(const std::string& finalizer) const {
  return std::find(finalizers.begin(), finalizers.end(), finalizer) != finalizers.end();
}

std::string PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kHybrid:
      return "Hybrid";
    case PlacementPolicy::kLocalOnly:
      return "LocalOnly";
    case PlacementPolicy::kRemoteOnly:
      return "RemoteOnly";
  }
  return "RemoteOnly";
}

const Condition* DataServiceStatus::FindCondition(const std::string& type) const {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

absl::StatusOr<ObjectMeta> ParseObjectMeta(const json& object) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a DataService must be a JSON object, got ", JsonTypeName(object)));
  }
  FieldReader r;
  ObjectMeta meta;
  const json* m = r.Object(object, "", "metadata", /*required=*/true);
  if (m != nullptr) {
    r.String(*m, "metadata", "name", &meta.name, /*required=*/true);
    r.String(*m, "metadata", "namespace", &meta.namespace_name);
    r.String(*m, "metadata", "uid", &meta.uid);
    r.Int(*m, "metadata", "generation", &meta.generation);
    r.String(*m, "metadata", "resourceVersion", &meta.resource_version);
    r.StringMap(*m, "metadata", "labels", &meta.labels);
    r.StringMap(*m, "metadata", "annotations", &meta.annotations);
    absl::Time t;
    if (r.Timestamp(*m, "metadata", "creationTimestamp", &t)) meta.creation_timestamp = t;
    if (r.Timestamp(*m, "metadata", "deletionTimestamp", &t)) meta.deletion_timestamp = t;
    r.StringList(*m, "metadata", "finalizers", &meta.finalizers);
  }
  if (!r.ok()) return absl::InvalidArgumentError(FormatFieldErrors(r.errors()));
  return meta;
}

absl::StatusOr<DataService> ParseDataService(const json& object) {
  try {
    absl::StatusOr<ObjectMeta> meta = ParseObjectMeta(object);
    if (!meta.ok()) return meta.status();
    FieldReader r;
    DataService ds;
    ds.metadata = *std::move(meta);
    std::string api_version;
    if (r.String(object, "", "apiVersion", &api_version) && api_version != kApiVersion) {
      r.Error("apiVersion", absl::StrCat("must be ", kApiVersion, ", got \"", api_version, "\""));
    }
    std::string kind;
    if (r.String(object, "", "kind", &kind) && kind != kKind) {
      r.Error("kind", absl::StrCat("must be ", kKind, ", got \"", kind, "\""));
    }
    const json* spec = r.Object(object, "", "spec", /*required=*/true);
    if (spec != nullptr) {
      ParsePipeline(r, *spec, &ds.spec.pipeline);
      ParseDispatcher(r, *spec, &ds.spec.dispatcher);
      ParseWorkers(r, *spec, &ds.spec.workers);
      ParsePlacement(r, *spec, &ds.spec.placement);
      ParseAutoscaling(r, *spec, &ds.spec.autoscaling);
      if (const json* ao = r.Object(*spec, "spec", "autoOrder")) {
        r.Bool(*ao, "spec.autoOrder", "enabled", &ds.spec.auto_order.enabled);
        r.Enum(*ao, "spec.autoOrder", "mode", {"strict", "relaxed"}, &ds.spec.auto_order.mode);
      }
      if (const json* sh = r.Object(*spec, "spec", "sharing")) {
        r.Bool(*sh, "spec.sharing", "enabled", &ds.spec.sharing.enabled);
      }
    }
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("DataService \"", ds.metadata.name,
                                                     "\" is invalid: ", FormatFieldErrors(r.errors())));
    }
    ds.status = ParseDataServiceStatus(object);
    return ds;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed DataService: ", e.what()));
  }
}

std::vector<FieldError> ValidateDataService(const DataService& ds) {
  std::vector<FieldError> errors;
  const DataServiceSpec& spec = ds.spec;
  if (!IsDns1035Label(ds.metadata.name, kMaxNameLength)) {
    errors.push_back({"metadata.name",
                      absl::StrCat("\"", ds.metadata.name, "\" must be a DNS-1035 label of at most ", kMaxNameLength,
                                   " characters (lowercase letters, digits, '-', starting with a letter) "
                                   "because it prefixes the dispatcher Service's name")});
  }
  // Dispatcher.
  const DispatcherSpec& d = spec.dispatcher;
  if (d.image.empty()) errors.push_back({"spec.dispatcher.image", "must not be empty"});
  ValidatePort(d.port, "spec.dispatcher.port", &errors);
  ValidatePort(d.metrics_port, "spec.dispatcher.metricsPort", &errors);
  if (d.port == d.metrics_port) {
    errors.push_back({"spec.dispatcher.metricsPort", "must differ from spec.dispatcher.port"});
  }
  if (d.journal.has_value()) {
    absl::StatusOr<int64_t> size = ParseQuantityMillis(d.journal->size);
    if (size.ok() && *size <= 0) errors.push_back({"spec.dispatcher.journal.size", "must be positive"});
  }
  if (d.termination_grace_period_seconds < 0) {
    errors.push_back({"spec.dispatcher.terminationGracePeriodSeconds", "must not be negative"});
  }
  ValidateRequestsWithinLimits(d.resources, "spec.dispatcher.resources", &errors);
  ValidateLabelMap(d.node_selector, "spec.dispatcher.nodeSelector", &errors);
  ValidateTolerations(d.tolerations, "spec.dispatcher.tolerations", &errors);
  ValidateExtraArgs(d.extra_args, {"port", "metrics_port", "journal_dir", "dataservice"}, "spec.dispatcher.extraArgs", &errors);

  // Workers.
  const WorkersSpec& w = spec.workers;
  if (w.image.empty()) errors.push_back({"spec.workers.image", "must not be empty"});
  if (w.replicas < 0) errors.push_back({"spec.workers.replicas", "must not be negative"});
  if (w.min_replicas < 0) errors.push_back({"spec.workers.minReplicas", "must not be negative"});
  if (w.max_replicas < 0) errors.push_back({"spec.workers.maxReplicas", "must not be negative"});
  if (w.min_replicas > w.max_replicas) {
    errors.push_back({"spec.workers.minReplicas", "must not exceed spec.workers.maxReplicas"});
  }
  if (w.replicas < w.min_replicas || w.replicas > w.max_replicas) {
    errors.push_back({"spec.workers.replicas",
                      absl::StrCat(w.replicas, " must lie between minReplicas (", w.min_replicas,
                                   ") and maxReplicas (", w.max_replicas, ")")});
  }
  if (w.local.has_value()) {
    if (*w.local < 0) errors.push_back({"spec.workers.local", "must not be negative"});
    if (*w.local > w.max_replicas) errors.push_back({"spec.workers.local", "must not exceed spec.workers.maxReplicas"});
    if (spec.placement.policy != PlacementPolicy::kHybrid) {
      errors.push_back({"spec.workers.local", "may only be set when spec.placement.policy is Hybrid"});
    }
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < w.workers_to_delete.size(); ++i) {
    if (!seen.insert(w.workers_to_delete[i]).second) {
      errors.push_back({IndexPath("spec.workers.workersToDelete", i),
                        absl::StrCat("duplicate name \"", w.workers_to_delete[i], "\" (the list is a set)")});
    }
  }
  ValidatePort(w.port, "spec.workers.port", &errors);
  ValidatePort(w.metrics_port, "spec.workers.metricsPort", &errors);
  if (w.port == w.metrics_port) errors.push_back({"spec.workers.metricsPort", "must differ from spec.workers.port"});
  if (w.max_unavailable < 1) errors.push_back({"spec.workers.maxUnavailable", "must be at least 1"});
  if (w.termination_grace_period_seconds < 0) {
    errors.push_back({"spec.workers.terminationGracePeriodSeconds", "must not be negative"});
  }
  ValidateRequestsWithinLimits(w.resources, "spec.workers.resources", &errors);
  ValidateExtraArgs(w.extra_args,
                    {"dispatcher_address", "port", "metrics_port", "placement", "worker_address", "host", "dataservice"},
                    "spec.workers.extraArgs", &errors);

  // Placement.
  const PlacementSpec& p = spec.placement;
  if (p.policy != PlacementPolicy::kRemoteOnly) {
    if (!p.consumer_selector.has_value()) {
      errors.push_back({"spec.placement.consumerSelector", "required unless spec.placement.policy is RemoteOnly"});
    } else if (p.consumer_selector->match_labels.empty() && p.consumer_selector->match_expressions.empty()) {
      errors.push_back({"spec.placement.consumerSelector",
                        "must not be empty (an empty selector would treat every pod in the namespace as a consumer): "
                        "select the trainer pods with matchLabels or matchExpressions, or use policy RemoteOnly"});
    }
    if (WorkerCpuMillis(w) <= 0) {
      errors.push_back({"spec.workers.resources.requests.cpu",
                        "must be positive when workers may run locally (it sizes local capacity)"});
    }
  }
  if (p.consumer_selector.has_value()) {
    const std::string sel_path = "spec.placement.consumerSelector";
    ValidateLabelMap(p.consumer_selector->match_labels, JoinPath(sel_path, "matchLabels"), &errors);
    for (size_t i = 0; i < p.consumer_selector->match_expressions.size(); ++i) {
      const LabelSelectorRequirement& req = p.consumer_selector->match_expressions[i];
      std::string item_path = IndexPath(JoinPath(sel_path, "matchExpressions"), i);
      if (!IsLabelKey(req.key)) errors.push_back({JoinPath(item_path, "key"), "invalid label key"});
      bool wants_values = req.op == "In" || req.op == "NotIn";
      if (wants_values && req.values.empty()) {
        errors.push_back({JoinPath(item_path, "values"), absl::StrCat("must not be empty for operator ", req.op)});
      }
      if (!wants_values && !req.values.empty()) {
        errors.push_back({JoinPath(item_path, "values"), absl::StrCat("must be empty for operator ", req.op)});
      }
      for (size_t j = 0; j < req.values.size(); ++j) {
        if (!IsLabelValue(req.values[j])) {
          errors.push_back({IndexPath(JoinPath(item_path, "values"), j), "invalid label value"});
        }
      }
    }
  }
  ValidateLabelMap(p.accelerator_node_selector, "spec.placement.acceleratorNodeSelector", &errors);
  ValidateLabelMap(p.remote_node_selector, "spec.placement.remoteNodeSelector", &errors);
  ValidateTolerations(p.tolerations, "spec.placement.tolerations", &errors);
  ValidateTolerations(p.local_tolerations, "spec.placement.localTolerations", &errors);
  if (!(p.local_cpu_fraction > 0.0 && p.local_cpu_fraction <= 1.0)) {
    errors.push_back({"spec.placement.localCpuFraction", absl::StrCat(p.local_cpu_fraction, " is not in (0, 1]")});
  }

  // Autoscaling (read by the autoscaler, checked here so both see the same object as valid).
  const AutoscalingSpec& a = spec.autoscaling;
  if (!(a.target_stall_ratio >= 0.0 && a.target_stall_ratio < 1.0)) {
    errors.push_back({"spec.autoscaling.targetStallRatio", absl::StrCat(a.target_stall_ratio, " is not in [0, 1)")});
  }
  for (const auto& [name, rules] : {std::pair<std::string, const ScalingRules*>{"scaleUp", &a.scale_up},
                                    std::pair<std::string, const ScalingRules*>{"scaleDown", &a.scale_down}}) {
    std::string rpath = JoinPath("spec.autoscaling.behavior", name);
    if (rules->stabilization_window_seconds.value_or(0) < 0) {
      errors.push_back({JoinPath(rpath, "stabilizationWindowSeconds"), "must not be negative"});
    }
    if (rules->max_step.has_value() && *rules->max_step < 1) {
      errors.push_back({JoinPath(rpath, "maxStep"), "must be at least 1"});
    }
  }
  if (!(a.headroom >= 0.0 && a.headroom <= 10.0)) {
    errors.push_back({"spec.autoscaling.headroom", absl::StrCat(a.headroom, " is not in [0, 10]")});
  }
  if (!(a.tolerance >= 0.0 && a.tolerance <= 0.5)) {
    errors.push_back({"spec.autoscaling.tolerance", absl::StrCat(a.tolerance, " is not in [0, 0.5]")});
  }
  if (!(a.interference_tolerance >= 0.0 && a.interference_tolerance <= 1.0)) {
    errors.push_back({"spec.autoscaling.interferenceTolerance", absl::StrCat(a.interference_tolerance, " is not in [0, 1]")});
  }
  if (a.fallback_failure_threshold.has_value() &&
      (*a.fallback_failure_threshold < 1 || *a.fallback_failure_threshold > 1000)) {
    errors.push_back({"spec.autoscaling.fallback.failureThreshold", "must be in [1, 1000]"});
  }
  if (a.fallback_replicas.has_value() && (*a.fallback_replicas < 0 || *a.fallback_replicas > 10000)) {
    errors.push_back({"spec.autoscaling.fallback.replicas", "must be in [0, 10000]"});
  }
  if (a.accelerator_hourly.value_or(0) < 0) errors.push_back({"spec.autoscaling.cost.acceleratorHourly", "must not be negative"});
  if (a.remote_cpu_hourly.value_or(0) < 0) errors.push_back({"spec.autoscaling.cost.remoteCpuHourly", "must not be negative"});
  return errors;
}

json StatusToJson(const DataServiceStatus& status) {
  json conditions = json::array();
  for (const Condition& c : status.conditions) {
    json jc = {{"type", c.type}, {"status", c.status}};
    if (!c.reason.empty()) jc["reason"] = c.reason;
    if (!c.message.empty()) jc["message"] = c.message;
    if (!c.last_transition_time.empty()) jc["lastTransitionTime"] = c.last_transition_time;
    jc["observedGeneration"] = c.observed_generation;
    conditions.push_back(std::move(jc));
  }
  json out = {
      {"observedGeneration", status.observed_generation},
      {"conditions", std::move(conditions)},
      {"replicas", status.replicas},
      {"readyReplicas", status.ready_replicas},
      {"localReplicas", status.local_replicas},
      {"remoteReplicas", status.remote_replicas},
      {"localCapacity", status.local_capacity},
      {"drainingReplicas", status.draining_replicas},
      {"selector", status.selector},
  };
  if (!status.dispatcher_address.empty()) out["dispatcherAddress"] = status.dispatcher_address;
  if (status.auto_order.has_value()) {
    const AutoOrderStatus& a = *status.auto_order;
    // Every key, always: status writes are merge patches, which would keep a key left out.
    out["autoOrder"] = {{"mode", a.mode},
                        {"outcome", a.outcome},
                        {"originalOrder", a.original_order},
                        {"chosenOrder", a.chosen_order},
                        {"predictedSpeedup", a.predicted_speedup},
                        {"measuredSpeedup", a.measured_speedup},
                        {"message", a.message}};
  }
  return out;
}

int64_t WorkerCpuMillis(const WorkersSpec& workers) {
  for (const StringMap* m : {&workers.resources.requests, &workers.resources.limits}) {
    auto it = m->find("cpu");
    if (it == m->end()) continue;
    absl::StatusOr<int64_t> millis = ParseQuantityMillis(it->second);
    if (millis.ok()) return *millis;
  }
  return 1000;
}

std::string FormatKubeTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", absl::FromUnixSeconds(absl::ToUnixSeconds(t)), absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> ParseKubeTime(const std::string& text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid timestamp \"", text, "\": ", err));
  }
  return t;
}

}  // namespace sluice::op
