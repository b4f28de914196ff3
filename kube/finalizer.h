// Finalizer helper with kube-rs finalizer() semantics. Given the current object:
//   - not being deleted, finalizer missing -> add it (guarded JSON patch); the reconcile function is
//     not called (the write triggers a new watch event, which reconciles with the finalizer present)
//   - not being deleted, finalizer present -> reconcile(kApply, object)
//   - being deleted, finalizer present     -> reconcile(kCleanup, object); on success remove the
//     finalizer (guarded JSON patch: test /metadata/finalizers/<i> == name, remove it)
//   - being deleted, finalizer missing     -> nothing to do
// Guards that fail (someone else changed the finalizers) return Aborted (IsConflict): requeue.
//
// Threading: free functions; thread-safe as the Client is.
#ifndef SLUICE_KUBE_FINALIZER_H_
#define SLUICE_KUBE_FINALIZER_H_

#include <functional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kube/client.h"
#include "kube/controller.h"
#include "kube/resource.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {

enum class FinalizerEvent { kApply, kCleanup };

using FinalizerReconcile =
    std::function<absl::StatusOr<ReconcileResult>(FinalizerEvent event, const nlohmann::json& object)>;

bool HasFinalizer(const nlohmann::json& object, absl::string_view finalizer);
bool IsBeingDeleted(const nlohmann::json& object);

// Guarded patches; return the object as the server answered.
absl::StatusOr<nlohmann::json> AddFinalizer(Client& client, const ResourceRef& ref, const nlohmann::json& object,
                                            absl::string_view finalizer);
absl::StatusOr<nlohmann::json> RemoveFinalizer(Client& client, const ResourceRef& ref,
                                               const nlohmann::json& object, absl::string_view finalizer);

absl::StatusOr<ReconcileResult> Finalize(Client& client, const ResourceRef& ref, const nlohmann::json& object,
                                         absl::string_view finalizer, const FinalizerReconcile& reconcile);

}  // namespace sluice::kube

#endif  // SLUICE_KUBE_FINALIZER_H_
