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
#include <vector>

#include "absl/status/statusor.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline {

// Bytes as a sequence of ranges, each kept alive by an owner: how an encoded element (and a
// response carrying elements) reaches the wire without copying tensor data. Immutable once built;
// copies share the ranges. Thread-compatible.
class WireBytes {
 public:
  struct Range {
    const char* data = nullptr;
    size_t size = 0;
    std::shared_ptr<const void> owner;  // keeps `data` alive
  };

  // Appends ranges: copied bytes are gathered into owned buffers (consecutive copies share one);
  // views keep their owner. Thread-compatible; Finish() once.
  class Builder {
   public:
    void AppendCopy(absl::string_view bytes);
    void AppendZeros(size_t n);
    // Views `size` bytes at `data` owned by `owner`; bytes shorter than `min_view_bytes` are copied.
    void AppendView(const void* data, size_t size, std::shared_ptr<const void> owner, size_t min_view_bytes = 0);
    void Append(const WireBytes& bytes, size_t min_view_bytes = 0);
    // Starts an empty builder with `bytes` as its first copied bytes (taking the string's capacity).
    void AdoptCopies(std::string bytes);
    // Room for `n` more copied bytes (saves regrowing the owned buffer).
    void ReserveCopies(size_t n) { owned_.reserve(owned_.size() + n); }
    size_t size() const { return size_; }
    WireBytes Finish() &&;

   private:
    struct Segment {
      bool owned = false;
      size_t offset = 0;                  // owned: into `owned_`
      const char* data = nullptr;         // a view
      size_t size = 0;
      std::shared_ptr<const void> owner;  // a view's owner
    };
    std::string owned_;
    absl::InlinedVector<Segment, 3> segments_;
    size_t size_ = 0;
  };

  WireBytes() = default;
  // One range owning `bytes`.
  static WireBytes FromString(std::string bytes);
  // One range without an owner: whoever makes it keeps the bytes alive as long as this object and
  // its copies. A Builder copies such a range (it cannot view what nothing owns).
  static WireBytes Unowned(const char* data, size_t size);
  // Makes an empty object Unowned(data, size) in place (no temporary to build, move and destroy).
  void SetUnowned(const char* data, size_t size);

  absl::Span<const Range> ranges() const { return ranges_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The bytes in one string (moves them out of a sole owned buffer when it can).
  std::string Flatten() const&;
  std::string Flatten() &&;

 private:
  absl::InlinedVector<Range, 3> ranges_;
  size_t size_ = 0;
  std::shared_ptr<std::string> sole_;  // set when the only range is an owned buffer of this object
};

std::string EncodeElement(const Element& element);
// The size of EncodeElement(element)'s bytes, and those bytes written to `out` (room for
// EncodedElementSize(element) bytes): for encoding small elements into a larger shared buffer
// without an allocation per element.
size_t EncodedElementSize(const Element& element);
void EncodeElementTo(const Element& element, char* out);
// The same bytes as EncodeElement, as ranges: the header, string payloads, padding and numeric
// payloads shorter than `min_view_bytes` are copied; larger numeric payloads are views of the
// tensors' buffers (no copy).
WireBytes EncodeElementWire(const Element& element, size_t min_view_bytes = 16 << 10);
// Tensors of the result view `bytes` (kept alive through their owners).
absl::StatusOr<Element> DecodeElement(std::shared_ptr<const std::string> bytes);
// The same for bytes inside a larger buffer that `owner` keeps alive.
absl::StatusOr<Element> DecodeElement(std::shared_ptr<const void> owner, absl::string_view bytes);
// The same into `out` (what it held is replaced; on an error it holds part of the element).
absl::Status DecodeElementTo(std::shared_ptr<const void> owner, absl::string_view bytes, Element* out);

enum class Codec { kNone = 0, kLz4 = 1, kZstd = 2 };

// ChooseCodec never compresses data smaller than this.
inline constexpr size_t kMinCompressedBytes = 4096;

// Picks a codec for `data`: none for small payloads (< kMinCompressedBytes) or when a sample barely compresses
// (already-compressed JPEG bytes, random floats); lz4 otherwise.
Codec ChooseCodec(const std::string& data);
// The same choice for encoded ranges, sampling the largest range (the bulk of an element's data
// rather than its header).
Codec ChooseCodec(const WireBytes& data);
absl::StatusOr<std::string> Compress(const std::string& data, Codec codec);
// `uncompressed_size` bounds the output; a mismatch is an error (corrupt or hostile input).
absl::StatusOr<std::string> Decompress(absl::string_view data, Codec codec, uint64_t uncompressed_size);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_ELEMENT_CODEC_H_
