#include "dataplane/client/service_rpc.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.grpc.pb.h"

#include <grpcpp/support/sync_stream.h>

namespace sluice::client {
namespace {

void Prepare(grpc::ClientContext& ctx, const CallOptions& options) {
  if (options.deadline != absl::InfiniteFuture()) ctx.set_deadline(absl::ToChronoTime(options.deadline));
  ctx.set_wait_for_ready(options.wait_for_ready);
}

// A unary call on `stub`, cancelled (TryCancel) when options.cancel is. A cancel that comes before
// the call starts is applied by gRPC when it starts.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Unary(Stub* stub,
                               grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                               const Request& request, const CallOptions& options) {
  grpc::ClientContext ctx;
  Prepare(ctx, options);
  CancelCallback on_cancel(options.cancel, [&ctx] { ctx.TryCancel(); });
  Response response;
  const grpc::Status s = (stub->*method)(&ctx, request, &response);
  if (!s.ok()) return rpc::ToAbsl(s);
  return response;
}

class GrpcDispatcherRpc final : public DispatcherRpc {
 public:
  explicit GrpcDispatcherRpc(std::shared_ptr<grpc::Channel> channel)
      : stub_(service::Dispatcher::NewStub(std::move(channel))) {}

  absl::StatusOr<service::RegisterDatasetResponse> RegisterDataset(const service::RegisterDatasetRequest& request,
                                                                   const CallOptions& options) override {
    return Unary(stub_.get(), &service::Dispatcher::Stub::RegisterDataset, request, options);
  }
  absl::StatusOr<service::GetOrCreateJobResponse> GetOrCreateJob(const service::GetOrCreateJobRequest& request,
                                                                 const CallOptions& options) override {
    return Unary(stub_.get(), &service::Dispatcher::Stub::GetOrCreateJob, request, options);
  }
  absl::StatusOr<service::ClientHeartbeatResponse> ClientHeartbeat(const service::ClientHeartbeatRequest& request,
                                                                   const CallOptions& options) override {
    return Unary(stub_.get(), &service::Dispatcher::Stub::ClientHeartbeat, request, options);
  }
  absl::Status ReleaseJobClient(const service::ReleaseJobClientRequest& request, const CallOptions& options) override {
    return Unary(stub_.get(), &service::Dispatcher::Stub::ReleaseJobClient, request, options).status();
  }

 private:
  std::unique_ptr<service::Dispatcher::Stub> stub_;
};

// GetElements read raw: the generated stub's method, with ByteBuffer responses.
constexpr char kGetElementsMethod[] = "/sluice.service.Worker/GetElements";

class GrpcElementStream final : public ElementStream {
 public:
  GrpcElementStream(grpc::ChannelInterface* channel, const grpc::internal::RpcMethod& method,
                    const service::GetElementsRequest& request, const CallOptions& options) {
    Prepare(ctx_, options);
    on_cancel_.emplace(options.cancel, [this] { ctx_.TryCancel(); });
    reader_.reset(grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel, method, &ctx_, request));
  }
  ~GrpcElementStream() override {
    on_cancel_.reset();  // no cancel callback runs once the context starts going away
    if (!finished_) {
      ctx_.TryCancel();
      (void)reader_->Finish();
    }
  }

  bool Read(grpc::ByteBuffer* message) override { return reader_->Read(message); }
  void Cancel() override { ctx_.TryCancel(); }
  absl::Status Finish() override {
    finished_ = true;
    return rpc::ToAbsl(reader_->Finish());
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader_;
  std::optional<CancelCallback> on_cancel_;
  bool finished_ = false;
};

class GrpcWorkerRpc final : public WorkerRpc {
 public:
  GrpcWorkerRpc(std::shared_ptr<grpc::ChannelCredentials> credentials, grpc::ChannelArguments channel_args)
      : credentials_(std::move(credentials)), channel_args_(std::move(channel_args)) {}

  std::unique_ptr<ElementStream> GetElements(const std::string& address, const service::GetElementsRequest& request,
                                             const CallOptions& options) override {
    Worker* w = WorkerFor(address);
    return std::make_unique<GrpcElementStream>(w->channel.get(), *w->get_elements, request, options);
  }
  absl::StatusOr<service::GetElementsResponse> GetElement(const std::string& address,
                                                          const service::GetElementsRequest& request,
                                                          const CallOptions& options) override {
    return Unary(StubFor(address), &service::Worker::Stub::GetElement, request, options);
  }
  bool Connected(const std::string& address) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    auto it = workers_.find(address);
    return it != workers_.end() && it->second.channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY;
  }

 private:
  struct Worker {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<service::Worker::Stub> stub;
    std::unique_ptr<grpc::internal::RpcMethod> get_elements;
  };
  // Workers live as long as this object (never erased; std::map nodes do not move), so the
  // pointer stays valid.
  Worker* WorkerFor(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    Worker& w = workers_[address];
    if (!w.stub) {
      w.channel = grpc::CreateCustomChannel(address, credentials_, channel_args_);
      w.stub = service::Worker::NewStub(w.channel);
      w.get_elements = std::make_unique<grpc::internal::RpcMethod>(
          kGetElementsMethod, grpc::internal::RpcMethod::SERVER_STREAMING, w.channel);
    }
    return &w;
  }
  service::Worker::Stub* StubFor(const std::string& address) { return WorkerFor(address)->stub.get(); }

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const grpc::ChannelArguments channel_args_;
  absl::Mutex mu_;
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<DispatcherRpc> MakeGrpcDispatcherRpc(std::shared_ptr<grpc::Channel> channel) {
  return std::make_unique<GrpcDispatcherRpc>(std::move(channel));
}

std::unique_ptr<WorkerRpc> MakeGrpcWorkerRpc(std::shared_ptr<grpc::ChannelCredentials> credentials,
                                             grpc::ChannelArguments channel_args) {
  return std::make_unique<GrpcWorkerRpc>(std::move(credentials), std::move(channel_args));
}

}  // namespace sluice::client
