// Turns an ElementData received from a worker into a pipeline Element: checks the declared sizes,
// decompresses (bounded by uncompressed_size) and decodes with pipeline::DecodeElement, whose
// tensors view the decoded buffer (no copy after the wire). Uncompressed bytes are moved out of
// the message, not copied. Every failure (a corrupt or hostile worker) is an InvalidArgument error
// naming what was wrong. Pure; thread-safe.
#ifndef SLUICE_DATAPLANE_CLIENT_ELEMENT_DECODER_H_
#define SLUICE_DATAPLANE_CLIENT_ELEMENT_DECODER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "dataplane/client/buffer_pool.h"
#include "dataplane/pipeline/tensor.h"
#include "dataservice.pb.h"

namespace sluice::client {

struct DecodedElement {
  pipeline::Element element;
  uint64_t bytes = 0;  // size of the decoded buffer the element's tensors keep alive
};

// Consumes `data.data()` (left empty; with a `pool`, holding a recycled buffer for the next parse
// into the same message). `max_element_bytes` bounds uncompressed_size before any allocation, so a
// lying size cannot make the client allocate arbitrary memory. With a `pool`, the element's
// buffer returns to it when the element's last tensor is dropped.
absl::StatusOr<DecodedElement> DecodeElementData(service::ElementData& data, uint64_t max_element_bytes,
                                                 BufferPool* pool = nullptr);

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_ELEMENT_DECODER_H_
