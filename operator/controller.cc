#include "operator/controller.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "kube/apply.h"
#include "kube/errors.h"
#include "kube/finalizer.h"
#include "kube/packed_object.h"
#include "kube/resource.h"
#include "operator/event_notes.h"
#include "operator/manifests.h"
#include "operator/pod_snapshot.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

static_assert(kMaxEventNoteBytes == kube::kMaxEventNoteBytes, "event notes are split where the recorder cuts them");

constexpr char kIndexControllerUid[] = "controller-uid";
constexpr char kIndexNamespace[] = "namespace";

std::string ManagedSelector() { return absl::StrCat(kLabelManagedBy, "=", kManagedByValue); }

// spec.placement.policy read straight from the object (RemoteOnly when absent, the CRD default).
bool IsRemoteOnly(const json& dataservice) {
  const json* spec = dataservice.is_object() && dataservice.contains("spec") ? &dataservice["spec"] : nullptr;
  if (spec == nullptr || !spec->is_object() || !spec->contains("placement")) return true;
  const json& placement = (*spec)["placement"];
  if (!placement.is_object() || !placement.contains("policy")) return true;
  return placement["policy"] == "RemoteOnly";
}

kube::ResourceRef RefForKind(const std::string& kind) {
  if (kind == "Service") return kube::resources::Services();
  if (kind == "PersistentVolumeClaim") return PersistentVolumeClaims();
  return kube::resources::Pods();
}

}  // namespace

kube::ResourceRef DataServices() { return kube::ResourceRef{kGroup, "v1alpha1", kPlural, true}; }
kube::ResourceRef PersistentVolumeClaims() { return kube::ResourceRef{"", "v1", "persistentvolumeclaims", true}; }

DataServiceController::DataServiceController(kube::Client* client, OperatorOptions options)
    : client_(client),
      options_(std::move(options)),
      queue_(options_.clock),
      recorder_(client, kube::EventRecorderOptions{.reporting_controller = "sluice.dev/operator",
                                                   .reporting_instance = options_.reporting_instance,
                                                   .clock = options_.clock}) {
  (void)pods_.AddIndex(kPodIndexControllerUid, kube::IndexByControllerUid());
  (void)pods_.AddIndex(kPodIndexNamespace, kube::IndexByNamespace());
  (void)pods_.AddIndex(kPodIndexNode, IndexByPodNode());
  (void)services_.AddIndex(kIndexControllerUid, kube::IndexByControllerUid());
  (void)claims_.AddIndex(kIndexControllerUid, kube::IndexByControllerUid());
  (void)dataservices_.AddIndex(kIndexNamespace, kube::IndexByNamespace());

  auto reflector = [&](kube::Store* store, kube::ResourceRef ref, std::string ns, std::string selector,
                       std::function<json(json&&)> transform = kube::DropManagedFields) {
    kube::ReflectorOptions o;
    o.resource = std::move(ref);
    o.ns = std::move(ns);
    o.label_selector = std::move(selector);
    o.clock = options_.clock;
    o.transform = std::move(transform);
    reflector_names_.push_back(o.resource.plural);
    reflectors_.push_back(std::make_unique<kube::Reflector>(client_, store, std::move(o)));
    return reflectors_.back().get();
  };
  // Caches hold packed entries (kube/packed_object.h): identity plus the object as JSON text.
  auto packed = [](json&& o) { return kube::PackObject(kube::DropManagedFields(std::move(o))); };
  kube::Reflector* dataservices = reflector(&dataservices_, DataServices(), options_.watch_namespace, "", packed);
  dataservices->AddEventHandler(kube::EnqueueObjectHandler(&queue_));
  dataservices->AddEventHandler(ConsumerSelectorHandler());
  dataservices->AddEventHandler(TerminatingNamespaceHandler());
  // Every pod of the cluster, compacted to what the reconciler reads (and indexed by node: the CPU
  // requested on a consumer node is summed from the cache when a reconcile reads it, see
  // operator/pod_snapshot.h).
  kube::Reflector* pods = reflector(&pods_, kube::resources::Pods(), "", "", PackPod);
  pods->AddEventHandler(ExpectationsHandler("Pod"));
  pods->AddEventHandler(kube::EnqueueControllerOwnerHandler(&queue_, kKind));
  pods->AddEventHandler(ConsumerPodHandler());
  pods->AddEventHandler(ConsumerNodePodHandler());
  kube::Reflector* services =
      reflector(&services_, kube::resources::Services(), options_.watch_namespace, ManagedSelector(), packed);
  services->AddEventHandler(ExpectationsHandler("Service"));
  services->AddEventHandler(kube::EnqueueControllerOwnerHandler(&queue_, kKind));
  kube::Reflector* claims =
      reflector(&claims_, PersistentVolumeClaims(), options_.watch_namespace, ManagedSelector(), packed);
  claims->AddEventHandler(ExpectationsHandler("PersistentVolumeClaim"));
  claims->AddEventHandler(kube::EnqueueControllerOwnerHandler(&queue_, kKind));
  reflector(&nodes_, kube::resources::Nodes(), "", "", CompactNode)->AddEventHandler(NodeHandler());
}

