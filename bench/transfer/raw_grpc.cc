#include "bench/transfer/raw_grpc.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
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

grpc::Status RawTransferService::Stream(grpc::ServerContext* context, const raw::RawStreamRequest* request,
                                        grpc::ServerWriter<raw::RawStreamResponse>* writer) {
  if (absl::Status s = ValidateRawRequest(*request); !s.ok()) return rpc::ToGrpc(s);
  const std::vector<std::string> elements = MakeElements(request->element_bytes(), request->distinct_elements());
  const int64_t per_message = ElementsPerMessage(request->element_bytes(),
                                                 request->max_response_bytes() > 0 ? request->max_response_bytes() : 1 << 20);
  raw::RawStreamResponse response;
  size_t next = 0;
  while (!context->IsCancelled()) {
    response.Clear();
    // Copies the stored bytes into the message, as a server holding its data elsewhere must.
    for (int64_t i = 0; i < per_message; ++i) {
      response.add_elements(elements[next]);
      if (++next == elements.size()) next = 0;
    }
    if (!writer->Write(response)) break;
  }
  return grpc::Status::OK;
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

absl::StatusOr<Throughput> ReadRawStream(const std::string& address, const raw::RawStreamRequest& request,
                                         const ReadWindow& window) {
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), rpc::MakeChannelArguments());
  auto stub = raw::RawTransfer::NewStub(channel);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<raw::RawStreamResponse>> reader = stub->Stream(&context, request);
  raw::RawStreamResponse response;
  int64_t skipped = 0;
  absl::Time warm_from = absl::InfiniteFuture();
  absl::Time start = absl::InfiniteFuture();
  Throughput t;
  std::vector<double> cpu_before;
  bool ended = false;
  while (true) {
    if (!reader->Read(&response)) {
      ended = true;
      break;
    }
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
  if (!ended) {
    context.TryCancel();
    while (reader->Read(&response)) {
    }
  }
  grpc::Status status = reader->Finish();
  if (ended) {
    if (!status.ok()) return rpc::ToAbsl(status);
    return absl::DataLossError("the raw gRPC stream ended before the measurement window closed");
  }
  return t;
}

}  // namespace sluice::bench
