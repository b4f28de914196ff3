#include "dataplane/pipeline/image/resample.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace sluice::pipeline::image {
namespace {

constexpr int kBits = ResampleAxis::kWeightBits;

std::atomic<bool> force_scalar{false};
// The vertical pass keeps 7 fractional bits in its 16-bit row buffer (at most 255 << 7 = 32640,
// so the values fit int16 for SSE2's multiply-add); the horizontal pass then accumulates kBits
// more, so it shifts by 7 + kBits at the end.
constexpr int kRowFractionBits = 7;
constexpr int kVerticalShift = kBits - kRowFractionBits;
constexpr int kHorizontalShift = kBits + kRowFractionBits;

// Window of input indices and float weights for one output sample.
struct Window {
  int64_t start = 0;
  absl::InlinedVector<double, 16> weights;  // no heap allocation for typical windows
};

// floor/ceil for the magnitudes used here (|v| < 2^62), inline (baseline x86-64 has no roundsd).
inline int64_t FloorInt(double v) {
  const int64_t t = static_cast<int64_t>(v);
  return static_cast<double>(t) > v ? t - 1 : t;
}
inline int64_t CeilInt(double v) {
  const int64_t t = static_cast<int64_t>(v);
  return static_cast<double>(t) < v ? t + 1 : t;
}

Window NearestWindow(double center, int64_t lo, int64_t hi) {
  int64_t idx = FloorInt(center);
  idx = std::clamp<int64_t>(idx, lo, hi - 1);
  return Window{idx, {1.0}};
}

Window BilinearWindow(double center, double filter_scale, int64_t lo, int64_t hi) {
  const double support = filter_scale;  // the triangle filter has support 1, widened by the scale
  int64_t first = FloorInt(center - support + 0.5);
  int64_t last = FloorInt(center + support + 0.5);  // exclusive
  first = std::max(first, lo);
  last = std::min(last, hi);
  Window w;
  w.start = first;
  double total = 0;
  const double inv_scale = 1.0 / filter_scale;
  for (int64_t j = first; j < last; ++j) {
    double d = std::abs((static_cast<double>(j) + 0.5 - center) * inv_scale);
    double v = d < 1.0 ? 1.0 - d : 0.0;
    w.weights.push_back(v);
    total += v;
  }
  if (total <= 0) return NearestWindow(center, lo, hi);
  const double inv_total = 1.0 / total;
  for (double& v : w.weights) v *= inv_total;
  return w;
}

Window AreaWindow(double a, double b, int64_t lo, int64_t hi) {
  int64_t first = std::max<int64_t>(FloorInt(a), lo);
  int64_t last = std::min<int64_t>(CeilInt(b), hi);  // exclusive
  Window w;
  w.start = first;
  double total = 0;
  for (int64_t j = first; j < last; ++j) {
    double v = std::min(b, static_cast<double>(j + 1)) - std::max(a, static_cast<double>(j));
    v = std::max(v, 0.0);
    w.weights.push_back(v);
    total += v;
  }
  if (total <= 0) return NearestWindow((a + b) / 2, lo, hi);
  const double inv_total = 1.0 / total;
  for (double& v : w.weights) v *= inv_total;
  return w;
}

// Drops zero weights at both ends so the window is as short as possible.
void Trim(Window& w) {
  size_t begin = 0, end = w.weights.size();
  while (end > begin + 1 && w.weights[end - 1] == 0) --end;
  while (begin + 1 < end && w.weights[begin] == 0) ++begin;
  w.weights.erase(w.weights.begin() + end, w.weights.end());
  w.weights.erase(w.weights.begin(), w.weights.begin() + begin);
  w.start += static_cast<int64_t>(begin);
}

// --- kernels -----------------------------------------------------------------------------------
// Compiled for AVX2 and a baseline; the loader picks one at start-up (GCC function multiversioning).

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SLUICE_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define SLUICE_MULTIVERSION
#endif

// acc[k] = sum_t w[t] * rows[t][k], then row[k] = rounded acc >> kVerticalShift. The portable
// path (non-x86 CPUs, and tests via ForceScalarResampleForTesting).
SLUICE_MULTIVERSION
void VerticalPass(const uint8_t* base, int64_t stride, const int32_t* weights, int count, int64_t n,
                  int32_t* __restrict acc, uint16_t* __restrict row) {
  {
    const int32_t w = weights[0];
    const uint8_t* __restrict src = base;
    for (int64_t k = 0; k < n; ++k) acc[k] = w * src[k] + (1 << (kVerticalShift - 1));
  }
  for (int t = 1; t < count; ++t) {
    const int32_t w = weights[t];
    const uint8_t* __restrict src = base + t * stride;
    for (int64_t k = 0; k < n; ++k) acc[k] += w * src[k];
  }
  for (int64_t k = 0; k < n; ++k) row[k] = static_cast<uint16_t>(acc[k] >> kVerticalShift);
}

#if defined(__SSE2__)
// The same with SSE2 multiply-adds on pairs of rows: 16 columns per step, two taps per pmaddwd.
// Reads exactly [0, n) of each row.
void VerticalPassSse2(const uint8_t* base, int64_t stride, const int16_t* weights, int count, int64_t n,
                      uint16_t* __restrict row) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i round = _mm_set1_epi32(1 << (kVerticalShift - 1));
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m128i acc0 = round, acc1 = round, acc2 = round, acc3 = round;
    int t = 0;
    for (; t + 2 <= count; t += 2) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + t * stride + k));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + (t + 1) * stride + k));
      const int32_t wpair = static_cast<int32_t>(static_cast<uint16_t>(weights[t])) |
                            (static_cast<int32_t>(static_cast<uint16_t>(weights[t + 1])) << 16);
      const __m128i w = _mm_set1_epi32(wpair);
      const __m128i lo = _mm_unpacklo_epi8(a, b);  // a0 b0 a1 b1 ... a7 b7
      const __m128i hi = _mm_unpackhi_epi8(a, b);
      acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), w));
      acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), w));
      acc2 = _mm_add_epi32(acc2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), w));
      acc3 = _mm_add_epi32(acc3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), w));
    }
    if (t < count) {  // odd tap count: pair the last row with zeros
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + t * stride + k));
      const __m128i w = _mm_set1_epi32(static_cast<int32_t>(static_cast<uint16_t>(weights[t])));
      const __m128i lo = _mm_unpacklo_epi8(a, zero);  // a0 0 a1 0 ... as int16 pairs (a, 0)
      const __m128i hi = _mm_unpackhi_epi8(a, zero);
      acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(_mm_unpacklo_epi16(lo, zero), w));
      acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(_mm_unpackhi_epi16(lo, zero), w));
      acc2 = _mm_add_epi32(acc2, _mm_madd_epi16(_mm_unpacklo_epi16(hi, zero), w));
      acc3 = _mm_add_epi32(acc3, _mm_madd_epi16(_mm_unpackhi_epi16(hi, zero), w));
    }
    // Values are at most 255 << 7, so the signed 16-bit pack does not saturate.
    const __m128i r0 = _mm_packs_epi32(_mm_srai_epi32(acc0, kVerticalShift), _mm_srai_epi32(acc1, kVerticalShift));
    const __m128i r1 = _mm_packs_epi32(_mm_srai_epi32(acc2, kVerticalShift), _mm_srai_epi32(acc3, kVerticalShift));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + k), r0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + k + 8), r1);
  }
  for (; k < n; ++k) {
    int32_t acc = 1 << (kVerticalShift - 1);
    for (int t = 0; t < count; ++t) acc += weights[t] * base[t * stride + k];
    row[k] = static_cast<uint16_t>(acc >> kVerticalShift);
  }
}
#endif

