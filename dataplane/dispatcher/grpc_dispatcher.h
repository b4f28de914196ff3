// The gRPC face of the dispatcher: GrpcDispatcher forwards each Dispatcher RPC to DispatcherService
// and converts absl::Status to grpc::Status (code and message kept); DispatcherServer listens with
// the configured TLS/mTLS credentials and message size limits.
//
// Threading: gRPC calls the handlers on its own threads; DispatcherService is thread-safe.
// DispatcherServer::Shutdown may be called from any thread, once or more.
#ifndef SLUICE_DATAPLANE_DISPATCHER_GRPC_DISPATCHER_H_
#define SLUICE_DATAPLANE_DISPATCHER_GRPC_DISPATCHER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/dispatcher/dispatcher_impl.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.grpc.pb.h"

namespace sluice::dispatcher {

class GrpcDispatcher final : public service::Dispatcher::Service {
 public:
  explicit GrpcDispatcher(DispatcherService* service) : service_(service) {}

  grpc::Status RegisterDataset(grpc::ServerContext*, const service::RegisterDatasetRequest* request,
                               service::RegisterDatasetResponse* response) override;
  grpc::Status GetOrCreateJob(grpc::ServerContext*, const service::GetOrCreateJobRequest* request,
                              service::GetOrCreateJobResponse* response) override;
  grpc::Status ClientHeartbeat(grpc::ServerContext*, const service::ClientHeartbeatRequest* request,
                               service::ClientHeartbeatResponse* response) override;
  grpc::Status ReleaseJobClient(grpc::ServerContext*, const service::ReleaseJobClientRequest* request,
                                service::ReleaseJobClientResponse* response) override;
  grpc::Status WorkerHeartbeat(grpc::ServerContext*, const service::WorkerHeartbeatRequest* request,
                               service::WorkerHeartbeatResponse* response) override;
  grpc::Status GetSplits(grpc::ServerContext*, const service::GetSplitsRequest* request,
                         service::GetSplitsResponse* response) override;
  grpc::Status WorkerDeregister(grpc::ServerContext*, const service::WorkerDeregisterRequest* request,
                                service::WorkerDeregisterResponse* response) override;
  grpc::Status DrainWorkers(grpc::ServerContext*, const service::DrainWorkersRequest* request,
                            service::DrainWorkersResponse* response) override;
  grpc::Status GetState(grpc::ServerContext*, const service::GetStateRequest* request,
                        service::GetStateResponse* response) override;

 private:
  DispatcherService* const service_;
};

struct DispatcherServerOptions {
  std::string address = "0.0.0.0:0";  // host:port; port 0 picks a free one
  rpc::TlsOptions tls;
  int max_message_bytes = rpc::kDefaultMaxMessageBytes;
};

class DispatcherServer {
 public:
  // Starts serving `service` (which must outlive the server). Errors name the address.
  static absl::StatusOr<std::unique_ptr<DispatcherServer>> Start(const DispatcherServerOptions& options,
                                                                 DispatcherService* service);
  ~DispatcherServer();  // Shutdown(now)

  int port() const { return port_; }
  // Stops accepting calls, cancels the ones still running at `deadline`, and waits for them.
  void Shutdown(absl::Time deadline);

 private:
  DispatcherServer() = default;
  std::unique_ptr<GrpcDispatcher> handler_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::dispatcher

#endif  // SLUICE_DATAPLANE_DISPATCHER_GRPC_DISPATCHER_H_
