// The autoscaler's reconcile, as a pure function: from a DataService object as read (spec, status,
// managedFields), its worker pods, the other scalers that name it (HPAs, KEDA ScaledObjects) and
// one observation of its metrics, what to write — the spec fields the autoscaler owns
// (spec.workers.replicas, local, workersToDelete, by server-side apply as `sluice-autoscaler`),
// status.autoscaler (inputs, arithmetic, decision, conditions and the policy's history, so that a
// restarted or new leader continues with the same windows) and Events.
//
// Pure: no I/O, no clock (now comes in). Safe to call from any thread.
#ifndef SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALING_PLAN_H_
#define SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALING_PLAN_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "autoscaler/policy/policy.h"
#include "autoscaler/sources/prometheus_source.h"
#include "nlohmann/json.hpp"
#include "operator/dataservice_types.h"

namespace sluice::autoscaler {

inline constexpr char kFieldManager[] = "sluice-autoscaler";

// The autoscaler's own settings (flags), shared by every DataService.
struct GlobalSettings {
  std::optional<std::string> prometheus_url;  // for DataServices that name none; none: direct scrape
  absl::Duration max_signal_age = absl::Minutes(2);
  absl::Duration settle_time = absl::Seconds(30);
  // Costs above these are taken for mistakes (a price per month, per cluster, in cents...).
  double max_accelerator_hourly = 10000;
  double max_remote_cpu_hourly = 100;
};

// One DataService's settings for the policy and its metric source.
struct AutoscalingSettings {
  PolicyConfig policy;
  std::optional<std::string> prometheus_url;  // none: scrape the dispatcher and workers directly
  std::map<std::string, std::string> queries;
};

// From a valid, parsed DataService. Errors name the field and say what to do.
absl::StatusOr<AutoscalingSettings> SettingsFor(const op::DataService& ds, const GlobalSettings& global);

// A worker pod of the DataService, as the autoscaler sees it.
struct WorkerPod {
  std::string name;
  bool local = false;
  bool ready = false;
  bool terminating = false;
  absl::Time created = absl::InfinitePast();
  std::string node;
};

struct PlanInput {
  nlohmann::json object;                   // the DataService as read
  std::vector<WorkerPod> workers;
  std::vector<std::string> other_scalers;  // e.g. "HorizontalPodAutoscaler ml/train-hpa"
  std::optional<Observation> observation;  // none when the settings are invalid (nothing was observed)
  absl::Time now;
  std::optional<op::DataService> parsed{};  // `object` parsed, when the caller has (else parsed here)
};

// The spec fields the autoscaler applies.
struct SpecWrite {
  int32_t replicas = 0;
  std::optional<int32_t> local;                // Hybrid only
  std::vector<std::string> workers_to_delete;  // empty: the field is left out (and so removed)
  // The server-side apply body for DataService `name` in `ns`.
  nlohmann::json ApplyBody(const std::string& name, const std::string& ns) const;
};

struct EventNote {
  std::string type;  // Normal | Warning
  std::string reason;
  std::string note;
};

struct Plan {
  std::optional<SpecWrite> spec;       // apply when set
  nlohmann::json status;               // the value of status.autoscaler to apply (always)
  std::vector<EventNote> events;
  std::optional<Decision> decision;    // when the policy ran
  std::optional<AutoscalingSettings> settings;
  std::string skipped;                 // why the policy did not run or was not acted on ("" when it was)
  bool holding = false;
};

Plan PlanAutoscaling(const PlanInput& in, const GlobalSettings& global);

// The policy's history kept in status.autoscaler.history, and back. A malformed one is empty.
nlohmann::json HistoryToJson(const PolicyHistory& history);
PolicyHistory HistoryFromJson(const nlohmann::json& history);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_CONTROLLER_AUTOSCALING_PLAN_H_
