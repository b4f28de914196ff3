// Internals shared by the image ops (decode_ops.cc, transform_ops.cc, image_ops.cc): argument
// parsing, input checks, and the crop/resize planning that both the plain ops and the fused
// decode ops use. Not part of the public API. Everything here is stateless and thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_IMAGE_IMAGE_OP_UTIL_H_
#define SLUICE_DATAPLANE_PIPELINE_IMAGE_IMAGE_OP_UTIL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/pipeline/image/crop_geometry.h"
#include "dataplane/pipeline/image/resample.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline::image {

// "<op>: field '<field>': <message>".
std::string FieldMessage(absl::string_view op, absl::string_view field, absl::string_view message);

// Shape of an image tensor: [H, W, C], or [H, W] (then C = 1 and `rank2`).
struct ImageShape {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  bool rank2 = false;
};

// Checks that `t` is an image; with `uint8_only`, that its dtype is uint8. Errors name op and field.
absl::StatusOr<ImageShape> CheckImage(const Tensor& t, absl::string_view op, absl::string_view field,
                                      bool uint8_only);
// The bytes of a scalar string tensor holding an encoded image.
absl::StatusOr<absl::string_view> EncodedBytes(const Tensor& t, absl::string_view op, absl::string_view field);

// Reads a `size` argument: [s] or [h, w] with positive entries.
absl::Status ReadSize(const Args& args, absl::string_view op, int64_t* h, int64_t* w, bool* single);

// --- crop / resize ---------------------------------------------------------------------------

enum class CropResizeKind { kResize, kCenterCrop, kRandomCrop, kRandomResizedCrop };

struct CropResizeSpec {
  CropResizeKind kind = CropResizeKind::kResize;
  std::string op;     // op name, for messages
  std::string field;
  int64_t size_h = 0, size_w = 0;
  bool shorter_side = false;  // resize with one size: the shorter side becomes size_h
  RandomResizedCropParams rrc;
  ResizeMethod method = ResizeMethod::kBilinear;
  bool antialias = true;
};

absl::StatusOr<CropResizeSpec> CropResizeSpecFromArgs(CropResizeKind kind, absl::string_view op,
                                                      const Args& args);

// What to do with an image of the given size: the source rectangle, the output size, and whether
// pixels are resampled (resize, random_resized_crop) or copied (the crops, zero-padded where the
// rectangle leaves the image).
struct CropResizePlan {
  CropRect rect;
  int64_t out_h = 0, out_w = 0;
  bool resample = false;
};

absl::StatusOr<CropResizePlan> PlanCropResize(const CropResizeSpec& spec, int64_t height, int64_t width,
                                              uint64_t seed);

// Applies a plan to a decoded image tensor (resampling needs uint8).
absl::StatusOr<Tensor> ApplyCropResize(const CropResizeSpec& spec, const Tensor& image,
                                       const ImageShape& shape, const CropResizePlan& plan);

// Copies rect (which may leave the image) of an image whose row r starts at rows + r * stride into
// a zeroed output [rect.h, rect.w, pixel_bytes]. `valid` is the part of the image available:
// rows [valid.y, valid.y + valid.h) and columns [valid.x, valid.x + valid.w), with `rows` pointing
// at pixel (valid.y, valid.x).
void CopyRect(const uint8_t* rows, int64_t stride, const CropRect& valid, int64_t pixel_bytes,
              const CropRect& rect, uint8_t* out);

std::unique_ptr<ElementOp> MakeCropResizeOp(CropResizeSpec spec);

// --- decode ------------------------------------------------------------------------------------

enum class ImageFormat { kJpeg, kPng, kAny };

struct DecodeSpec {
  ImageFormat format = ImageFormat::kAny;
  std::string op;
  std::string field;
  int channels = 3;
  bool skip_on_error = false;
  int dct_scale = -1;  // -1 auto, else 1, 2, 4 or 8
};

absl::StatusOr<DecodeSpec> DecodeSpecFromArgs(ImageFormat format, absl::string_view op, const Args& args);
std::unique_ptr<ElementOp> MakeDecodeOp(DecodeSpec spec);
// decode_jpeg/decode_image followed by a crop or resize of the same field, as one region decode.
std::unique_ptr<ElementOp> MakeFusedDecodeOp(DecodeSpec decode, CropResizeSpec crop);

// The DCT scale denominator (1, 2, 4 or 8) for decoding `rect` of a full-size JPEG that is then
// resized to out_h x out_w: the largest allowed one that keeps the scaled rect at least as large
// as the output in both dimensions. `dct_scale` is the decode op's setting (-1 auto, else a cap).
int ChooseDctScale(const CropRect& rect, int64_t out_h, int64_t out_w, int dct_scale);

// --- flip / normalize --------------------------------------------------------------------------

struct FlipSpec {
  std::string field;
  bool horizontal = true;
  double probability = 0.5;
};
absl::StatusOr<FlipSpec> FlipSpecFromArgs(const Args& args);
std::unique_ptr<ElementOp> MakeFlipOp(FlipSpec spec);

struct NormalizeSpec {
  std::string field;
  std::vector<double> mean, std;
  double scale = 1.0 / 255.0;
  bool chw = true;
  std::optional<FlipSpec> flip;  // a random_flip fused in front
};
absl::StatusOr<NormalizeSpec> NormalizeSpecFromArgs(const Args& args);
std::unique_ptr<ElementOp> MakeNormalizeOp(NormalizeSpec spec);

}  // namespace sluice::pipeline::image

#endif  // SLUICE_DATAPLANE_PIPELINE_IMAGE_IMAGE_OP_UTIL_H_
