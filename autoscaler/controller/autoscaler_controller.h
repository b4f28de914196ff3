// AutoscalerController: the thin adapter between the kube/ runtime and the pure plan
// (autoscaling_plan.h). Reflectors keep caches of DataServices, of the pods the operator made for
// them (label sluice.dev/dataservice), and of the HorizontalPodAutoscalers (and KEDA ScaledObjects,
// when that API exists) that may name a DataService. Each DataService with
// spec.autoscaling.enabled is reconciled once per `period` (a periodic requeue), and at once when
// its spec changes: observe its metrics (SignalProvider), plan, server-side apply the spec fields
// it owns as `sluice-autoscaler` (a 409 from another owner is reported, never forced), apply
// status.autoscaler through the status subresource, and record Events.
//
// DataServices are cached compacted and packed as JSON text (what the autoscaler reads of them).
// The latest status.autoscaler of each DataService is also kept in memory: status writes are
// coalesced (written when something significant changed, else at most every `status_interval`),
// and the policy's history is read from memory while this process leads, from the object after a
// restart or a leader change.
//
// Threading: Start/Stop from one owner thread. Reflector handlers only enqueue. Reconciles run on
// the kube::Controller's worker threads, concurrently for different keys, never for the same key;
// `mu_` guards the in-memory state and is never held across an API call or an observation.
#ifndef SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALER_CONTROLLER_H_
#define SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALER_CONTROLLER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "autoscaler/controller/autoscaler_metrics.h"
#include "autoscaler/controller/autoscaling_plan.h"
#include "autoscaler/sources/signal_provider.h"
#include "kube/client.h"
#include "kube/clock.h"
#include "kube/controller.h"
#include "kube/event_recorder.h"
#include "kube/reflector.h"
#include "kube/store.h"
#include "kube/workqueue.h"

namespace sluice::autoscaler {

kube::ResourceRef DataServicesResource();
kube::ResourceRef HorizontalPodAutoscalers();
kube::ResourceRef ScaledObjects();

struct AutoscalerOptions {
  std::string watch_namespace;  // "" = all namespaces
  int workers = 2;
  absl::Duration period = absl::Seconds(15);
  absl::Duration status_interval = absl::Seconds(60);
  GlobalSettings global;
  std::string field_manager = kFieldManager;
  std::string reporting_instance = "sluice-autoscaler";
  kube::Clock* clock = kube::Clock::Real();
  std::function<void(absl::string_view)> log;  // one line per noteworthy happening (tests capture them)
  AutoscalerMetrics* metrics = nullptr;        // optional; must outlive the controller
  SignalProvider* signals = nullptr;           // required; must outlive the controller
  bool watch_scaled_objects = false;           // KEDA's API is served: watch ScaledObjects too
};

class AutoscalerController {
 public:
  AutoscalerController(kube::Client* client, AutoscalerOptions options);
  ~AutoscalerController();
  AutoscalerController(const AutoscalerController&) = delete;
  AutoscalerController& operator=(const AutoscalerController&) = delete;

  absl::Status Start(absl::Duration sync_timeout);
  void Stop();

  // One reconcile of a DataService key ("namespace/name"); public for tests.
  absl::StatusOr<kube::ReconcileResult> ReconcileKey(const std::string& key);

  int64_t reconciles() const { return controller_ ? controller_->reconciles() : 0; }

 private:
  struct Memory {
    std::string status;       // the last status.autoscaler planned (JSON text: a fifth of a JSON tree's memory)
    std::string significant;  // its significant part, as last written (JSON text)
    absl::Time written = absl::InfinitePast();
    absl::Time decided = absl::InfinitePast();
    int64_t generation = -1;
  };
  std::vector<WorkerPod> WorkersOf(const std::string& ns, const std::string& name, std::string* dispatcher_ip,
                                   std::map<std::string, std::string>* worker_ips) const;
  std::vector<std::string> OtherScalersOf(const std::string& ns, const std::string& name) const;
  void Log(absl::string_view line) const;
  void Emit(const nlohmann::json& dataservice, const EventNote& event);

  kube::Client* const client_;
  const AutoscalerOptions options_;
  kube::WorkQueue queue_;
  kube::EventRecorder recorder_;
  kube::Store dataservices_;
  kube::Store pods_;
  kube::Store scalers_;  // HPAs and ScaledObjects
  std::vector<std::unique_ptr<kube::Reflector>> reflectors_;
  std::unique_ptr<kube::Controller> controller_;

  mutable absl::Mutex mu_;
  std::map<std::string, Memory> memory_ ABSL_GUARDED_BY(mu_);
};

// status.autoscaler without what changes every period (times, inputs, arithmetic, history): a
// change of the rest is written at once.
nlohmann::json SignificantStatus(nlohmann::json status);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALER_CONTROLLER_H_