inline uint8_t ClampToByte(int32_t v) {
  v >>= kHorizontalShift;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

template <int C>
void HorizontalPassFixed(const uint16_t* row, const ResampleAxis& x, int64_t first_col, uint8_t* dst) {
  const int64_t out_w = x.out_size();
  for (int64_t ox = 0; ox < out_w; ++ox) {
    const int32_t* w = x.weights(ox);
    const int n = x.count(ox);
    const uint16_t* p = row + (x.start(ox) - first_col) * C;
    int32_t acc[C];
    for (int c = 0; c < C; ++c) acc[c] = 1 << (kHorizontalShift - 1);
    for (int t = 0; t < n; ++t) {
      const int32_t wt = w[t];
      for (int c = 0; c < C; ++c) acc[c] += wt * p[t * C + c];
    }
    for (int c = 0; c < C; ++c) dst[ox * C + c] = ClampToByte(acc[c]);
  }
}

#if defined(__SSE2__)
// Two taps of all channels of one output pixel: [a.c0 b.c0 a.c1 b.c1 ...] * [wa wb wa wb ...].
template <int C>
inline __m128i TapPair(const uint16_t* p, const int16_t* w) {
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + C));
  int32_t wpair;
  std::memcpy(&wpair, w, sizeof(wpair));  // w[0] | w[1] << 16
  return _mm_madd_epi16(_mm_unpacklo_epi16(a, b), _mm_set1_epi32(wpair));
}

