// The Kubernetes objects a DataService owns, built as full JSON manifests: the dispatcher pod, its
// Service and journal claim, and the local and remote worker pods. Also their stable names, labels,
// ownerReference and the template hashes that detect a changed pod spec.
// Pure functions of the DataService; safe to call from any thread.
#ifndef SLUICE_OPERATOR_MANIFESTS_H_
#define SLUICE_OPERATOR_MANIFESTS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "operator/dataservice_types.h"

namespace sluice::op {

inline constexpr char kLabelName[] = "app.kubernetes.io/name";
inline constexpr char kLabelInstance[] = "app.kubernetes.io/instance";
inline constexpr char kLabelManagedBy[] = "app.kubernetes.io/managed-by";
inline constexpr char kLabelDataService[] = "sluice.dev/dataservice";
inline constexpr char kLabelRole[] = "sluice.dev/role";            // dispatcher | worker
inline constexpr char kLabelPlacement[] = "sluice.dev/placement";  // local | remote
inline constexpr char kLabelTemplateHash[] = "sluice.dev/template-hash";
// Annotation on local worker pods naming the consumer node they are pinned to.
inline constexpr char kAnnotationNode[] = "sluice.dev/node";
inline constexpr char kManagedByValue[] = "sluice-operator";

inline constexpr char kJournalMountPath[] = "/var/lib/sluice/journal";
inline constexpr char kPipelineMountDir[] = "/etc/sluice/pipeline";

enum class Pool { kLocal, kRemote };
std::string PoolName(Pool pool);  // "local" | "remote"

std::string DispatcherPodName(const DataService& ds);    // <ds>-dispatcher
std::string DispatcherServiceName(const DataService& ds);  // <ds>-dispatcher
std::string JournalClaimName(const DataService& ds);     // <ds>-dispatcher-journal
std::string WorkerPodName(const DataService& ds, Pool pool, int64_t ordinal);  // <ds>-worker-<pool>-<n>
// The pool and ordinal encoded in a worker pod name of this DataService, if it is one.
std::optional<std::pair<Pool, int64_t>> ParseWorkerPodName(const DataService& ds, const std::string& name);

// <service>.<namespace>.svc:<port>
std::string DispatcherAddress(const DataService& ds);
// Label selector of the worker pods as a string (status.selector, used by /scale).
std::string WorkerSelector(const DataService& ds);

// Controller ownerReference to the DataService (controller=true, blockOwnerDeletion=true).
nlohmann::json OwnerReference(const DataService& ds);

// Hash of everything in a worker pod of `pool` that is not specific to one pod (name, node);
// pods whose sluice.dev/template-hash differs run an old spec and are replaced gradually.
std::string WorkerTemplateHash(const DataService& ds, Pool pool);
std::string DispatcherTemplateHash(const DataService& ds);

// Full manifests. `node` is the consumer node a local worker is pinned to (ignored for remote).
nlohmann::json BuildWorkerPod(const DataService& ds, Pool pool, int64_t ordinal, const std::string& node);
nlohmann::json BuildDispatcherPod(const DataService& ds);
nlohmann::json BuildDispatcherService(const DataService& ds);
nlohmann::json BuildJournalClaim(const DataService& ds);

// 64-bit FNV-1a of `data` as 16 lowercase hex digits; stable across builds and platforms.
std::string StableHash(const std::string& data);

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_MANIFESTS_H_
