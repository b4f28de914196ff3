// Serialises Elements for the wire and reads them back without copying tensor data, and
// compresses the bytes (lz4 or zstd) when that pays off.
//
// Layout (little-endian): "SLE1", u32 field count, u64 key, then per field a header (u16 name
// length, name, u8 dtype, u8 rank, i64 dims[rank], u64 payload bytes, and for strings u64 count +
// u64 lengths[count]), then every field's payload, each starting at a multiple of 64 bytes from
// the start. Decoding checks every length against the buffer and names the offset of a problem.
// Stateless; thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_ELEMENT_CODEC_H_
#define SLUICE_DATAPLANE_PIPELINE_ELEMENT_CODEC_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline {

std::string EncodeElement(const Element& element);
// Tensors of the result view `bytes` (kept alive through their owners).
absl::StatusOr<Element> DecodeElement(std::shared_ptr<const std::string> bytes);

enum class Codec { kNone = 0, kLz4 = 1, kZstd = 2 };

// Picks a codec for `data`: none for small payloads (< 4 KiB) or when a sample barely compresses
// (already-compressed JPEG bytes, random floats); lz4 otherwise.
Codec ChooseCodec(const std::string& data);
absl::StatusOr<std::string> Compress(const std::string& data, Codec codec);
// `uncompressed_size` bounds the output; a mismatch is an error (corrupt or hostile input).
absl::StatusOr<std::string> Decompress(const std::string& data, Codec codec, uint64_t uncompressed_size);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_ELEMENT_CODEC_H_