DataServiceController::~DataServiceController() { Stop(); }

kube::ResourceEventHandler DataServiceController::ConsumerSelectorHandler() {
  // Remembers the consumer selector of every DataService that places workers locally, so that pod
  // events are matched without parsing DataServices.
  auto update = [this](const kube::ObjectPtr& ds) {
    const std::string key = kube::ObjectKey(*ds);
    absl::StatusOr<DataService> parsed = ParseDataService(kube::UnpackObject(*ds));
    absl::MutexLock lock(&mu_);
    if (parsed.ok() && parsed->spec.placement.policy != PlacementPolicy::kRemoteOnly &&
        parsed->spec.placement.consumer_selector.has_value() &&
        !(parsed->spec.placement.consumer_selector->match_labels.empty() &&
          parsed->spec.placement.consumer_selector->match_expressions.empty())) {  // {} is invalid, not "every pod"
      consumer_selectors_[key] = ConsumerSelector{kube::NamespaceOf(*ds), *parsed->spec.placement.consumer_selector};
    } else {
      consumer_selectors_.erase(key);
    }
  };
  kube::ResourceEventHandler handler;
  handler.on_add = update;
  handler.on_update = [update](const kube::ObjectPtr&, const kube::ObjectPtr& ds) { update(ds); };
  handler.on_delete = [this](const kube::ObjectPtr& ds) {
    absl::MutexLock lock(&mu_);
    consumer_selectors_.erase(kube::ObjectKey(*ds));
  };
  return handler;
}

kube::ResourceEventHandler DataServiceController::ConsumerPodHandler() {
  // A consumer pod appearing, moving or going changes local capacity: requeue every DataService of
  // its namespace whose consumer selector matches it.
  auto enqueue = [this](const kube::ObjectPtr& pod) {
    std::vector<std::string> keys;
    {
      absl::MutexLock lock(&mu_);
      if (consumer_selectors_.empty()) return;
      const std::string ns = kube::NamespaceOf(*pod);
      std::optional<absl::StatusOr<ObservedPod>> p;  // parsed on the first DataService of its namespace
      for (const auto& [key, consumer] : consumer_selectors_) {
        if (consumer.ns != ns) continue;
        if (!p.has_value()) p = ObservedPodFromJson(kube::UnpackObject(*pod));
        if (!p->ok()) return;
        if (SelectorMatches(consumer.selector, (*p)->labels)) keys.push_back(key);
      }
    }
    for (const std::string& key : keys) queue_.Add(key);
  };
  kube::ResourceEventHandler handler;
  handler.on_add = enqueue;
  handler.on_update = [enqueue](const kube::ObjectPtr& old_pod, const kube::ObjectPtr& new_pod) {
    enqueue(old_pod);
    enqueue(new_pod);
  };
  handler.on_delete = enqueue;
  return handler;
}

kube::ResourceEventHandler DataServiceController::ExpectationsHandler(std::string kind) {
  // An object of ours seen added satisfies its expected create, seen deleted its expected delete,
  // even when no reconcile runs in between: a pod created and deleted again (by a namespace deletion,
  // an eviction) before a reconcile looked would otherwise hold the expectations until their timeout.
  auto observed = [this, kind](const kube::ObjectPtr& o, bool added) {
    if (o == nullptr) return;
    std::optional<kube::PackedController> ref = kube::PackedControllerOf(*o);
    if (!ref.has_value() || ref->kind != kKind) return;
    const std::string ns = kube::NamespaceOf(*o);
    const std::string key = ns.empty() ? ref->name : absl::StrCat(ns, "/", ref->name);
    kube::ObjectPtr owner = dataservices_.Get(key);
    if (owner == nullptr || kube::UidOf(kube::UnpackObject(*owner)) != ref->uid) return;  // someone else's
    const std::string object_key = ObjectKey(kind, kube::NameOf(*o));
    absl::MutexLock lock(&mu_);
    if (added) {
      expectations_.CreationObserved(key, object_key);
    } else {
      expectations_.DeletionObserved(key, object_key);
    }
  };
  kube::ResourceEventHandler handler;
  handler.on_add = [observed](const kube::ObjectPtr& o) { observed(o, true); };
  handler.on_delete = [observed](const kube::ObjectPtr& o) { observed(o, false); };
  return handler;
}

