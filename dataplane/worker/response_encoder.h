// The protobuf wire bytes of a GetElementsResponse, written by hand so that element payloads go
// out as views of the tensors' memory instead of being copied into a message first, and the
// encoder that prepares small elements for that.
//
// The output is byte-for-byte what any protobuf parser reads as a GetElementsResponse (field
// order: elements, then end_of_sequence; inside ElementData: data, compression,
// uncompressed_size; default values omitted as proto3 does). Small fields are gathered into owned
// buffers; payload ranges of at least `min_view_bytes` stay views; elements a WireEncoder framed
// go out as they are, a run of them adjacent in one slab as one range. EncodeElementsResponse is
// stateless and thread-safe; a WireEncoder is used by one thread at a time.
#ifndef SLUICE_DATAPLANE_WORKER_RESPONSE_ENCODER_H_
#define SLUICE_DATAPLANE_WORKER_RESPONSE_ENCODER_H_

#include <cstddef>
#include <iterator>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/element_codec.h"
#include "dataplane/worker/element_buffer.h"
#include "dataservice.pb.h"

namespace sluice::worker {

// One response of a GetElements stream before serialisation: elements already in the codec the
// client asked for.
struct ElementsResponse {
  std::vector<EncodedElementPtr> elements;
  bool end_of_sequence = false;
  // The request's bounds on one response (elements, and bytes of element data: the first element
  // always fits). A writer holding this response unsent, behind a write in flight, may append the
  // next ones to it within them (CanAppend).
  size_t max_elements = std::numeric_limits<size_t>::max();
  size_t max_bytes = std::numeric_limits<size_t>::max();

  size_t bytes() const {
    size_t n = 0;
    for (const EncodedElementPtr& e : elements) n += e->size();
    return n;
  }
  // Whether `next`'s elements may join this response: neither carries end_of_sequence and the
  // result stays within this response's bounds. `my_bytes`, `next_bytes`: their bytes().
  bool CanAppend(const ElementsResponse& next, size_t my_bytes, size_t next_bytes) const {
    return !end_of_sequence && !next.end_of_sequence && !elements.empty() &&
           elements.size() + next.elements.size() <= max_elements && my_bytes + next_bytes <= max_bytes;
  }
};

pipeline::WireBytes EncodeElementsResponse(const ElementsResponse& response, size_t min_view_bytes = 16 << 10);

// The bytes around an element's data in its `elements` entry of a GetElementsResponse: `head`
// (entry key and length, ElementData.data key and length) and `tail` (compression,
// uncompressed_size; default values omitted).
struct EntryFraming {
  char head[24];
  size_t head_size = 0;
  char tail[24];
  size_t tail_size = 0;
  size_t size(uint64_t data_size) const { return head_size + data_size + tail_size; }
};
EntryFraming FrameElementEntry(uint64_t data_size, service::Compression compression, uint64_t uncompressed_size);

// Encodes a producer's elements as EncodeForWire does. Small elements that go out uncompressed
// (framed, at most kMaxSlabElementBytes) are written with their framing (EncodedElement::framed)
// into a shared slab of kSlabBytes, and their EncodedElements live in the slab too: no
// allocation per element, and EncodeElementsResponse sends a run of them as one range without
// copying. A slab is freed once the last of its elements is dropped (the elements of a task are
// consumed in order, so slabs go soon; a live element keeps at most one slab alive).
class WireEncoder {
 public:
  // 64 KiB: the sender drops the elements of a response it sent (a reference count each, on their
  // slab) while the producer takes references on its current slab; with slabs smaller than the
  // task buffer the two mostly touch different slabs, not one cache line per element.
  static constexpr size_t kSlabBytes = 64 << 10;
  static constexpr size_t kMaxSlabElementBytes = 16 << 10;

  absl::StatusOr<EncodedElementPtr> Encode(const pipeline::Element& element, service::Compression compression);

 private:
  struct Slab;
  std::shared_ptr<Slab> slab_;
};

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_RESPONSE_ENCODER_H_
