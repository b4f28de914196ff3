#include "operator/reconciler.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/capacity_input.h"
#include "operator/event_notes.h"
#include "operator/manifests.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

// One of the DataService's worker pods, classified.
struct WorkerPod {
  const ObservedPod* pod = nullptr;
  Pool pool = Pool::kRemote;
  std::string node;  // local workers: the consumer node it is pinned to
  bool up_to_date = false;
};

EmitEvent Event(std::string type, std::string reason, std::string action, std::string note,
                std::vector<std::string> names = {}) {
  return EmitEvent{std::move(type), std::move(reason), std::move(action), std::move(note), std::move(names)};
}

bool OwnedBy(const std::string& controller_uid, const ObjectMeta& meta) { return controller_uid == meta.uid; }

bool IsWorker(const ObservedPod& pod) {
  auto it = pod.labels.find(kLabelRole);
  return it != pod.labels.end() && it->second == "worker";
}

bool Active(const ObservedPod& pod) { return !pod.terminating && !pod.Finished(); }

// "Unschedulable: 0/3 nodes are available: ..." (the PodScheduled=False condition of a pending pod).
std::string SchedulingProblem(const ObservedPod& pod) {
  return pod.unschedulable_message.empty() ? pod.unschedulable_reason
                                           : absl::StrCat(pod.unschedulable_reason, ": ", pod.unschedulable_message);
}

// The worker pod counts as the status reports them.
struct WorkerCounts {
  int64_t active = 0, ready = 0, local = 0, remote = 0;
};

// `excluded`: pods a scale-down is draining (leaving, so not counted).
WorkerCounts CountWorkers(const std::vector<const ObservedPod*>& pods, const DataService& ds,
                          const std::set<std::string>& excluded = {}) {
  WorkerCounts c;
  for (const ObservedPod* p : pods) {
    if (!IsWorker(*p) || !Active(*p) || excluded.count(p->name)) continue;
    ++c.active;
    if (p->ready) ++c.ready;
    auto place = p->labels.find(kLabelPlacement);
    bool local = place != p->labels.end() ? place->second == "local" : [&] {
      auto parsed = ParseWorkerPodName(ds, p->name);
      return parsed.has_value() && parsed->first == Pool::kLocal;
    }();
    ++(local ? c.local : c.remote);
  }
  return c;
}

void ApplyCounts(const WorkerCounts& c, DataServiceStatus* status) {
  status->replicas = c.active;
  status->ready_replicas = c.ready;
  status->local_replicas = c.local;
  status->remote_replicas = c.remote;
}

Condition MakeCondition(const std::string& type, bool value, std::string reason, std::string message,
                        int64_t generation) {
  Condition c;
  c.type = type;
  c.status = value ? "True" : "False";
  c.reason = std::move(reason);
  c.message = std::move(message);
  c.observed_generation = generation;
  return c;
}

bool ConditionIs(const DataServiceStatus& status, const std::string& type, const std::string& value,
                 const std::string& reason) {
  const Condition* c = status.FindCondition(type);
  return c != nullptr && c->status == value && c->reason == reason;
}

// Scale-down order: not-ready before ready (either pool), remote before local, outdated before
// up-to-date, newest before oldest.
bool DeleteFirst(const WorkerPod& a, const WorkerPod& b) {
  if (a.pod->ready != b.pod->ready) return !a.pod->ready;
  if (a.pool != b.pool) return a.pool == Pool::kRemote;
  if (a.up_to_date != b.up_to_date) return !a.up_to_date;
  absl::Time ta = a.pod->creation_timestamp.value_or(absl::InfiniteFuture());
  absl::Time tb = b.pod->creation_timestamp.value_or(absl::InfiniteFuture());
  if (ta != tb) return ta > tb;
  return a.pod->name > b.pod->name;
}

// ---- Deletion: drain, then release the finalizer ----

