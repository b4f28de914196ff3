// The dispatcher calls a worker makes, as an interface: the gRPC implementation lives in
// grpc_worker.h; unit tests use fakes. Each call blocks until it has an answer, fails, passes
// `options.deadline`, or `options.cancel` (may be null) is cancelled, in which case it returns
// CANCELLED promptly.
//
// Implementations are thread-safe: the heartbeat thread and every task's split provider call
// concurrently.
#ifndef SLUICE_DATAPLANE_WORKER_DISPATCHER_CLIENT_H_
#define SLUICE_DATAPLANE_WORKER_DISPATCHER_CLIENT_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/worker/cancel_token.h"
#include "dataservice.pb.h"

namespace sluice::worker {

struct CallOptions {
  CancelToken* cancel = nullptr;
  absl::Time deadline = absl::InfiniteFuture();  // implementations also apply their own default timeout
};

class DispatcherClient {
 public:
  virtual ~DispatcherClient() = default;
  virtual absl::StatusOr<service::WorkerHeartbeatResponse> WorkerHeartbeat(
      const service::WorkerHeartbeatRequest& request, const CallOptions& options) = 0;
  virtual absl::StatusOr<service::GetSplitsResponse> GetSplits(const service::GetSplitsRequest& request,
                                                               const CallOptions& options) = 0;
  virtual absl::Status WorkerDeregister(const service::WorkerDeregisterRequest& request,
                                        const CallOptions& options) = 0;
};

// Errors worth retrying: the dispatcher is restarting or briefly overloaded.
inline bool IsRetryableDispatcherError(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsResourceExhausted(status) ||
         absl::IsAborted(status);
}

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_DISPATCHER_CLIENT_H_