kube::ResourceEventHandler DataServiceController::ConsumerNodePodHandler() {
  // Any pod appearing on, changing on or leaving a node that runs a DataService's consumers changes
  // the CPU left there: requeue that DataService (its own pods requeue it anyway).
  static const kube::IndexFunc node_of = IndexByPodNode();
  auto enqueue = [this](const kube::ObjectPtr& pod) {
    if (pod == nullptr) return;
    std::vector<std::string> nodes = node_of(*pod);
    if (nodes.empty()) return;
    std::vector<std::string> keys;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, consumer_nodes] : consumer_nodes_) {
        if (consumer_nodes.count(nodes[0])) keys.push_back(key);
      }
    }
    for (const std::string& key : keys) queue_.Add(key);
  };
  kube::ResourceEventHandler handler;
  handler.on_add = enqueue;
  handler.on_update = [enqueue](const kube::ObjectPtr& before, const kube::ObjectPtr& after) {
    enqueue(before);
    enqueue(after);
  };
  handler.on_delete = enqueue;
  return handler;
}

kube::ResourceEventHandler DataServiceController::NodeHandler() {
  auto enqueue_local = [this]() {
    std::vector<std::string> keys;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, selector] : consumer_selectors_) keys.push_back(key);
    }
    for (const std::string& key : keys) queue_.Add(key);
  };
  // Compact nodes hold only what capacity reads, plus the resourceVersion: an update that changes
  // nothing else (a status heartbeat) requeues nothing.
  auto same = [](const kube::ObjectPtr& a, const kube::ObjectPtr& b) {
    if (a == nullptr || b == nullptr) return a == b;
    auto part = [](const json& o, const char* key) { return o.contains(key) ? o[key] : json(); };
    auto labels = [](const json& o) {
      return o.contains("metadata") && o["metadata"].is_object() && o["metadata"].contains("labels")
                 ? o["metadata"]["labels"]
                 : json();
    };
    return part(*a, "spec") == part(*b, "spec") && part(*a, "status") == part(*b, "status") && labels(*a) == labels(*b);
  };
  kube::ResourceEventHandler handler;
  handler.on_add = [enqueue_local](const kube::ObjectPtr&) { enqueue_local(); };
  handler.on_update = [enqueue_local, same](const kube::ObjectPtr& before, const kube::ObjectPtr& after) {
    if (!same(before, after)) enqueue_local();
  };
  handler.on_delete = [enqueue_local](const kube::ObjectPtr&) { enqueue_local(); };
  return handler;
}

kube::ResourceEventHandler DataServiceController::TerminatingNamespaceHandler() {
  // A namespace marked as terminating is forgotten once it holds no DataService any more (the
  // namespace can only finish, and be created anew, after its DataServices are gone).
  kube::ResourceEventHandler handler;
  handler.on_delete = [this](const kube::ObjectPtr& ds) {
    const std::string ns = kube::NamespaceOf(*ds);
    if (!dataservices_.ByIndex(kIndexNamespace, ns).empty()) return;
    absl::MutexLock lock(&mu_);
    terminating_namespaces_.erase(ns);
  };
  return handler;
}

bool DataServiceController::NamespaceTerminating(const std::string& ns) const {
  absl::MutexLock lock(&mu_);
  return terminating_namespaces_.count(ns) > 0;
}

void DataServiceController::MarkNamespaceTerminating(const std::string& ns, const std::string& key,
                                                     const absl::Status& refusal) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    first = terminating_namespaces_.insert(ns).second;
  }
  if (options_.metrics != nullptr) options_.metrics->CountApiError("create");
  if (first) {
    Warn(absl::StrCat("namespace ", ns, " is being deleted; creating nothing more in it (no pods, Services, claims or "
                      "Events) until its DataServices are gone"),
         key, refusal);
  }
}

