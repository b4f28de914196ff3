// JPEG decoding with libjpeg(-turbo)'s full API: header-only reads, DCT-domain downscaling
// (1/2, 1/4, 1/8), and region-of-interest decoding (only the needed columns via
// jpeg_crop_scanline, rows above the region skipped with jpeg_skip_scanlines, rows below never
// decoded).
//
// libjpeg reports fatal errors through longjmp; JpegDecoder confines that to its own methods, each
// of which turns an error into an absl::Status. One JpegDecoder decodes one image and is used by
// one thread; create one per call (it is cheap).
#ifndef SLUICE_DATAPLANE_PIPELINE_IMAGE_JPEG_DECODER_H_
#define SLUICE_DATAPLANE_PIPELINE_IMAGE_JPEG_DECODER_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline::image {

// Images with more pixels than this are rejected before any pixel is decoded.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

struct JpegHeader {
  int64_t width = 0;
  int64_t height = 0;
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  bool progressive = false;
};

// True when `data` starts with a JPEG SOI marker.
bool LooksLikeJpeg(absl::string_view data);

class JpegDecoder {
 public:
  // `data` must outlive the decoder.
  explicit JpegDecoder(absl::string_view data);
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads the markers up to the first scan. Errors: not a JPEG, corrupt header, image too large.
  absl::Status ReadHeader();
  const JpegHeader& header() const { return header_; }

  // Starts decompression at 1/scale_denom of full size (1, 2, 4 or 8) with 1 (gray) or 3 (RGB)
  // output channels. Output dimensions are ceil(full / scale_denom).
  absl::Status Start(int scale_denom, int channels);
  int64_t output_width() const;
  int64_t output_height() const;

  // Limits decoding to output columns [x, x + w). libjpeg widens the range to whole iMCUs; the
  // decoded rows then start at column *actual_x and are *actual_w wide. Call before any row.
  absl::Status CropColumns(int64_t x, int64_t w, int64_t* actual_x, int64_t* actual_w);
  // Skips n output rows (entropy-decoded but not transformed or colour-converted where possible).
  absl::Status SkipRows(int64_t n);
  // Decodes the next n rows into dst (row i at dst + i * stride; each row output_width (or the
  // cropped width) * channels bytes).
  absl::Status ReadRows(uint8_t* dst, int64_t stride, int64_t n);

  // Whether libjpeg hit the end of the data early (it then pads with grey and only warns).
  bool truncated() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  JpegHeader header_;
  int channels_ = 3;
};

// Decodes a whole JPEG to a uint8 tensor [H, W, channels] at 1/scale_denom size. Error messages
// do not name a field; callers prefix them.
absl::StatusOr<Tensor> DecodeJpegToTensor(absl::string_view data, int channels, int scale_denom);

}  // namespace sluice::pipeline::image

#endif  // SLUICE_DATAPLANE_PIPELINE_IMAGE_JPEG_DECODER_H_
