// Writing TFRecord files (tests, benchmarks, examples and `sluice` tooling write their data with it).
//
// TFRecordWriter appends framed records to a file, optionally gzip- or zlib-compressed; it is used
// by one thread at a time. The free functions are thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_WRITER_H_
#define SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_WRITER_H_

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dataplane/pipeline/tfrecord/byte_stream.h"
#include "dataplane/pipeline/tfrecord/tfrecord_reader.h"

namespace sluice::pipeline {

// Appends one framed record (header, data, footer) to `out`.
void AppendTFRecord(absl::string_view data, std::string* out);
// The framed bytes of `records`, uncompressed (what an uncompressed file holds).
std::string EncodeTFRecords(absl::Span<const std::string> records);

class TFRecordWriter {
 public:
  // Creates (truncates) `path`.
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(
      const std::string& path, TFRecordCompression compression = TFRecordCompression::kNone);
  ~TFRecordWriter();  // closes without reporting errors; call Close() to see them
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  absl::Status Write(absl::string_view record);
  // Flushes, finishes the compressed stream and closes the file.
  absl::Status Close();

 private:
  TFRecordWriter(std::FILE* file, std::string path, TFRecordCompression compression);
  absl::Status Drain(bool force);

  std::FILE* file_;
  const std::string path_;
  std::string framed_;      // framed records not yet compressed or written
  std::string compressed_;  // compressed bytes not yet written
  std::unique_ptr<DeflateBuffer> deflate_;
  absl::Status error_;
};

// Writes `records` to `path` (created or truncated).
absl::Status WriteTFRecordFile(const std::string& path, absl::Span<const std::string> records,
                               TFRecordCompression compression = TFRecordCompression::kNone);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TFRECORD_TFRECORD_WRITER_H_
