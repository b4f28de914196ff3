#include "bench/transfer/raw_grpc.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/rpc/credentials.h"

namespace sluice::bench {

namespace {
constexpr int64_t kMaxElementBytes = int64_t{64} << 20;
constexpr int64_t kMaxDistinctBytes = int64_t{512} << 20;
}  // namespace

int64_t ElementsPerMessage(int64_t element_bytes, int64_t max_response_bytes) {
  if (element_bytes <= 0) return 1;
  return std::max<int64_t>(1, max_response_bytes / element_bytes);
}

absl::Status ValidateRawRequest(const raw::RawStreamRequest& r) {
  if (r.element_bytes() < 1 || r.element_bytes() > kMaxElementBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("element_bytes must be in [1, ", kMaxElementBytes, "], got ", r.element_bytes()));
  }
  if (r.distinct_elements() < 1 || r.distinct_elements() * r.element_bytes() > kMaxDistinctBytes) {
    return absl::InvalidArgumentError(absl::StrCat("distinct_elements must be >= 1 and hold at most ",
                                                   kMaxDistinctBytes, " bytes in all, got ", r.distinct_elements(),
                                                   " of ", r.element_bytes(), " bytes"));
  }
  if (r.max_response_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_response_bytes must be >= 0, got ", r.max_response_bytes()));
  }
  return absl::OkStatus();
}

std::vector<std::string> MakeElements(int64_t bytes, int64_t count) {
  std::vector<std::string> out(static_cast<size_t>(count));
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (auto& e : out) {
    e.resize(static_cast<size_t>(bytes));
    for (char& c : e) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      c = static_cast<char>(x >> 56);
    }
  }
  return out;
}

std::vector<std::string> SerializedMessages(const raw::RawStreamRequest& request) {
  const std::vector<std::string> elements = MakeElements(request.element_bytes(), request.distinct_elements());
  const int64_t per_message = ElementsPerMessage(
      request.element_bytes(), request.max_response_bytes() > 0 ? request.max_response_bytes() : 1 << 20);
  const int64_t distinct = request.distinct_elements();
  const int64_t count = (distinct + per_message - 1) / per_message;
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(count));
  raw::RawStreamResponse response;
  for (int64_t m = 0; m < count; ++m) {
    response.Clear();
    for (int64_t i = 0; i < per_message; ++i) response.add_elements(elements[(m * per_message + i) % distinct]);
    out.push_back(response.SerializeAsString());
  }
  return out;
}

namespace {

// A gRPC slice owning `bytes`.
grpc::Slice OwningSlice(std::string bytes) {
  auto* owned = new std::string(std::move(bytes));
  return grpc::Slice(
      owned->data(), owned->size(), +[](void* p) { delete static_cast<std::string*>(p); }, owned);
}

// One stream: cycles through the pre-serialized messages, each write a ByteBuffer sharing the
// message's slice. gRPC allows one write in flight; OnWriteDone (gRPC's thread) starts the next at
// once. A failed write (the client cancelled or went away) ends the stream. Deletes itself in OnDone.
class RawStreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RawStreamReactor(std::vector<grpc::Slice> messages) : messages_(std::move(messages)) { WriteNext(); }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    buffer_ = grpc::ByteBuffer(&messages_[next_], 1);  // shares the slice: a reference count, no copy
    if (++next_ == messages_.size()) next_ = 0;
    StartWrite(&buffer_);
  }
  const std::vector<grpc::Slice> messages_;
  size_t next_ = 0;  // touched only by the one write chain, so by one thread at a time
  grpc::ByteBuffer buffer_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* RawTransferService::Stream(grpc::CallbackServerContext*,
                                                                       const grpc::ByteBuffer* request_bytes) {
  raw::RawStreamRequest request;
  grpc::ByteBuffer copy(*request_bytes);  // shares the slices
  grpc::Status parsed = grpc::GenericDeserialize<grpc::ProtoBufferReader, raw::RawStreamRequest>(&copy, &request);
  absl::Status valid = parsed.ok() ? ValidateRawRequest(request)
                                   : absl::InvalidArgumentError("RawStreamRequest does not parse");
  if (!valid.ok()) {
    class Failed final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
     public:
      explicit Failed(const grpc::Status& s) { Finish(s); }
      void OnDone() override { delete this; }
    };
    return new Failed(rpc::ToGrpc(valid));
  }
  if (fault_ != RawFault::kNone) {
    // Rewrite the elements the way the fault says, then serialize as usual.
    std::vector<std::string> messages = SerializedMessages(request);
    for (std::string& m : messages) {
      raw::RawStreamResponse r;
      r.ParseFromString(m);
      for (std::string& e : *r.mutable_elements()) {
        if (fault_ == RawFault::kShortElements) e.pop_back();
        if (fault_ == RawFault::kCorruptBytes) e.back() = static_cast<char>(e.back() ^ 1);
      }
      m = r.SerializeAsString();
    }
    std::vector<grpc::Slice> slices;
    for (std::string& m : messages) slices.push_back(OwningSlice(std::move(m)));
    return new RawStreamReactor(std::move(slices));
  }
  std::vector<grpc::Slice> slices;
  for (std::string& m : SerializedMessages(request)) slices.push_back(OwningSlice(std::move(m)));
  return new RawStreamReactor(std::move(slices));
}

int RunRawServer(int port) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  RawTransferService service;
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &bound);
  builder.SetMaxSendMessageSize(rpc::kDefaultMaxMessageBytes);
  builder.SetMaxReceiveMessageSize(rpc::kDefaultMaxMessageBytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    std::fprintf(stderr, "level=error msg=\"raw gRPC server cannot listen\" port=%d\n", port);
    return 1;
  }
  std::fprintf(stderr, "level=info msg=listening port=%d\n", bound);
  std::fflush(stderr);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

