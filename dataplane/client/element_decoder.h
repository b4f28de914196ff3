// Turns an ElementData received from a worker into a pipeline Element: checks the declared sizes,
// decompresses (bounded by uncompressed_size) and decodes with pipeline::DecodeElement, whose
// tensors view the decoded buffer (no copy after the wire). Uncompressed bytes are moved out of
// the message, not copied. Every failure (a corrupt or hostile worker) is an InvalidArgument error
// naming what was wrong. Pure; thread-safe.
#ifndef SLUICE_DATAPLANE_CLIENT_ELEMENT_DECODER_H_
#define SLUICE_DATAPLANE_CLIENT_ELEMENT_DECODER_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/client/buffer_pool.h"
#include "dataplane/pipeline/tensor.h"
#include "dataplane/rpc/shm_ring.h"
#include "dataservice.pb.h"

namespace sluice::client {

struct DecodedElement {
  // User-provided: value-initialising an aggregate (emplace_back()) zero-fills all of it first,
  // the Element's ~0.5 KB of inline field storage included, whatever Element's constructors.
  DecodedElement() noexcept {}
  DecodedElement(pipeline::Element e, uint64_t b) : element(std::move(e)), bytes(b) {}

  pipeline::Element element;
  uint64_t bytes = 0;  // size of the decoded buffer the element's tensors keep alive
};

// Consumes `data.data()` (left empty; with a `pool`, holding a recycled buffer for the next parse
// into the same message). `max_element_bytes` bounds uncompressed_size before any allocation, so a
// lying size cannot make the client allocate arbitrary memory. With a `pool`, the element's
// buffer returns to it when the element's last tensor is dropped.
absl::StatusOr<DecodedElement> DecodeElementData(service::ElementData& data, uint64_t max_element_bytes,
                                                 BufferPool* pool = nullptr);

// A GetElementsResponse of a stream, read from its wire bytes (ResponseParser).
struct ParsedResponse {
  std::vector<DecodedElement> elements;
  bool end_of_sequence = false;
  std::string shm_ring;  // a serialized ShmRing: the worker offers its shared-memory ring
};

// Reads GetElementsResponse messages straight from gRPC's received slices, without protobuf:
// each element's bytes are copied once (or not at all: shared memory, set_shm), small ones (up to kMaxChunkedElementBytes) into a shared
// chunk of kChunkBytes at a 64-byte aligned offset (no allocation per element; the element's
// tensors keep the chunk alive, so a live element holds at most kChunkBytes; a message starts a
// fresh chunk when the current one is more than half used), larger ones into
// a buffer of their own from `pool`. Compressed elements are decompressed into their own buffer.
// Unknown fields are skipped (a newer worker may send more). A malformed message is an
// InvalidArgument error naming what was wrong; the elements decoded before it are kept in `out`
// (so the bad one is element out->elements.size() of the message).
// One thread at a time.
class ResponseParser {
 public:
  static constexpr size_t kChunkBytes = 64 << 10;
  static constexpr size_t kMaxChunkedElementBytes = 16 << 10;

  // `pool` may be null (fresh buffers).
  ResponseParser(uint64_t max_element_bytes, std::shared_ptr<BufferPool> pool)
      : max_element_bytes_(max_element_bytes), pool_(std::move(pool)) {}

  absl::Status Parse(const grpc::ByteBuffer& message, ParsedResponse* out);
  // The stream's shared-memory ring (dataplane/rpc/shm_ring.h; may be null; owned by a shared_ptr,
  // as Attach makes it, and alive while parsing). An uncompressed element with
  // ElementData.shm_size is handed out as a view into the ring (no copy): its tensors keep the
  // ring's slot reserved, and the mapping alive, until the last of them is dropped
  // (ShmRingReader::Hold). Once the slots held would span more than `view_limit` bytes of the
  // ring (default: half of it; a trainer holding many elements, or one for long), elements are
  // copied out once and released at once instead, so that the worker keeps room to write; a
  // compressed one is decompressed straight out of the ring and released. Without a ring such an
  // element is an error.
  void set_shm(rpc::ShmRingReader* ring) {
    shm_ = ring;
    shm_view_limit_ = ring == nullptr ? 0 : ring->data_bytes() / 2;
  }
  void set_shm_view_limit(uint64_t bytes) { shm_view_limit_ = bytes; }

 private:
  // Room for `size` (<= kMaxChunkedElementBytes) bytes in the chunk at a 64-byte aligned address,
  // and the owner that keeps them alive.
  char* Allocate(size_t size, std::shared_ptr<const void>* owner);
  // A buffer with room for `n` bytes after padding (its size) to a 64-byte aligned address; and
  // the buffer made shared (pooled), returning where its bytes start.
  std::string TakeAligned(size_t n);
  char* Adopt(std::string buffer, size_t pad, std::shared_ptr<const void>* owner);

  const uint64_t max_element_bytes_;
  const std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<char[]> chunk_;
  size_t chunk_used_ = 0;
  rpc::ShmRingReader* shm_ = nullptr;
  uint64_t shm_view_limit_ = 0;
};

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_ELEMENT_DECODER_H_