absl::Status DataServiceController::Start(absl::Duration sync_timeout) {
  for (auto& r : reflectors_) r->Start();
  for (auto& r : reflectors_) {
    if (!r->WaitForSync(sync_timeout)) {
      Stop();
      return absl::DeadlineExceededError(
          absl::StrCat("informer caches did not sync within ", absl::FormatDuration(sync_timeout),
                       " (is the DataService CRD installed, and may the operator list pods, services, "
                       "persistentvolumeclaims, nodes and dataservices?)"));
    }
  }
  if (options_.metrics != nullptr) {
    options_.metrics->SetQueueSources([this] { return static_cast<int64_t>(queue_.Len()); },
                                      [this] { return static_cast<int64_t>(queue_.NumWaiting()); });
    for (size_t i = 0; i < reflectors_.size(); ++i) {
      kube::Reflector* r = reflectors_[i].get();
      options_.metrics->SetReflectorSources(reflector_names_[i], [r] { return r->watch_restarts(); },
                                            [r] { return r->relists(); });
    }
  }
  kube::ControllerOptions copts;
  copts.name = "dataservice";
  copts.workers = options_.workers;
  copts.on_result = [this](const std::string& key, const absl::StatusOr<kube::ReconcileResult>& result) {
    if (!result.ok()) Warn("reconcile failed; retrying with backoff", key, result.status());
  };
  controller_ = std::make_unique<kube::Controller>(
      &queue_, [this](const std::string& key) { return ReconcileKey(key); }, copts);
  controller_->Start();
  return absl::OkStatus();
}

void DataServiceController::Stop() {
  if (controller_) controller_->Stop();  // shuts the queue down and joins the workers
  for (auto& r : reflectors_) r->Stop();
  if (options_.metrics != nullptr) options_.metrics->ClearSources();
}

void DataServiceController::Warn(absl::string_view what, absl::string_view key, const absl::Status& status) const {
  if (options_.log) {
    options_.log(absl::StrCat(key, key.empty() ? "" : ": ", what, ": ", status.ToString()));
    return;
  }
  SLUICE_LOG(Warning, what).With("dataservice", key).With("error", status.ToString());
}

ReconcileInput DataServiceController::BuildInput(const std::string& key, const json& dataservice) {
  ReconcileInput in;
  in.dataservice = dataservice;
  const std::string uid = kube::UidOf(dataservice);
  const std::string ns = kube::NamespaceOf(dataservice);
  // Consumer pods, nodes and CPU sums only matter to local placement (and a valid selector).
  std::optional<LabelSelector> consumers;
  if (!IsRemoteOnly(dataservice)) {
    if (absl::StatusOr<DataService> parsed = ParseDataService(dataservice); parsed.ok()) {
      const std::optional<LabelSelector>& selector = parsed->spec.placement.consumer_selector;
      if (selector.has_value() && !(selector->match_labels.empty() && selector->match_expressions.empty())) {
        consumers = *selector;
      }
    }
  }
  // Owned pods, the namespace's pods and the CPU on the consumer nodes, all from one state of the
  // pod cache (operator/pod_snapshot.h); the consumer nodes of the last pass are the first guess.
  std::set<std::string> consumer_nodes;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = consumer_nodes_.find(key); it != consumer_nodes_.end()) consumer_nodes = it->second;
  }
  PodSnapshot snapshot = ReadPodSnapshot(pods_, ns, uid, consumers, &consumer_nodes);
  {
    absl::MutexLock lock(&mu_);
    if (consumers.has_value()) {
      consumer_nodes_[key] = consumer_nodes;
    } else {
      consumer_nodes_.erase(key);
    }
  }
  for (const std::string& problem : snapshot.malformed) {
    Warn("ignoring a malformed cached pod", "", absl::InvalidArgumentError(problem));
  }
  in.owned_pods = std::move(snapshot.owned);
  if (consumers.has_value()) {
    in.consumer_pods = std::move(snapshot.namespace_pods);
    in.cpu_requested_by_node = std::move(snapshot.cpu_requested_by_node);
    for (const kube::ObjectPtr& o : nodes_.List()) {
      if (auto n = ObservedNodeFromJson(*o); n.ok()) in.nodes.push_back(*std::move(n));
    }
  }
  for (const kube::ObjectPtr& o : services_.ByIndex(kIndexControllerUid, uid)) {
    if (auto s = ObservedServiceFromJson(kube::UnpackObject(*o)); s.ok()) in.owned_services.push_back(*std::move(s));
  }
  for (const kube::ObjectPtr& o : claims_.ByIndex(kIndexControllerUid, uid)) {
    if (auto c = ObservedClaimFromJson(kube::UnpackObject(*o)); c.ok()) in.owned_claims.push_back(*std::move(c));
  }
  in.now = options_.clock->Now();
  in.options = options_.reconcile;
  return in;
}

