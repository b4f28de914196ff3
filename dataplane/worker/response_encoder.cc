#include "dataplane/worker/response_encoder.h"

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

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

}  // namespace

pipeline::WireBytes EncodeElementsResponse(const ElementsResponse& response, size_t min_view_bytes) {
  pipeline::WireBytes::Builder b;
  size_t copied = 2;
  for (const EncodedElementPtr& e : response.elements) {
    copied += 32;
    for (const auto& range : e->bytes.ranges()) {
      if (range.size < min_view_bytes) copied += range.size;
    }
  }
  b.ReserveCopies(copied);
  std::string head;
  for (const EncodedElementPtr& e : response.elements) {
    const uint64_t size = e->size();
    const uint64_t compression = static_cast<uint64_t>(ToCompression(e->codec));
    const uint64_t uncompressed = e->uncompressed_size;
    uint64_t body = 0;
    if (size > 0) body += 1 + VarintSize(size) + size;
    if (compression != 0) body += 1 + VarintSize(compression);
    if (uncompressed != 0) body += 1 + VarintSize(uncompressed);
    head.clear();
    head.push_back(static_cast<char>(kResponseElements));
    PutVarint(head, body);
    if (size > 0) {
      head.push_back(static_cast<char>(kDataBytes));
      PutVarint(head, size);
    }
    b.AppendCopy(head);
    b.Append(e->bytes, min_view_bytes);
    head.clear();
    if (compression != 0) {
      head.push_back(static_cast<char>(kDataCompression));
      PutVarint(head, compression);
    }
    if (uncompressed != 0) {
      head.push_back(static_cast<char>(kDataUncompressedSize));
      PutVarint(head, uncompressed);
    }
    b.AppendCopy(head);
  }
  if (response.end_of_sequence) {
    const char eos[2] = {static_cast<char>(kResponseEndOfSequence), 1};
    b.AppendCopy(absl::string_view(eos, 2));
  }
  return std::move(b).Finish();
}

}  // namespace sluice::worker