ReconcileResult ReconcileDeletion(const ReconcileInput& in, const ObjectMeta& meta,
                                  const std::vector<const ObservedPod*>& pods) {
  ReconcileResult result;
  if (!meta.HasFinalizer(kDrainFinalizer)) return result;  // nothing of ours holds the object
  DataService named;
  named.metadata = meta;
  std::vector<const ObservedPod*> worker_pods;
  const ObservedPod* dispatcher = nullptr;
  for (const ObservedPod* p : pods) {
    if (IsWorker(*p) && Active(*p)) worker_pods.push_back(p);
    if (p->name == DispatcherPodName(named) && Active(*p) && p->ready) dispatcher = p;
  }
  std::sort(worker_pods.begin(), worker_pods.end(),
            [](const ObservedPod* a, const ObservedPod* b) { return a->name < b->name; });
  std::vector<std::string> workers;
  for (const ObservedPod* p : worker_pods) workers.push_back(p->name);
  const bool dispatcher_ready = dispatcher != nullptr;
  absl::StatusOr<DataService> ds = ParseDataService(in.dataservice);
  absl::Time deadline = *meta.deletion_timestamp + in.options.drain_timeout;

  if (meta.HasFinalizer(kForegroundDeletionFinalizer)) {
    // Foreground deletion: the garbage collector deletes every dependent now, whatever finalizers
    // hold this object, and a deleted pod's containers are stopped by its kubelet whatever
    // finalizers hold the pod. Nothing the operator can set keeps the workers running for a drain.
    // (The workers counted are those not yet ended, the collector's deletes already seen or not.)
    int64_t going = 0;
    for (const ObservedPod* p : pods) going += IsWorker(*p) && !p->Finished();
    result.actions.push_back(Event(
        "Warning", "DrainSkipped", "Drain",
        absl::StrCat("deleted with propagationPolicy Foreground (kubectl delete --cascade=foreground; Argo CD's "
                     "default): garbage collection deletes the dispatcher and the ",
                     going > 0 ? absl::StrCat(going, " ") : "",
                     "workers together with the DataService, so they cannot be drained through the dispatcher; "
                     "each worker stops on SIGTERM with its own short shutdown drain, and readers may lose what was "
                     "not yet delivered. Delete with propagationPolicy Background (kubectl's default) to drain first; "
                     "releasing the DataService")));
  } else if (workers.empty() && meta.HasFinalizer(kOrphanFinalizer)) {
    result.actions.push_back(Event("Normal", "Drained", "Drain",
                                   "deleted with propagationPolicy Orphan: its pods keep running without an owner and "
                                   "are not drained; releasing the DataService"));
  } else if (workers.empty()) {
    result.actions.push_back(Event("Normal", "Drained", "Drain", "no workers left to drain; releasing the DataService"));
  } else if (in.drain.has_value() && in.drain->complete) {
    result.actions.push_back(Event("Normal", "Drained", "Drain",
                                   absl::StrCat("drained ", workers.size(), " workers",
                                                in.drain->message.empty() ? "" : ": ", in.drain->message)));
  } else if (in.now >= deadline) {
    result.actions.push_back(Event("Warning", "DrainTimedOut", "Drain",
                                   absl::StrCat("workers not drained after ",
                                                absl::FormatDuration(in.options.drain_timeout),
                                                "; releasing the DataService, workers stop on SIGTERM")));
  } else if (!ds.ok() || !dispatcher_ready) {
    result.actions.push_back(Event("Warning", "DrainSkipped", "Drain",
                                   "the dispatcher is not ready, so workers cannot be drained through it; "
                                   "releasing the DataService, workers stop on SIGTERM"));
  } else {
    if (!in.drain.has_value()) {
      result.actions.push_back(Event("Normal", "DrainStarted", "Drain",
                                     absl::StrCat("draining ", workers.size(), " workers before deletion")));
    }
    DrainWorkers drain;
    drain.dispatcher_address = DispatcherAddress(*ds);
    if (!dispatcher->pod_ip.empty()) {
      drain.dispatcher_endpoint = absl::StrCat(dispatcher->pod_ip, ":", ds->spec.dispatcher.port);
    }
    drain.workers = workers;
    for (const ObservedPod* p : worker_pods) {
      if (!p->pod_ip.empty()) drain.worker_addresses.push_back(absl::StrCat(p->pod_ip, ":", ds->spec.workers.port));
    }
    result.actions.push_back(std::move(drain));
    result.requeue_after = std::min(in.options.drain_poll_interval, deadline - in.now);
    return result;
  }
  result.actions.push_back(RemoveFinalizer{});
  return result;
}

// ---- Invalid spec: Degraded, nothing created or deleted ----

ReconcileResult ReconcileInvalid(const ReconcileInput& in, const ObjectMeta& meta,
                                 const std::vector<const ObservedPod*>& pods, const std::string& problem) {
  ReconcileResult result;
  DataServiceStatus old_status = ParseDataServiceStatus(in.dataservice);
  DataServiceStatus status = old_status;
  DataService named;
  named.metadata = meta;
  status.observed_generation = meta.generation;
  ApplyCounts(CountWorkers(pods, named), &status);
  std::string message = absl::StrCat("invalid spec, nothing is created or deleted until it is fixed: ", problem);
  SetCondition(&status.conditions, MakeCondition(kConditionDegraded, true, "InvalidSpec", message, meta.generation),
               in.now);
  SetCondition(&status.conditions,
               MakeCondition(kConditionReady, false, "InvalidSpec", "the spec is invalid; see the Degraded condition",
                             meta.generation),
               in.now);
  const Condition* before = old_status.FindCondition(kConditionDegraded);
  if (before == nullptr || before->status != "True" || before->message != message) {
    result.actions.push_back(Event("Warning", "InvalidSpec", "Validate", message));
  }
  if (!(status == old_status)) result.actions.push_back(UpdateStatus{StatusToJson(status)});
  return result;
}

// ---- The placement split ----

autoscaler::CapacitySplitInput SplitInputFor(const DataService& ds, int64_t capacity) {
  return {PlacementOf(ds.spec.placement.policy), ds.spec.workers.replicas, ds.spec.workers.local, capacity};
}

// The plan of `split` (by the placement library's rule), with the ScalingLimited reason and message.
void ApplySplit(const DataService& ds, const autoscaler::CapacitySplit& split, WorkerPlan* plan) {
  plan->desired_local = split.local;
  plan->desired_remote = split.remote;
  plan->limited_reason = autoscaler::CapacityLimitName(split.limit);
  plan->limited_message.clear();
  const int64_t cap = plan->capacity.total_workers;
  switch (split.limit) {
    case autoscaler::CapacityLimit::kNone:
      break;
    case autoscaler::CapacityLimit::kLocalCapacityExhausted:
      plan->limited_message = absl::StrCat("policy LocalOnly: only ", cap, " of ", split.wanted_local,
                                           " workers fit on the consumer nodes at localCpuFraction ",
                                           ds.spec.placement.local_cpu_fraction);
      break;
    case autoscaler::CapacityLimit::kLocalSplitCapped:
      plan->limited_message = absl::StrCat("workers.local asks for ", split.wanted_local,
                                           " local workers but the consumer nodes fit ", cap, "; running ",
                                           split.remote, " remote");
      break;
  }
}

WorkerPlan PlanSplit(const DataService& ds, autoscaler::LocalCapacity capacity) {
  WorkerPlan plan;
  plan.capacity = std::move(capacity);
  ApplySplit(ds, autoscaler::SplitByCapacity(SplitInputFor(ds, plan.capacity.total_workers)), &plan);
  return plan;
}

// ---- The normal path ----

class Planner {
 public:
  Planner(const ReconcileInput& in, const DataService& ds, std::vector<const ObservedPod*> pods)
      : in_(in), ds_(ds), pods_(std::move(pods)) {}

  ReconcileResult Run();

