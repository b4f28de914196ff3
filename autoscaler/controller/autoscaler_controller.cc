#include "autoscaler/controller/autoscaler_controller.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "kube/apply.h"
#include "kube/errors.h"
#include "kube/packed_object.h"
#include "kube/resource.h"

namespace sluice::autoscaler {

using json = nlohmann::json;

namespace {

constexpr char kIndexDataService[] = "dataservice";  // "namespace/name" of the pod's DataService
constexpr char kIndexTarget[] = "target";            // "namespace/name" of the DataService a scaler names
constexpr char kLabelDataService[] = "sluice.dev/dataservice";
constexpr char kLabelRole[] = "sluice.dev/role";
constexpr char kLabelPlacement[] = "sluice.dev/placement";

std::string Key(const std::string& ns, const std::string& name) { return absl::StrCat(ns, "/", name); }

const json& Field(const json& j, std::initializer_list<const char*> path) {
  static const json kNull;
  const json* cur = &j;
  for (const char* p : path) {
    if (!cur->is_object() || !cur->contains(p)) return kNull;
    cur = &(*cur)[p];
  }
  return *cur;
}

// A pod reduced to what the autoscaler reads.
json CompactPod(json&& pod) {
  json out = {{"metadata",
               {{"name", Field(pod, {"metadata", "name"})},
                {"namespace", Field(pod, {"metadata", "namespace"})},
                {"resourceVersion", Field(pod, {"metadata", "resourceVersion"})},
                {"labels", Field(pod, {"metadata", "labels"})}}}};
  for (const char* key : {"creationTimestamp", "deletionTimestamp"}) {
    if (!Field(pod, {"metadata", key}).is_null()) out["metadata"][key] = Field(pod, {"metadata", key});
  }
  out["spec"] = {{"nodeName", Field(pod, {"spec", "nodeName"})}};
  out["status"] = {{"podIP", Field(pod, {"status", "podIP"})}, {"phase", Field(pod, {"status", "phase"})}};
  bool ready = false;
  const json& conditions = Field(pod, {"status", "conditions"});
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (c.value("type", "") == "Ready" && c.value("status", "") == "True") ready = true;
    }
  }
  out["status"]["ready"] = ready;
  return out;
}

// An HPA or ScaledObject reduced to its target.
json CompactScaler(json&& scaler) {
  return {{"kind", Field(scaler, {"kind"})},
          {"metadata",
           {{"name", Field(scaler, {"metadata", "name"})},
            {"namespace", Field(scaler, {"metadata", "namespace"})},
            {"resourceVersion", Field(scaler, {"metadata", "resourceVersion"})}}},
          {"spec", {{"scaleTargetRef", Field(scaler, {"spec", "scaleTargetRef"})}}}};
}

std::vector<std::string> TargetIndex(const json& scaler) {
  const json& ref = Field(scaler, {"spec", "scaleTargetRef"});
  if (!ref.is_object() || ref.value("kind", "") != "DataService") return {};
  const std::string api = ref.value("apiVersion", "sluice.dev/v1alpha1");
  if (!api.empty() && api.rfind("sluice.dev/", 0) != 0) return {};
  return {Key(kube::NamespaceOf(scaler), ref.value("name", ""))};
}

std::vector<std::string> DataServiceIndex(const json& pod) {
  const json& ds = Field(pod, {"metadata", "labels", kLabelDataService});
  if (!ds.is_string()) return {};
  return {Key(kube::NamespaceOf(pod), ds.get<std::string>())};
}

bool AutoscalingEnabled(const json& ds) { return Field(ds, {"spec", "autoscaling", "enabled"}) == true; }