absl::StatusOr<kube::ReconcileResult> DataServiceController::ReconcileKey(const std::string& key) {
  absl::Time start = absl::Now();
  absl::StatusOr<kube::ReconcileResult> result = ReconcileOnce(key);
  if (options_.metrics != nullptr) options_.metrics->ObserveReconcile(absl::Now() - start, result.ok());
  return result;
}

absl::StatusOr<kube::ReconcileResult> DataServiceController::ReconcileOnce(const std::string& key) {
  kube::ObjectPtr dataservice = dataservices_.Get(key);
  if (dataservice == nullptr) {  // gone: garbage collection removes what it owned
    absl::MutexLock lock(&mu_);
    expectations_.Forget(key);
    drains_.erase(key);
    pod_drains_.erase(key);
    auto_orders_.erase(key);
    status_written_.erase(key);
    consumer_nodes_.erase(key);
    return kube::ReconcileResult{};
  }
  const json object = kube::UnpackObject(*dataservice);
  ReconcileInput input = BuildInput(key, object);
  {
    absl::MutexLock lock(&mu_);
    input.expectations = expectations_.Pending(key);
    if (auto it = drains_.find(key); it != drains_.end()) input.drain = it->second;
    if (auto it = pod_drains_.find(key); it != pod_drains_.end()) {
      std::set<std::string> present;  // pods of this DataService that still exist
      for (const ObservedPod& p : input.owned_pods) present.insert(p.uid);
      for (auto d = it->second.begin(); d != it->second.end();) {
        d = present.count(d->first) ? std::next(d) : it->second.erase(d);
      }
      input.pod_drains = it->second;
      if (it->second.empty()) pod_drains_.erase(it);
    }
    input.namespace_terminating = terminating_namespaces_.count(kube::NamespaceOf(object)) > 0;
    if (auto it = auto_orders_.find(key); it != auto_orders_.end()) input.auto_order = it->second;
  }
  absl::StatusOr<ReconcileResult> result = Reconcile(input);
  if (!result.ok()) {
    // The object cannot be identified; retrying will not help until it changes.
    Warn("cannot reconcile", key, result.status());
    return kube::ReconcileResult{};
  }
  {
    absl::MutexLock lock(&mu_);
    RecordExpectations(key, *result, input.now, &expectations_);
  }
  std::optional<absl::Duration> status_due;
  absl::Status executed = Execute(key, object, *result, &status_due);
  if (!executed.ok()) return executed;
  kube::ReconcileResult out;
  if (result->requeue_after.has_value() || status_due.has_value()) {
    out.requeue_after = std::min(result->requeue_after.value_or(absl::InfiniteDuration()),
                                 status_due.value_or(absl::InfiniteDuration()));
  } else if (absl::StatusOr<DataService> parsed = ParseDataService(object);
             parsed.ok() && parsed->spec.placement.policy != PlacementPolicy::kRemoteOnly &&
             !parsed->metadata.deletion_timestamp.has_value()) {
    out.requeue_after = options_.resync_period;
  }
  return out;
}

void DataServiceController::Emit(const json& dataservice, const EmitEvent& event) {
  const std::string ns = kube::NamespaceOf(dataservice);
  if (NamespaceTerminating(ns)) return;
  absl::Status s = recorder_.Record(dataservice, event.type == "Warning" ? kube::EventType::kWarning : kube::EventType::kNormal,
                                    event.reason, event.action, event.note);
  if (!s.ok() && kube::HasStatusCause(s, "NamespaceTerminating")) {
    MarkNamespaceTerminating(ns, kube::ObjectKey(dataservice), s);
    return;
  }
  if (!s.ok()) {
    if (options_.metrics != nullptr) options_.metrics->CountApiError("event");
    Warn(absl::StrCat("recording event ", event.reason), kube::ObjectKey(dataservice), s);
  }
}