// C = 3 or 4, two output pixels per step, P tap pairs per pixel (P = 0: the axis' count, at run
// time). Each pixel reads paired_taps() pixels (+1 element) from its window's start: the row
// buffer is padded for that.
template <int C, int P>
void HorizontalPassSse2(const uint16_t* row, const ResampleAxis& x, int64_t first_col,
                        uint8_t* __restrict dst) {
  static_assert(C == 3 || C == 4);
  const int64_t out_w = x.out_size();
  const int pairs = P > 0 ? P : x.paired_taps() / 2;
  const int64_t* __restrict starts = x.starts();
  const int16_t* __restrict weights = x.weights16(0);
  const int64_t wstride = 2 * pairs;
  const __m128i round = _mm_set1_epi32(1 << (kHorizontalShift - 1));
  int64_t ox = 0;
  for (; ox + 2 <= out_w; ox += 2) {
    const uint16_t* p0 = row + (starts[ox] - first_col) * C;
    const uint16_t* p1 = row + (starts[ox + 1] - first_col) * C;
    const int16_t* w0 = weights + ox * wstride;
    const int16_t* w1 = w0 + wstride;
    __m128i acc0 = round, acc1 = round;
    for (int k = 0; k < pairs; ++k) {
      acc0 = _mm_add_epi32(acc0, TapPair<C>(p0 + 2 * k * C, w0 + 2 * k));
      acc1 = _mm_add_epi32(acc1, TapPair<C>(p1 + 2 * k * C, w1 + 2 * k));
    }
    const __m128i words = _mm_packs_epi32(_mm_srai_epi32(acc0, kHorizontalShift),
                                          _mm_srai_epi32(acc1, kHorizontalShift));
    const __m128i bytes = _mm_packus_epi16(words, words);  // pixel 0 in bytes 0-3, pixel 1 in 4-7
    const uint64_t both = static_cast<uint64_t>(_mm_cvtsi128_si64(bytes));
    const uint32_t px0 = static_cast<uint32_t>(both), px1 = static_cast<uint32_t>(both >> 32);
    std::memcpy(dst + ox * C, &px0, C);
    std::memcpy(dst + (ox + 1) * C, &px1, C);
  }
  for (; ox < out_w; ++ox) {
    const uint16_t* p = row + (starts[ox] - first_col) * C;
    const int16_t* w = weights + ox * wstride;
    __m128i acc = round;
    for (int k = 0; k < pairs; ++k) acc = _mm_add_epi32(acc, TapPair<C>(p + 2 * k * C, w + 2 * k));
    acc = _mm_srai_epi32(acc, kHorizontalShift);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
    const uint32_t px = static_cast<uint32_t>(_mm_cvtsi128_si32(bytes));
    std::memcpy(dst + ox * C, &px, C);
  }
}

template <int C>
void HorizontalPassSse2Dispatch(const uint16_t* row, const ResampleAxis& x, int64_t first_col, uint8_t* dst) {
  switch (x.paired_taps() / 2) {
    case 1: HorizontalPassSse2<C, 1>(row, x, first_col, dst); break;
    case 2: HorizontalPassSse2<C, 2>(row, x, first_col, dst); break;
    case 3: HorizontalPassSse2<C, 3>(row, x, first_col, dst); break;
    case 4: HorizontalPassSse2<C, 4>(row, x, first_col, dst); break;
    default: HorizontalPassSse2<C, 0>(row, x, first_col, dst); break;
  }
}
#endif

void HorizontalPassGeneric(const uint16_t* row, const ResampleAxis& x, int64_t first_col, int channels,
                           uint8_t* dst) {
  const int64_t out_w = x.out_size();
  for (int64_t ox = 0; ox < out_w; ++ox) {
    const int32_t* w = x.weights(ox);
    const int n = x.count(ox);
    const uint16_t* p = row + (x.start(ox) - first_col) * channels;
    for (int c = 0; c < channels; ++c) {
      int32_t acc = 1 << (kHorizontalShift - 1);
      for (int t = 0; t < n; ++t) acc += w[t] * p[t * channels + c];
      dst[ox * channels + c] = ClampToByte(acc);
    }
  }
}

}  // namespace