// A DataService as cached: what the autoscaler reads of it (the spec; status.autoscaler and the
// operator's counts; of managedFields only the entries touching spec.workers, reduced to it),
// packed as JSON text (kube/packed_object.h), with the generation and whether autoscaling is on
// kept beside it for the event handlers. A thousand DataServices with their status.autoscaler
// take a few megabytes so, instead of tens as JSON trees.
json CompactDataService(json&& ds) {
  if (ds.contains("status") && ds["status"].is_object()) {
    json& status = ds["status"];
    status.erase("conditions");
    status.erase("autoOrder");
  }
  if (ds.contains("metadata") && ds["metadata"].is_object()) {
    json& meta = ds["metadata"];
    meta.erase("annotations");  // kubectl's last-applied-configuration can be large
    if (meta.contains("managedFields") && meta["managedFields"].is_array()) {
      json kept = json::array();
      for (json& entry : meta["managedFields"]) {
        const json& workers = Field(entry, {"fieldsV1", "f:spec", "f:workers"});
        if (!workers.is_object()) continue;
        json reduced = {{"manager", entry.value("manager", "")}, {"operation", entry.value("operation", "")},
                        {"fieldsV1", {{"f:spec", {{"f:workers", workers}}}}}};
        if (entry.contains("subresource")) reduced["subresource"] = entry["subresource"];
        kept.push_back(std::move(reduced));
      }
      meta["managedFields"] = std::move(kept);
    }
  }
  const json generation = Field(ds, {"metadata", "generation"});
  const bool enabled = AutoscalingEnabled(ds);
  json packed = kube::PackObject(std::move(ds));
  packed["metadata"]["generation"] = generation;
  packed["autoscalingEnabled"] = enabled;
  return packed;
}

// The server-side apply of status.autoscaler (forced: the autoscaler owns it). The answer, the
// whole DataService, is not parsed: nothing reads it (the watch brings the object), and a thousand
// DataServices rewrite their status every few minutes.
absl::Status ApplyStatus(kube::Client& client, const std::string& ns, const std::string& name, const std::string& body,
                         const std::string& field_manager) {
  kube::WriteOptions w;
  w.field_manager = field_manager;
  w.force = true;
  const std::string path =
      absl::StrCat(DataServicesResource().ObjectPath(ns, name, "status"), kube::BuildQuery(w.ToQuery()));
  auto answer = client.Send("PATCH", path, body, kube::PatchContentType(kube::PatchType::kApply));
  if (!answer.ok()) return answer.status();
  if (answer->status < 200 || answer->status >= 300) {
    return kube::StatusFromResponse(answer->status, answer->body, absl::StrCat("PATCH ", path));
  }
  return absl::OkStatus();
}

bool CachedEnabled(const json& cached) {
  return kube::IsPacked(cached) ? cached.value("autoscalingEnabled", false) : AutoscalingEnabled(cached);
}

}  // namespace

kube::ResourceRef DataServicesResource() { return kube::ResourceRef{"sluice.dev", "v1alpha1", "dataservices", true}; }
kube::ResourceRef HorizontalPodAutoscalers() {
  return kube::ResourceRef{"autoscaling", "v2", "horizontalpodautoscalers", true};
}
kube::ResourceRef ScaledObjects() { return kube::ResourceRef{"keda.sh", "v1alpha1", "scaledobjects", true}; }

json SignificantStatus(json s) {
  for (const char* volatile_key : {"inputs", "arithmetic", "history", "stallRatio", "demand", "lastDecision"}) {
    s.erase(volatile_key);  // measured numbers and times
  }
  if (s.contains("decision") && s["decision"].is_object()) {
    s["decision"].erase("time");
    s["decision"].erase("learnt");
    if (s["decision"].contains("reasons")) s["decision"]["reasons"] = json::array();
  }
  if (s.contains("conditions") && s["conditions"].is_array()) {
    for (json& c : s["conditions"]) c.erase("message");
  }
  return s;
}