void DataServiceController::RunDrainRound(const std::string& key, const DrainWorkers& drain) {
  DrainProgress progress;
  if (options_.drainer == nullptr) {
    progress = DrainProgress{true, "draining is disabled in this operator; workers stop on SIGTERM"};
  } else {
    absl::StatusOr<DrainProgress> round = options_.drainer->Drain(drain);  // RPCs: no lock held
    if (options_.metrics != nullptr) options_.metrics->CountDrainRpc(round.ok());
    if (round.ok()) {
      progress = *std::move(round);
      SLUICE_LOG(Info, "drain round")
          .With("dataservice", key)
          .With("dispatcher", drain.dispatcher_endpoint.empty() ? drain.dispatcher_address : drain.dispatcher_endpoint)
          .With("complete", progress.complete)
          .With("progress", progress.message);
    } else {
      Warn("drain round failed; retrying until the drain timeout", key, round.status());
      progress = DrainProgress{false, std::string(round.status().message())};
    }
  }
  {
    absl::MutexLock lock(&mu_);
    drains_[key] = progress;
  }
  if (progress.complete) queue_.Add(key);  // release the finalizer now, not at the next poll
}

void DataServiceController::RunScaleDownDrainRound(const std::string& key, const DrainWorkers& drain) {
  const absl::Time now = options_.clock->Now();
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, PodDrain>& pods = pod_drains_[key];
    for (size_t i = 0; i < drain.worker_uids.size() && i < drain.workers.size() && i < drain.worker_addresses.size();
         ++i) {
      auto [it, added] = pods.try_emplace(drain.worker_uids[i]);
      if (!added) continue;
      it->second.pod = drain.workers[i];
      it->second.address = drain.worker_addresses[i];
      it->second.started = now;  // the drain timer starts with the first request
    }
  }
  DrainProgress progress;
  absl::Status failed;
  if (options_.drainer == nullptr) {
    for (const std::string& address : drain.worker_addresses) {
      progress.workers[address] = WorkerDrainVerdict{true, "draining is disabled in this operator; the pod stops on SIGTERM"};
    }
  } else {
    absl::StatusOr<DrainProgress> round = options_.drainer->Drain(drain);  // RPCs: no lock held
    if (options_.metrics != nullptr) options_.metrics->CountDrainRpc(round.ok());
    if (round.ok()) {
      progress = *std::move(round);
    } else {
      failed = round.status();
      Warn("scale-down drain round failed; retrying until each pod's drain deadline", key, failed);
    }
  }
  int drained = 0;
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, PodDrain>& pods = pod_drains_[key];
    for (size_t i = 0; i < drain.worker_uids.size(); ++i) {
      auto it = pods.find(drain.worker_uids[i]);
      if (it == pods.end()) continue;
      if (!failed.ok()) {
        it->second.message = absl::StrCat("the last drain round failed: ", failed.message());
        continue;
      }
      auto verdict = progress.workers.find(it->second.address);
      it->second.answered = true;
      it->second.drained = verdict != progress.workers.end() && verdict->second.drained;
      it->second.message = verdict != progress.workers.end() ? verdict->second.message
                                                             : std::string("the drain round gave no verdict for it");
      drained += it->second.drained;
    }
  }
  if (failed.ok()) {
    SLUICE_LOG(Info, "scale-down drain round")
        .With("dataservice", key)
        .With("dispatcher", drain.dispatcher_endpoint.empty() ? drain.dispatcher_address : drain.dispatcher_endpoint)
        .With("pods", absl::StrJoin(drain.workers, ","))
        .With("drained", drained)
        .With("progress", progress.message);
  }
  if (drained > 0) queue_.Add(key);  // delete the drained pods now, not at the next poll
}

void DataServiceController::ReadAutoOrderOf(const std::string& key, const ReadAutoOrder& read) {
  if (options_.auto_order_reader == nullptr) return;
  absl::StatusOr<AutoOrderStatus> status = options_.auto_order_reader->Read(read);  // an RPC: no lock held
  if (!status.ok()) {
    Warn("reading AutoOrder from the dispatcher failed; asking again on the next pass", key, status.status());
    return;
  }
  SLUICE_LOG(Info, "autoorder read").With("dataservice", key).With("outcome", status->outcome)
      .With("chosen_order", status->chosen_order);
  {
    absl::MutexLock lock(&mu_);
    auto_orders_[key] = ObservedAutoOrder{read.dispatcher_uid, *std::move(status)};
  }
  queue_.Add(key);  // write status.autoOrder now
}

