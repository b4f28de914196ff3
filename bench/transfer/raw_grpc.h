// The raw gRPC baseline of the transfer benchmark, written the way a competent engineer would
// stream pre-made bytes with gRPC (raw_transfer.proto):
//  - the server serializes each distinct message once, when the stream starts, and writes it
//    from then on as a ByteBuffer sharing that slice (no copy, no serialization per write), from
//    the callback API: OnWriteDone starts the next write at once on gRPC's thread, so writes are
//    back to back with no thread hand-off;
//  - the client reads with the callback API too: gRPC's thread parses each message and queues it
//    (a few messages deep, reusing parsed messages' storage), and the consumer thread only pops
//    and counts, as a training loop would consume; reading resumes when the consumer makes room.
//
// RawTransferService is thread-safe (each stream has its own reactor and messages). RunRawServer
// blocks until SIGTERM or SIGINT; it runs as a child process of the benchmark (`sluice bench
// transfer --serve_raw_grpc`), so both sides of the comparison cross a process boundary over
// loopback.
#ifndef SLUICE_BENCH_TRANSFER_RAW_GRPC_H_
#define SLUICE_BENCH_TRANSFER_RAW_GRPC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/dataservice/bench_report.h"
#include "raw_transfer.grpc.pb.h"

#include <grpcpp/support/byte_buffer.h>

namespace sluice::bench {

// Elements per message: as many as fit in max_response_bytes, at least one.
int64_t ElementsPerMessage(int64_t element_bytes, int64_t max_response_bytes);
// Checks a request's fields; errors name the field and the allowed range.
absl::Status ValidateRawRequest(const raw::RawStreamRequest& request);
// `count` deterministic pseudo-random byte strings of `bytes` each.
std::vector<std::string> MakeElements(int64_t bytes, int64_t count);

// The serialized RawStreamResponse messages a stream cycles through: message m holds elements
// (m * per_message + i) mod distinct_elements, i < per_message, of MakeElements(...); enough
// messages that every element is sent. The request must be valid.
std::vector<std::string> SerializedMessages(const raw::RawStreamRequest& request);

// What a test can make the server get wrong, to check that the client notices.
enum class RawFault {
  kNone,
  kShortElements,  // each element is one byte short
  kCorruptBytes,   // each element's last byte is flipped
};

class RawTransferService final : public raw::RawTransfer::WithRawCallbackMethod_Stream<raw::RawTransfer::CallbackService> {
 public:
  explicit RawTransferService(RawFault fault = RawFault::kNone) : fault_(fault) {}
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Stream(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request) override;

 private:
  const RawFault fault_;
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

// Checks raw elements against what the server is supposed to send: every element must have the
// requested size (always checked, it is cheap) and, with `check_contents`, be byte for byte one of
// MakeElements(element_bytes, distinct_elements). DataLoss naming the element otherwise.
class RawElementChecker {
 public:
  RawElementChecker(const raw::RawStreamRequest& request, bool check_contents);
  absl::Status Check(const std::string& element, int64_t index) const;

 private:
  int64_t element_bytes_;
  bool check_contents_;
  std::vector<std::string> expected_;
};

// Streams from a RawTransfer server at `address` and counts the elements' bytes during the window,
// checking each element (RawElementChecker; contents too with `check_contents`, which tests use).
absl::StatusOr<Throughput> ReadRawStream(const std::string& address, const raw::RawStreamRequest& request,
                                         const ReadWindow& window, bool check_contents = false);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_TRANSFER_RAW_GRPC_H_
