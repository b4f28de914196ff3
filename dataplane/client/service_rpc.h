// The calls the client makes, as interfaces: to the dispatcher (DispatcherRpc: registration, the
// job, heartbeats, release) and to workers (WorkerRpc: a task's element stream, one coordinated
// round). The gRPC implementations are made by MakeGrpcDispatcherRpc and MakeGrpcWorkerRpc; the
// client's loops (job_session.h, task_readers.h, round_reader.h) see only these interfaces, so
// their unit tests use in-process fakes.
//
// Each call blocks until it has an answer, fails, passes `options.deadline`, or `options.cancel`
// (may be null) is cancelled, in which case it ends promptly with CANCELLED. Errors are gRPC's
// status converted to absl::Status (same code and message).
//
// Threading: implementations are thread-safe (the session and every reader call concurrently).
// An ElementStream is used by one thread, except Cancel(), which any thread may call.
#ifndef SLUICE_DATAPLANE_CLIENT_SERVICE_RPC_H_
#define SLUICE_DATAPLANE_CLIENT_SERVICE_RPC_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/client/cancel_token.h"
#include "dataservice.pb.h"

namespace sluice::client {

struct CallOptions {
  absl::Time deadline = absl::InfiniteFuture();
  // Wait for the channel to connect instead of failing fast (retries after a failure; see
  // retry_policy.h, "Reconnecting").
  bool wait_for_ready = false;
  CancelToken* cancel = nullptr;
};

class DispatcherRpc {
 public:
  virtual ~DispatcherRpc() = default;
  virtual absl::StatusOr<service::RegisterDatasetResponse> RegisterDataset(
      const service::RegisterDatasetRequest& request, const CallOptions& options) = 0;
  virtual absl::StatusOr<service::GetOrCreateJobResponse> GetOrCreateJob(
      const service::GetOrCreateJobRequest& request, const CallOptions& options) = 0;
  virtual absl::StatusOr<service::ClientHeartbeatResponse> ClientHeartbeat(
      const service::ClientHeartbeatRequest& request, const CallOptions& options) = 0;
  virtual absl::Status ReleaseJobClient(const service::ReleaseJobClientRequest& request,
                                        const CallOptions& options) = 0;
};

// A server stream of GetElementsResponse messages, read as their wire bytes (the reader parses
// them, element_decoder.h's ResponseParser, copying each element's bytes once).
class ElementStream {
 public:
  virtual ~ElementStream() = default;
  // The next message's bytes into `message`; false at the end of the stream, whether it ended
  // cleanly or not (Finish says which).
  virtual bool Read(grpc::ByteBuffer* message) = 0;
  // Ends the stream early (thread-safe; Read then returns false).
  virtual void Cancel() = 0;
  // The stream's status, once Read returned false. Call once.
  virtual absl::Status Finish() = 0;
};

class WorkerRpc {
 public:
  virtual ~WorkerRpc() = default;
  // Opens a GetElements stream to the worker at `address`. Never null: a stream that cannot open
  // reads nothing and finishes with the error.
  virtual std::unique_ptr<ElementStream> GetElements(const std::string& address,
                                                     const service::GetElementsRequest& request,
                                                     const CallOptions& options) = 0;
  virtual absl::StatusOr<service::GetElementsResponse> GetElement(const std::string& address,
                                                                  const service::GetElementsRequest& request,
                                                                  const CallOptions& options) = 0;
  // Whether the connection to the worker at `address` is up now (gRPC: the channel is READY). A
  // stream waiting (wait_for_ready) on a connection that is not up has received nothing and can
  // receive nothing until it connects; on one that is up, the worker may have sent elements the
  // reader has not read yet.
  virtual bool Connected(const std::string& address) = 0;
};

std::unique_ptr<DispatcherRpc> MakeGrpcDispatcherRpc(std::shared_ptr<grpc::Channel> channel);
// One channel per worker address, made on first use with these credentials and arguments.
std::unique_ptr<WorkerRpc> MakeGrpcWorkerRpc(std::shared_ptr<grpc::ChannelCredentials> credentials,
                                             grpc::ChannelArguments channel_args);

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_SERVICE_RPC_H_
