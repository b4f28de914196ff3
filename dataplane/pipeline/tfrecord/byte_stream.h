// Sequential byte streams used by the TFRecord reader and writer: a file read with large buffered
// reads, a memory region, and zlib/gzip (de)compression layered over another stream.
//
// Each stream is used by one thread at a time (thread-compatible). Errors name the file or stream
// given at construction.
#ifndef SLUICE_DATAPLANE_PIPELINE_TFRECORD_BYTE_STREAM_H_
#define SLUICE_DATAPLANE_PIPELINE_TFRECORD_BYTE_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::pipeline {

// The container format of a zlib-compressed stream.
enum class ZlibFormat { kGzip, kZlib };

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to `size` bytes into `dst`. Returns the number read; 0 only at the end of the stream.
  // May return fewer than `size` bytes before the end.
  virtual absl::StatusOr<size_t> Read(uint8_t* dst, size_t size) = 0;
  // Reads until `size` bytes are read or the stream ends. Returns the number read.
  absl::StatusOr<size_t> ReadFully(uint8_t* dst, size_t size);
};

// Reads a file with plain read(2) calls of the caller's size (the readers ask for large blocks).
absl::StatusOr<std::unique_ptr<ByteStream>> OpenFileByteStream(const std::string& path);

// Reads `bytes`, which the caller keeps alive for the stream's lifetime.
std::unique_ptr<ByteStream> NewMemoryByteStream(absl::string_view bytes);

// Decompresses `compressed`. Concatenated members (as `cat a.gz b.gz` makes) are read as one stream.
// `name` prefixes errors, which give the compressed byte offset of the damage.
std::unique_ptr<ByteStream> NewInflateByteStream(std::unique_ptr<ByteStream> compressed,
                                                 ZlibFormat format, std::string name);

// Compresses everything appended to it into `output` (a complete gzip or zlib stream once
// Finish() returns).
class DeflateBuffer {
 public:
  DeflateBuffer(ZlibFormat format, std::string* output, int level = 6);
  ~DeflateBuffer();
  DeflateBuffer(const DeflateBuffer&) = delete;
  DeflateBuffer& operator=(const DeflateBuffer&) = delete;

  absl::Status Append(absl::string_view bytes);
  absl::Status Finish();

 private:
  absl::Status Run(absl::string_view bytes, int flush);

  struct State;
  std::unique_ptr<State> state_;
  std::string* output_;
  bool finished_ = false;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TFRECORD_BYTE_STREAM_H_
