// Reading what AutoOrder did to a DataService's pipeline from its dispatcher (GetState, the
// dispatcher's RPC interface — the only way the operator reaches the data plane), for
// status.autoOrder. The dispatcher plans AutoOrder once, when it registers the DataService's
// pipeline (its default dataset) at start-up, so one read per dispatcher pod suffices.
//
// Threading: AutoOrderFromState is pure. GrpcAutoOrderReader is thread-safe (no shared mutable
// state; each read opens its own channel) and blocks for at most one RPC deadline.
#ifndef SLUICE_OPERATOR_DISPATCHER_AUTO_ORDER_H_
#define SLUICE_OPERATOR_DISPATCHER_AUTO_ORDER_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.pb.h"
#include "operator/reconciler.h"

namespace sluice::op {

// The report of the dispatcher's default dataset as status.autoOrder; outcome empty and a message
// saying why when the dispatcher reports none (no default pipeline, or AutoOrder off there).
AutoOrderStatus AutoOrderFromState(const service::GetStateResponse& state);

class AutoOrderReader {
 public:
  virtual ~AutoOrderReader() = default;
  // An error means the dispatcher could not be asked; the caller asks again on a later pass.
  virtual absl::StatusOr<AutoOrderStatus> Read(const ReadAutoOrder& read) = 0;
};

struct GrpcAutoOrderReaderOptions {
  rpc::TlsOptions tls;  // as GrpcWorkerDrainerOptions::tls
  absl::Duration rpc_timeout = absl::Seconds(5);
};

class GrpcAutoOrderReader final : public AutoOrderReader {
 public:
  explicit GrpcAutoOrderReader(GrpcAutoOrderReaderOptions options) : options_(std::move(options)) {}
  // Dials read.dispatcher_endpoint (the pod), or dispatcher_address when it is empty.
  absl::StatusOr<AutoOrderStatus> Read(const ReadAutoOrder& read) override;

 private:
  const GrpcAutoOrderReaderOptions options_;
};

}  // namespace sluice::op

#endif  // SLUICE_OPERATOR_DISPATCHER_AUTO_ORDER_H_
