// Typed view of the DataService custom resource (sluice.dev/v1alpha1, crds/dataservices.sluice.dev.yaml):
// parsing from the JSON the API server returns (defaults applied, errors naming the field path),
// semantic validation of what the OpenAPI schema cannot express, and status serialisation.
// Pure value types and functions; safe to use from any thread. nlohmann::json exceptions never escape.
#ifndef SLUICE_OPERATOR_DATASERVICE_TYPES_H_
#define SLUICE_OPERATOR_DATASERVICE_TYPES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "operator/json_fields.h"

namespace sluice::op {

inline constexpr char kGroup[] = "sluice.dev";
inline constexpr char kApiVersion[] = "sluice.dev/v1alpha1";
inline constexpr char kKind[] = "DataService";
inline constexpr char kPlural[] = "dataservices";
// Finalizer that holds a deleted DataService until its workers were drained.
inline constexpr char kDrainFinalizer[] = "sluice.dev/drain";
// Finalizers the API server adds for a delete with propagationPolicy Foreground / Orphan (the
// garbage collector removes them once it has deleted / orphaned the dependents).
inline constexpr char kForegroundDeletionFinalizer[] = "foregroundDeletion";
inline constexpr char kOrphanFinalizer[] = "orphan";
// Longest DataService name: "<name>-dispatcher" must be a 63-character DNS-1035 label.
inline constexpr size_t kMaxNameLength = 52;

using StringMap = std::map<std::string, std::string>;

struct ObjectMeta {
  std::string name;
  std::string namespace_name;
  std::string uid;
  int64_t generation = 0;
  std::string resource_version;
  StringMap labels;
  StringMap annotations;
  std::optional<absl::Time> creation_timestamp;
  std::optional<absl::Time> deletion_timestamp;
  std::vector<std::string> finalizers;

  bool HasFinalizer(const std::string& finalizer) const;
};

// Container resources; quantities kept as text (an integer quantity such as cpu: 2 becomes "2").
// Every quantity has been checked to parse.
struct ResourceRequirements {
  StringMap requests;
  StringMap limits;
};

struct ConfigMapKeyRef {
  std::string name;
  std::string key = "pipeline.yaml";
};

// Exactly one of config_map_ref and inline_text is set, or neither (clients register pipelines).
struct PipelineSource {
  std::optional<ConfigMapKeyRef> config_map_ref;
  std::optional<std::string> inline_text;
};

struct Toleration {
  std::string key;
  std::string op;      // "Exists" or "Equal"; empty means Equal
  std::string value;
  std::string effect;  // empty matches every effect
  std::optional<int64_t> toleration_seconds;
};

struct JournalSpec {
  std::optional<std::string> storage_class_name;
  std::string size = "1Gi";
};

struct DispatcherSpec {
  std::string image;
  std::string image_pull_policy;  // empty: cluster default
  ResourceRequirements resources;
  int64_t port = 5050;
  int64_t metrics_port = 8090;
  std::optional<JournalSpec> journal;
  StringMap node_selector;
  std::vector<Toleration> tolerations;
  int64_t termination_grace_period_seconds = 30;
  std::vector<std::string> extra_args;
};

struct WorkersSpec {
  std::string image;
  std::string image_pull_policy;
  // Defaults to requests {cpu: 1, memory: 1Gi} when the whole field is absent (as the CRD does).
  ResourceRequirements resources;
  int64_t replicas = 1;
  int64_t min_replicas = 0;
  int64_t max_replicas = 32;
  std::optional<int64_t> local;  // Hybrid only: desired local share of replicas
  std::vector<std::string> workers_to_delete;
  int64_t port = 5051;
  int64_t metrics_port = 8091;
  int64_t max_unavailable = 1;
  int64_t termination_grace_period_seconds = 30;
  std::vector<std::string> extra_args;
};

struct LabelSelectorRequirement {
  std::string key;
  std::string op;  // In, NotIn, Exists, DoesNotExist
  std::vector<std::string> values;
};

struct LabelSelector {
  StringMap match_labels;
  std::vector<LabelSelectorRequirement> match_expressions;
};

enum class PlacementPolicy { kHybrid, kRemoteOnly, kLocalOnly };
std::string PlacementPolicyName(PlacementPolicy policy);

struct PlacementSpec {
  PlacementPolicy policy = PlacementPolicy::kRemoteOnly;
  std::optional<LabelSelector> consumer_selector;
  StringMap accelerator_node_selector;
  StringMap remote_node_selector;
  std::vector<Toleration> tolerations;        // remote worker pods
  std::vector<Toleration> local_tolerations;  // local worker pods
  double local_cpu_fraction = 0.5;
};

struct ScalingRules {
  std::optional<int64_t> stabilization_window_seconds;
  std::optional<int64_t> max_step;
};

// Read by the autoscaler only; parsed here so that the whole object is checked in one place.
struct AutoscalingSpec {
  bool enabled = false;
  std::string mode = "Auto";  // Auto | Recommend
  double target_stall_ratio = 0.05;
  double headroom = 0.05;                // capacity planned above the estimated need
  double tolerance = 0.10;               // no change within this relative distance of the need
  double interference_tolerance = 0.10;  // most slowdown of the trainers local workers may cause
  std::optional<int64_t> fallback_failure_threshold;
  std::optional<int64_t> fallback_replicas;
  std::optional<std::string> prometheus_url;
  StringMap prometheus_queries;
  ScalingRules scale_up;
  ScalingRules scale_down;
  std::optional<double> accelerator_hourly;
  std::optional<double> remote_cpu_hourly;
};

struct AutoOrderSpec {
  bool enabled = false;
  std::string mode = "relaxed";  // strict | relaxed
};

struct SharingSpec {
  bool enabled = false;
};

struct DataServiceSpec {
  PipelineSource pipeline;
  DispatcherSpec dispatcher;
  WorkersSpec workers;
  PlacementSpec placement;
  AutoscalingSpec autoscaling;
  AutoOrderSpec auto_order;
  SharingSpec sharing;
};

struct Condition {
  std::string type;
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339, as stored
  int64_t observed_generation = 0;