 private:
  void CheckExpectations();
  void PlanDispatcher();
  void PlanWorkers();
  void Delete(const WorkerPod& w, const std::string& reason, std::set<std::string>* deleted);
  // A scale-down's removal: drained through the dispatcher first when it can be (CanDrain), else
  // deleted at once.
  void Remove(const WorkerPod& w, const std::string& reason, std::set<std::string>* deleted);
  bool DispatcherServing() const;
  bool CanDrain(const WorkerPod& w) const;
  // The scale-down drains of this pass: those that go on (or start) get one DrainWorkers action.
  void PlanDrains();
  std::string FreeName(Pool pool);
  DataServiceStatus BuildStatus() const;

  const ReconcileInput& in_;
  const DataService& ds_;
  std::vector<const ObservedPod*> pods_;
  ReconcileResult result_;
  bool blocked_ = false;
  const ObservedPod* dispatcher_ = nullptr;
  const ObservedService* service_ = nullptr;
  const ObservedClaim* claim_ = nullptr;
  std::vector<WorkerPod> workers_;       // active (not terminating, not finished)
  std::vector<WorkerPod> finished_;      // Succeeded/Failed, not yet deleted
  std::set<std::string> taken_names_;    // every owned pod name, pending creates, names created now
  std::vector<Action> object_actions_;   // creates and deletes, emitted after the scale event
  // Scale-down drains: pods in in_.pod_drains (started by earlier passes), the names of every pod
  // draining (those and the ones starting now), the ones kept this pass (neither drained nor timed
  // out), the ones starting now (with their reasons), and those deleted after their drain.
  std::vector<WorkerPod> draining_;
  std::set<std::string> draining_names_;
  std::vector<WorkerPod> drain_kept_;
  std::vector<std::pair<WorkerPod, std::string>> new_drains_;
  int64_t drain_ended_ = 0;
  std::optional<DrainWorkers> drain_action_;
};

ReconcileResult Planner::Run() {
  const std::string dispatcher_name = DispatcherPodName(ds_);
  const std::string local_hash = WorkerTemplateHash(ds_, Pool::kLocal);
  const std::string remote_hash = WorkerTemplateHash(ds_, Pool::kRemote);
  for (const ObservedPod* p : pods_) {
    taken_names_.insert(p->name);
    if (p->name == dispatcher_name) {
      dispatcher_ = p;
      continue;
    }
    if (!IsWorker(*p)) continue;
    WorkerPod w;
    w.pod = p;
    auto place = p->labels.find(kLabelPlacement);
    if (place != p->labels.end()) {
      w.pool = place->second == "local" ? Pool::kLocal : Pool::kRemote;
    } else if (auto parsed = ParseWorkerPodName(ds_, p->name)) {
      w.pool = parsed->first;
    }
    if (w.pool == Pool::kLocal) {
      auto note = p->annotations.find(kAnnotationNode);
      w.node = !p->node_name.empty() ? p->node_name
               : !p->affinity_node.empty() ? p->affinity_node
               : note != p->annotations.end() ? note->second
                                              : "";
    }
    auto hash = p->labels.find(kLabelTemplateHash);
    w.up_to_date = hash != p->labels.end() && hash->second == (w.pool == Pool::kLocal ? local_hash : remote_hash);
    if (p->terminating) continue;
    (p->Finished() ? finished_ : workers_).push_back(w);
  }
  for (const WorkerPod& w : workers_) {
    if (in_.pod_drains.count(w.pod->uid)) {
      draining_.push_back(w);
      draining_names_.insert(w.pod->name);
    }
  }
  for (const ObservedService& s : in_.owned_services) {
    if (s.name == DispatcherServiceName(ds_) && OwnedBy(s.controller_uid, ds_.metadata)) service_ = &s;
  }
  for (const ObservedClaim& c : in_.owned_claims) {
    if (c.name == JournalClaimName(ds_) && OwnedBy(c.controller_uid, ds_.metadata)) claim_ = &c;
  }
  for (const std::string& key : in_.expectations.creates) {
    const std::string prefix = "Pod/";
    if (key.rfind(prefix, 0) == 0) taken_names_.insert(key.substr(prefix.size()));
  }

  std::vector<ObservedPod> owned_copy;
  for (const ObservedPod* p : pods_) owned_copy.push_back(*p);
  result_.plan = PlanSplit(ds_, autoscaler::ComputeLocalCapacity(CapacityInputFor(
                                    ds_, in_.nodes, in_.consumer_pods, in_.cpu_requested_by_node, owned_copy)));

  if (!ds_.metadata.HasFinalizer(kDrainFinalizer)) result_.actions.push_back(AddFinalizer{});
  CheckExpectations();
  if (!blocked_) {
    PlanDispatcher();
    PlanWorkers();
  }
  for (Action& a : object_actions_) result_.actions.push_back(std::move(a));
  if (drain_action_.has_value()) result_.actions.push_back(*std::move(drain_action_));
  // AutoOrder: once the dispatcher pod serves, ask it what it did to the pipeline (once per pod).
  if (ds_.spec.auto_order.enabled && dispatcher_ != nullptr && Active(*dispatcher_) && dispatcher_->ready &&
      !dispatcher_->pod_ip.empty() && (!in_.auto_order.has_value() || in_.auto_order->dispatcher_uid != dispatcher_->uid)) {
    result_.actions.push_back(ReadAutoOrder{DispatcherAddress(ds_),
                                            absl::StrCat(dispatcher_->pod_ip, ":", ds_.spec.dispatcher.port),
                                            dispatcher_->uid});
  }

  DataServiceStatus status = BuildStatus();
  if (!result_.plan.limited_reason.empty() &&
      !ConditionIs(ds_.status, kConditionScalingLimited, "True", result_.plan.limited_reason)) {
    result_.actions.push_back(Event("Warning", "ScalingLimited", "Scale", result_.plan.limited_message));
  }
  if (!(status == ds_.status)) {
    result_.actions.push_back(UpdateStatus{StatusToJson(status), IsSignificantStatusChange(ds_.status, status)});
  }
  return std::move(result_);
}

