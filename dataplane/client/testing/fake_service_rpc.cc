#include "dataplane/client/testing/fake_service_rpc.h"

#include <utility>

#include "dataplane/pipeline/element_codec.h"

namespace sluice::client::testing {

service::ElementData RawElement(const pipeline::Element& element) {
  service::ElementData out;
  std::string bytes = pipeline::EncodeElement(element);
  out.set_uncompressed_size(bytes.size());
  out.set_compression(service::COMPRESSION_NONE);
  out.set_data(std::move(bytes));
  return out;
}

service::GetElementsResponse ValuesResponse(const std::vector<int64_t>& values, bool end_of_sequence) {
  service::GetElementsResponse resp;
  for (int64_t v : values) {
    pipeline::Element e;
    e.Set("v", pipeline::Tensor::Scalar(v));
    e.set_key(static_cast<uint64_t>(v));
    *resp.add_elements() = RawElement(e);
  }
  resp.set_end_of_sequence(end_of_sequence);
  return resp;
}

// ---------------------------------------------------------------- FakeDispatcherRpc

void FakeDispatcherRpc::Record(const std::string& call, const CallOptions& options) {
  absl::MutexLock l(&mu_);
  calls_.push_back(call);
  wait_for_ready_.push_back(options.wait_for_ready);
}

absl::StatusOr<service::RegisterDatasetResponse> FakeDispatcherRpc::RegisterDataset(
    const service::RegisterDatasetRequest& request, const CallOptions& options) {
  Record("RegisterDataset", options);
  if (register_dataset) return register_dataset(request, options);
  service::RegisterDatasetResponse resp;
  resp.set_dataset_id("registered");
  return resp;
}

absl::StatusOr<service::GetOrCreateJobResponse> FakeDispatcherRpc::GetOrCreateJob(
    const service::GetOrCreateJobRequest& request, const CallOptions& options) {
  Record("GetOrCreateJob", options);
  {
    absl::MutexLock l(&mu_);
    job_requests_.push_back(request);
  }
  if (get_or_create_job) return get_or_create_job(request, options);
  service::GetOrCreateJobResponse resp;
  resp.set_job_id(1);
  resp.set_job_client_id(1);
  resp.set_iteration(1);
  resp.set_dataset_id(request.spec().dataset_id());
  return resp;
}

absl::StatusOr<service::ClientHeartbeatResponse> FakeDispatcherRpc::ClientHeartbeat(
    const service::ClientHeartbeatRequest& request, const CallOptions& options) {
  Record("ClientHeartbeat", options);
  {
    absl::MutexLock l(&mu_);
    heartbeats_.push_back(request);
  }
  if (client_heartbeat) return client_heartbeat(request, options);
  return service::ClientHeartbeatResponse();
}

absl::Status FakeDispatcherRpc::ReleaseJobClient(const service::ReleaseJobClientRequest& request,
                                                 const CallOptions& options) {
  Record("ReleaseJobClient", options);
  if (release_job_client) return release_job_client(request);
  return absl::OkStatus();
}

std::vector<std::string> FakeDispatcherRpc::calls() const {
  absl::MutexLock l(&mu_);
  return calls_;
}
std::vector<bool> FakeDispatcherRpc::wait_for_ready() const {
  absl::MutexLock l(&mu_);
  return wait_for_ready_;
}
std::vector<service::ClientHeartbeatRequest> FakeDispatcherRpc::heartbeats() const {
  absl::MutexLock l(&mu_);
  return heartbeats_;
}
std::vector<service::GetOrCreateJobRequest> FakeDispatcherRpc::job_requests() const {
  absl::MutexLock l(&mu_);
  return job_requests_;
}

// ---------------------------------------------------------------- FakeWorkerRpc

// Reads its task's script; a cancel (Cancel() or the call's token) ends it with CANCELLED.
class FakeWorkerRpc::Stream final : public ElementStream {
 public:
  Stream(FakeWorkerRpc* rpc, int64_t task_id, CancelToken* token) : rpc_(rpc), task_id_(task_id) {
    on_cancel_ = std::make_unique<CancelCallback>(token, [this] { Cancel(); });
  }
  ~Stream() override {
    on_cancel_.reset();
    absl::MutexLock l(&rpc_->mu_);
    if (!ended_) --rpc_->open_;
    ended_ = true;
  }

