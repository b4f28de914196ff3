#include "dataplane/client/testing/fake_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/element_codec.h"

namespace sluice::client::testing {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(5);  // how often blocked handlers check for cancellation
constexpr size_t kMaxResponseBytes = 1 << 20;

}  // namespace

void FakeWorker::Push(int64_t task_id, Item item) {
  absl::MutexLock l(&mu_);
  tasks_[task_id].items.push_back(std::move(item));
}

void FakeWorker::AddTask(int64_t task_id) {
  absl::MutexLock l(&mu_);
  tasks_[task_id];
}

void FakeWorker::PushElement(int64_t task_id, pipeline::Element element) {
  Push(task_id, Item{Item::Kind::kElement, std::move(element), {}, {}});
}
void FakeWorker::PushRaw(int64_t task_id, service::ElementData data) {
  Push(task_id, Item{Item::Kind::kRaw, {}, std::move(data), {}});
}
void FakeWorker::PushEnd(int64_t task_id) { Push(task_id, Item{Item::Kind::kEnd, {}, {}, {}}); }
void FakeWorker::PushError(int64_t task_id, grpc::Status status) {
  Push(task_id, Item{Item::Kind::kError, {}, {}, std::move(status)});
}

bool FakeWorker::EndSent(int64_t task_id) const {
  absl::MutexLock l(&mu_);
  auto it = tasks_.find(task_id);
  return it != tasks_.end() && it->second.end_sent;
}

size_t FakeWorker::Pending(int64_t task_id) const {
  absl::MutexLock l(&mu_);
  auto it = tasks_.find(task_id);
  return it == tasks_.end() ? 0 : it->second.items.size();
}

void FakeWorker::SetRoundFunction(RoundFunction fn) {
  absl::MutexLock l(&mu_);
  round_fn_ = std::move(fn);
}

void FakeWorker::SetRoundGate(int64_t round) {
  absl::MutexLock l(&mu_);
  round_gate_ = round;
}

std::vector<FakeWorker::RoundRequest> FakeWorker::round_requests() const {
  absl::MutexLock l(&mu_);
  return round_requests_;
}
int64_t FakeWorker::streams_opened() const {
  absl::MutexLock l(&mu_);
  return streams_opened_;
}
int64_t FakeWorker::active_streams() const {
  absl::MutexLock l(&mu_);
  return active_streams_;
}
int64_t FakeWorker::elements_sent() const {
  absl::MutexLock l(&mu_);
  return elements_sent_;
}
std::vector<service::GetElementsRequest> FakeWorker::stream_requests() const {
  absl::MutexLock l(&mu_);
  return stream_requests_;
}
std::map<service::Compression, int64_t> FakeWorker::codecs_sent() const {
  absl::MutexLock l(&mu_);
  return codecs_sent_;
}

void FakeWorker::Shutdown() {
  absl::MutexLock l(&mu_);
  shutdown_ = true;
}

service::ElementData FakeWorker::Encode(const pipeline::Element& element, service::Compression requested) {
  std::string bytes = pipeline::EncodeElement(element);
  pipeline::Codec codec = pipeline::Codec::kNone;
  switch (requested) {
    case service::COMPRESSION_AUTO: codec = pipeline::ChooseCodec(bytes); break;
    case service::COMPRESSION_LZ4: codec = pipeline::Codec::kLz4; break;
    case service::COMPRESSION_ZSTD: codec = pipeline::Codec::kZstd; break;
    default: codec = pipeline::Codec::kNone; break;
  }
  service::ElementData out;
  out.set_uncompressed_size(bytes.size());
  auto compressed = pipeline::Compress(bytes, codec);
  if (!compressed.ok()) codec = pipeline::Codec::kNone;
  const service::Compression sent = codec == pipeline::Codec::kLz4    ? service::COMPRESSION_LZ4
                                    : codec == pipeline::Codec::kZstd ? service::COMPRESSION_ZSTD
                                                                      : service::COMPRESSION_NONE;
  out.set_compression(sent);
  out.set_data(codec == pipeline::Codec::kNone ? std::move(bytes) : *std::move(compressed));
  absl::MutexLock l(&mu_);
  ++codecs_sent_[sent];
  return out;
}