void Planner::CheckExpectations() {
  const PendingOperations& pending = in_.expectations;
  if (pending.empty()) return;
  std::set<std::string> observed;       // every owned object
  std::set<std::string> still_present;  // owned objects not being deleted
  for (const ObservedPod* p : pods_) {
    observed.insert(ObjectKey("Pod", p->name));
    if (!p->terminating) still_present.insert(ObjectKey("Pod", p->name));
  }
  for (const ObservedService& s : in_.owned_services) {
    observed.insert(ObjectKey("Service", s.name));
    still_present.insert(ObjectKey("Service", s.name));
  }
  for (const ObservedClaim& c : in_.owned_claims) {
    observed.insert(ObjectKey("PersistentVolumeClaim", c.name));
    still_present.insert(ObjectKey("PersistentVolumeClaim", c.name));
  }
  std::vector<std::string> unsatisfied;
  for (const std::string& key : pending.creates) {
    if (!observed.count(key)) unsatisfied.push_back(absl::StrCat("create ", key));
  }
  for (const std::string& key : pending.deletes) {
    if (still_present.count(key)) unsatisfied.push_back(absl::StrCat("delete ", key));
  }
  if (unsatisfied.empty()) {
    result_.expectations = ExpectationsState::kSatisfied;
    return;
  }
  absl::Time expiry = pending.recorded_at + in_.options.expectations_timeout;
  if (in_.now < expiry) {
    result_.expectations = ExpectationsState::kPending;
    blocked_ = true;
    result_.requeue_after = expiry - in_.now;
    return;
  }
  result_.expectations = ExpectationsState::kExpired;
  result_.actions.push_back(Event("Warning", "ExpectationsExpired", "Reconcile",
                                  absl::StrCat("gave up waiting to observe: ", absl::StrJoin(unsatisfied, ", "))));
}

void Planner::PlanDispatcher() {
  if (ds_.spec.dispatcher.journal.has_value() && claim_ == nullptr) {
    std::string name = JournalClaimName(ds_);
    object_actions_.push_back(CreateObject{
        "PersistentVolumeClaim", name, BuildJournalClaim(ds_),
        Event("Normal", "CreatedJournalClaim", "Create",
              absl::StrCat("created persistent volume claim ", name, " (", ds_.spec.dispatcher.journal->size,
                           ") for the dispatcher journal"))});
  }
  json service = BuildDispatcherService(ds_);
  if (service_ == nullptr) {
    object_actions_.push_back(CreateObject{
        "Service", DispatcherServiceName(ds_), service,
        Event("Normal", "CreatedService", "Create", absl::StrCat("created service ", DispatcherServiceName(ds_)))});
  } else {
    std::vector<ServicePort> want;
    for (const json& p : service["spec"]["ports"]) {
      want.push_back(ServicePort{p["name"].get<std::string>(), p["port"].get<int64_t>(), p["targetPort"].get<int64_t>()});
    }
    if (service_->ports != want) {
      object_actions_.push_back(PatchObject{
          "Service", service_->name, json{{"spec", {{"ports", service["spec"]["ports"]}}}},
          Event("Normal", "UpdatedService", "Update",
                absl::StrCat("updated the ports of service ", service_->name, " to match the spec"))});
    }
  }
  const std::string name = DispatcherPodName(ds_);
  if (dispatcher_ == nullptr) {
    object_actions_.push_back(
        CreateObject{"Pod", name, BuildDispatcherPod(ds_),
                     Event("Normal", "CreatedDispatcher", "Create", absl::StrCat("created dispatcher pod ", name))});
    return;
  }
  if (dispatcher_->terminating) return;  // recreated once it is gone (the name is still taken)
  std::string reason;
  if (dispatcher_->Finished()) {
    reason = absl::StrCat("the dispatcher pod ended (phase ", dispatcher_->phase, ")");
  } else {
    auto hash = dispatcher_->labels.find(kLabelTemplateHash);
    if (hash == dispatcher_->labels.end() || hash->second != DispatcherTemplateHash(ds_)) {
      reason = "the dispatcher spec changed";
    }
  }
  if (!reason.empty()) {
    object_actions_.push_back(DeleteObject{
        "Pod", name, dispatcher_->uid, reason,
        Event("Normal", "DeletedDispatcher", "Delete", absl::StrCat("deleted dispatcher pod ", name, ": ", reason, "; it is recreated"))});
  }
}

void Planner::Delete(const WorkerPod& w, const std::string& reason, std::set<std::string>* deleted) {
  deleted->insert(w.pod->name);
  object_actions_.push_back(DeleteObject{
      "Pod", w.pod->name, w.pod->uid, reason,
      Event("Normal", "DeletedWorker", "Delete", absl::StrCat("deleted ", PoolName(w.pool), " worker pod{s} {}: ", reason),
            {w.pod->name})});
}

bool Planner::DispatcherServing() const {
  return dispatcher_ != nullptr && Active(*dispatcher_) && dispatcher_->ready && !dispatcher_->pod_ip.empty();
}

bool Planner::CanDrain(const WorkerPod& w) const {
  return in_.options.scale_down_drain_timeout > absl::ZeroDuration() && DispatcherServing() &&
         w.pod->phase == "Running" && w.pod->ready && !w.pod->pod_ip.empty();
}

void Planner::Remove(const WorkerPod& w, const std::string& reason, std::set<std::string>* deleted) {
  if (!CanDrain(w)) {
    Delete(w, reason, deleted);
    return;
  }
  deleted->insert(w.pod->name);
  draining_names_.insert(w.pod->name);
  new_drains_.emplace_back(w, reason);
}