RawElementChecker::RawElementChecker(const raw::RawStreamRequest& request, bool check_contents)
    : element_bytes_(request.element_bytes()), check_contents_(check_contents) {
  if (check_contents_) expected_ = MakeElements(request.element_bytes(), request.distinct_elements());
  std::sort(expected_.begin(), expected_.end());
}

absl::Status RawElementChecker::Check(const std::string& element, int64_t index) const {
  if (static_cast<int64_t>(element.size()) != element_bytes_) {
    return absl::DataLossError(absl::StrCat("raw element ", index, " has ", element.size(), " bytes, not ", element_bytes_));
  }
  if (check_contents_ && !std::binary_search(expected_.begin(), expected_.end(), element)) {
    return absl::DataLossError(absl::StrCat("raw element ", index, " is not one of the elements the server makes"));
  }
  return absl::OkStatus();
}

namespace {

// Reads a RawTransfer stream with the callback API. gRPC's thread parses each message into
// `incoming_` and queues it; while fewer than kMaxQueued wait, it starts the next read at once,
// otherwise Pop (the consumer) restarts reading when it takes one. Popped messages come back
// through `spare_` so parsing reuses their strings. The owner must call Cancel and then Finish
// (which waits for OnDone) before destroying it.
class RawStreamReader final : public grpc::ClientReadReactor<raw::RawStreamResponse> {
 public:
  static constexpr size_t kMaxQueued = 4;

  RawStreamReader(raw::RawTransfer::Stub* stub, const raw::RawStreamRequest& request) : request_(request) {
    stub->async()->Stream(&context_, &request_, this);
    StartRead(&incoming_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    bool more = false;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        ended_ = true;
        return;
      }
      queue_.push_back(std::move(incoming_));
      if (!spare_.empty()) {
        incoming_ = std::move(spare_.back());
        spare_.pop_back();
      }
      more = queue_.size() < kMaxQueued;
      reading_ = more;
    }
    if (more) StartRead(&incoming_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }

  // The next message into `*out` (its previous contents are recycled); false when the stream ended.
  bool Pop(raw::RawStreamResponse* out) {
    bool restart = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || ended_ || done_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return false;
      spare_.push_back(std::move(*out));
      *out = std::move(queue_.front());
      queue_.pop_front();
      if (!reading_ && !ended_ && !done_) {
        reading_ = true;
        restart = true;
      }
    }
    if (restart) StartRead(&incoming_);
    return true;
  }

  void Cancel() { context_.TryCancel(); }

  // Waits for the call to end and returns its status.
  grpc::Status Finish() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }

 private:
  grpc::ClientContext context_;
  const raw::RawStreamRequest request_;
  raw::RawStreamResponse incoming_;  // written by gRPC while a read is pending, else by whoever starts one
  absl::Mutex mu_;
  std::deque<raw::RawStreamResponse> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<raw::RawStreamResponse> spare_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = true;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<Throughput> ReadRawStream(const std::string& address, const raw::RawStreamRequest& request,
                                         const ReadWindow& window, bool check_contents) {
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), rpc::MakeChannelArguments());
  auto stub = raw::RawTransfer::NewStub(channel);
  // Invalid requests are the server's to refuse (the reader reports its status); the checker
  // only needs a sane size to build its expectations.
  const bool sane = ValidateRawRequest(request).ok();
  const RawElementChecker checker(request, check_contents && sane);
  RawStreamReader reader(stub.get(), request);
  raw::RawStreamResponse response;
  int64_t skipped = 0;
  int64_t index = 0;
  absl::Time warm_from = absl::InfiniteFuture();
  absl::Time start = absl::InfiniteFuture();
  Throughput t;
  std::vector<double> cpu_before;
  bool ended = false;
  absl::Status bad;
  while (true) {
    if (!reader.Pop(&response)) {
      ended = true;
      break;
    }
    for (const std::string& e : response.elements()) {
      if (absl::Status s = checker.Check(e, index++); !s.ok()) bad = s;
    }
    if (!bad.ok()) break;
    const absl::Time now = absl::Now();
    if (start == absl::InfiniteFuture()) {
      // Still warming up: first skip elements, then wait out the warm-up time.
      if (skipped < window.skip_elements) {
        skipped += response.elements_size();
        if (skipped >= window.skip_elements) warm_from = now;
        continue;
      }
      if (warm_from == absl::InfiniteFuture()) warm_from = now;
      if (now - warm_from >= window.warmup) {
        start = now;
        cpu_before = SampleCpuSeconds(window.cpu_pids);
      }
      continue;
    }
    for (const std::string& e : response.elements()) t.bytes += static_cast<int64_t>(e.size());
    t.elements += response.elements_size();
    if (now - start >= window.measure) {
      t.seconds = absl::ToDoubleSeconds(now - start);
      t.cpu_seconds = SampleCpuSeconds(window.cpu_pids);
      for (size_t i = 0; i < t.cpu_seconds.size(); ++i) t.cpu_seconds[i] -= cpu_before[i];
      break;
    }
  }
  if (!ended) reader.Cancel();
  grpc::Status status = reader.Finish();
  if (!bad.ok()) return bad;
  if (ended) {
    if (!status.ok()) return rpc::ToAbsl(status);
    return absl::DataLossError("the raw gRPC stream ended before the measurement window closed");
  }
  return t;
}

}  // namespace sluice::bench