grpc::Status FakeWorker::GetElements(grpc::ServerContext* ctx, const service::GetElementsRequest* req,
                                     grpc::ServerWriter<service::GetElementsResponse>* writer) {
  const int64_t task_id = req->task_id();
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is shutting down");
    if (!tasks_.count(task_id)) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("task_id ", task_id, " is not known"));
    }
    ++streams_opened_;
    ++active_streams_;
    stream_requests_.push_back(*req);
  }
  struct Leave {
    FakeWorker* w;
    ~Leave() {
      absl::MutexLock l(&w->mu_);
      --w->active_streams_;
    }
  } leave{this};
  const size_t max_items = req->max_elements() > 0 ? static_cast<size_t>(req->max_elements()) : 8;
  while (true) {
    std::vector<Item> batch;
    bool end = false;
    grpc::Status error;
    {
      absl::MutexLock l(&mu_);
      Task& task = tasks_[task_id];
      auto ready = [&] {
        mu_.AssertHeld();
        return shutdown_ || !task.items.empty();
      };
      while (!mu_.AwaitWithTimeout(absl::Condition(&ready), kPoll)) {
        if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
      }
      if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is shutting down");
      size_t bytes = 0;
      while (!task.items.empty() && batch.size() < max_items && bytes < kMaxResponseBytes) {
        Item& front = task.items.front();
        if (front.kind == Item::Kind::kError) {
          if (batch.empty()) {
            error = front.status;
            task.items.pop_front();
          }
          break;
        }
        if (front.kind == Item::Kind::kEnd) {
          end = true;
          task.end_sent = true;
          task.items.pop_front();
          break;
        }
        bytes += front.kind == Item::Kind::kRaw ? front.raw.data().size() : front.element.ByteSize();
        batch.push_back(std::move(front));
        task.items.pop_front();
      }
    }
    if (!error.ok()) return error;
    service::GetElementsResponse resp;
    for (auto& item : batch) {
      if (item.kind == Item::Kind::kRaw) {
        *resp.add_elements() = std::move(item.raw);
      } else {
        *resp.add_elements() = Encode(item.element, req->compression());
      }
    }
    resp.set_end_of_sequence(end);
    const int n = resp.elements_size();
    if (!writer->Write(resp)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    {
      absl::MutexLock l(&mu_);
      elements_sent_ += n;
    }
    if (end) return grpc::Status::OK;
  }
}

grpc::Status FakeWorker::GetElement(grpc::ServerContext* ctx, const service::GetElementsRequest* req,
                                    service::GetElementsResponse* resp) {
  RoundFunction fn;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is shutting down");
    round_requests_.push_back(RoundRequest{req->task_id(), req->round(), req->consumer_index()});
    auto open = [&] {
      mu_.AssertHeld();
      return shutdown_ || req->round() < round_gate_;
    };
    while (!mu_.AwaitWithTimeout(absl::Condition(&open), kPoll)) {
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    }
    if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is shutting down");
    fn = round_fn_;
  }
  if (!fn) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no round function set");
  RoundReply reply = fn(req->task_id(), req->round(), req->consumer_index());
  switch (reply.kind) {
    case RoundReply::Kind::kError: return reply.status;
    case RoundReply::Kind::kSkip: resp->set_round_skipped(true); break;
    case RoundReply::Kind::kEnd: resp->set_end_of_sequence(true); break;
    case RoundReply::Kind::kRaw: *resp->add_elements() = std::move(reply.raw); break;
    case RoundReply::Kind::kElement: {
      service::ElementData* d = resp->add_elements();
      *d = Encode(reply.element, req->compression());
      d->set_round(req->round());
      absl::MutexLock l(&mu_);
      ++elements_sent_;
      break;
    }
  }
  return grpc::Status::OK;
}

}  // namespace sluice::client::testing