void Planner::PlanDrains() {
  const absl::Duration timeout = in_.options.scale_down_drain_timeout;
  std::vector<std::pair<const WorkerPod*, absl::Time>> going;  // with each one's deadline
  for (const WorkerPod& w : drain_kept_) going.emplace_back(&w, in_.pod_drains.at(w.pod->uid).started + timeout);
  for (const auto& [w, reason] : new_drains_) going.emplace_back(&w, in_.now + timeout);
  if (going.empty()) return;
  if (!new_drains_.empty()) {
    std::vector<EmitEvent> started;
    for (const auto& [w, reason] : new_drains_) {
      started.push_back(Event("Normal", "DrainingWorker", "Drain",
                              absl::StrCat("draining worker pod{s} {} through the dispatcher, deleted once drained "
                                           "(at most ", absl::FormatDuration(timeout), "): ", reason),
                              {w.pod->name}));
    }
    for (EmitEvent& e : RenderEvents(started)) result_.actions.push_back(std::move(e));
  }
  // The dispatcher is asked again every round (idempotent; a dispatcher restarted without a
  // journal forgot the drain). Without a serving dispatcher the drains wait for it or their deadline.
  if (DispatcherServing()) {
    DrainWorkers drain;
    drain.scope = DrainScope::kScaleDown;
    drain.dispatcher_address = DispatcherAddress(ds_);
    drain.dispatcher_endpoint = absl::StrCat(dispatcher_->pod_ip, ":", ds_.spec.dispatcher.port);
    for (const auto& [w, deadline] : going) {
      auto known = in_.pod_drains.find(w->pod->uid);
      drain.workers.push_back(w->pod->name);
      drain.worker_uids.push_back(w->pod->uid);
      drain.worker_addresses.push_back(known != in_.pod_drains.end() && !known->second.address.empty()
                                           ? known->second.address
                                           : absl::StrCat(w->pod->pod_ip, ":", ds_.spec.workers.port));
    }
    drain_action_ = std::move(drain);
  }
  absl::Duration next = in_.options.drain_poll_interval;
  for (const auto& [w, deadline] : going) next = std::min(next, std::max(deadline - in_.now, absl::ZeroDuration()));
  result_.requeue_after = std::min(result_.requeue_after.value_or(absl::InfiniteDuration()), next);
}

std::string Planner::FreeName(Pool pool) {
  std::set<std::string> listed(ds_.spec.workers.workers_to_delete.begin(), ds_.spec.workers.workers_to_delete.end());
  for (int64_t ordinal = 0;; ++ordinal) {
    std::string name = WorkerPodName(ds_, pool, ordinal);
    if (taken_names_.count(name) || listed.count(name)) continue;
    taken_names_.insert(name);
    return name;
  }
}

