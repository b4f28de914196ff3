#include "dataplane/pipeline/image/crop_geometry.h"

#include <algorithm>
#include <cmath>

namespace sluice::pipeline::image {
namespace {

// Python's round(): half to even (std::nearbyint in the default rounding mode).
int64_t RoundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

}  // namespace

int64_t CropRng::Int(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  // Rejection sampling: unbiased for any range.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t v;
  do {
    v = engine_();
  } while (v >= limit);
  return lo + static_cast<int64_t>(v % range);
}

CropRect RandomResizedCropRect(int64_t height, int64_t width, const RandomResizedCropParams& p,
                               CropRng& rng) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_ratio_min = std::log(p.ratio_min);
  const double log_ratio_max = std::log(p.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(p.scale_min, p.scale_max);
    const double aspect = std::exp(rng.Uniform(log_ratio_min, log_ratio_max));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t y = rng.Int(0, height - h);
      const int64_t x = rng.Int(0, width - w);
      return CropRect{y, x, h, w};
    }
  }
  // Fallback: central crop, aspect ratio clamped to the allowed range.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < std::min(p.ratio_min, p.ratio_max)) {
    w = width;
    h = RoundHalfEven(static_cast<double>(w) / std::min(p.ratio_min, p.ratio_max));
  } else if (in_ratio > std::max(p.ratio_min, p.ratio_max)) {
    h = height;
    w = RoundHalfEven(static_cast<double>(h) * std::max(p.ratio_min, p.ratio_max));
  }
  h = std::clamp<int64_t>(h, 1, height);
  w = std::clamp<int64_t>(w, 1, width);
  return CropRect{(height - h) / 2, (width - w) / 2, h, w};
}

namespace {
// Offset of a centred crop along one axis. A larger crop pads floor(excess / 2) before the image.
int64_t CenterOffset(int64_t size, int64_t crop) {
  if (crop > size) return -((crop - size) / 2);
  return RoundHalfEven(static_cast<double>(size - crop) / 2.0);
}
}  // namespace

CropRect CenterCropRect(int64_t height, int64_t width, int64_t crop_h, int64_t crop_w) {
  return CropRect{CenterOffset(height, crop_h), CenterOffset(width, crop_w), crop_h, crop_w};
}

CropRect RandomCropRect(int64_t height, int64_t width, int64_t crop_h, int64_t crop_w, CropRng& rng) {
  const int64_t y = rng.Int(0, height - crop_h);
  const int64_t x = rng.Int(0, width - crop_w);
  return CropRect{y, x, crop_h, crop_w};
}

void ShorterSideSize(int64_t height, int64_t width, int64_t size, int64_t* out_h, int64_t* out_w) {
  if (width <= height) {
    *out_w = size;
    *out_h = std::max<int64_t>(1, size * height / width);
  } else {
    *out_h = size;
    *out_w = std::max<int64_t>(1, size * width / height);
  }
}

bool FlipDecision(uint64_t seed, double probability) {
  CropRng rng(seed);
  return rng.Uniform() < probability;
}

}  // namespace sluice::pipeline::image
