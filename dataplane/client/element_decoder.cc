#include "dataplane/client/element_decoder.h"

#include <memory>
#include <string>
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/element_codec.h"

namespace sluice::client {

absl::StatusOr<DecodedElement> DecodeElementData(service::ElementData& data, uint64_t max_element_bytes,
                                                 BufferPool* pool) {
  const uint64_t size = data.uncompressed_size();
  if (size > max_element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("element declares uncompressed_size ", size,
                                                   " bytes, above the client's max_element_bytes ", max_element_bytes,
                                                   " (corrupt worker response, or raise max_element_bytes)"));
  }
  pipeline::Codec codec;
  switch (data.compression()) {
    case service::COMPRESSION_NONE: codec = pipeline::Codec::kNone; break;
    case service::COMPRESSION_LZ4: codec = pipeline::Codec::kLz4; break;
    case service::COMPRESSION_ZSTD: codec = pipeline::Codec::kZstd; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("element has compression ", static_cast<int>(data.compression()),
                                                     ", which is not a concrete codec (NONE, LZ4 or ZSTD)"));
  }
  auto share = [pool](std::string b) -> std::shared_ptr<const std::string> {
    if (pool != nullptr) return pool->Adopt(std::move(b));
    return std::make_shared<const std::string>(std::move(b));
  };
  std::shared_ptr<const std::string> bytes;
  if (codec == pipeline::Codec::kNone) {
    if (data.data().size() != size) {
      return absl::InvalidArgumentError(absl::StrCat("uncompressed element is ", data.data().size(),
                                                     " bytes but declares uncompressed_size ", size));
    }
    bytes = share(std::move(*data.mutable_data()));
    if (pool != nullptr) {
      *data.mutable_data() = pool->Take();
    } else {
      data.clear_data();
    }
  } else {
    auto out = pipeline::Decompress(data.data(), codec, size);
    if (!out.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot decompress element (", data.data().size(),
                                                     " compressed bytes, uncompressed_size ", size,
                                                     "): ", out.status().message()));
    }
    bytes = share(*std::move(out));
    data.clear_data();
  }
  auto element = pipeline::DecodeElement(bytes);
  if (!element.ok()) return absl::InvalidArgumentError(absl::StrCat("cannot decode element: ", element.status().message()));
  return DecodedElement{*std::move(element), size};
}

}  // namespace sluice::client

namespace sluice::client {
namespace {

// Reads wire bytes across gRPC's slices. Every read is bounds-checked: false when the bytes end.
class SliceReader {
 public:
  explicit SliceReader(const grpc::ByteBuffer& message) {
    (void)message.Dump(&slices_);  // references to the received slices, no copy
    for (const grpc::Slice& s : slices_) total_ += s.size();
    Enter(0);
  }
  size_t pos() const { return pos_; }
  size_t total() const { return total_; }

  bool Byte(uint8_t* out) {
    if (p_ == end_ && !Advance()) return false;
    *out = *p_++;
    ++pos_;
    return true;
  }
  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }
  // Appends `n` bytes to `out`.
  bool Append(std::string* out, size_t n) {
    if (n > total_ - pos_) return false;
    pos_ += n;
    while (n > 0) {
      if (p_ == end_) Advance();
      const size_t k = std::min(n, static_cast<size_t>(end_ - p_));
      out->append(reinterpret_cast<const char*>(p_), k);
      p_ += k;
      n -= k;
    }
    return true;
  }
  // Copies `n` bytes to `out` (null: skips them).
  bool Copy(char* out, size_t n) {
    if (n > total_ - pos_) return false;
    pos_ += n;
    while (n > 0) {
      if (p_ == end_) Advance();
      const size_t k = std::min(n, static_cast<size_t>(end_ - p_));
      if (out != nullptr) {
        std::memcpy(out, p_, k);
        out += k;
      }
      p_ += k;
      n -= k;
    }
    return true;
  }

 private:
  void Enter(size_t i) {
    slice_ = i;
    if (i < slices_.size()) {
      p_ = slices_[i].begin();
      end_ = slices_[i].end();
    } else {
      p_ = end_ = nullptr;
    }
  }
  bool Advance() {
    while (slice_ + 1 < slices_.size()) {
      Enter(slice_ + 1);
      if (p_ != end_) return true;
    }
    return false;
  }

  std::vector<grpc::Slice> slices_;
  size_t total_ = 0;
  size_t pos_ = 0;
  size_t slice_ = 0;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
};

// Skips a field of wire type `wire_type` (the key read already).
bool SkipField(SliceReader& r, uint64_t wire_type) {
  uint64_t v;
  switch (wire_type) {
    case 0: return r.Varint(&v);
    case 1: return r.Copy(nullptr, 8);
    case 2: return r.Varint(&v) && r.Copy(nullptr, v);
    case 5: return r.Copy(nullptr, 4);
    default: return false;  // groups (3, 4) and invalid types
  }
}

constexpr size_t kAlign = 64;

}  // namespace