void Planner::PlanWorkers() {
  const WorkersSpec& spec = ds_.spec.workers;
  const WorkerPlan& plan = result_.plan;
  std::set<std::string> deleted;
  auto remaining = [&](std::optional<Pool> pool) {
    std::vector<WorkerPod> out;
    for (const WorkerPod& w : workers_) {
      if (deleted.count(w.pod->name)) continue;
      if (pool.has_value() && w.pool != *pool) continue;
      out.push_back(w);
    }
    return out;
  };
  // Worker counts before this pass (pods that ended count: replacing them is not scaling; pods
  // being drained do not: they already left).
  int64_t before_total = 0;
  int64_t before_local = 0;
  for (const std::vector<WorkerPod>* list : {&workers_, &finished_}) {
    for (const WorkerPod& w : *list) {
      if (list == &workers_ && draining_names_.count(w.pod->name)) continue;
      ++before_total;
      before_local += w.pool == Pool::kLocal;
    }
  }

  // 0. Pods a scale-down is draining leave whatever the spec says now (a drain cannot be undone;
  //    if more workers are wanted again, new pods are created): each is deleted once the dispatcher
  //    reports it drained, or once its drain timed out (it then hands its input back on SIGTERM).
  for (const WorkerPod& w : draining_) {
    deleted.insert(w.pod->name);
    const PodDrain& drain = in_.pod_drains.at(w.pod->uid);
    const std::string pool = PoolName(w.pool);
    if (drain.answered && drain.drained) {
      ++drain_ended_;
      object_actions_.push_back(DeleteObject{
          "Pod", w.pod->name, w.pod->uid, absl::StrCat("drained through the dispatcher: ", drain.message),
          Event("Normal", "DrainedWorker", "Delete",
                absl::StrCat("deleted drained ", pool, " worker pod{s} {}: the dispatcher reports nothing left to "
                             "deliver or hand back"),
                {w.pod->name}),
          "drained"});
    } else if (in_.now >= drain.started + in_.options.scale_down_drain_timeout) {
      ++drain_ended_;
      const std::string timeout = absl::FormatDuration(in_.options.scale_down_drain_timeout);
      object_actions_.push_back(DeleteObject{
          "Pod", w.pod->name, w.pod->uid,
          absl::StrCat("not drained after ", timeout, drain.message.empty() ? "" : ": ", drain.message),
          Event("Warning", "WorkerDrainTimedOut", "Delete",
                absl::StrCat("deleted ", pool, " worker pod{s} {} not drained after ", timeout,
                             drain.message.empty() ? "" : absl::StrCat(" (", drain.message, ")"),
                             "; each falls back to the SIGTERM hand-back: splits go back at the readers' positions "
                             "and what clients have not read within the pod's shutdown budget is lost"),
                {w.pod->name}),
          "timed_out"});
    } else {
      drain_kept_.push_back(w);
    }
  }

  // 1. Pods that ended are replaced.
  for (const WorkerPod& w : finished_) {
    Delete(w, absl::StrCat("the pod ended (phase ", w.pod->phase, ")"), &deleted);
  }
  // 2. Pods the autoscaler named go first, whatever else happens.
  std::set<std::string> listed(spec.workers_to_delete.begin(), spec.workers_to_delete.end());
  for (const WorkerPod& w : workers_) {
    if (listed.count(w.pod->name) && !deleted.count(w.pod->name)) {
      Remove(w, "listed in spec.workers.workersToDelete", &deleted);
    }
  }
  // Hybrid with the split left to the operator (no workers.local): the listed pods are the scale
  // down. Their pools keep what is left rather than being rebalanced in the same breath (which
  // would delete a pod nobody named and create another); only a shortfall is filled, local first
  // (autoscaler::SplitAfterNamedRemovals; the plain split in every other case).
  if (!listed.empty()) {
    ApplySplit(ds_,
               autoscaler::SplitAfterNamedRemovals(SplitInputFor(ds_, plan.capacity.total_workers),
                                                   static_cast<int64_t>(remaining(Pool::kLocal).size()),
                                                   static_cast<int64_t>(remaining(Pool::kRemote).size())),
               &result_.plan);
  }
  // 3. Local pods beyond what their node can take now (or on nodes that no longer run consumers).
  std::map<std::string, std::vector<WorkerPod>> by_node;
  for (const WorkerPod& w : remaining(Pool::kLocal)) by_node[w.node].push_back(w);
  for (auto& [node, pods] : by_node) {
    int64_t cap = node.empty() ? 0 : plan.capacity.WorkersOn(node);
    int64_t excess = static_cast<int64_t>(pods.size()) - cap;
    if (excess <= 0) continue;
    std::sort(pods.begin(), pods.end(), DeleteFirst);
    for (int64_t i = 0; i < excess; ++i) {
      Remove(pods[i],
             node.empty() ? std::string("the pod is not pinned to a consumer node")
                          : absl::StrCat("consumer node ", node, " has room for ", cap, " local workers now"),
             &deleted);
    }
  }
  // 4. Scale down. When there are more workers than planned, the surplus is picked across both
  //    pools in the order not-ready (either pool), remote, outdated, newest (DeleteFirst). A ready
  //    pod is only picked from a pool above its target: taking it from a pool at its target would
  //    only make step 6 create a replacement there. A not-ready pod is picked even from a pool at
  //    its target; the replacement (step 6) and the trim below happen in this same pass, so the
  //    next pass finds the total and both pools on target and does nothing — no oscillation.
  {
    std::vector<WorkerPod> pods = remaining(std::nullopt);
    const int64_t desired_total = plan.desired_local + plan.desired_remote;
    int64_t excess = static_cast<int64_t>(pods.size()) - desired_total;
    if (excess > 0) {
      std::sort(pods.begin(), pods.end(), DeleteFirst);
      std::map<Pool, int64_t> left{{Pool::kLocal, static_cast<int64_t>(remaining(Pool::kLocal).size())},
                                   {Pool::kRemote, static_cast<int64_t>(remaining(Pool::kRemote).size())}};
      for (const WorkerPod& w : pods) {
        if (excess == 0) break;
        const int64_t target = w.pool == Pool::kLocal ? plan.desired_local : plan.desired_remote;
        if (w.pod->ready && left[w.pool] <= target) continue;
        Remove(w,
               absl::StrCat("scaling down to ", desired_total, w.pod->ready ? " workers" : " workers (not ready: first to go)"),
               &deleted);
        --left[w.pool];
        --excess;
      }
    }
  }
  //    Then each pool is trimmed to its target (Hybrid moving workers between the pools: the
  //    deletes here and the creates of step 6 balance, so the total stays).
  for (auto [pool, target] : {std::pair<Pool, int64_t>{Pool::kLocal, plan.desired_local},
                              std::pair<Pool, int64_t>{Pool::kRemote, plan.desired_remote}}) {
    std::vector<WorkerPod> pods = remaining(pool);
    int64_t excess = static_cast<int64_t>(pods.size()) - target;
    if (excess <= 0) continue;
    std::sort(pods.begin(), pods.end(), DeleteFirst);
    for (int64_t i = 0; i < excess; ++i) {
      Remove(pods[i], absl::StrCat("scaling the ", PoolName(pool), " workers down to ", target), &deleted);
    }
  }
  // 5. Rolling replacement of pods with an outdated template: not-ready ones at once, ready ones
  //    only while fewer than maxUnavailable workers are unavailable.
  for (const WorkerPod& w : remaining(std::nullopt)) {
    if (!w.up_to_date && !w.pod->ready) Delete(w, "the worker spec changed (not ready, replaced at once)", &deleted);
  }
  {
    std::vector<WorkerPod> pods = remaining(std::nullopt);
    int64_t desired_total = plan.desired_local + plan.desired_remote;
    int64_t unavailable = std::max<int64_t>(0, desired_total - static_cast<int64_t>(pods.size()));
    for (const WorkerPod& w : pods) unavailable += !w.pod->ready;
    int64_t budget = spec.max_unavailable - unavailable;
    std::vector<WorkerPod> outdated;
    for (const WorkerPod& w : pods) {
      if (!w.up_to_date) outdated.push_back(w);
    }
    std::sort(outdated.begin(), outdated.end(), [](const WorkerPod& a, const WorkerPod& b) {
      absl::Time ta = a.pod->creation_timestamp.value_or(absl::InfinitePast());
      absl::Time tb = b.pod->creation_timestamp.value_or(absl::InfinitePast());
      return ta != tb ? ta < tb : a.pod->name < b.pod->name;
    });
    for (size_t i = 0; budget > 0 && i < outdated.size(); ++i, --budget) {
      Delete(outdated[i], "the worker spec changed (rolling replacement)", &deleted);
    }
  }
  // 6. Create what is missing: local pods on the consumer nodes with the most free slots.
  std::vector<Action> creates;
  {
    std::map<std::string, int64_t> used;
    for (const WorkerPod& w : remaining(Pool::kLocal)) ++used[w.node];
    int64_t deficit = plan.desired_local - static_cast<int64_t>(remaining(Pool::kLocal).size());
    for (; deficit > 0; --deficit) {
      const autoscaler::NodeCapacity* best = nullptr;
      int64_t best_free = 0;
      for (const autoscaler::NodeCapacity& n : plan.capacity.nodes) {
        if (!n.excluded_reason.empty()) continue;
        int64_t free = n.workers - used[n.node];
        if (free > best_free) {
          best = &n;
          best_free = free;
        }
      }
      if (best == nullptr) break;
      ++used[best->node];
      std::string name = FreeName(Pool::kLocal);
      int64_t ordinal = ParseWorkerPodName(ds_, name)->second;
      creates.push_back(CreateObject{
          "Pod", name, BuildWorkerPod(ds_, Pool::kLocal, ordinal, best->node),
          Event("Normal", "CreatedWorker", "Create",
                absl::StrCat("created local worker pod{s} {} on consumer node ", best->node), {name})});
    }
  }
  {
    int64_t deficit = plan.desired_remote - static_cast<int64_t>(remaining(Pool::kRemote).size());
    for (; deficit > 0; --deficit) {
      std::string name = FreeName(Pool::kRemote);
      int64_t ordinal = ParseWorkerPodName(ds_, name)->second;
      creates.push_back(CreateObject{"Pod", name, BuildWorkerPod(ds_, Pool::kRemote, ordinal, ""),
                                     Event("Normal", "CreatedWorker", "Create", "created remote worker pod{s} {}", {name})});
    }
  }
  // A scale-up is announced by the creates themselves: each carries the same ScalingUp event naming
  // its pod, and the controller emits the events of the creates that succeeded merged into one
  // (names as ordinal ranges, split over several events only if one note would be too long). So
  // the event names pods that exist, and one write announces them all. A scale-down (or a scale-up
  // that creates nothing this pass) is announced before the pod actions it explains; its deletes
  // name their pods in DeletedWorker events once done.
  const int64_t after_total = plan.desired_local + plan.desired_remote;
  if (after_total != before_total) {
    std::string note = absl::StrCat("workers ", before_total, " -> ", after_total, " (local ", before_local, " -> ",
                                    plan.desired_local, ", remote ", before_total - before_local, " -> ",
                                    plan.desired_remote, ")");
    if (after_total > before_total && !creates.empty()) {
      for (Action& a : creates) {
        auto& c = std::get<CreateObject>(a);
        c.event = Event("Normal", "ScalingUp", "Scale", absl::StrCat(note, "; created {}"), {c.name});
      }
    } else {
      result_.actions.push_back(Event("Normal", after_total > before_total ? "ScalingUp" : "ScalingDown", "Scale", note));
    }
  }
  for (Action& a : creates) object_actions_.push_back(std::move(a));
  PlanDrains();
}

