// The protobuf wire bytes of a GetElementsResponse, written by hand so that element payloads go
// out as views of the tensors' memory instead of being copied into a message first.
//
// The output is byte-for-byte what any protobuf parser reads as a GetElementsResponse (field
// order: elements, then end_of_sequence; inside ElementData: data, compression,
// uncompressed_size; default values omitted as proto3 does). Small fields are gathered into owned
// buffers; payload ranges of at least `min_view_bytes` stay views. Stateless; thread-safe.
#ifndef SLUICE_DATAPLANE_WORKER_RESPONSE_ENCODER_H_
#define SLUICE_DATAPLANE_WORKER_RESPONSE_ENCODER_H_

#include <vector>

#include "dataplane/pipeline/element_codec.h"
#include "dataplane/worker/element_buffer.h"

namespace sluice::worker {

// One response of a GetElements stream before serialisation: elements already in the codec the
// client asked for.
struct ElementsResponse {
  std::vector<EncodedElementPtr> elements;
  bool end_of_sequence = false;
};

pipeline::WireBytes EncodeElementsResponse(const ElementsResponse& response, size_t min_view_bytes = 16 << 10);

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_RESPONSE_ENCODER_H_