char* ResponseParser::Allocate(size_t size, std::shared_ptr<const void>* owner) {
  constexpr size_t kCapacity = kChunkBytes + kAlign;
  auto aligned_offset = [this] {
    const uintptr_t at = reinterpret_cast<uintptr_t>(chunk_.get()) + chunk_used_;
    return chunk_used_ + (kAlign - at % kAlign) % kAlign;
  };
  if (chunk_ == nullptr || aligned_offset() + size > kCapacity) {
    chunk_ = std::shared_ptr<char[]>(new char[kCapacity]);  // written before read: not zeroed
    chunk_used_ = 0;
  }
  const size_t at = aligned_offset();
  chunk_used_ = at + size;
  *owner = chunk_;
  return chunk_.get() + at;
}

std::string ResponseParser::TakeAligned(size_t n) {
  // A buffer of its own (from the pool when there is one), written once: no zero-filling.
  std::string buffer = pool_ != nullptr ? pool_->Take() : std::string();
  buffer.clear();
  buffer.reserve(n + kAlign);
  const size_t pad = (kAlign - reinterpret_cast<uintptr_t>(buffer.data()) % kAlign) % kAlign;
  buffer.append(pad, '\0');
  return buffer;
}

char* ResponseParser::Adopt(std::string buffer, size_t pad, std::shared_ptr<const void>* owner) {
  std::shared_ptr<const std::string> shared =
      pool_ != nullptr ? pool_->Adopt(std::move(buffer)) : std::make_shared<const std::string>(std::move(buffer));
  char* data = const_cast<char*>(shared->data()) + pad;
  *owner = std::move(shared);
  return data;
}

