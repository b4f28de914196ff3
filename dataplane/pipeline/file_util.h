// Reading whole files into shared, immutable memory: mmap for plain files, zlib inflation for
// .gz files. The returned Buffer's owner keeps the memory alive, so tensors can view it without
// copying. Thread-safe (no shared state).
#ifndef SLUICE_DATAPLANE_PIPELINE_FILE_UTIL_H_
#define SLUICE_DATAPLANE_PIPELINE_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline {

// Maps `path` read-only (an empty file gives an empty buffer). Errors name the path.
absl::StatusOr<Buffer> MapFile(const std::string& path);
// Reads `path` into memory, inflating it first when its name ends in .gz.
absl::StatusOr<Buffer> ReadMaybeCompressedFile(const std::string& path);
// Inflates gzip or zlib data.
absl::StatusOr<std::string> Inflate(const uint8_t* data, size_t size, const std::string& what);
// The size of a file in bytes.
absl::StatusOr<int64_t> FileSize(const std::string& path);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_FILE_UTIL_H_
