// The DataService reconciler as a pure function of observed state: given the DataService object,
// the objects it owns, the nodes, the consumer pods, the outstanding expectations and the current
// time, it returns the actions that move the cluster toward the spec (create / apply / delete
// objects, write status, emit events, manage the drain finalizer) plus a requeue hint.
//
// No I/O and no clock. DataServiceController (operator/controller.h) gathers the input from its
// informer caches, records expectations for the creates and deletes of the result, then executes
// every action in order, carrying on past a failed one (the actions are independent; see below),
// and returns the first error so that the key is retried with backoff; it calls Reconcile again on
// the next event. Reconcile is thread-compatible: it touches nothing but its arguments.
#ifndef SLUICE_OPERATOR_RECONCILER_H_
#define SLUICE_OPERATOR_RECONCILER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "autoscaler/placement/local_capacity.h"
#include "nlohmann/json.hpp"
#include "operator/dataservice_types.h"
#include "operator/expectations.h"
#include "operator/observed_state.h"

namespace sluice::op {

// ---- Actions ----
// The actions of one result are independent of each other: the controller executes them in order
// and carries on past a failure. An object action carries the event that announces it; the
// controller emits that event only when the API call succeeded (and a Warning event when it failed).

// An events.k8s.io/v1 Event regarding the DataService. With `names`, `note` is a template: "{}"
// stands for the names compacted into ordinal ranges and "{s}" for a plural "s" (see
// operator/event_notes.h, which also merges events and splits notes that would be too long).
struct EmitEvent {
  std::string type;    // Normal | Warning
  std::string reason;  // CamelCase, e.g. CreatedWorker
  std::string action;  // CamelCase verb, e.g. Create
  std::string note;
  std::vector<std::string> names = {};  // the objects the note names
};

// Create `manifest` (kind Pod, Service or PersistentVolumeClaim) in the DataService's namespace.
struct CreateObject {
  std::string kind;
  std::string name;
  nlohmann::json manifest;
  EmitEvent event;
};

// Change fields of an existing object with a JSON merge patch (RFC 7386: a list in the patch replaces
// the whole list), sent with the same field manager as the create. One write mechanism per object:
// the operator's creates (POST) and these patches are both "Update" operations of sluice-operator,
// so the server sees one owner of every field. (A server-side apply of an object created by POST
// is another owner to the server: it keeps the fields the create set and adds the applied ones, so
// a changed Service port was added beside the old one and refused as a duplicate port name.)
struct PatchObject {
  std::string kind;
  std::string name;
  nlohmann::json merge_patch;
  EmitEvent event;
};

// Delete an object, with a precondition on its uid so that a newer object of the same name is safe.
struct DeleteObject {
  std::string kind;
  std::string name;
  std::string uid;
  std::string reason;  // why, for logs (the event carries it too)
  EmitEvent event;
  // A worker pod deleted after a scale-down drain: "drained" or "timed_out" (for metrics); else "".
  std::string drain_outcome = {};
};

// Write the operator-owned status fields through the status subresource (a merge patch of
// {"status": status}; status.autoscaler is never included, the autoscaler owns it).
// `significant`: a condition's status or reason, observedGeneration, the dispatcher address or the
// selector changed. Changes of counts and messages alone are not significant: the controller may
// coalesce them (write them a little later, together with whatever changes next).
struct UpdateStatus {
  nlohmann::json status;
  bool significant = true;
};

struct AddFinalizer {
  std::string finalizer = kDrainFinalizer;
};
struct RemoveFinalizer {
  std::string finalizer = kDrainFinalizer;
};

// Ask the dispatcher (through its RPC client) to drain workers: stop handing them tasks and splits,
// make them hand back their input (unstarted splits whole, started ones at the reader's position)
// and let their clients read what they buffered.
//  - kDataService (the DataService is being deleted): every worker of the dispatcher. The
//    controller reports progress back in ReconcileInput::drain (complete when the dispatcher lists
//    every worker as draining with no tasks left and no job has clients).
//  - kScaleDown (worker pods a scale-down removes): exactly `worker_addresses`. The controller
//    reports each pod's verdict back in ReconcileInput::pod_drains; a pod is deleted once the
//    dispatcher says it drained (or at ReconcileOptions::scale_down_drain_timeout).
enum class DrainScope { kDataService, kScaleDown };
struct DrainWorkers {
  std::string dispatcher_address;   // the Service address, status.dispatcherAddress (TLS name, fallback)
  std::string dispatcher_endpoint;  // the dispatcher pod's "podIP:port" (what the operator dials)
  std::vector<std::string> workers;           // worker pod names (kDataService: every active one)
  std::vector<std::string> worker_addresses;  // their advertised addresses "podIP:port" (pods with an IP)
  DrainScope scope = DrainScope::kDataService;
  // kScaleDown: the pods' uids, parallel to `workers` and `worker_addresses` (every pod has an IP).
  std::vector<std::string> worker_uids = {};
};

// Ask the dispatcher (GetState, through its RPC client) what AutoOrder did to the DataService's
// pipeline. The controller reports the answer back in ReconcileInput::auto_order, once per
// dispatcher pod (AutoOrder runs when the dispatcher registers the pipeline at start-up).
struct ReadAutoOrder {
  std::string dispatcher_address;   // the Service address (TLS name, fallback)
  std::string dispatcher_endpoint;  // the dispatcher pod's "podIP:port"
  std::string dispatcher_uid;       // the pod whose answer this is
};

using Action = std::variant<CreateObject, PatchObject, DeleteObject, UpdateStatus, EmitEvent, AddFinalizer,
                            RemoveFinalizer, DrainWorkers, ReadAutoOrder>;

// ---- Input ----

struct ReconcileOptions {
  // Outstanding creates/deletes older than this are given up on (the cache may have missed an event).
  absl::Duration expectations_timeout = absl::Minutes(5);
  // A deleted DataService whose workers have not drained after this long is released anyway.
  absl::Duration drain_timeout = absl::Minutes(10);
  // How soon to look again while a drain is in progress.
  absl::Duration drain_poll_interval = absl::Seconds(5);
  // A worker pod a scale-down removes is drained through the dispatcher first and deleted once
  // drained, or after this long anyway (it then hands its input back on SIGTERM within its shutdown
  // budget). Zero: scale-downs delete at once, without draining (the library's default; the
  // sluice-operator flag --scale-down-drain-timeout-seconds defaults to 120 s).
  absl::Duration scale_down_drain_timeout = absl::ZeroDuration();
};

// What a dispatcher pod answered to ReadAutoOrder.
struct ObservedAutoOrder {
  std::string dispatcher_uid;
  AutoOrderStatus status;
};

// What the dispatcher said about one worker a scale-down drains (local/worker_drain.h decides it).
struct WorkerDrainVerdict {
  bool drained = false;
  std::string message;  // "draining, 1 task: 12 elements produced and not yet received by clients"
};

// Progress of a drain the controller started after a DrainWorkers action.
struct DrainProgress {
  bool complete = false;
  std::string message;
  // kScaleDown: the verdict per worker address named (complete when every one drained).
  std::map<std::string, WorkerDrainVerdict> workers = {};
};

// A worker pod a scale-down is draining, as the controller remembers it. Memory only: an operator
// restart forgets it, and the next pass starts the drain (and its timer) again; asking the
// dispatcher to drain a worker twice is harmless.
struct PodDrain {
  std::string pod;       // the pod's name
  std::string address;   // the worker address drained, "podIP:port"
  absl::Time started;    // when the controller first asked the dispatcher to drain it
  bool answered = false;  // a drain round answered for it
  bool drained = false;   // the dispatcher's verdict in the last round that answered
  std::string message;    // that verdict's reason, or why the last round failed
};

struct ReconcileInput {
  // The DataService as stored (JSON from the cache). Parsed inside, so that a malformed object still
  // gets a Degraded condition instead of being dropped.
  nlohmann::json dataservice;
  // Objects whose controller ownerReference is this DataService (others are ignored).
  std::vector<ObservedPod> owned_pods;
  std::vector<ObservedService> owned_services;
  std::vector<ObservedClaim> owned_claims;
  // All nodes (only those running consumer pods matter).
  std::vector<ObservedNode> nodes;
  // Pods selected by spec.placement.consumerSelector in the DataService's namespace (re-filtered here).
  std::vector<ObservedPod> consumer_pods;
  // CPU requested per node by all pods of the cluster (SumCpuRequestsByNode).
  std::map<std::string, int64_t> cpu_requested_by_node;
  // Snapshot of Expectations::Pending for this DataService.
  PendingOperations expectations;
  // Set by the controller once it started draining (after a kDataService DrainWorkers action).
  std::optional<DrainProgress> drain;
  // Worker pods a scale-down is draining (kScaleDown DrainWorkers actions), by pod uid. A pod listed
  // here leaves whatever the spec says now: it is kept (and not counted in status.replicas) until
  // drained or until scale_down_drain_timeout after `started`, then deleted; no replacement is
  // created for it unless the spec asks for more workers.
  std::map<std::string, PodDrain> pod_drains;
  // The API server refuses creates in the DataService's namespace because the namespace is being
  // deleted (a create was answered 403 with cause NamespaceTerminating): the result then holds no
  // creates and no Events (Events are creates too); deletes, status and finalizer writes go on.
  bool namespace_terminating = false;
  // The last answer to ReadAutoOrder (status.autoOrder shows it while it is from the current
  // dispatcher pod).
  std::optional<ObservedAutoOrder> auto_order;
  absl::Time now = absl::UnixEpoch();
  ReconcileOptions options;
};

// ---- Output ----

enum class ExpectationsState {
  kNone,       // nothing was outstanding
  kSatisfied,  // everything outstanding has been observed: the controller may Forget them
  kPending,    // still waiting: no creates or deletes were planned
  kExpired,    // waited longer than expectations_timeout: given up, planning went ahead
};

// What the reconciler decided about the worker pools (also useful to tests and logs). The capacity
// and the split come from the placement library (autoscaler/placement/local_capacity.h), the same
// model the autoscaler decides with.
struct WorkerPlan {
  int64_t desired_local = 0;
  int64_t desired_remote = 0;
  autoscaler::LocalCapacity capacity;
  std::string limited_reason;   // non-empty when ScalingLimited is True
  std::string limited_message;
};

struct ReconcileResult {
  std::vector<Action> actions;
  std::optional<absl::Duration> requeue_after;
  ExpectationsState expectations = ExpectationsState::kNone;
  WorkerPlan plan;
};

// Errors only when the object cannot even be identified (not an object, no metadata.name or
// metadata.uid); every other problem becomes a Degraded condition in the returned status action.
absl::StatusOr<ReconcileResult> Reconcile(const ReconcileInput& input);

// Records in `expectations` the creates and deletes of `result` for the DataService `ds_key`
// (clearing satisfied or expired ones first). Call before executing the actions.
void RecordExpectations(const std::string& ds_key, const ReconcileResult& result, absl::Time now,
                        Expectations* expectations);

// Whether going from `before` to `after` is a significant status change (see UpdateStatus).
bool IsSignificantStatusChange(const DataServiceStatus& before, const DataServiceStatus& after);

// Condition types and the helper that keeps lastTransitionTime when a status does not change.
inline constexpr char kConditionReady[] = "Ready";
inline constexpr char kConditionDispatcherReady[] = "DispatcherReady";
inline constexpr char kConditionWorkersReady[] = "WorkersReady";
inline constexpr char kConditionDegraded[] = "Degraded";
inline constexpr char kConditionScalingLimited[] = "ScalingLimited";

// Sets `condition` in `conditions` (by type). Its lastTransitionTime is `now` when the type is new
// or its status changed, and the previous one otherwise.
void SetCondition(std::vector<Condition>* conditions, Condition condition, absl::Time now);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_RECONCILER_H_
