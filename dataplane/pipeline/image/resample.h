// Separable image resampling for uint8 (and, more slowly, float32) HWC images: bilinear (optionally antialiased, i.e. a
// triangle filter widened by the downscale factor, as Pillow does), nearest and area (exact pixel
// coverage).
//
// A ResamplePlan is built once per call from the geometry (source box, clamp bounds, output size,
// flips) and holds per-axis fixed-point weight tables, so the inner loops do only integer
// multiply-adds: no divisions and no floating point per pixel. The vertical pass runs first, one
// output row at a time over contiguous source rows (SSE2: 16 columns x 2 rows per multiply-add
// step), into a 16-bit row buffer; the horizontal pass then reads that row (SSE2: two output
// pixels per step, two taps of all channels per multiply-add, for 3 and 4 channels). Portable
// scalar kernels give bit-identical results elsewhere. Flips cost nothing: they reverse the
// weight tables.
//
// Everything here is a pure function of its inputs; plans are immutable and thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_IMAGE_RESAMPLE_H_
#define SLUICE_DATAPLANE_PIPELINE_IMAGE_RESAMPLE_H_

#include <cstdint>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::pipeline::image {

enum class ResizeMethod { kBilinear, kNearest, kArea };

absl::StatusOr<ResizeMethod> ParseResizeMethod(absl::string_view name);
absl::string_view ResizeMethodName(ResizeMethod method);

// A read-only view of a uint8 image region. Pixel (y, x) of the full image lives at
// data + (y - origin_y) * stride + (x - origin_x) * channels; only rows/columns the plan needs
// (ResamplePlan::rows()/cols()) must be backed by memory.
struct ImageView {
  const uint8_t* data = nullptr;
  int64_t stride = 0;  // bytes between rows
  int channels = 0;
  int64_t origin_y = 0;
  int64_t origin_x = 0;
};

// One axis of a plan: for every output index, a window of input indices and its weights.
class ResampleAxis {
 public:
  // Maps the source interval [box_start, box_start + box_size) onto `out_size` samples. Input
  // indices outside [clamp_begin, clamp_end) are never read (weights are renormalised instead).
  // `reverse` mirrors the output (flip).
  static ResampleAxis Make(ResizeMethod method, bool antialias, double box_start, double box_size,
                           int64_t clamp_begin, int64_t clamp_end, int64_t out_size, bool reverse);

  int64_t out_size() const { return out_size_; }
  int taps() const { return taps_; }
  // Range of input indices read: [first_input(), end_input()).
  int64_t first_input() const { return first_input_; }
  int64_t end_input() const { return end_input_; }
  int64_t start(int64_t i) const { return start_[i]; }
  const int64_t* starts() const { return start_.data(); }
  int count(int64_t i) const { return count_[i]; }
  const int32_t* weights(int64_t i) const { return &weights_[i * taps_]; }
  // The same weights as int16, padded with zeros to an even count (paired_taps()) for SIMD.
  int paired_taps() const { return paired_taps_; }
  const int16_t* weights16(int64_t i) const { return &weights16_[i * paired_taps_]; }

  static constexpr int kWeightBits = 14;

 private:
  int64_t out_size_ = 0;
  int taps_ = 0;
  int paired_taps_ = 0;
  int64_t first_input_ = 0;
  int64_t end_input_ = 0;
  std::vector<int64_t> start_;
  std::vector<int> count_;
  std::vector<int32_t> weights_;  // out_size * taps, each window sums to 1 << kWeightBits
  std::vector<int16_t> weights16_;  // out_size * paired_taps
};

struct ResampleGeometry {
  // Source box in full-image pixel coordinates (may be fractional).
  double box_y = 0, box_x = 0, box_h = 0, box_w = 0;
  // Source pixels that may be read: rows [clamp_y0, clamp_y1), columns [clamp_x0, clamp_x1).
  int64_t clamp_y0 = 0, clamp_y1 = 0, clamp_x0 = 0, clamp_x1 = 0;
  int64_t out_h = 0, out_w = 0;
  ResizeMethod method = ResizeMethod::kBilinear;
  bool antialias = true;
  bool flip_horizontal = false;
  bool flip_vertical = false;
};

class ResamplePlan {
 public:
  explicit ResamplePlan(const ResampleGeometry& geometry);

  // Source rows [rows_begin(), rows_end()) and columns [cols_begin(), cols_end()) are read.
  int64_t rows_begin() const { return y_.first_input(); }
  int64_t rows_end() const { return y_.end_input(); }
  int64_t cols_begin() const { return x_.first_input(); }
  int64_t cols_end() const { return x_.end_input(); }
  int64_t out_h() const { return y_.out_size(); }
  int64_t out_w() const { return x_.out_size(); }

  // Writes out_h x out_w x channels bytes (rows of out_w * channels bytes) to `dst`.
  void Run(const ImageView& src, uint8_t* dst) const;
  // The same for a float32 image (the view's data and stride are in floats, not bytes): the same
  // windows and weights (as floats), accumulated in float, not rounded. Portable scalar code that
  // the compiler vectorises; about 4x the memory traffic of the uint8 path.
  void RunFloat(const float* src, int64_t stride, int channels, int64_t origin_y, int64_t origin_x,
                float* dst) const;

 private:
  ResampleAxis y_;
  ResampleAxis x_;
};

// Convenience: resamples a full, tightly packed HWC image of the given width (the geometry's clamp
// bounds must lie inside it).
void ResampleImage(const uint8_t* src, int64_t width, int channels, const ResampleGeometry& geometry,
                   uint8_t* dst);

// The float32 counterpart of ResampleImage.
void ResampleImageFloat(const float* src, int64_t width, int channels, const ResampleGeometry& geometry,
                        float* dst);

// Makes every ResamplePlan::Run use the portable scalar kernels (what non-x86 CPUs run) instead
// of SSE2, so tests can check both on x86. Process-wide; for tests only.
void ForceScalarResampleForTesting(bool scalar);

}  // namespace sluice::pipeline::image

#endif  // SLUICE_DATAPLANE_PIPELINE_IMAGE_RESAMPLE_H_