DataServiceStatus Planner::BuildStatus() const {
  const int64_t gen = ds_.metadata.generation;
  DataServiceStatus status = ds_.status;
  status.observed_generation = gen;
  status.dispatcher_address = DispatcherAddress(ds_);
  status.selector = WorkerSelector(ds_);
  status.local_capacity = result_.plan.capacity.total_workers;
  ApplyCounts(CountWorkers(pods_, ds_, draining_names_), &status);
  status.draining_replicas = static_cast<int64_t>(draining_names_.size()) - drain_ended_;
  if (!ds_.spec.auto_order.enabled) {
    if (status.auto_order.has_value()) status.auto_order = AutoOrderStatus{"off", "unchanged", "", "", 0, 0, "spec.autoOrder.enabled is false"};
  } else if (in_.auto_order.has_value() && dispatcher_ != nullptr && in_.auto_order->dispatcher_uid == dispatcher_->uid) {
    status.auto_order = in_.auto_order->status;
  }

  // DispatcherReady.
  Condition dispatcher;
  if (dispatcher_ == nullptr) {
    dispatcher = MakeCondition(kConditionDispatcherReady, false, "DispatcherPodMissing", "the dispatcher pod does not exist yet", gen);
  } else if (!Active(*dispatcher_)) {
    dispatcher = MakeCondition(kConditionDispatcherReady, false, "DispatcherRestarting",
                               "the dispatcher pod is being replaced", gen);
  } else if (!dispatcher_->ready && !dispatcher_->unschedulable_reason.empty()) {
    // The scheduler's own words (PodScheduled=False), e.g. an unbound journal claim.
    std::string message = absl::StrCat("dispatcher pod ", dispatcher_->name, " cannot be scheduled: ",
                                       SchedulingProblem(*dispatcher_));
    if (claim_ != nullptr && !claim_->phase.empty() && claim_->phase != "Bound") {
      absl::StrAppend(&message, " (journal claim ", claim_->name, " is ", claim_->phase, ")");
    }
    dispatcher = MakeCondition(kConditionDispatcherReady, false, "DispatcherUnschedulable", message, gen);
  } else if (!dispatcher_->ready) {
    dispatcher = MakeCondition(kConditionDispatcherReady, false, "DispatcherPodNotReady",
                               absl::StrCat("dispatcher pod ", dispatcher_->name, " is not ready"), gen);
  } else if (service_ == nullptr) {
    dispatcher = MakeCondition(kConditionDispatcherReady, false, "ServiceMissing", "the dispatcher service does not exist yet", gen);
  } else {
    dispatcher = MakeCondition(kConditionDispatcherReady, true, "DispatcherPodReady",
                               absl::StrCat("serving at ", status.dispatcher_address), gen);
  }
  // WorkersReady.
  const int64_t desired = result_.plan.desired_local + result_.plan.desired_remote;
  int64_t outdated = 0;
  for (const WorkerPod& w : workers_) outdated += !w.up_to_date && !draining_names_.count(w.pod->name);
  Condition workers;
  if (outdated > 0) {
    workers = MakeCondition(kConditionWorkersReady, false, "RollingUpdate",
                            absl::StrCat(outdated, " of ", status.replicas, " workers run an outdated spec; replacing at most ",
                                         ds_.spec.workers.max_unavailable, " at a time"),
                            gen);
  } else if (status.ready_replicas >= desired && status.replicas == desired) {
    workers = MakeCondition(kConditionWorkersReady, true, "AllWorkersReady",
                            absl::StrCat(status.ready_replicas, "/", desired, " workers ready"), gen);
  } else {
    std::string message = absl::StrCat(status.ready_replicas, "/", desired, " workers ready");
    std::vector<const ObservedPod*> unschedulable;
    for (const WorkerPod& w : workers_) {
      if (!w.pod->ready && !w.pod->unschedulable_reason.empty()) unschedulable.push_back(w.pod);
    }
    if (!unschedulable.empty()) {
      absl::StrAppend(&message, "; ", unschedulable.size(), " cannot be scheduled (", unschedulable[0]->name, ": ",
                      SchedulingProblem(*unschedulable[0]), ")");
    }
    workers = MakeCondition(kConditionWorkersReady, false, "WorkersNotReady", message, gen);
  }
  if (status.draining_replicas > 0) {
    absl::StrAppend(&workers.message, "; ", status.draining_replicas,
                    " draining through the dispatcher before deletion");
  }
  // Degraded.
  std::vector<std::string> failed;
  for (const ObservedPod* p : pods_) {
    if (p->phase == "Failed" && !p->terminating) failed.push_back(p->name);
  }
  Condition degraded = failed.empty()
                           ? MakeCondition(kConditionDegraded, false, "AsExpected", "", gen)
                           : MakeCondition(kConditionDegraded, true, "PodFailed",
                                           absl::StrCat("pods failed and are being replaced: ", absl::StrJoin(failed, ", ")), gen);
  // ScalingLimited.
  Condition limited = result_.plan.limited_reason.empty()
                          ? MakeCondition(kConditionScalingLimited, false, "WithinLimits", "", gen)
                          : MakeCondition(kConditionScalingLimited, true, result_.plan.limited_reason,
                                          result_.plan.limited_message, gen);
  // Ready.
  Condition ready;
  if (dispatcher.status != "True") {
    ready = MakeCondition(kConditionReady, false, "DispatcherNotReady", dispatcher.message, gen);
  } else if (workers.status != "True") {
    ready = MakeCondition(kConditionReady, false, "WorkersNotReady", workers.message, gen);
  } else if (degraded.status == "True") {
    ready = MakeCondition(kConditionReady, false, "Degraded", degraded.message, gen);
  } else {
    ready = MakeCondition(kConditionReady, true, "Ready", workers.message, gen);
  }
  for (Condition* c : {&ready, &dispatcher, &workers, &degraded, &limited}) {
    SetCondition(&status.conditions, std::move(*c), in_.now);
  }
  return status;
}

}  // namespace

