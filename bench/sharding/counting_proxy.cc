#include "bench/sharding/counting_proxy.h"

#include "absl/strings/str_cat.h"
#include "dataplane/rpc/credentials.h"

namespace sluice::bench {

void CountGetSplits(const service::GetSplitsRequest& request, const service::GetSplitsResponse& response,
                    DispatcherCallCounts* counts) {
  ++counts->get_splits_calls;
  counts->splits_handed_out += response.splits_size();
  counts->starts_acknowledged += request.started_split_indices_size();
  if (response.end_of_splits()) ++counts->end_of_splits_answers;
  if (request.max_splits() == 0) {
    ++counts->ack_only_calls;
    return;
  }
  ++counts->fetch_calls;
  if (response.splits_size() > 0) ++counts->fetches_with_splits;
  if (response.splits_size() == 0 && !response.end_of_splits()) ++counts->empty_answers;
}

absl::StatusOr<std::unique_ptr<CountingDispatcherProxy>> CountingDispatcherProxy::Start(
    const std::string& dispatcher_address) {
  std::unique_ptr<CountingDispatcherProxy> proxy(new CountingDispatcherProxy());
  proxy->stub_ = service::Dispatcher::NewStub(
      grpc::CreateCustomChannel(dispatcher_address, grpc::InsecureChannelCredentials(), rpc::MakeChannelArguments()));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &proxy->port_);
  builder.SetMaxReceiveMessageSize(rpc::kDefaultMaxMessageBytes);
  builder.SetMaxSendMessageSize(rpc::kDefaultMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.RegisterService(proxy.get());
  proxy->server_ = builder.BuildAndStart();
  if (proxy->server_ == nullptr || proxy->port_ == 0) {
    return absl::UnavailableError("the counting dispatcher proxy cannot listen on 127.0.0.1");
  }
  return proxy;
}

CountingDispatcherProxy::~CountingDispatcherProxy() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

std::string CountingDispatcherProxy::address() const { return absl::StrCat("127.0.0.1:", port_); }

DispatcherCallCounts CountingDispatcherProxy::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void CountingDispatcherProxy::ResetCounts() {
  absl::MutexLock lock(&mu_);
  counts_ = DispatcherCallCounts();
}

template <typename Request, typename Response, typename Method>
grpc::Status CountingDispatcherProxy::Forward(grpc::ServerContext* server_context, const Request& request,
                                              Response* response, Method method) {
  grpc::ClientContext context;
  context.set_deadline(server_context->deadline());
  grpc::Status status = (stub_.get()->*method)(&context, request, response);
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    ++counts_.failed_calls;
  }
  return status;
}

#define SLUICE_FORWARD(Method)                                                                  \
  grpc::Status CountingDispatcherProxy::Method(grpc::ServerContext* c, const service::Method##Request* q, \
                                               service::Method##Response* r) {                  \
    return Forward(c, *q, r, &service::Dispatcher::Stub::Method);                               \
  }
SLUICE_FORWARD(RegisterDataset)
SLUICE_FORWARD(GetOrCreateJob)
SLUICE_FORWARD(ClientHeartbeat)
SLUICE_FORWARD(ReleaseJobClient)
SLUICE_FORWARD(WorkerDeregister)
SLUICE_FORWARD(DrainWorkers)
SLUICE_FORWARD(GetState)
#undef SLUICE_FORWARD

grpc::Status CountingDispatcherProxy::WorkerHeartbeat(grpc::ServerContext* c, const service::WorkerHeartbeatRequest* q,
                                                      service::WorkerHeartbeatResponse* r) {
  grpc::Status status = Forward(c, *q, r, &service::Dispatcher::Stub::WorkerHeartbeat);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    ++counts_.worker_heartbeats;
  }
  return status;
}

grpc::Status CountingDispatcherProxy::GetSplits(grpc::ServerContext* c, const service::GetSplitsRequest* q,
                                                service::GetSplitsResponse* r) {
  grpc::Status status = Forward(c, *q, r, &service::Dispatcher::Stub::GetSplits);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    CountGetSplits(*q, *r, &counts_);
  }
  return status;
}

}  // namespace sluice::bench
