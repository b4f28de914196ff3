// DataServiceController: the thin adapter between the kube/ runtime and the pure reconciler.
// Reflectors keep caches of DataServices, all pods (owned workers, consumer pods and the pods whose
// CPU requests fill the consumer nodes), the operator's Services and PersistentVolumeClaims, and nodes. Their events
// put DataService keys ("namespace/name") on a work queue; each reconcile builds a ReconcileInput
// from the caches, calls Reconcile, records expectations and executes the actions against the API
// server (creates, server-side apply, uid-guarded deletes, status merge patches, guarded finalizer
// patches, events.k8s.io Events).
//
// Draining: a DrainWorkers action runs one drain round through the WorkerDrainer (the dispatcher's
// RPC client); its progress is fed back to the next reconcile, and a completed drain requeues the
// key at once so that the finalizer goes (kDataService) or the drained pods are deleted
// (kScaleDown). Scale-down drains are remembered per pod uid (PodDrain: when the first round asked
// for it, the last verdict) in memory only: an operator restart forgets them, so the next pass
// asks again and the drain timer starts again. Entries of pods that no longer exist are dropped.
// Without a drainer (options.drainer null) draining is disabled: a drain counts as complete at once
// (workers then stop on SIGTERM).
// AutoOrder: a ReadAutoOrder action asks the dispatcher (AutoOrderReader) what AutoOrder did; the
// answer is fed back to the next reconcile (status.autoOrder), which is requeued at once.
//
// A namespace being deleted refuses every create (403, cause NamespaceTerminating). The first such
// answer marks the namespace: the rest of that pass and every later reconcile of its DataServices
// create nothing and emit no Events (ReconcileInput::namespace_terminating), until the namespace
// holds no DataService any more. One refused create per namespace is how the operator learns it
// (it does not watch namespaces).
//
// Threading: Start/Stop from one owner thread. Reflector handlers run on the reflector threads and
// only enqueue keys. Reconciles run on the kube::Controller's worker threads, concurrently for
// different keys, never for the same key; expectations and drain progress are guarded by mu_, which
// is never held across an API call.
#ifndef SLUICE_OPERATOR_CONTROLLER_H_
#define SLUICE_OPERATOR_CONTROLLER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/client.h"
#include "kube/clock.h"
#include "kube/controller.h"
#include "kube/event_recorder.h"
#include "kube/reflector.h"
#include "kube/store.h"
#include "kube/workqueue.h"
#include "nlohmann/json.hpp"
#include "operator/compact_objects.h"
#include "operator/dispatcher_auto_order.h"
#include "operator/dispatcher_drainer.h"
#include "operator/expectations.h"
#include "operator/operator_metrics.h"
#include "operator/reconciler.h"

namespace sluice::op {

// The DataService resource (sluice.dev/v1alpha1, namespaced).
kube::ResourceRef DataServices();
kube::ResourceRef PersistentVolumeClaims();

struct OperatorOptions {
  std::string watch_namespace;  // DataServices (and their Services/claims) of this namespace; "" = all
  int workers = 2;              // concurrent reconciles
  ReconcileOptions reconcile;
  // DataServices with local placement are reconciled at least this often, because capacity also
  // changes with pods and nodes that trigger no DataService event.
  absl::Duration resync_period = absl::Seconds(30);
  std::string field_manager = "sluice-operator";
  std::string reporting_instance = "sluice-operator";
  kube::Clock* clock = kube::Clock::Real();
  // Receives one line per noteworthy happening (failed API calls, malformed cached objects)
  // instead of the structured log (tests capture them).
  std::function<void(absl::string_view)> log;
  // Reconcile counts and latency, queue depth, watch restarts, API errors (optional; must outlive
  // the controller).
  OperatorMetrics* metrics = nullptr;
  // Status changes of counts and messages only (see UpdateStatus::significant) are written at most
  // once per window per DataService; zero writes every change at once.
  absl::Duration status_coalesce_window = absl::Seconds(2);
  // Drains workers of deleted DataServices through their dispatcher (optional, see above; must
  // outlive the controller; called from reconcile threads, so it must be thread-safe).
  WorkerDrainer* drainer = nullptr;
  // Reads what AutoOrder did from the dispatcher for status.autoOrder (optional, as `drainer`;
  // without it status.autoOrder is not written).
  AutoOrderReader* auto_order_reader = nullptr;
};

class DataServiceController {
 public:
  DataServiceController(kube::Client* client, OperatorOptions options);
  ~DataServiceController();  // Stop()s
  DataServiceController(const DataServiceController&) = delete;
  DataServiceController& operator=(const DataServiceController&) = delete;