bool IsSignificantStatusChange(const DataServiceStatus& before, const DataServiceStatus& after) {
  if (before.observed_generation != after.observed_generation || before.dispatcher_address != after.dispatcher_address ||
      before.selector != after.selector || before.conditions.size() != after.conditions.size()) {
    return true;
  }
  for (const Condition& c : after.conditions) {
    const Condition* old = before.FindCondition(c.type);
    if (old == nullptr || old->status != c.status || old->reason != c.reason) return true;
  }
  return false;
}

void SetCondition(std::vector<Condition>* conditions, Condition condition, absl::Time now) {
  for (Condition& existing : *conditions) {
    if (existing.type != condition.type) continue;
    condition.last_transition_time =
        existing.status == condition.status && !existing.last_transition_time.empty()
            ? existing.last_transition_time
            : FormatKubeTime(now);
    existing = std::move(condition);
    return;
  }
  condition.last_transition_time = FormatKubeTime(now);
  conditions->push_back(std::move(condition));
}

namespace {

// In a namespace being deleted nothing can be created: drop the creates and every Event.
ReconcileResult WithoutCreates(ReconcileResult result) {
  std::vector<Action> kept;
  for (Action& a : result.actions) {
    if (std::holds_alternative<CreateObject>(a) || std::holds_alternative<EmitEvent>(a)) continue;
    if (auto* d = std::get_if<DeleteObject>(&a)) d->event = EmitEvent{};
    if (auto* p = std::get_if<PatchObject>(&a)) p->event = EmitEvent{};
    kept.push_back(std::move(a));
  }
  result.actions = std::move(kept);
  return result;
}

absl::StatusOr<ReconcileResult> ReconcileFor(const ReconcileInput& in);

}  // namespace

absl::StatusOr<ReconcileResult> Reconcile(const ReconcileInput& in) {
  absl::StatusOr<ReconcileResult> result = ReconcileFor(in);
  if (result.ok() && in.namespace_terminating) return WithoutCreates(*std::move(result));
  return result;
}

namespace {

absl::StatusOr<ReconcileResult> ReconcileFor(const ReconcileInput& in) {
  absl::StatusOr<ObjectMeta> meta = ParseObjectMeta(in.dataservice);
  if (!meta.ok()) return meta.status();
  if (meta->uid.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("DataService \"", meta->name,
                                                   "\": metadata.uid is missing; reconcile objects read from the API server"));
  }
  std::vector<const ObservedPod*> pods;
  for (const ObservedPod& p : in.owned_pods) {
    if (OwnedBy(p.controller_uid, *meta)) pods.push_back(&p);
  }
  if (meta->deletion_timestamp.has_value()) return ReconcileDeletion(in, *meta, pods);

  absl::StatusOr<DataService> ds = ParseDataService(in.dataservice);
  if (!ds.ok()) return ReconcileInvalid(in, *meta, pods, std::string(ds.status().message()));
  std::vector<FieldError> errors = ValidateDataService(*ds);
  if (!errors.empty()) return ReconcileInvalid(in, *meta, pods, FormatFieldErrors(errors));
  return Planner(in, *ds, std::move(pods)).Run();
}

}  // namespace

void RecordExpectations(const std::string& ds_key, const ReconcileResult& result, absl::Time now,
                        Expectations* expectations) {
  if (result.expectations == ExpectationsState::kSatisfied || result.expectations == ExpectationsState::kExpired) {
    expectations->Forget(ds_key);
  }
  for (const Action& action : result.actions) {
    if (const auto* c = std::get_if<CreateObject>(&action)) {
      expectations->ExpectCreate(ds_key, ObjectKey(c->kind, c->name), now);
    } else if (const auto* d = std::get_if<DeleteObject>(&action)) {
      expectations->ExpectDelete(ds_key, ObjectKey(d->kind, d->name), now);
    }
  }
}

}  // namespace sluice::op
