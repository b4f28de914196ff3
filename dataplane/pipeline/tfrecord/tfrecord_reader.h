// Reading TFRecord files: the record framing, integrity checks and zero-copy record views.
//
// A TFRecord file is a sequence of records, each framed as
//   uint64 length (little endian) | uint32 masked CRC-32C of the length bytes |
//   length bytes of data          | uint32 masked CRC-32C of the data
// optionally compressed as a whole with gzip or zlib.
//
// Uncompressed files are memory-mapped (small ones read into memory) and each record is a view
// into that mapping, kept alive by the record's owner. Compressed files are inflated into chunks
// of a few hundred KiB; records are views into a chunk, kept alive by the chunk.
//
// Error recovery: after Next() returns an error, the reader is either positioned after the bad
// record, when the framing is intact (data CRC mismatch, record over max_record_bytes), or at the
// end, when the framing is lost (length CRC mismatch, truncated record, corrupt compressed data),
// so a caller skipping errors simply calls Next() again.
//
// A reader is used by one thread at a time; the records it returns may be shared freely.
#ifndef SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_READER_H_
#define SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/pipeline/tensor.h"
#include "dataplane/pipeline/tfrecord/byte_stream.h"

namespace sluice::pipeline {

inline constexpr size_t kTFRecordHeaderBytes = 12;  // length + masked CRC of the length
inline constexpr size_t kTFRecordFooterBytes = 4;   // masked CRC of the data
inline constexpr size_t kTFRecordOverheadBytes = kTFRecordHeaderBytes + kTFRecordFooterBytes;

enum class TFRecordCompression { kNone, kGzip, kZlib };

absl::string_view TFRecordCompressionName(TFRecordCompression compression);
// Parses "none", "gzip", "zlib" or "auto"; "auto" picks by the file's extension: .gz/.gzip -> gzip,
// .zz/.zlib -> zlib, anything else -> none.
absl::StatusOr<TFRecordCompression> ResolveTFRecordCompression(absl::string_view name,
                                                               absl::string_view path);

struct TFRecordReaderOptions {
  bool verify_crc = true;
  uint64_t max_record_bytes = 0;           // 0 = unbounded
  size_t chunk_bytes = 512 * 1024;         // compressed files: inflate granularity
  size_t mmap_threshold_bytes = 1 << 20;   // uncompressed files at least this big are mmapped
};

struct TFRecord {
  std::shared_ptr<const void> owner;  // keeps `data` alive
  absl::string_view data;
  uint64_t offset = 0;  // byte offset of the record's header in the (uncompressed) file
  uint64_t index = 0;   // ordinal of the record among those read by this reader, bad ones included
};

class TFRecordReader {
 public:
  virtual ~TFRecordReader() = default;
  // The next record, std::nullopt at the end. Errors name the file and the record's byte offset.
  virtual absl::StatusOr<std::optional<TFRecord>> Next() = 0;
};

// Reads the records of an in-memory file image (zero-copy). Reading starts at byte `begin`, which
// must be a record boundary, and stops before the first record that starts at or after `end`.
std::unique_ptr<TFRecordReader> NewBufferTFRecordReader(Buffer buffer, std::string name,
                                                        TFRecordReaderOptions options,
                                                        uint64_t begin = 0,
                                                        uint64_t end = UINT64_MAX);

// Reads the records of a stream (used for compressed files).
std::unique_ptr<TFRecordReader> NewStreamTFRecordReader(std::unique_ptr<ByteStream> stream,
                                                        std::string name,
                                                        TFRecordReaderOptions options);

// Opens a TFRecord file. `begin`/`end` select a byte range (see NewBufferTFRecordReader; end = -1
// means the end of the file); ranges are only supported for uncompressed files.
absl::StatusOr<std::unique_ptr<TFRecordReader>> OpenTFRecordFile(const std::string& path,
                                                                 TFRecordCompression compression,
                                                                 TFRecordReaderOptions options,
                                                                 int64_t begin = 0,
                                                                 int64_t end = -1);

// Maps (or, below `mmap_threshold_bytes`, reads) a whole file. Errors name the path.
absl::StatusOr<Buffer> LoadFileBuffer(const std::string& path, size_t mmap_threshold_bytes);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_READER_H_
