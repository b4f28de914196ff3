#include "dataplane/worker/worker_test_util.h"

#include <catch2/catch.hpp>


#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/element_codec.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/rpc/credentials.h"
#include "dataplane/worker/element_buffer.h"
#include "dataplane/worker/split_provider.h"
#include "testing/test_util.h"

namespace sluice::worker::testing {

void FakeDispatcher::SetSplits(std::vector<pipeline::Split> splits, int64_t num_epochs) {
  absl::MutexLock lock(&mu_);
  splits_ = std::move(splits);
  queue_.assign(splits_.begin(), splits_.end());
  started_this_epoch_.clear();
  num_epochs_ = num_epochs;
  epoch_ = 0;
}

void FakeDispatcher::FailNextGetSplits(int n, absl::StatusCode code) {
  absl::MutexLock lock(&mu_);
  fail_get_splits_ = n;
  fail_code_ = code;
}

void FakeDispatcher::SetRelease(bool release) {
  absl::MutexLock lock(&mu_);
  release_ = release;
}

void FakeDispatcher::FailHeartbeats(bool fail) {
  absl::MutexLock lock(&mu_);
  fail_heartbeats_ = fail;
}

void FakeDispatcher::BlockGetSplits(bool block) {
  absl::MutexLock lock(&mu_);
  block_get_splits_ = block;
}

void FakeDispatcher::AssignTask(const std::string& worker_address, service::TaskDef task) {
  absl::MutexLock lock(&mu_);
  assigned_[worker_address][task.task_id()] = std::move(task);
}

void FakeDispatcher::DeleteTask(const std::string& worker_address, int64_t task_id) {
  absl::MutexLock lock(&mu_);
  assigned_[worker_address].erase(task_id);
  to_delete_[worker_address].insert(task_id);
}

absl::StatusOr<service::WorkerHeartbeatResponse> FakeDispatcher::WorkerHeartbeat(
    const service::WorkerHeartbeatRequest& request, const CallOptions&) {
  absl::MutexLock lock(&mu_);
  heartbeats_.push_back(request);
  if (fail_heartbeats_) return absl::UnavailableError("fake dispatcher: heartbeats fail");
  std::set<int64_t> known;
  for (const auto& task : request.tasks()) {
    known.insert(task.task_id());
    for (uint64_t index : task.started_split_indices()) {
      started_.insert(index);
      started_this_epoch_.insert(index);
    }
  }
  service::WorkerHeartbeatResponse response;
  for (const auto& [id, task] : assigned_[request.worker_address()]) {
    if (known.count(id) == 0 && !request.draining()) *response.add_new_tasks() = task;
  }
  for (int64_t id : to_delete_[request.worker_address()]) {
    if (known.count(id) > 0) response.add_tasks_to_delete(id);
  }
  return response;
}

absl::StatusOr<service::GetSplitsResponse> FakeDispatcher::GetSplits(const service::GetSplitsRequest& request,
                                                                     const CallOptions& options) {
  CancelCallback wake(options.cancel, [this] { absl::MutexLock lock(&mu_); });
  absl::MutexLock lock(&mu_);
  ++calls_;
  requests_.push_back(request);
  for (uint64_t index : request.started_split_indices()) {
    started_.insert(index);
    started_this_epoch_.insert(index);
  }
  auto unblocked = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !block_get_splits_ || IsCancelled(options.cancel); };
  mu_.Await(absl::Condition(&unblocked));
  if (IsCancelled(options.cancel)) return absl::CancelledError("fake dispatcher: call cancelled");
  if (fail_get_splits_ > 0) {
    --fail_get_splits_;
    // The acknowledgements did not arrive.
    for (uint64_t index : request.started_split_indices()) {
      started_.erase(started_.find(index));
      started_this_epoch_.erase(index);
    }
    return absl::Status(fail_code_, "fake dispatcher: injected failure");
  }
  for (const service::SplitProgress& p : request.progress()) {
    if (p.lease_end() >= 0) leases_[p.index()] = std::max(leases_[p.index()], p.lease_end());
    if (p.finished()) finished_.insert(p.index());
  }
  service::GetSplitsResponse response;
  response.set_epoch(epoch_);
  response.set_release(release_);
  if (request.epoch() > epoch_) {
    if (num_epochs_ >= 0 && request.epoch() >= num_epochs_) {
      response.set_end_of_splits(true);  // past the last epoch
      return response;
    }
    if (!queue_.empty() || started_this_epoch_.size() < splits_.size()) return response;  // not open yet
    epoch_ = request.epoch();
    queue_.assign(splits_.begin(), splits_.end());
    started_this_epoch_.clear();
    response.set_epoch(epoch_);
  } else if (request.epoch() < epoch_) {
    response.set_end_of_splits(true);
    return response;
  }
  for (int i = 0; i < request.max_splits() && !queue_.empty(); ++i) {
    *response.add_splits() = ToProto(queue_.front());
    handed_out_.push_back(queue_.front().index);
    queue_.pop_front();
  }
  if (response.splits_size() > 0) ++calls_with_splits_;
  // As the dispatcher: the epoch ends for a task once every split of it was handed out and started.
  response.set_end_of_splits(queue_.empty() && started_this_epoch_.size() == splits_.size());
  return response;
}

