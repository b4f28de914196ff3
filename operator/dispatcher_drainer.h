// Draining a DataService's workers before it is deleted, through the dispatcher's RPC interface
// (proto/dataservice.proto, service Dispatcher) — the only way the operator reaches the data plane.
//
// One drain round: DrainWorkers marks the workers draining, so they get no new tasks or splits and
// hand their input back; GetState then tells how far they are.
//  - DrainScope::kDataService (the whole DataService is going): every worker of the dispatcher.
//    The drain is complete when every registered worker is draining and has no task left (its
//    jobs finished, or it deregistered) and no job still has clients attached (a finished job's
//    clients may still be reading what the workers buffered); EvaluateDrain decides that, purely.
//    The controller runs one round per reconcile of a deleted DataService until it is complete or
//    the drain timeout passes.
//  - DrainScope::kScaleDown (worker pods a scale-down removes): exactly the addresses named. Each
//    gets the dispatcher's delivery-confirmed verdict (local/worker_drain.h, the rule `sluice up`
//    stops its workers by): drained when no longer registered, draining with no task, or draining
//    and `drained` (clients received all it produced, it holds no split). The round is complete
//    when every named worker drained.
//
// Threading: EvaluateDrain is pure. GrpcWorkerDrainer is thread-safe (no shared mutable state; each
// round opens its own channel) and blocks for at most two RPC deadlines.
#ifndef SLUICE_OPERATOR_DISPATCHER_DRAINER_H_
#define SLUICE_OPERATOR_DISPATCHER_DRAINER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/rpc/credentials.h"
#include "operator/reconciler.h"
#include "dataservice.pb.h"

namespace sluice::op {

// Whether the workers of `state` have drained, with a message for events and logs
// ("the dispatcher reports 3 workers drained, ..." / "waiting for 1 of 3 workers and 1 jobs: worker
// 10.0.0.7:5051 (2 tasks), job 4 'train' (2 clients reading)").
DrainProgress EvaluateDrain(const service::GetStateResponse& state);

// The verdict for each of `addresses` (kScaleDown); complete when every one drained.
DrainProgress EvaluateWorkersDrain(const service::GetStateResponse& state, const std::vector<std::string>& addresses);

class WorkerDrainer {
 public:
  virtual ~WorkerDrainer() = default;
  // One drain round against the dispatcher named by `drain` (either scope; kScaleDown answers with
  // DrainProgress::workers, one verdict per address named). An error means the dispatcher could
  // not be asked (unreachable, failed call); the caller retries on its next pass.
  virtual absl::StatusOr<DrainProgress> Drain(const DrainWorkers& drain) = 0;
};

struct GrpcWorkerDrainerOptions {
  // TLS towards dispatchers. When TLS is on and no server name is set, the name expected in the
  // dispatcher's certificate is the host of DrainWorkers::dispatcher_address (the Service name).
  rpc::TlsOptions tls;
  absl::Duration rpc_timeout = absl::Seconds(5);  // deadline of each of the two calls
};

class GrpcWorkerDrainer final : public WorkerDrainer {
 public:
  explicit GrpcWorkerDrainer(GrpcWorkerDrainerOptions options) : options_(std::move(options)) {}
  // Dials drain.dispatcher_endpoint (the pod), or dispatcher_address when the pod has no IP.
  absl::StatusOr<DrainProgress> Drain(const DrainWorkers& drain) override;

 private:
  const GrpcWorkerDrainerOptions options_;
};

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_DISPATCHER_DRAINER_H_