  // Starts the reflectors, waits up to `sync_timeout` for their first lists, then starts the workers.
  absl::Status Start(absl::Duration sync_timeout);
  // Stops workers and reflectors (idempotent).
  void Stop();

  // One reconcile of a DataService key; what the workers call (public for tests).
  absl::StatusOr<kube::ReconcileResult> ReconcileKey(const std::string& key);

  int64_t reconciles() const { return controller_ ? controller_->reconciles() : 0; }

 private:
  absl::StatusOr<kube::ReconcileResult> ReconcileOnce(const std::string& key);
  ReconcileInput BuildInput(const std::string& key, const nlohmann::json& dataservice);
  // Runs the actions; sets `status_due` when a status write was deferred (coalesced) until then.
  absl::Status Execute(const std::string& key, const nlohmann::json& dataservice, const ReconcileResult& result,
                       std::optional<absl::Duration>* status_due);
  // After a create failed with `status`: OK when the object exists and this DataService controls
  // it (the create raced an earlier one), else the error to report (AlreadyExists naming the
  // object's controller when the name is taken by someone else). Makes a GET; no lock held.
  absl::Status ForeignObjectConflict(const CreateObject& create, const std::string& ns, const nlohmann::json& dataservice,
                                     const absl::Status& status);
  void Emit(const nlohmann::json& dataservice, const EmitEvent& event);
  void RunDrainRound(const std::string& key, const DrainWorkers& drain);
  void RunScaleDownDrainRound(const std::string& key, const DrainWorkers& drain);
  void ReadAutoOrderOf(const std::string& key, const ReadAutoOrder& read);
  // A problem worth a warning: `what` happened to DataService `key` (or "" when none).
  void Warn(absl::string_view what, absl::string_view key, const absl::Status& status) const;
  kube::ResourceEventHandler ConsumerSelectorHandler();
  kube::ResourceEventHandler ConsumerPodHandler();
  kube::ResourceEventHandler ConsumerNodePodHandler();
  // Clears the expectation an added (created) or deleted object of `kind` satisfies.
  kube::ResourceEventHandler ExpectationsHandler(std::string kind);
  kube::ResourceEventHandler TerminatingNamespaceHandler();
  // Namespaces whose deletion the API server reported (403 NamespaceTerminating on a create): the
  // operator creates nothing more in them, Events included. Locks mu_.
  bool NamespaceTerminating(const std::string& ns) const;
  void MarkNamespaceTerminating(const std::string& ns, const std::string& key, const absl::Status& refusal);
  // A node appearing, going, or changing what local capacity depends on (allocatable, taints,
  // schedulability, labels) requeues every DataService that places workers locally.
  kube::ResourceEventHandler NodeHandler();

  kube::Client* const client_;
  const OperatorOptions options_;
  kube::WorkQueue queue_;
  kube::EventRecorder recorder_;

  kube::Store dataservices_;
  kube::Store pods_;  // every pod of the cluster
  kube::Store services_;
  kube::Store claims_;
  kube::Store nodes_;
  std::vector<std::unique_ptr<kube::Reflector>> reflectors_;
  std::vector<std::string> reflector_names_;  // resource plural of each reflector, for metrics
  std::unique_ptr<kube::Controller> controller_;

  struct ConsumerSelector {
    std::string ns;
    LabelSelector selector;
  };
  mutable absl::Mutex mu_;
  Expectations expectations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DrainProgress> drains_ ABSL_GUARDED_BY(mu_);
  // Scale-down drains: DataService key -> pod uid -> what is known of the pod's drain.
  std::map<std::string, std::map<std::string, PodDrain>> pod_drains_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ObservedAutoOrder> auto_orders_ ABSL_GUARDED_BY(mu_);  // the dispatchers' answers
  // DataServices placing workers locally, by key: their consumer selectors.
  std::map<std::string, ConsumerSelector> consumer_selectors_ ABSL_GUARDED_BY(mu_);
  // When each DataService's status was last written (for coalescing).
  std::map<std::string, absl::Time> status_written_ ABSL_GUARDED_BY(mu_);
  // The consumer nodes of each DataService's last pod snapshot (the next one's first guess).
  std::map<std::string, std::set<std::string>> consumer_nodes_ ABSL_GUARDED_BY(mu_);
  // Namespaces being deleted (see NamespaceTerminating).
  std::set<std::string> terminating_namespaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_CONTROLLER_H_
