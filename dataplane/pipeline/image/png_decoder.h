// PNG decoding with libpng to 8-bit HWC pixels (16-bit samples keep their high byte, palettes and
// low bit depths are expanded, alpha is dropped or kept according to the requested channels).
// Pure function; thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_IMAGE_PNG_DECODER_H_
#define SLUICE_DATAPLANE_PIPELINE_IMAGE_PNG_DECODER_H_

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline::image {

// True when `data` starts with the PNG signature.
bool LooksLikePng(absl::string_view data);

// Decodes to a uint8 tensor [H, W, channels]; channels is 1 (gray), 3 (RGB) or 4 (RGBA). Error
// messages do not name a field; callers prefix them.
absl::StatusOr<Tensor> DecodePngToTensor(absl::string_view data, int channels);

}  // namespace sluice::pipeline::image

#endif  // SLUICE_DATAPLANE_PIPELINE_IMAGE_PNG_DECODER_H_