absl::Status ResponseParser::Parse(const grpc::ByteBuffer& message, ParsedResponse* out) {
  // A message starts a new chunk once the current one is half used: the consumer then releases
  // the previous message's elements (a reference count per tensor on their chunk) while this
  // thread takes references on another chunk, instead of both writing one cache line per element.
  // Small messages still share chunks, so a chunk holds at most twice what its elements use.
  if (chunk_used_ > kChunkBytes / 2) chunk_.reset();
  SliceReader r(message);
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(what);
  };
  while (r.pos() < r.total()) {
    uint64_t key;
    if (!r.Varint(&key)) return bad("truncated field key");
    const uint64_t field = key >> 3, wire_type = key & 7;
    if (field == 2 && wire_type == 0) {  // end_of_sequence
      uint64_t v;
      if (!r.Varint(&v)) return bad("truncated end_of_sequence");
      out->end_of_sequence = v != 0;
      continue;
    }
    if (field == 4 && wire_type == 2) {  // shm_ring
      uint64_t n;
      if (!r.Varint(&n) || n > r.total() - r.pos() || n > 4096) return bad("truncated or oversized shm_ring");
      out->shm_ring.clear();
      if (!r.Append(&out->shm_ring, n)) return bad("truncated shm_ring");
      continue;
    }
    if (field != 1 || wire_type != 2) {
      if (!SkipField(r, wire_type)) return bad(absl::StrCat("cannot skip field ", field, " of wire type ", wire_type));
      continue;
    }
    // An ElementData.
    uint64_t length;
    if (!r.Varint(&length) || length > r.total() - r.pos()) return bad("truncated ElementData");
    const size_t end = r.pos() + length;
    char* data = nullptr;
    size_t data_size = 0;
    std::shared_ptr<const void> owner;
    uint64_t compression = 0, uncompressed_size = 0, shm_offset = 0, shm_size = 0;
    uint64_t release_at = 0;       // ring position to release once the element is read (0: none)
    // Releases the ring bytes read in place once done with (also on every error below).
    struct ReleaseRing {
      rpc::ShmRingReader* ring;
      const uint64_t* end;
      ~ReleaseRing() {
        if (*end != 0) ring->Release(*end);
      }
    } release_ring{shm_, &release_at};
    while (r.pos() < end) {
      uint64_t k;
      if (!r.Varint(&k)) return bad("truncated ElementData field key");
      const uint64_t f = k >> 3, wt = k & 7;
      if (f == 1 && wt == 2) {
        uint64_t n;
        if (!r.Varint(&n) || n > end - std::min(end, r.pos())) return bad("data runs past its ElementData");
        if (n > max_element_bytes_) {
          return bad(absl::StrCat("element data of ", n, " bytes is above the client's max_element_bytes ",
                                  max_element_bytes_, " (corrupt worker response, or raise max_element_bytes)"));
        }
        data_size = n;
        if (n <= kMaxChunkedElementBytes) {
          data = Allocate(n, &owner);
          if (!r.Copy(data, n)) return bad("truncated data");
        } else {
          // A buffer of its own (from the pool when there is one), written once: no zero-filling.
          std::string buffer = pool_ != nullptr ? pool_->Take() : std::string();
          buffer.clear();
          buffer.reserve(n + kAlign);
          const size_t pad = (kAlign - reinterpret_cast<uintptr_t>(buffer.data()) % kAlign) % kAlign;
          buffer.append(pad, '\0');
          if (!r.Append(&buffer, n)) return bad("truncated data");
          std::shared_ptr<const std::string> shared = pool_ != nullptr
                                                          ? pool_->Adopt(std::move(buffer))
                                                          : std::make_shared<const std::string>(std::move(buffer));
          data = const_cast<char*>(shared->data()) + pad;
          owner = std::move(shared);
        }
      } else if (f == 5 && wt == 0) {
        if (!r.Varint(&shm_offset)) return bad("truncated shm_offset");
      } else if (f == 6 && wt == 0) {
        if (!r.Varint(&shm_size)) return bad("truncated shm_size");
      } else if (f == 2 && wt == 0) {
        if (!r.Varint(&compression)) return bad("truncated compression");
      } else if (f == 3 && wt == 0) {
        if (!r.Varint(&uncompressed_size)) return bad("truncated uncompressed_size");
      } else if (!SkipField(r, wt)) {
        return bad(absl::StrCat("cannot skip ElementData field ", f, " of wire type ", wt));
      }
    }
    if (r.pos() != end) return bad("ElementData fields run past its length");
    if (shm_size > 0) {  // the bytes are in the shared-memory ring: viewed there, or copied out once
      if (data_size > 0) return bad("ElementData has both data and shm_size");
      if (shm_ == nullptr) return bad("ElementData.shm_size is set but this stream has no shared-memory ring");
      if (shm_size > max_element_bytes_) {
        return bad(absl::StrCat("ElementData.shm_size ", shm_size, " is above the client's max_element_bytes ",
                                max_element_bytes_));
      }
      // A view while the slots held stay within the limit (an uncompressed element's tensors
      // then point into the ring, which keeps its slot until they are dropped); beyond it, or for
      // a compressed element (decompressed straight out of the ring below), the slot is released
      // once read.
      const bool view = compression == service::COMPRESSION_NONE && shm_->held_span() + shm_size <= shm_view_limit_;
      if (view) {
        absl::StatusOr<rpc::ShmRingReader::Held> held = shm_->Hold(shm_offset, shm_size);
        if (!held.ok()) return held.status();
        data = const_cast<char*>(held->bytes.data());  // read-only: tensors expose it as const
        owner = std::move(held->owner);
      } else {
        absl::StatusOr<absl::string_view> bytes = shm_->View(shm_offset, shm_size);
        if (!bytes.ok()) return bytes.status();
        if (compression == service::COMPRESSION_NONE) {
          std::string buffer = TakeAligned(shm_size);
          const size_t pad = buffer.size();
          buffer.append(bytes->data(), bytes->size());
          data = Adopt(std::move(buffer), pad, &owner);
        } else {
          data = const_cast<char*>(bytes->data());  // decompressed below (read only), then released
        }
        release_at = shm_offset + shm_size;
      }
      data_size = shm_size;
    }
    if (uncompressed_size > max_element_bytes_) {
      return bad(absl::StrCat("element declares uncompressed_size ", uncompressed_size,
                              " bytes, above the client's max_element_bytes ", max_element_bytes_,
                              " (corrupt worker response, or raise max_element_bytes)"));
    }
    pipeline::Codec codec;
    switch (compression) {
      case service::COMPRESSION_NONE: codec = pipeline::Codec::kNone; break;
      case service::COMPRESSION_LZ4: codec = pipeline::Codec::kLz4; break;
      case service::COMPRESSION_ZSTD: codec = pipeline::Codec::kZstd; break;
      default:
        return bad(absl::StrCat("element has compression ", compression,
                                ", which is not a concrete codec (NONE, LZ4 or ZSTD)"));
    }
    // Decoded in place (an Element's fields are inline: every move copies them).
    if (out->elements.empty()) out->elements.reserve(r.total() / (r.pos() + 1) + 1);
    DecodedElement& decoded = out->elements.emplace_back();
    decoded.bytes = uncompressed_size;
    absl::Status element;
    if (codec == pipeline::Codec::kNone) {
      if (data_size != uncompressed_size) {
        out->elements.pop_back();
        return bad(absl::StrCat("uncompressed element is ", data_size, " bytes but declares uncompressed_size ",
                                uncompressed_size));
      }
      element = pipeline::DecodeElementTo(std::move(owner), absl::string_view(data, data_size), &decoded.element);
    } else {
      auto raw = pipeline::Decompress(absl::string_view(data == nullptr ? "" : data, data_size), codec,
                                      uncompressed_size);
      owner.reset();
      if (!raw.ok()) {
        out->elements.pop_back();
        return bad(absl::StrCat("cannot decompress element (", data_size, " compressed bytes, uncompressed_size ",
                                uncompressed_size, "): ", raw.status().message()));
      }
      std::shared_ptr<const std::string> bytes =
          pool_ != nullptr ? pool_->Adopt(*std::move(raw)) : std::make_shared<const std::string>(*std::move(raw));
      const absl::string_view view(*bytes);
      element = pipeline::DecodeElementTo(std::move(bytes), view, &decoded.element);
    }
    if (!element.ok()) {
      out->elements.pop_back();
      return bad(absl::StrCat("cannot decode element: ", element.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::client
