#include "dataplane/pipeline/image/resample.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "dataplane/pipeline/image/image_test_util.h"

namespace sluice::pipeline::image {
namespace {

using testing::Compare;
using testing::FlatImage;
using testing::NoiseImage;
using testing::RawImage;
using testing::SmoothImage;

ResampleGeometry Full(const RawImage& img, int64_t out_h, int64_t out_w, ResizeMethod method,
                      bool antialias = true) {
  ResampleGeometry g;
  g.box_h = static_cast<double>(img.height);
  g.box_w = static_cast<double>(img.width);
  g.clamp_y1 = img.height;
  g.clamp_x1 = img.width;
  g.out_h = out_h;
  g.out_w = out_w;
  g.method = method;
  g.antialias = antialias;
  return g;
}

RawImage Run(const RawImage& img, const ResampleGeometry& g) {
  RawImage out{g.out_h, g.out_w, img.channels, {}};
  out.pixels.resize(g.out_h * g.out_w * img.channels);
  ResampleImage(img.pixels.data(), img.width, static_cast<int>(img.channels), g, out.pixels.data());
  return out;
}

// Straightforward floating-point separable filter with the same filter definitions, used as the
// reference for the fixed-point implementation.
std::vector<std::vector<std::pair<int64_t, double>>> ReferenceAxis(ResizeMethod method, bool antialias,
                                                                   int64_t in, int64_t out) {
  std::vector<std::vector<std::pair<int64_t, double>>> axis(out);
  const double scale = static_cast<double>(in) / out;
  for (int64_t i = 0; i < out; ++i) {
    double total = 0;
    for (int64_t j = 0; j < in; ++j) {
      double w = 0;
      if (method == ResizeMethod::kBilinear) {
        const double fs = antialias ? std::max(scale, 1.0) : 1.0;
        const double d = std::abs((j + 0.5 - (i + 0.5) * scale) / fs);
        w = std::max(0.0, 1.0 - d);
      } else if (method == ResizeMethod::kArea) {
        w = std::max(0.0, std::min((i + 1) * scale, j + 1.0) - std::max(i * scale, static_cast<double>(j)));
      }
      if (w > 0) axis[i].push_back({j, w});
      total += w;
    }
    for (auto& [j, w] : axis[i]) w /= total;
  }
  return axis;
}

RawImage Reference(const RawImage& img, int64_t out_h, int64_t out_w, ResizeMethod method, bool antialias) {
  auto ay = ReferenceAxis(method, antialias, img.height, out_h);
  auto ax = ReferenceAxis(method, antialias, img.width, out_w);
  RawImage out{out_h, out_w, img.channels, {}};
  out.pixels.resize(out_h * out_w * img.channels);
  for (int64_t y = 0; y < out_h; ++y) {
    for (int64_t x = 0; x < out_w; ++x) {
      for (int64_t c = 0; c < img.channels; ++c) {
        double v = 0;
        for (auto [sy, wy] : ay[y]) {
          for (auto [sx, wx] : ax[x]) v += wy * wx * img.at(sy, sx, c);
        }
        out.pixels[(y * out_w + x) * img.channels + c] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return out;
}

TEST_CASE("Resampling a flat image keeps it exactly flat") {
  RawImage flat = FlatImage(37, 53, {200, 17, 99});
  for (ResizeMethod m : {ResizeMethod::kBilinear, ResizeMethod::kNearest, ResizeMethod::kArea}) {
    for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{{10, 7}, {37, 53}, {90, 120}, {1, 1}}) {
      RawImage out = Run(flat, Full(flat, h, w, m));
      REQUIRE(Compare(out, FlatImage(h, w, {200, 17, 99})).max == 0);
    }
  }
}

TEST_CASE("Resampling to the same size is the identity") {
  RawImage img = NoiseImage(20, 30, 3, 1);
  for (ResizeMethod m : {ResizeMethod::kBilinear, ResizeMethod::kNearest, ResizeMethod::kArea}) {
    CHECK(Compare(Run(img, Full(img, 20, 30, m)), img).max == 0);
  }
}

TEST_CASE("Bilinear upsampling of two pixels interpolates between them") {
  RawImage img{1, 2, 1, {0, 255}};
  RawImage out = Run(img, Full(img, 1, 4, ResizeMethod::kBilinear));
  // Sample centres 0.25, 0.75, 1.25, 1.75 in pixel units; edges clamp to the edge pixel.
  CHECK(out.pixels == std::vector<uint8_t>{0, 64, 191, 255});
}

TEST_CASE("Area downscaling by 2 averages 2x2 blocks") {
  RawImage img{2, 4, 1, {0, 10, 20, 30, 40, 50, 60, 70}};
  RawImage out = Run(img, Full(img, 1, 2, ResizeMethod::kArea));
  CHECK(static_cast<int>(out.pixels[0]) == 25);  // (0 + 10 + 40 + 50) / 4
  CHECK(static_cast<int>(out.pixels[1]) == 45);  // (20 + 30 + 60 + 70) / 4
}

TEST_CASE("Nearest picks the source pixel under each output centre") {
  RawImage img{1, 6, 1, {0, 1, 2, 3, 4, 5}};
  RawImage out = Run(img, Full(img, 1, 3, ResizeMethod::kNearest));
  CHECK(out.pixels == std::vector<uint8_t>{1, 3, 5});  // centres 1.0, 3.0, 5.0
}

TEST_CASE("Fixed-point resampling matches a floating-point reference within 1") {
  RawImage img = NoiseImage(61, 83, 3, 9);
  struct Case {
    int64_t h, w;
    ResizeMethod m;
    bool aa;
  };
  for (Case c : {Case{20, 30, ResizeMethod::kBilinear, true}, Case{20, 30, ResizeMethod::kBilinear, false},
                 Case{150, 100, ResizeMethod::kBilinear, true}, Case{7, 9, ResizeMethod::kBilinear, true},
                 Case{20, 30, ResizeMethod::kArea, true}, Case{100, 200, ResizeMethod::kArea, true}}) {
    INFO("out " << c.h << "x" << c.w << " method " << ResizeMethodName(c.m) << " antialias " << c.aa);
    RawImage out = Run(img, Full(img, c.h, c.w, c.m, c.aa));
    RawImage ref = Reference(img, c.h, c.w, c.m, c.aa);
    CHECK(Compare(out, ref).max <= 1);
  }
}

TEST_CASE("Downscaling a horizontal gradient keeps it a gradient") {
  RawImage img{4, 256, 1, {}};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 256; ++x) img.pixels.push_back(static_cast<uint8_t>(x));
  }
  RawImage out = Run(img, Full(img, 2, 64, ResizeMethod::kBilinear));
  for (int x = 1; x < 63; ++x) {
    // Output pixel x covers source 4x .. 4x + 3, whose mean is 4x + 1.5.
    CHECK(std::abs(out.at(0, x, 0) - (4 * x + 1.5)) <= 1.0);
  }
}

TEST_CASE("Flips mirror the output and cost nothing extra") {
  RawImage img = SmoothImage(40, 50, 3);
  ResampleGeometry g = Full(img, 20, 24, ResizeMethod::kBilinear);
  RawImage plain = Run(img, g);
  g.flip_horizontal = true;
  RawImage h = Run(img, g);
  g.flip_horizontal = false;
  g.flip_vertical = true;
  RawImage v = Run(img, g);
  for (int64_t y = 0; y < 20; ++y) {
    for (int64_t x = 0; x < 24; ++x) {
      for (int64_t c = 0; c < 3; ++c) {
        REQUIRE(h.at(y, x, c) == plain.at(y, 23 - x, c));
        REQUIRE(v.at(y, x, c) == plain.at(19 - y, x, c));
      }
    }
  }
}

TEST_CASE("A plan reads only the clamp region, and a view of that region gives the same output") {
  RawImage img = NoiseImage(100, 120, 3, 3);
  ResampleGeometry g;
  g.box_y = 20;
  g.box_x = 30;
  g.box_h = 50;
  g.box_w = 60;
  g.clamp_y0 = 20;
  g.clamp_y1 = 70;
  g.clamp_x0 = 30;
  g.clamp_x1 = 90;
  g.out_h = 16;
  g.out_w = 16;
  ResamplePlan plan(g);
  CHECK(plan.rows_begin() >= 20);
  CHECK(plan.rows_end() <= 70);
  CHECK(plan.cols_begin() >= 30);
  CHECK(plan.cols_end() <= 90);

  RawImage full = Run(img, g);
  // Copy just the rows/columns the plan reads into a separate buffer with its own origin.
  const int64_t rh = plan.rows_end() - plan.rows_begin(), rw = plan.cols_end() - plan.cols_begin();
  std::vector<uint8_t> region(rh * rw * 3);
  for (int64_t y = 0; y < rh; ++y) {
    for (int64_t x = 0; x < rw * 3; ++x) {
      region[y * rw * 3 + x] = img.pixels[((plan.rows_begin() + y) * 120 + plan.cols_begin()) * 3 + x];
    }
  }
  RawImage out{16, 16, 3, std::vector<uint8_t>(16 * 16 * 3)};
  plan.Run(ImageView{region.data(), rw * 3, 3, plan.rows_begin(), plan.cols_begin()}, out.pixels.data());
  CHECK(Compare(out, full).max == 0);
}

TEST_CASE("Channel counts other than 3 use the generic path correctly") {
  for (int64_t channels : {1, 2, 4, 5}) {
    RawImage img = NoiseImage(30, 40, channels, 11);
    RawImage out = Run(img, Full(img, 12, 17, ResizeMethod::kBilinear));
    RawImage ref = Reference(img, 12, 17, ResizeMethod::kBilinear, true);
    INFO("channels " << channels);
    CHECK(Compare(out, ref).max <= 1);
  }
}

// Restores the SIMD kernels when a test that forced the scalar ones ends.
struct ScalarKernels {
  ScalarKernels() { ForceScalarResampleForTesting(true); }
  ~ScalarKernels() { ForceScalarResampleForTesting(false); }
};

TEST_CASE("The portable scalar kernels give exactly the SIMD kernels' output") {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t channels = std::vector<int64_t>{1, 3, 4, 2}[trial % 4];
    const int64_t h = 5 + static_cast<int64_t>(rng() % 120), w = 5 + static_cast<int64_t>(rng() % 120);
    RawImage img = NoiseImage(h, w, channels, trial);
    const ResizeMethod m = std::vector<ResizeMethod>{ResizeMethod::kBilinear, ResizeMethod::kArea,
                                                      ResizeMethod::kNearest}[trial % 3];
    ResampleGeometry g = Full(img, 1 + static_cast<int64_t>(rng() % 90), 1 + static_cast<int64_t>(rng() % 90), m,
                              trial % 5 != 0);
    g.flip_horizontal = trial % 2 == 0;
    RawImage simd = Run(img, g);
    RawImage scalar;
    {
      ScalarKernels force;
      scalar = Run(img, g);
    }
    INFO("trial " << trial << ": " << h << "x" << w << "x" << channels << " -> " << g.out_h << "x" << g.out_w);
    REQUIRE(Compare(simd, scalar).max == 0);
  }
  // And the scalar path alone against the floating-point reference.
  ScalarKernels force;
  RawImage img = NoiseImage(61, 83, 3, 9);
  CHECK(Compare(Run(img, Full(img, 20, 30, ResizeMethod::kBilinear)),
                Reference(img, 20, 30, ResizeMethod::kBilinear, true)).max <= 1);
}

TEST_CASE("ParseResizeMethod accepts the three names and rejects others") {
  CHECK(*ParseResizeMethod("area") == ResizeMethod::kArea);
  CHECK(*ParseResizeMethod("nearest") == ResizeMethod::kNearest);
  CHECK(*ParseResizeMethod("bilinear") == ResizeMethod::kBilinear);
  auto bad = ParseResizeMethod("bicubic");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("bicubic") != std::string::npos);
}

}  // namespace
}  // namespace sluice::pipeline::image