absl::Status DataServiceController::ForeignObjectConflict(const CreateObject& create, const std::string& ns,
                                                          const json& dataservice, const absl::Status& status) {
  if (!absl::IsAlreadyExists(status)) return status;
  // AlreadyExists: ours (a create whose answer was lost, a stale cache) is fine — its watch event
  // arrives; anything else is a conflict to report and retry.
  absl::StatusOr<json> existing = client_->Get(RefForKind(create.kind), ns, create.name);
  if (!existing.ok()) {
    if (absl::IsNotFound(existing.status())) {
      return absl::AbortedError(absl::StrCat(create.kind, " ", create.name, " existed and is gone now; retrying"));
    }
    return existing.status();
  }
  const std::optional<json> controller = kube::ControllerOf(*existing);
  const std::string uid = kube::UidOf(dataservice);
  if (controller && controller->value("uid", "") == uid) return absl::OkStatus();
  const bool terminating = existing->contains("metadata") && (*existing)["metadata"].contains("deletionTimestamp");
  return absl::AlreadyExistsError(absl::StrCat(
      create.kind, " ", create.name, " already exists and is not controlled by this DataService (",
      controller ? absl::StrCat("controller: ", controller->value("kind", "?"), " ", controller->value("name", "?"),
                                " uid ", controller->value("uid", "?"))
                 : std::string("no controller"),
      terminating ? "; it is terminating" : "",
      "); retrying with backoff until it is gone — delete or rename it if it is not going away"));
}

