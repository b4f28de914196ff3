// The raw gRPC baseline of the transfer benchmark: a server that streams pre-made elements
// (raw_transfer.proto) and a client loop that reads them for a measured window.
//
// RawTransferService is thread-safe (each stream builds its own elements). RunRawServer blocks
// until SIGTERM or SIGINT; it runs as a child process of the benchmark (`sluice bench transfer
// --serve_raw_grpc`), so both sides of the comparison cross a process boundary over loopback.
#ifndef SLUICE_BENCH_TRANSFER_RAW_GRPC_H_
#define SLUICE_BENCH_TRANSFER_RAW_GRPC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/dataservice/bench_report.h"
#include "raw_transfer.grpc.pb.h"

namespace sluice::bench {

// Elements per message: as many as fit in max_response_bytes, at least one.
int64_t ElementsPerMessage(int64_t element_bytes, int64_t max_response_bytes);
// Checks a request's fields; errors name the field and the allowed range.
absl::Status ValidateRawRequest(const raw::RawStreamRequest& request);
// `count` deterministic pseudo-random byte strings of `bytes` each.
std::vector<std::string> MakeElements(int64_t bytes, int64_t count);

class RawTransferService final : public raw::RawTransfer::Service {
 public:
  grpc::Status Stream(grpc::ServerContext* context, const raw::RawStreamRequest* request,
                      grpc::ServerWriter<raw::RawStreamResponse>* writer) override;
};

// Serves RawTransfer on 127.0.0.1 (port 0: any), logs "msg=listening port=N" to stderr and waits
// for SIGTERM/SIGINT. Returns the process exit code.
int RunRawServer(int port);

// What a measured read should skip and how long it should count.
struct ReadWindow {
  int64_t skip_elements = 0;                      // not counted: start-up, cache filling
  absl::Duration warmup = absl::Milliseconds(500);  // not counted either (after the skipped elements)
  absl::Duration measure = absl::Seconds(2);
  std::vector<pid_t> cpu_pids;  // processes whose CPU time over the window goes into Throughput::cpu_seconds
};

// Streams from a RawTransfer server at `address` and counts the elements' bytes during the window.
absl::StatusOr<Throughput> ReadRawStream(const std::string& address, const raw::RawStreamRequest& request,
                                         const ReadWindow& window);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_TRANSFER_RAW_GRPC_H_