AutoscalerController::AutoscalerController(kube::Client* client, AutoscalerOptions options)
    : client_(client),
      options_(std::move(options)),
      queue_(options_.clock),
      recorder_(client, kube::EventRecorderOptions{.reporting_controller = "sluice.dev/autoscaler",
                                                   .reporting_instance = options_.reporting_instance,
                                                   .clock = options_.clock}) {
  (void)pods_.AddIndex(kIndexDataService, DataServiceIndex);
  (void)scalers_.AddIndex(kIndexTarget, TargetIndex);

  auto reflector = [&](kube::Store* store, kube::ResourceRef ref, std::string selector,
                       std::function<json(json&&)> transform) {
    kube::ReflectorOptions o;
    o.resource = std::move(ref);
    o.ns = options_.watch_namespace;
    o.label_selector = std::move(selector);
    o.clock = options_.clock;
    o.transform = std::move(transform);
    reflectors_.push_back(std::make_unique<kube::Reflector>(client_, store, std::move(o)));
    return reflectors_.back().get();
  };
  // DataServices keep their managedFields: who owns spec.workers.replicas is part of the decision.
  kube::Reflector* ds = reflector(&dataservices_, DataServicesResource(), "", CompactDataService);
  ds->AddEventHandler(kube::ResourceEventHandler{
      .on_add = [this](const kube::ObjectPtr& o) {
        if (CachedEnabled(*o)) queue_.Add(kube::ObjectKey(*o));
      },
      .on_update =
          [this](const kube::ObjectPtr& before, const kube::ObjectPtr& after) {
            // Only spec changes (generation) matter at once; status writes (ours too) wait for the period.
            if (Field(*before, {"metadata", "generation"}) != Field(*after, {"metadata", "generation"})) {
              queue_.Add(kube::ObjectKey(*after));
            }
          },
      .on_delete = [this](const kube::ObjectPtr& o) { queue_.Add(kube::ObjectKey(*o)); }});
  // Packed entries keep only the identity outside the text (kube/packed_object.h); the label the
  // index reads is kept beside it, or no pod would ever be found by its DataService.
  reflector(&pods_, kube::resources::Pods(), kLabelDataService, [](json&& o) {
    json label = Field(o, {"metadata", "labels", kLabelDataService});
    json packed = kube::PackObject(CompactPod(std::move(o)));
    if (label.is_string()) packed["metadata"]["labels"] = {{kLabelDataService, std::move(label)}};
    return packed;
  });
  auto scaler_handler = kube::ResourceEventHandler{
      .on_add = [this](const kube::ObjectPtr& o) { for (const auto& k : TargetIndex(*o)) queue_.Add(k); },
      .on_update =
          [this](const kube::ObjectPtr& before, const kube::ObjectPtr& after) {
            for (const auto& k : TargetIndex(*before)) queue_.Add(k);
            for (const auto& k : TargetIndex(*after)) queue_.Add(k);
          },
      .on_delete = [this](const kube::ObjectPtr& o) { for (const auto& k : TargetIndex(*o)) queue_.Add(k); }};
  reflector(&scalers_, HorizontalPodAutoscalers(), "", CompactScaler)->AddEventHandler(scaler_handler);
  if (options_.watch_scaled_objects) {
    reflector(&scalers_, ScaledObjects(), "", CompactScaler)->AddEventHandler(scaler_handler);
  }
}

AutoscalerController::~AutoscalerController() { Stop(); }

absl::Status AutoscalerController::Start(absl::Duration sync_timeout) {
  for (auto& r : reflectors_) r->Start();
  for (auto& r : reflectors_) {
    if (!r->WaitForSync(sync_timeout)) {
      Stop();
      return absl::DeadlineExceededError(absl::StrCat(
          "caches did not sync within ", absl::FormatDuration(sync_timeout),
          " (is the DataService CRD installed, and may the autoscaler list and watch dataservices, pods and "
          "horizontalpodautoscalers?)"));
    }
  }
  kube::ControllerOptions copts;
  copts.name = "autoscaler";
  copts.workers = options_.workers;
  copts.on_result = [this](const std::string& key, const absl::StatusOr<kube::ReconcileResult>& result) {
    if (options_.metrics != nullptr) options_.metrics->CountReconcile(result.ok());
    if (!result.ok()) Log(absl::StrCat(key, ": reconcile failed, retrying with backoff: ", result.status().ToString()));
  };
  controller_ = std::make_unique<kube::Controller>(&queue_, [this](const std::string& key) { return ReconcileKey(key); },
                                                   copts);
  controller_->Start();
  return absl::OkStatus();
}