absl::Status DataServiceController::Execute(const std::string& key, const json& dataservice,
                                            const ReconcileResult& result, std::optional<absl::Duration>* status_due) {
  const std::string ns = kube::NamespaceOf(dataservice);
  const std::string name = kube::NameOf(dataservice);
  absl::Status first_error;
  auto fail = [&](const absl::Status& s, const std::string& what, const char* operation) {
    if (options_.metrics != nullptr) options_.metrics->CountApiError(operation);
    Warn(what, key, s);
    if (first_error.ok()) first_error = s;
  };
  // Events announcing successful object actions are merged per (type, reason, action): one Event
  // for "deleted remote worker pods ds-worker-remote-[3-5]" rather than three (RenderEvents; split
  // into several only when one note would be too long, so every pod stays named).
  std::vector<EmitEvent> announced;
  auto announce = [&](const EmitEvent& e) {
    if (e.reason.empty()) return;  // an action without an event of its own
    announced.push_back(e);
  };
  bool objects_changed = false;  // a create or delete went through: its watch event brings a new pass
  const UpdateStatus* status_update = nullptr;
  kube::WriteOptions write;
  write.field_manager = options_.field_manager;

  for (const Action& action : result.actions) {
    if (const auto* c = std::get_if<CreateObject>(&action)) {
      if (NamespaceTerminating(ns)) {  // learnt from an earlier create of this pass
        absl::MutexLock lock(&mu_);
        expectations_.CreateFailed(key, ObjectKey(c->kind, c->name));
        continue;
      }
      absl::StatusOr<json> created = client_->Create(RefForKind(c->kind), ns, c->manifest, write);
      if (!created.ok() && kube::HasStatusCause(created.status(), "NamespaceTerminating")) {
        // The namespace is being deleted: nothing can be created in it any more, and that is not
        // an error to retry (nor a Warning: Events are creates too).
        {
          absl::MutexLock lock(&mu_);
          expectations_.CreateFailed(key, ObjectKey(c->kind, c->name));
        }
        MarkNamespaceTerminating(ns, key, created.status());
        continue;
      }
      if (created.ok()) {
        SLUICE_LOG(Info, "created").With("dataservice", key).With("kind", c->kind).With("name", c->name);
        objects_changed = true;
        announce(c->event);
      } else if (absl::Status conflict = ForeignObjectConflict(*c, ns, dataservice, created.status()); !conflict.ok()) {
        // Not created. Either an error, or the name is taken by an object this DataService does
        // not control (a previous DataService of the same name still terminating, or someone
        // else's): the cache would never show ours, so the expectation must not wait for it.
        {
          absl::MutexLock lock(&mu_);
          expectations_.CreateFailed(key, ObjectKey(c->kind, c->name));
        }
        Emit(dataservice, EmitEvent{"Warning", "FailedCreate", "Create",
                                    absl::StrCat("creating ", c->kind, " ", c->name, ": ", conflict.message())});
        fail(conflict, absl::StrCat("create ", c->kind, " ", c->name), "create");
      }
    } else if (const auto* p = std::get_if<PatchObject>(&action)) {
      absl::StatusOr<json> patched =
          client_->Patch(RefForKind(p->kind), ns, p->name, kube::PatchType::kMerge, p->merge_patch, write);
      if (patched.ok()) {
        announce(p->event);
      } else {
        fail(patched.status(), absl::StrCat("patch ", p->kind, " ", p->name), "patch");
      }
    } else if (const auto* d = std::get_if<DeleteObject>(&action)) {
      kube::DeleteOptions opts;
      opts.precondition_uid = d->uid;
      absl::StatusOr<json> deleted = client_->Delete(RefForKind(d->kind), ns, d->name, opts);
      if (deleted.ok()) {
        SLUICE_LOG(Info, "deleted").With("dataservice", key).With("kind", d->kind).With("name", d->name)
            .With("reason", d->reason);
        objects_changed = true;
        announce(d->event);
        if (!d->drain_outcome.empty() && options_.metrics != nullptr) {
          options_.metrics->CountScaleDownDrain(d->drain_outcome == "drained");
        }
      } else if (absl::IsNotFound(deleted.status())) {
        absl::MutexLock lock(&mu_);
        expectations_.DeletionObserved(key, ObjectKey(d->kind, d->name));
      } else {
        {
          absl::MutexLock lock(&mu_);
          expectations_.DeleteFailed(key, ObjectKey(d->kind, d->name));
        }
        Emit(dataservice, EmitEvent{"Warning", "FailedDelete", "Delete",
                                    absl::StrCat("deleting ", d->kind, " ", d->name, ": ", deleted.status().message())});
        fail(deleted.status(), absl::StrCat("delete ", d->kind, " ", d->name), "delete");
      }
    } else if (const auto* s = std::get_if<UpdateStatus>(&action)) {
      status_update = s;  // written last, once we know what else this pass changed
    } else if (const auto* e = std::get_if<EmitEvent>(&action)) {
      for (const EmitEvent& rendered : RenderEvents({*e})) Emit(dataservice, rendered);
    } else if (const auto* af = std::get_if<AddFinalizer>(&action)) {
      // Guarded by a test of the current list (null when absent), as kube::AddFinalizer does.
      absl::StatusOr<json> r = kube::AddFinalizer(*client_, DataServices(), dataservice, af->finalizer);
      if (!r.ok()) fail(r.status(), "add finalizer", "finalizer");
    } else if (const auto* rf = std::get_if<RemoveFinalizer>(&action)) {
      absl::StatusOr<json> r = kube::RemoveFinalizer(*client_, DataServices(), dataservice, rf->finalizer);
      if (!r.ok() && !absl::IsNotFound(r.status())) fail(r.status(), "remove finalizer", "finalizer");
    } else if (const auto* drain = std::get_if<DrainWorkers>(&action)) {
      if (drain->scope == DrainScope::kScaleDown) {
        RunScaleDownDrainRound(key, *drain);
      } else {
        RunDrainRound(key, *drain);
      }
    } else if (const auto* read = std::get_if<ReadAutoOrder>(&action)) {
      ReadAutoOrderOf(key, *read);
    }
  }
  for (const EmitEvent& e : RenderEvents(announced)) Emit(dataservice, e);

  if (status_update != nullptr) {
    // Status coalescing. The status was computed from the caches before this pass's creates and
    // deletes: when any went through, their watch events bring a new pass that writes a current
    // status, so this one is skipped. A change of counts or messages only waits until the
    // coalescing window since the last write has passed (the key is requeued for then).
    const absl::Time now = options_.clock->Now();
    bool write_now = true;
    if (objects_changed && first_error.ok()) {
      write_now = false;
    } else if (!status_update->significant && options_.status_coalesce_window > absl::ZeroDuration()) {
      absl::MutexLock lock(&mu_);
      auto last = status_written_.find(key);
      if (last != status_written_.end() && now < last->second + options_.status_coalesce_window) {
        write_now = false;
        *status_due = last->second + options_.status_coalesce_window - now;
      }
    }
    if (write_now) {
      absl::StatusOr<json> patched = kube::PatchStatus(*client_, DataServices(), ns, name, status_update->status);
      if (patched.ok()) {
        absl::MutexLock lock(&mu_);
        status_written_[key] = now;
      } else {
        fail(patched.status(), "status update", "status");
      }
    }
  }
  return first_error;
}

}  // namespace sluice::op
