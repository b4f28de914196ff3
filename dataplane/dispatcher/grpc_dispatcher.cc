#include "dataplane/dispatcher/grpc_dispatcher.h"

#include "absl/strings/str_cat.h"

namespace sluice::dispatcher {

grpc::Status GrpcDispatcher::RegisterDataset(grpc::ServerContext*, const service::RegisterDatasetRequest* request,
                                             service::RegisterDatasetResponse* response) {
  return rpc::ToGrpc(service_->RegisterDataset(*request, response));
}
grpc::Status GrpcDispatcher::GetOrCreateJob(grpc::ServerContext*, const service::GetOrCreateJobRequest* request,
                                            service::GetOrCreateJobResponse* response) {
  return rpc::ToGrpc(service_->GetOrCreateJob(*request, response));
}
grpc::Status GrpcDispatcher::ClientHeartbeat(grpc::ServerContext*, const service::ClientHeartbeatRequest* request,
                                             service::ClientHeartbeatResponse* response) {
  return rpc::ToGrpc(service_->ClientHeartbeat(*request, response));
}
grpc::Status GrpcDispatcher::ReleaseJobClient(grpc::ServerContext*, const service::ReleaseJobClientRequest* request,
                                              service::ReleaseJobClientResponse* response) {
  return rpc::ToGrpc(service_->ReleaseJobClient(*request, response));
}
grpc::Status GrpcDispatcher::WorkerHeartbeat(grpc::ServerContext*, const service::WorkerHeartbeatRequest* request,
                                             service::WorkerHeartbeatResponse* response) {
  return rpc::ToGrpc(service_->WorkerHeartbeat(*request, response));
}
grpc::Status GrpcDispatcher::GetSplits(grpc::ServerContext*, const service::GetSplitsRequest* request,
                                       service::GetSplitsResponse* response) {
  return rpc::ToGrpc(service_->GetSplits(*request, response));
}
grpc::Status GrpcDispatcher::WorkerDeregister(grpc::ServerContext*, const service::WorkerDeregisterRequest* request,
                                              service::WorkerDeregisterResponse* response) {
  return rpc::ToGrpc(service_->WorkerDeregister(*request, response));
}
grpc::Status GrpcDispatcher::DrainWorkers(grpc::ServerContext*, const service::DrainWorkersRequest* request,
                                          service::DrainWorkersResponse* response) {
  return rpc::ToGrpc(service_->DrainWorkers(*request, response));
}
grpc::Status GrpcDispatcher::GetState(grpc::ServerContext*, const service::GetStateRequest* request,
                                      service::GetStateResponse* response) {
  return rpc::ToGrpc(service_->GetState(*request, response));
}

absl::StatusOr<std::unique_ptr<DispatcherServer>> DispatcherServer::Start(const DispatcherServerOptions& options,
                                                                          DispatcherService* service) {
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_message_bytes: must be > 0, got ", options.max_message_bytes));
  }
  auto credentials = rpc::MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<DispatcherServer> server(new DispatcherServer());
  server->handler_ = std::make_unique<GrpcDispatcher>(service);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, *credentials, &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(server->handler_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", options.address,
                                               "' (address in use, or not a local address?)"));
  }
  return server;
}

DispatcherServer::~DispatcherServer() { Shutdown(absl::Now()); }

void DispatcherServer::Shutdown(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_ || server_ == nullptr) return;
    shut_down_ = true;
  }
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
}

}  // namespace sluice::dispatcher