void AutoscalerController::Stop() {
  if (controller_) controller_->Stop();
  for (auto& r : reflectors_) r->Stop();
}

void AutoscalerController::Log(absl::string_view line) const {
  if (options_.log) {
    options_.log(line);
    return;
  }
  SLUICE_LOG(Info, line);
}

std::vector<WorkerPod> AutoscalerController::WorkersOf(const std::string& ns, const std::string& name,
                                                       std::string* dispatcher_ip,
                                                       std::map<std::string, std::string>* worker_ips) const {
  std::vector<WorkerPod> out;
  for (const kube::ObjectPtr& packed : pods_.ByIndex(kIndexDataService, Key(ns, name))) {
    const json pod = kube::UnpackObject(*packed);
    const std::string role = Field(pod, {"metadata", "labels", kLabelRole}).is_string()
                                 ? Field(pod, {"metadata", "labels", kLabelRole}).get<std::string>()
                                 : "";
    const json& ip = Field(pod, {"status", "podIP"});
    const bool terminating = !Field(pod, {"metadata", "deletionTimestamp"}).is_null();
    if (role == "dispatcher") {
      if (ip.is_string() && !terminating) *dispatcher_ip = ip.get<std::string>();
      continue;
    }
    if (role != "worker") continue;
    WorkerPod w;
    w.name = kube::NameOf(pod);
    w.local = Field(pod, {"metadata", "labels", kLabelPlacement}) == "local";
    w.ready = Field(pod, {"status", "ready"}) == true;
    w.terminating = terminating;
    if (Field(pod, {"metadata", "creationTimestamp"}).is_string()) {
      auto t = op::ParseKubeTime(Field(pod, {"metadata", "creationTimestamp"}).get<std::string>());
      if (t.ok()) w.created = *t;
    }
    if (Field(pod, {"spec", "nodeName"}).is_string()) w.node = Field(pod, {"spec", "nodeName"}).get<std::string>();
    if (ip.is_string() && !terminating && !ip.get<std::string>().empty()) (*worker_ips)[w.name] = ip.get<std::string>();
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<std::string> AutoscalerController::OtherScalersOf(const std::string& ns, const std::string& name) const {
  std::vector<std::string> out;
  for (const kube::ObjectPtr& s : scalers_.ByIndex(kIndexTarget, Key(ns, name))) {
    std::string kind = Field(*s, {"kind"}).is_string() ? Field(*s, {"kind"}).get<std::string>() : "";
    if (kind.empty()) kind = "HorizontalPodAutoscaler";
    out.push_back(absl::StrCat(kind, " ", ns, "/", kube::NameOf(*s)));
  }
  return out;
}

void AutoscalerController::Emit(const json& dataservice, const EventNote& e) {
  absl::Status s = recorder_.Record(dataservice, e.type == "Warning" ? kube::EventType::kWarning : kube::EventType::kNormal,
                                    e.reason, "Autoscale", e.note);
  if (!s.ok()) Log(absl::StrCat(kube::ObjectKey(dataservice), ": cannot record event ", e.reason, ": ", s.ToString()));
}

absl::StatusOr<kube::ReconcileResult> AutoscalerController::ReconcileKey(const std::string& key) {
  std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('/', 1));
  const std::string ns = parts.size() == 2 ? parts[0] : "";
  const std::string name = parts.size() == 2 ? parts[1] : key;
  const absl::Time now = options_.clock->Now();
  kube::ObjectPtr packed = dataservices_.Get(key);
  json unpacked = packed == nullptr ? json() : kube::UnpackObject(*packed);
  const json* cached = packed == nullptr || !unpacked.is_object() ? nullptr : &unpacked;
  if (cached == nullptr || !AutoscalingEnabled(*cached)) {
    bool known = false;
    {
      absl::MutexLock lock(&mu_);
      known = memory_.erase(key) > 0;
    }
    if (known) {
      if (options_.signals != nullptr) options_.signals->Forget(ns, name);
      if (options_.metrics != nullptr) options_.metrics->Forget(ns, name);
    }
    if (cached == nullptr) return kube::ReconcileResult{};
    // Never autoscaled, or already told it is off: nothing to say.
    const json& conditions = Field(*cached, {"status", "autoscaler", "conditions"});
    bool said = !conditions.is_array();
    if (conditions.is_array()) {
      for (const json& c : conditions) {
        if (c.value("type", "") == "ScalingActive" && c.value("reason", "") == "Disabled") said = true;
      }
    }
    if (said) return kube::ReconcileResult{};
  }

  json object = std::move(unpacked);  // `cached` points at it until it moves into the plan's input
  cached = nullptr;
  const int64_t generation = Field(object, {"metadata", "generation"}).is_number_integer()
                                 ? Field(object, {"metadata", "generation"}).get<int64_t>()
                                 : 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      // Not due yet (an event woke us): wait for the period unless the spec changed.
      if (it->second.generation == generation && now - it->second.decided < options_.period) {
        return kube::ReconcileResult{.requeue_after = options_.period - (now - it->second.decided)};
      }
      object["status"]["autoscaler"] = json::parse(it->second.status);  // newer than the cached object's
    }
  }

  // Observe (no lock held).
  PlanInput in;
  in.now = now;
  std::string dispatcher_ip;
  std::map<std::string, std::string> worker_ips;
  in.workers = WorkersOf(ns, name, &dispatcher_ip, &worker_ips);
  in.other_scalers = OtherScalersOf(ns, name);
  if (AutoscalingEnabled(object) && options_.signals != nullptr) {
    auto parsed = op::ParseDataService(object);
    if (parsed.ok()) {
      auto settings = SettingsFor(*parsed, options_.global);
      if (settings.ok()) {
        ObserveRequest req;
        req.ns = ns;
        req.name = name;
        req.prometheus_url = settings->prometheus_url;
        req.queries = settings->queries;
        if (!dispatcher_ip.empty()) {
          req.dispatcher_metrics_url = absl::StrCat("http://", dispatcher_ip, ":", parsed->spec.dispatcher.metrics_port);
        }
        for (const auto& [pod, ip] : worker_ips) {
          req.worker_metrics_urls[pod] = absl::StrCat("http://", ip, ":", parsed->spec.workers.metrics_port);
        }
        in.observation = options_.signals->Observe(req, now);
      }
      in.parsed = *std::move(parsed);  // the plan need not parse it again
    }
  }
  in.object = std::move(object);
  const json& dataservice = in.object;  // as read (status.autoscaler: the latest planned)
  Plan plan = PlanAutoscaling(in, options_.global);

  // Apply the spec (never forced: a conflict is reported).
  bool applied = false;
  if (plan.spec) {
    auto result = kube::ServerSideApply(*client_, DataServicesResource(), ns, plan.spec->ApplyBody(name, ns),
                                        options_.field_manager, /*force=*/false);
    if (result.ok()) {
      applied = true;
      Log(absl::StrCat(key, ": applied ", plan.spec->ApplyBody(name, ns)["spec"].dump(), ": ",
                       plan.decision ? plan.decision->Summary() : ""));
    } else if (kube::IsConflict(result.status())) {
      if (options_.metrics != nullptr) options_.metrics->CountConflict(ns, name);
      const std::string message = absl::StrCat(
          "the apply of spec.workers conflicts with another field manager: ", result.status().message(),
          " — drop workers.replicas and workers.local from your manifest while autoscaling is on");
      for (json& c : plan.status["conditions"]) {
        if (c["type"] == "AbleToScale") {
          c["status"] = "False";
          c["reason"] = "ApplyConflict";
          c["message"] = message.substr(0, 1024);
        }
      }
      plan.status["decision"]["acted"] = false;
      plan.events.erase(std::remove_if(plan.events.begin(), plan.events.end(),
                                       [](const EventNote& e) { return e.type == "Normal"; }),
                        plan.events.end());
      plan.events.push_back({"Warning", "ApplyConflict", message.substr(0, 1024)});
      Log(absl::StrCat(key, ": ", message));
    } else {
      return result.status();  // retried with backoff; nothing recorded as done
    }
  }
  if (plan.spec && !applied) {
    // Nothing changed: keep the previous last change in the history.
    const json& prev_history = Field(dataservice, {"status", "autoscaler", "history"});
    if (prev_history.is_object() && prev_history.contains("lastChange")) {
      plan.status["history"]["lastChange"] = prev_history["lastChange"];
    } else {
      plan.status["history"].erase("lastChange");
    }
    const json& prev_scale = Field(dataservice, {"status", "autoscaler", "lastScaleTime"});
    if (prev_scale.is_null()) {
      plan.status.erase("lastScaleTime");
    } else {
      plan.status["lastScaleTime"] = prev_scale;
    }
  }

  // Status: written when something significant changed, or every status_interval.
  std::string status_text = plan.status.dump();
  const json significant = SignificantStatus(std::move(plan.status));  // plan.status is not read below
  const std::string significant_text = significant.dump();
  bool write = true;
  {
    absl::MutexLock lock(&mu_);
    auto it = memory_.find(key);
    if (it != memory_.end() && it->second.significant == significant_text &&
        now - it->second.written < options_.status_interval) {
      write = false;
    }
    if (it == memory_.end()) {
      // After a restart: compare with what the object holds.
      const json& stored = Field(dataservice, {"status", "autoscaler"});
      if (stored.is_object() && SignificantStatus(stored) == significant && !applied) write = false;
    }
  }
  if (write) {
    // The apply body, around the status text already made (no copy of the status as a tree).
    const std::string body = absl::StrCat(R"({"apiVersion":"sluice.dev/v1alpha1","kind":"DataService","metadata":{"name":)",
                                          json(name).dump(), R"(,"namespace":)", json(ns).dump(),
                                          R"(},"status":{"autoscaler":)", status_text, "}}");
    if (absl::Status s = ApplyStatus(*client_, ns, name, body, options_.field_manager); !s.ok()) {
      Log(absl::StrCat(key, ": cannot write status.autoscaler: ", s.ToString()));
      write = false;
    }
  }
  for (const EventNote& e : plan.events) Emit(dataservice, e);

  if (options_.metrics != nullptr && plan.decision) {
    AutoscalerMetrics::Outcome o;
    o.direction = DirectionName(plan.decision->direction);
    o.acted = applied;
    if (plan.decision->holding) {
      o.holding_reason = plan.decision->Has(Reason::kHeldOnChurn)       ? "churn"
                         : plan.decision->Has(Reason::kHeldOnStaleData) ? "stale_metrics"
                                                                        : "missing_metrics";
    }
    o.local = plan.decision->local;
    o.remote = plan.decision->remote;
    o.stall_ratio = plan.decision->arithmetic.stall_ratio;
    o.target_stall_ratio = plan.settings ? plan.settings->policy.target_stall_ratio : 0;
    o.metric_error = in.observation && !in.observation->errors.empty();
    o.source = plan.settings && plan.settings->prometheus_url ? "prometheus" : "scrape";
    options_.metrics->Record(ns, name, o);
  }

  {
    absl::MutexLock lock(&mu_);
    Memory& m = memory_[key];
    m.status = std::move(status_text);
    m.decided = now;
    m.generation = generation;
    if (write) {
      m.significant = significant_text;
      m.written = now;
    }
  }
  if (!AutoscalingEnabled(dataservice)) return kube::ReconcileResult{};
  return kube::ReconcileResult{.requeue_after = options_.period};
}

}  // namespace sluice::autoscaler
