// Crop rectangles for the crop ops, computed from image dimensions alone so the same code serves
// the plain ops (on decoded pixels) and the fused JPEG region decode (on header dimensions).
//
// Random choices come from a CropRng seeded only with the per-element seed, and are drawn in a
// fixed order, so an op and its fused form pick the same rectangle for the same seed. Pure
// functions; thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_IMAGE_CROP_GEOMETRY_H_
#define SLUICE_DATAPLANE_PIPELINE_IMAGE_CROP_GEOMETRY_H_

#include <cstdint>
#include <random>

namespace sluice::pipeline::image {

// A deterministic RNG with explicitly defined uniform draws (std:: distributions are not
// specified bit-for-bit across standard libraries).
class CropRng {
 public:
  explicit CropRng(uint64_t seed) : engine_(seed) {}
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [lo, hi] (inclusive).
  int64_t Int(int64_t lo, int64_t hi);

 private:
  std::mt19937_64 engine_;
};

struct CropRect {
  int64_t y = 0, x = 0, h = 0, w = 0;
  bool operator==(const CropRect&) const = default;
};

struct RandomResizedCropParams {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

// torchvision's RandomResizedCrop.get_params: up to 10 attempts at a random area fraction and
// log-uniform aspect ratio; if none fits, a central crop with the aspect ratio clamped to the range.
CropRect RandomResizedCropRect(int64_t height, int64_t width, const RandomResizedCropParams& params,
                               CropRng& rng);

// torchvision's center_crop offsets: round((size - crop) / 2) with round-half-to-even. Along an axis
// where the crop is larger than the image the offset is -floor((crop - size) / 2): the rect extends
// past the image and callers pad with zeros.
CropRect CenterCropRect(int64_t height, int64_t width, int64_t crop_h, int64_t crop_w);

// A uniformly placed crop of the given size; requires crop_h <= height and crop_w <= width.
CropRect RandomCropRect(int64_t height, int64_t width, int64_t crop_h, int64_t crop_w, CropRng& rng);

// Output size of `resize` with a single size: the shorter side becomes `size`, the other keeps the
// aspect ratio (truncated, as torchvision does).
void ShorterSideSize(int64_t height, int64_t width, int64_t size, int64_t* out_h, int64_t* out_w);

// Whether a random_flip with this probability flips, drawn from a fresh rng of `seed`.
bool FlipDecision(uint64_t seed, double probability);

}  // namespace sluice::pipeline::image

#endif  // SLUICE_DATAPLANE_PIPELINE_IMAGE_CROP_GEOMETRY_H_
