#include "dataplane/worker/response_encoder.h"

#include <cstring>
#include <string>

namespace sluice::worker {
namespace {

// Field keys: (field number << 3) | wire type (0 varint, 2 length-delimited).
constexpr uint8_t kResponseElements = (1 << 3) | 2;       // GetElementsResponse.elements
constexpr uint8_t kResponseEndOfSequence = (2 << 3) | 0;  // GetElementsResponse.end_of_sequence
constexpr uint8_t kDataBytes = (1 << 3) | 2;              // ElementData.data
constexpr uint8_t kDataCompression = (2 << 3) | 0;        // ElementData.compression
constexpr uint8_t kDataUncompressedSize = (3 << 3) | 0;   // ElementData.uncompressed_size

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* PutVarint(char* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<char>(v);
  return out;
}

// Whether two pointers share one control block (one owner keeps both alive).
bool SameOwner(const EncodedElementPtr& a, const EncodedElementPtr& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

EntryFraming FrameElementEntry(uint64_t data_size, service::Compression compression, uint64_t uncompressed_size) {
  const uint64_t c = static_cast<uint64_t>(compression);
  uint64_t body = 0;
  if (data_size > 0) body += 1 + VarintSize(data_size) + data_size;
  if (c != 0) body += 1 + VarintSize(c);
  if (uncompressed_size != 0) body += 1 + VarintSize(uncompressed_size);
  EntryFraming f;
  char* h = f.head;
  *h++ = static_cast<char>(kResponseElements);
  h = PutVarint(h, body);
  if (data_size > 0) {
    *h++ = static_cast<char>(kDataBytes);
    h = PutVarint(h, data_size);
  }
  f.head_size = static_cast<size_t>(h - f.head);
  char* t = f.tail;
  if (c != 0) {
    *t++ = static_cast<char>(kDataCompression);
    t = PutVarint(t, c);
  }
  if (uncompressed_size != 0) {
    *t++ = static_cast<char>(kDataUncompressedSize);
    t = PutVarint(t, uncompressed_size);
  }
  f.tail_size = static_cast<size_t>(t - f.tail);
  return f;
}

pipeline::WireBytes EncodeElementsResponse(const ElementsResponse& response, size_t min_view_bytes) {
  pipeline::WireBytes::Builder b;
  size_t copied = 2;
  for (const EncodedElementPtr& e : response.elements) {
    if (!e->framed.empty()) continue;  // mostly viewed, in runs
    copied += sizeof(EntryFraming::head) + sizeof(EntryFraming::tail);
    for (const auto& range : e->bytes.ranges()) {
      if (range.size < min_view_bytes || range.owner == nullptr) copied += range.size;
    }
  }
  b.ReserveCopies(copied);
  // A run of framed entries adjacent in one slab: one range, kept alive by its first element
  // (every element of a slab shares the slab's control block).
  const char* run = nullptr;
  size_t run_size = 0;
  const EncodedElementPtr* run_owner = nullptr;
  auto flush_run = [&] {
    if (run_size == 0) return;
    b.AppendView(run, run_size, std::shared_ptr<const void>(*run_owner), min_view_bytes);
    run_size = 0;
  };
  for (const EncodedElementPtr& e : response.elements) {
    if (!e->framed.empty()) {
      if (run_size > 0 && e->framed.data() == run + run_size && SameOwner(*run_owner, e)) {
        run_size += e->framed.size();
        continue;
      }
      flush_run();
      run = e->framed.data();
      run_size = e->framed.size();
      run_owner = &e;
      continue;
    }
    flush_run();
    const EntryFraming f = FrameElementEntry(e->size(), ToCompression(e->codec), e->uncompressed_size);
    b.AppendCopy(absl::string_view(f.head, f.head_size));
    b.Append(e->bytes, min_view_bytes);
    b.AppendCopy(absl::string_view(f.tail, f.tail_size));
  }
  flush_run();
  if (response.end_of_sequence) {
    const char eos[2] = {static_cast<char>(kResponseEndOfSequence), 1};
    b.AppendCopy(absl::string_view(eos, 2));
  }
  return std::move(b).Finish();
}

// ---------------------------------------------------------------- WireEncoder

struct WireEncoder::Slab {
  static constexpr size_t kElementsPerBlock = 64;

  explicit Slab(size_t n) : data(new char[n]), capacity(n) {}
  // A new element, in blocks of kElementsPerBlock that never move (the ones handed out stay put
  // while more are added): one allocation per 64 elements (a deque's 512-byte blocks held three).
  // Written by the encoder's thread only.
  EncodedElement& AddElement() {
    if (blocks.empty() || in_last_block == kElementsPerBlock) {
      blocks.push_back(std::make_unique<EncodedElement[]>(kElementsPerBlock));
      in_last_block = 0;
    }
    return blocks.back()[in_last_block++];
  }

  const std::unique_ptr<char[]> data;
  const size_t capacity;
  size_t used = 0;
  std::vector<std::unique_ptr<EncodedElement[]>> blocks;
  size_t in_last_block = 0;
};

absl::StatusOr<EncodedElementPtr> WireEncoder::Encode(const pipeline::Element& element,
                                                      service::Compression compression) {
  auto wanted = CodecFor(compression);
  if (!wanted.ok()) return wanted.status();
  if (wanted->has_value() && **wanted != pipeline::Codec::kNone) return EncodeForWire(element, compression);
  const size_t size = pipeline::EncodedElementSize(element);
  // AUTO leaves only elements below ChooseCodec's floor uncompressed without sampling them.
  if (!wanted->has_value() && size >= pipeline::kMinCompressedBytes) return EncodeForWire(element, compression);
  const EntryFraming f = FrameElementEntry(size, service::COMPRESSION_NONE, size);
  const size_t total = f.size(size);
  if (total > kMaxSlabElementBytes) return EncodeForWire(element, compression);
  if (slab_ == nullptr || slab_->capacity - slab_->used < total) slab_ = std::make_shared<Slab>(kSlabBytes);
  char* const out = slab_->data.get() + slab_->used;
  std::memcpy(out, f.head, f.head_size);
  pipeline::EncodeElementTo(element, out + f.head_size);
  std::memcpy(out + f.head_size + size, f.tail, f.tail_size);
  slab_->used += total;
  EncodedElement& e = slab_->AddElement();
  e.bytes.SetUnowned(out + f.head_size, size);
  e.codec = pipeline::Codec::kNone;
  e.uncompressed_size = size;
  e.framed = absl::string_view(out, total);
  return EncodedElementPtr(slab_, &e);
}

}  // namespace sluice::worker
