// What the operator observes in its informer caches, reduced to the fields the reconciler needs:
// pods, nodes, Services and PersistentVolumeClaims, parsed from their JSON, plus the pure helpers
// that interpret them (label selectors, taint toleration, CPU requests per node).
// Pure value types and functions; safe to use from any thread. nlohmann::json exceptions never escape.
#ifndef SLUICE_OPERATOR_OBSERVED_STATE_H_
#define SLUICE_OPERATOR_OBSERVED_STATE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "operator/dataservice_types.h"

namespace sluice::op {

struct ObservedPod {
  std::string name;
  std::string uid;
  StringMap labels;
  StringMap annotations;
  std::string controller_uid;  // uid of the ownerReference with controller=true; empty if none
  std::string node_name;       // spec.nodeName; empty until scheduled
  // The node a required node affinity pins the pod to (matchFields metadata.name In [one node]).
  std::string affinity_node;
  std::string phase = "Pending";  // status.phase
  bool ready = false;             // condition Ready is True
  // Condition PodScheduled is False: the scheduler's reason (e.g. Unschedulable) and message
  // ("0/3 nodes are available: ..."); empty while the pod is scheduled or not yet looked at.
  std::string unschedulable_reason;
  std::string unschedulable_message;
  std::string pod_ip;
  std::optional<absl::Time> creation_timestamp;
  bool terminating = false;  // metadata.deletionTimestamp is set
  // Effective CPU request: max(sum of containers, largest init container) plus overhead.
  int64_t cpu_request_millis = 0;

  // Succeeded or Failed: the pod will not run again and holds no resources.
  bool Finished() const { return phase == "Succeeded" || phase == "Failed"; }
};

struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule, PreferNoSchedule, NoExecute
};

struct ObservedNode {
  std::string name;
  StringMap labels;
  int64_t allocatable_cpu_millis = 0;
  std::vector<Taint> taints;
  bool unschedulable = false;  // spec.unschedulable (cordoned)
};

struct ServicePort {
  std::string name;
  int64_t port = 0;
  int64_t target_port = 0;  // 0 when absent or named

  bool operator==(const ServicePort&) const = default;
};

struct ObservedService {
  std::string name;
  std::string uid;
  std::string controller_uid;
  std::vector<ServicePort> ports;
};

struct ObservedClaim {
  std::string name;
  std::string uid;
  std::string controller_uid;
  std::string phase;  // Pending, Bound, Lost
};

// Parse cached objects. Errors name the field ("status.allocatable.cpu: invalid quantity ...").
absl::StatusOr<ObservedPod> ObservedPodFromJson(const nlohmann::json& pod);
absl::StatusOr<ObservedNode> ObservedNodeFromJson(const nlohmann::json& node);
absl::StatusOr<ObservedService> ObservedServiceFromJson(const nlohmann::json& service);
absl::StatusOr<ObservedClaim> ObservedClaimFromJson(const nlohmann::json& claim);

// Sum of CPU requests per node over pods bound to a node that are not Succeeded or Failed
// (terminating pods still count: they hold their CPU until gone). This is the "requested" input of
// the reconciler; it must be computed over ALL pods of the cluster, not only the operator's own.
std::map<std::string, int64_t> SumCpuRequestsByNode(const std::vector<ObservedPod>& pods);

// Kubernetes label selector semantics. An empty selector matches everything.
bool SelectorMatches(const LabelSelector& selector, const StringMap& labels);
// Equality-only selector (nodeSelector style): every key present with the same value.
bool MapSelectorMatches(const StringMap& selector, const StringMap& labels);

// Whether `toleration` tolerates `taint` (Kubernetes semantics: Exists / Equal, empty key with
// Exists matches every key, empty effect matches every effect).
bool Tolerates(const Toleration& toleration, const Taint& taint);
// The first NoSchedule or NoExecute taint none of `tolerations` tolerates, if any.
std::optional<Taint> FirstUntoleratedTaint(const std::vector<Toleration>& tolerations,
                                           const std::vector<Taint>& taints);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_OBSERVED_STATE_H_