absl::Status FakeDispatcher::WorkerDeregister(const service::WorkerDeregisterRequest& request, const CallOptions&) {
  absl::MutexLock lock(&mu_);
  deregistered_.push_back(request.worker_address());
  if (heartbeats_at_deregistration_ < 0) heartbeats_at_deregistration_ = static_cast<int64_t>(heartbeats_.size());
  return absl::OkStatus();
}

int64_t FakeDispatcher::get_splits_calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}
int64_t FakeDispatcher::calls_with_splits() const {
  absl::MutexLock lock(&mu_);
  return calls_with_splits_;
}
std::vector<service::GetSplitsRequest> FakeDispatcher::get_splits_requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}
std::vector<uint64_t> FakeDispatcher::handed_out() const {
  absl::MutexLock lock(&mu_);
  return handed_out_;
}
std::multiset<uint64_t> FakeDispatcher::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}
std::map<uint64_t, int64_t> FakeDispatcher::leases() const {
  absl::MutexLock lock(&mu_);
  return leases_;
}
std::multiset<uint64_t> FakeDispatcher::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}
std::vector<service::WorkerHeartbeatRequest> FakeDispatcher::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}
std::vector<std::string> FakeDispatcher::deregistered() const {
  absl::MutexLock lock(&mu_);
  return deregistered_;
}
int64_t FakeDispatcher::heartbeats_at_deregistration() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_at_deregistration_;
}
int64_t FakeDispatcher::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

class FakeDispatcherServer::Service : public service::Dispatcher::Service {
 public:
  explicit Service(FakeDispatcher* fake) : fake_(fake) {}
  grpc::Status WorkerHeartbeat(grpc::ServerContext*, const service::WorkerHeartbeatRequest* request,
                               service::WorkerHeartbeatResponse* response) override {
    auto r = fake_->WorkerHeartbeat(*request, {});
    if (!r.ok()) return rpc::ToGrpc(r.status());
    *response = *std::move(r);
    return grpc::Status::OK;
  }
  grpc::Status GetSplits(grpc::ServerContext*, const service::GetSplitsRequest* request,
                         service::GetSplitsResponse* response) override {
    auto r = fake_->GetSplits(*request, {});
    if (!r.ok()) return rpc::ToGrpc(r.status());
    *response = *std::move(r);
    return grpc::Status::OK;
  }
  grpc::Status WorkerDeregister(grpc::ServerContext*, const service::WorkerDeregisterRequest* request,
                                service::WorkerDeregisterResponse*) override {
    return rpc::ToGrpc(fake_->WorkerDeregister(*request, {}));
  }

 private:
  FakeDispatcher* fake_;
};

FakeDispatcherServer::FakeDispatcherServer(FakeDispatcher* fake, std::shared_ptr<grpc::ServerCredentials> credentials,
                                           int port)
    : service_(std::make_unique<Service>(fake)) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), credentials ? credentials : grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  REQUIRE(server_ != nullptr);
  REQUIRE(port_ > 0);
}

FakeDispatcherServer::~FakeDispatcherServer() { Shutdown(); }

void FakeDispatcherServer::Shutdown() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_.reset();
}

std::string FakeDispatcherServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

pipeline::PipelineDef Spec(const std::string& yaml) {
  auto def = pipeline::ParsePipelineSpec(yaml, "test.yaml");
  INFO(def.status().ToString());
  REQUIRE(def.ok());
  return *def;
}

service::TaskDef MakeTask(int64_t task_id, const std::string& yaml, service::ShardingPolicy sharding) {
  service::TaskDef task;
  task.set_task_id(task_id);
  task.set_job_id(task_id);
  *task.mutable_pipeline() = Spec(yaml);
  task.set_dataset_id(pipeline::Fingerprint(task.pipeline()));
  task.set_sharding(sharding);
  task.set_num_workers(1);
  task.set_num_epochs(1);
  return task;
}

std::vector<pipeline::Split> SplitsOf(const std::string& yaml) {
  auto p = pipeline::Pipeline::Create(Spec(yaml));
  REQUIRE(p.ok());
  auto splits = (*p)->ListSplits();
  REQUIRE(splits.ok());
  return *splits;
}

int64_t DecodeInt(const service::ElementData& data, const std::string& field) {
  auto codec = static_cast<pipeline::Codec>(0);
  switch (data.compression()) {
    case service::COMPRESSION_LZ4: codec = pipeline::Codec::kLz4; break;
    case service::COMPRESSION_ZSTD: codec = pipeline::Codec::kZstd; break;
    default: codec = pipeline::Codec::kNone; break;
  }
  std::string raw = data.data();
  if (codec != pipeline::Codec::kNone) {
    auto d = pipeline::Decompress(data.data(), codec, data.uncompressed_size());
    REQUIRE(d.ok());
    raw = *d;
  }
  REQUIRE(raw.size() == data.uncompressed_size());
  auto element = pipeline::DecodeElement(std::make_shared<const std::string>(std::move(raw)));
  REQUIRE(element.ok());
  const pipeline::Tensor* t = element->Find(field);
  REQUIRE(t != nullptr);
  auto v = t->AsInt64();
  REQUIRE(v.ok());
  return *v;
}

TestCertificate WriteSelfSignedCertificate(const std::string& dir, const std::string& name) {
  return sluice::testing::MakeSelfSignedCertificate(dir, name);
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace sluice::worker::testing