absl::StatusOr<ResizeMethod> ParseResizeMethod(absl::string_view name) {
  if (name == "bilinear") return ResizeMethod::kBilinear;
  if (name == "nearest") return ResizeMethod::kNearest;
  if (name == "area") return ResizeMethod::kArea;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown resize method '", name, "'; expected bilinear, nearest or area"));
}

absl::string_view ResizeMethodName(ResizeMethod method) {
  switch (method) {
    case ResizeMethod::kBilinear: return "bilinear";
    case ResizeMethod::kNearest: return "nearest";
    case ResizeMethod::kArea: return "area";
  }
  return "?";
}

ResampleAxis ResampleAxis::Make(ResizeMethod method, bool antialias, double box_start, double box_size,
                                int64_t clamp_begin, int64_t clamp_end, int64_t out_size, bool reverse) {
  ResampleAxis axis;
  axis.out_size_ = out_size;
  const double scale = box_size / static_cast<double>(out_size);
  std::vector<Window> windows;
  windows.reserve(out_size);
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = box_start + (static_cast<double>(i) + 0.5) * scale;
    Window w;
    switch (method) {
      case ResizeMethod::kNearest:
        w = NearestWindow(center, clamp_begin, clamp_end);
        break;
      case ResizeMethod::kBilinear:
        w = BilinearWindow(center, antialias ? std::max(scale, 1.0) : 1.0, clamp_begin, clamp_end);
        break;
      case ResizeMethod::kArea:
        w = AreaWindow(box_start + static_cast<double>(i) * scale,
                       box_start + static_cast<double>(i + 1) * scale, clamp_begin, clamp_end);
        break;
    }
    Trim(w);
    windows.push_back(std::move(w));
  }
  if (reverse) std::reverse(windows.begin(), windows.end());

  int taps = 1;
  for (const auto& w : windows) taps = std::max(taps, static_cast<int>(w.weights.size()));
  axis.taps_ = taps;
  axis.start_.resize(out_size);
  axis.count_.resize(out_size);
  axis.weights_.assign(out_size * taps, 0);
  axis.paired_taps_ = (taps + 1) / 2 * 2;
  axis.weights16_.assign(out_size * axis.paired_taps_, 0);
  axis.first_input_ = clamp_end;
  axis.end_input_ = clamp_begin;
  for (int64_t i = 0; i < out_size; ++i) {
    const Window& w = windows[i];
    const int n = static_cast<int>(w.weights.size());
    axis.start_[i] = w.start;
    axis.count_[i] = n;
    int32_t* dst = &axis.weights_[i * taps];
    int32_t sum = 0;
    int largest = 0;
    for (int t = 0; t < n; ++t) {
      dst[t] = static_cast<int32_t>(w.weights[t] * (1 << kBits) + 0.5);  // weights are >= 0
      sum += dst[t];
      if (dst[t] > dst[largest]) largest = t;
    }
    dst[largest] += (1 << kBits) - sum;  // exact unit gain: flat images stay flat
    for (int t = 0; t < n; ++t) axis.weights16_[i * axis.paired_taps_ + t] = static_cast<int16_t>(dst[t]);
    axis.first_input_ = std::min(axis.first_input_, w.start);
    axis.end_input_ = std::max(axis.end_input_, w.start + n);
  }
  return axis;
}

ResamplePlan::ResamplePlan(const ResampleGeometry& g)
    : y_(ResampleAxis::Make(g.method, g.antialias, g.box_y, g.box_h, g.clamp_y0, g.clamp_y1, g.out_h,
                            g.flip_vertical)),
      x_(ResampleAxis::Make(g.method, g.antialias, g.box_x, g.box_w, g.clamp_x0, g.clamp_x1, g.out_w,
                            g.flip_horizontal)) {}