  bool Read(grpc::ByteBuffer* message) override {
    absl::MutexLock l(&rpc_->mu_);
    auto ready = [this] {
      rpc_->mu_.AssertHeld();
      return cancelled_ || ended_ || !rpc_->scripts_[task_id_].empty();
    };
    rpc_->mu_.Await(absl::Condition(&ready));
    if (ended_) return false;
    if (cancelled_) {
      End(absl::CancelledError("cancelled by the client"));
      return false;
    }
    Event e = std::move(rpc_->scripts_[task_id_].front());
    rpc_->scripts_[task_id_].pop_front();
    if (e.close) {
      End(e.status);
      return false;
    }
    // As a worker sends it: the message's wire bytes.
    auto* bytes = new std::string(e.response.SerializeAsString());
    grpc::Slice slice(
        bytes->data(), bytes->size(), +[](void* p) { delete static_cast<std::string*>(p); }, bytes);
    *message = grpc::ByteBuffer(&slice, 1);
    return true;
  }
  void Cancel() override {
    absl::MutexLock l(&rpc_->mu_);
    cancelled_ = true;
  }
  absl::Status Finish() override {
    absl::MutexLock l(&rpc_->mu_);
    if (!ended_) End(cancelled_ ? absl::CancelledError("cancelled by the client") : absl::OkStatus());
    return status_;
  }

 private:
  void End(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(rpc_->mu_) {
    ended_ = true;
    status_ = std::move(status);
    --rpc_->open_;
  }
  FakeWorkerRpc* const rpc_;
  const int64_t task_id_;
  bool cancelled_ ABSL_GUARDED_BY(rpc_->mu_) = false;
  bool ended_ ABSL_GUARDED_BY(rpc_->mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(rpc_->mu_);
  std::unique_ptr<CancelCallback> on_cancel_;
};

void FakeWorkerRpc::Send(int64_t task_id, service::GetElementsResponse response) {
  absl::MutexLock l(&mu_);
  scripts_[task_id].push_back(Event{false, absl::OkStatus(), std::move(response)});
}

void FakeWorkerRpc::Close(int64_t task_id, absl::Status status) {
  absl::MutexLock l(&mu_);
  scripts_[task_id].push_back(Event{true, std::move(status), {}});
}

void FakeWorkerRpc::SetConnected(bool connected) {
  absl::MutexLock l(&mu_);
  connected_ = connected;
}

bool FakeWorkerRpc::Connected(const std::string&) {
  absl::MutexLock l(&mu_);
  return connected_;
}

int64_t FakeWorkerRpc::streams_opened(int64_t task_id) const {
  absl::MutexLock l(&mu_);
  auto it = opened_.find(task_id);
  return it == opened_.end() ? 0 : it->second;
}

int64_t FakeWorkerRpc::open_streams() const {
  absl::MutexLock l(&mu_);
  return open_;
}

std::vector<service::GetElementsRequest> FakeWorkerRpc::element_requests() const {
  absl::MutexLock l(&mu_);
  return element_requests_;
}

std::vector<bool> FakeWorkerRpc::stream_wait_for_ready() const {
  absl::MutexLock l(&mu_);
  return stream_wait_for_ready_;
}

std::unique_ptr<ElementStream> FakeWorkerRpc::GetElements(const std::string&, const service::GetElementsRequest& request,
                                                          const CallOptions& options) {
  {
    absl::MutexLock l(&mu_);
    ++opened_[request.task_id()];
    ++open_;
    stream_wait_for_ready_.push_back(options.wait_for_ready);
  }
  return std::make_unique<Stream>(this, request.task_id(), options.cancel);
}

absl::StatusOr<service::GetElementsResponse> FakeWorkerRpc::GetElement(const std::string&,
                                                                       const service::GetElementsRequest& request,
                                                                       const CallOptions&) {
  {
    absl::MutexLock l(&mu_);
    element_requests_.push_back(request);
  }
  if (get_element) return get_element(request);
  return absl::UnimplementedError("no get_element handler");
}

}  // namespace sluice::client::testing