  bool operator==(const Condition&) const = default;
};

// What AutoOrder did to the DataService's pipeline, as its dispatcher reports it (GetState; see
// docs/autoorder.md): status.autoOrder.
struct AutoOrderStatus {
  std::string mode;            // strict | relaxed | off
  std::string outcome;         // applied | unchanged | refused | failed; empty: the dispatcher reported nothing
  std::string original_order;  // "decode_jpeg(image) -> cast(image->float32) -> ..."
  std::string chosen_order;
  double predicted_speedup = 0;
  double measured_speedup = 0;
  std::string message;         // the reason (unchanged, refused, failed) or what else was left alone

  bool operator==(const AutoOrderStatus&) const = default;
};

struct DataServiceStatus {
  int64_t observed_generation = 0;
  std::vector<Condition> conditions;
  std::string dispatcher_address;
  int64_t replicas = 0;
  int64_t ready_replicas = 0;
  int64_t local_replicas = 0;
  int64_t remote_replicas = 0;
  int64_t local_capacity = 0;
  // Worker pods a scale-down is draining through the dispatcher before deleting them (not counted
  // in replicas and the other counts).
  int64_t draining_replicas = 0;
  std::string selector;
  std::optional<AutoOrderStatus> auto_order;

  const Condition* FindCondition(const std::string& type) const;
  bool operator==(const DataServiceStatus&) const = default;
};

struct DataService {
  ObjectMeta metadata;
  DataServiceSpec spec;
  DataServiceStatus status;
};

// Parses metadata only (name, namespace, uid, generation, timestamps, finalizers). Used on its own
// when the rest of an object is malformed, so that the error can still be reported on the object.
absl::StatusOr<ObjectMeta> ParseObjectMeta(const nlohmann::json& object);

// Parses a whole DataService, applying the CRD's defaults to absent (or null) fields. Type errors,
// unsupported enum values, missing required fields and unparsable quantities are reported together
// as one InvalidArgument status listing every field path. A malformed status is not an error: the
// status is then taken as empty (the operator rewrites it).
absl::StatusOr<DataService> ParseDataService(const nlohmann::json& object);

// The status of a DataService object; empty when absent or malformed (the operator rewrites it).
DataServiceStatus ParseDataServiceStatus(const nlohmann::json& object);

// Checks what the OpenAPI schema cannot express (name length, label syntax, selector operators,
// flags the operator manages, a positive worker CPU request for local placement) and repeats the
// CRD's ranges and CEL rules, so that a server without CEL support cannot slip an invalid spec
// through. Empty when the spec is valid.
std::vector<FieldError> ValidateDataService(const DataService& ds);

// The operator-owned part of the status as JSON (status.autoscaler is left out: the autoscaler owns it).
nlohmann::json StatusToJson(const DataServiceStatus& status);

// CPU each worker pod is accounted for when sizing local capacity: requests.cpu, else limits.cpu
// (Kubernetes then sets the request to the limit), else 1000 millicores.
int64_t WorkerCpuMillis(const WorkersSpec& workers);

// RFC 3339 in UTC with second precision ("2026-11-22T06:45:16Z"), the format of Kubernetes timestamps.
std::string FormatKubeTime(absl::Time t);
absl::StatusOr<absl::Time> ParseKubeTime(const std::string& text);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_DATASERVICE_TYPES_H_