void ResamplePlan::Run(const ImageView& src, uint8_t* dst) const {
  const int channels = src.channels;
  const int64_t first_col = x_.first_input();
  const int64_t n = (x_.end_input() - first_col) * channels;
#if defined(__SSE2__)
  const bool simd = !force_scalar.load(std::memory_order_relaxed);
#else
  const bool simd = false;
#endif
  // Per-thread scratch rows, reused across calls (no allocation per image once warm). The row
  // has zeroed padding for the SIMD pass, which may read a few pixels past a window's end.
  const int64_t padded = n + (x_.paired_taps() + 2) * channels;
  thread_local std::vector<int32_t> acc;
  if (!simd && static_cast<int64_t>(acc.size()) < n) acc.resize(n);
  thread_local std::vector<uint16_t> row;
  if (static_cast<int64_t>(row.size()) < padded) row.resize(padded);
  std::fill(row.begin() + n, row.begin() + padded, 0);
  const int64_t out_w = x_.out_size();
  const int64_t out_row_bytes = out_w * channels;
  for (int64_t oy = 0; oy < y_.out_size(); ++oy) {
    const uint8_t* base =
        src.data + (y_.start(oy) - src.origin_y) * src.stride + (first_col - src.origin_x) * channels;
    uint8_t* out = dst + oy * out_row_bytes;
#if defined(__SSE2__)
    if (simd) {
      VerticalPassSse2(base, src.stride, y_.weights16(oy), y_.count(oy), n, row.data());
      switch (channels) {
        case 3: HorizontalPassSse2Dispatch<3>(row.data(), x_, first_col, out); continue;
        case 4: HorizontalPassSse2Dispatch<4>(row.data(), x_, first_col, out); continue;
        case 1: HorizontalPassFixed<1>(row.data(), x_, first_col, out); continue;
        default: HorizontalPassGeneric(row.data(), x_, first_col, channels, out); continue;
      }
    }
#endif
    VerticalPass(base, src.stride, y_.weights(oy), y_.count(oy), n, acc.data(), row.data());
    switch (channels) {
      case 1: HorizontalPassFixed<1>(row.data(), x_, first_col, out); break;
      case 3: HorizontalPassFixed<3>(row.data(), x_, first_col, out); break;
      case 4: HorizontalPassFixed<4>(row.data(), x_, first_col, out); break;
      default: HorizontalPassGeneric(row.data(), x_, first_col, channels, out); break;
    }
  }
}

SLUICE_MULTIVERSION
void ResamplePlan::RunFloat(const float* src, int64_t stride, int channels, int64_t origin_y, int64_t origin_x,
                            float* dst) const {
  constexpr float kScale = 1.0f / static_cast<float>(1 << kBits);
  const int64_t first_col = x_.first_input();
  const int64_t n = (x_.end_input() - first_col) * channels;
  thread_local std::vector<float> row;
  if (static_cast<int64_t>(row.size()) < n) row.resize(n);
  const int64_t out_w = x_.out_size();
  for (int64_t oy = 0; oy < y_.out_size(); ++oy) {
    const float* base = src + (y_.start(oy) - origin_y) * stride + (first_col - origin_x) * channels;
    const int32_t* wy = y_.weights(oy);
    float* __restrict r = row.data();
    {
      const float w = static_cast<float>(wy[0]) * kScale;
      const float* __restrict s = base;
      for (int64_t k = 0; k < n; ++k) r[k] = w * s[k];
    }
    for (int t = 1; t < y_.count(oy); ++t) {
      const float w = static_cast<float>(wy[t]) * kScale;
      const float* __restrict s = base + t * stride;
      for (int64_t k = 0; k < n; ++k) r[k] += w * s[k];
    }
    float* out = dst + oy * out_w * channels;
    for (int64_t ox = 0; ox < out_w; ++ox) {
      const int32_t* wx = x_.weights(ox);
      const float* p = r + (x_.start(ox) - first_col) * channels;
      for (int c = 0; c < channels; ++c) {
        // Starting from the first tap (not 0.0f) keeps a one-tap window an exact copy, -0.0 included.
        float acc = static_cast<float>(wx[0]) * kScale * p[c];
        for (int t = 1; t < x_.count(ox); ++t) acc += static_cast<float>(wx[t]) * kScale * p[t * channels + c];
        out[ox * channels + c] = acc;
      }
    }
  }
}

void ResampleImageFloat(const float* src, int64_t width, int channels, const ResampleGeometry& geometry,
                        float* dst) {
  ResamplePlan plan(geometry);
  plan.RunFloat(src, width * channels, channels, 0, 0, dst);
}

void ForceScalarResampleForTesting(bool scalar) { force_scalar.store(scalar, std::memory_order_relaxed); }

void ResampleImage(const uint8_t* src, int64_t width, int channels, const ResampleGeometry& geometry,
                   uint8_t* dst) {
  ResamplePlan plan(geometry);
  ImageView view{src, width * channels, channels, 0, 0};
  plan.Run(view, dst);
}

}  // namespace sluice::pipeline::image
