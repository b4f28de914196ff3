// CRC-32C (Castagnoli polynomial, as used by TFRecord, iSCSI and ext4) and TFRecord's CRC masking.
//
// Crc32c() picks the fastest implementation available on the running CPU once (SSE4.2 `crc32`
// instructions on x86-64, otherwise a table-driven slicing-by-8 loop); both give identical
// results. All functions are pure and thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_TFRECORD_CRC32C_H_
#define SLUICE_DATAPLANE_PIPELINE_TFRECORD_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace sluice::pipeline {

// CRC-32C of `size` bytes continuing from `crc`, the CRC-32C of the bytes before them (0 for none).
// Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);
inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }
inline uint32_t Crc32c(absl::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

// The two implementations, exposed so tests and benchmarks can compare them directly.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size);
// Only call when Crc32cHardwareAvailable() is true.
uint32_t Crc32cExtendHardware(uint32_t crc, const void* data, size_t size);
bool Crc32cHardwareAvailable();

// TFRecord stores CRCs "masked" so that a CRC of data that itself contains CRCs stays well mixed.
inline constexpr uint32_t kTFRecordCrcMaskDelta = 0xa282ead8u;
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kTFRecordCrcMaskDelta;
}
inline uint32_t UnmaskCrc(uint32_t masked) {
  const uint32_t rotated = masked - kTFRecordCrcMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}
inline uint32_t MaskedCrc32c(const void* data, size_t size) { return MaskCrc(Crc32c(data, size)); }

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TFRECORD_CRC32C_H_
