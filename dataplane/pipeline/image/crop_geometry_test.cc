#include "dataplane/pipeline/image/crop_geometry.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <tuple>

namespace sluice::pipeline::image {
namespace {

TEST_CASE("CropRng::Int covers the inclusive range and nothing else") {
  CropRng rng(7);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    int64_t v = rng.Int(3, 9);
    REQUIRE(v >= 3);
    REQUIRE(v <= 9);
    seen.insert(v);
  }
  CHECK(seen.size() == 7);
  CHECK(rng.Int(5, 5) == 5);
}

TEST_CASE("CropRng is a pure function of its seed") {
  CropRng a(42), b(42), c(43);
  double va = a.Uniform(), vb = b.Uniform(), vc = c.Uniform();
  CHECK(va == vb);
  CHECK(va != vc);
  CHECK(va >= 0.0);
  CHECK(va < 1.0);
}

TEST_CASE("RandomResizedCropRect stays inside the image and respects scale and ratio") {
  RandomResizedCropParams p;  // scale [0.08, 1], ratio [3/4, 4/3]
  const int64_t H = 375, W = 500;
  int fallbacks = 0;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    CropRng rng(seed);
    CropRect r = RandomResizedCropRect(H, W, p, rng);
    REQUIRE(r.h > 0);
    REQUIRE(r.w > 0);
    REQUIRE(r.y >= 0);
    REQUIRE(r.x >= 0);
    REQUIRE(r.y + r.h <= H);
    REQUIRE(r.x + r.w <= W);
    const double area = static_cast<double>(r.h * r.w) / (H * W);
    const double ratio = static_cast<double>(r.w) / r.h;
    if (r.h == H && r.w == W) {
      ++fallbacks;  // 500/375 = 1.333 is inside the ratio range: the fallback is the whole image
      continue;
    }
    // Rounding to whole pixels moves area and ratio a little.
    CHECK(area >= 0.08 * 0.97);
    CHECK(area <= 1.0 + 1e-9);
    CHECK(ratio >= 0.75 * 0.98);
    CHECK(ratio <= 4.0 / 3.0 * 1.02);
  }
  CHECK(fallbacks < 100);
}

TEST_CASE("RandomResizedCropRect: same seed same rect, other seeds other rects") {
  RandomResizedCropParams p;
  CropRng a(1234), b(1234);
  CHECK(RandomResizedCropRect(480, 640, p, a) == RandomResizedCropRect(480, 640, p, b));
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> rects;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    CropRng rng(seed);
    CropRect r = RandomResizedCropRect(480, 640, p, rng);
    rects.insert({r.y, r.x, r.h, r.w});
  }
  CHECK(rects.size() >= 18);
}

TEST_CASE("RandomResizedCropRect falls back to a ratio-clamped central crop after 10 failures") {
  // Every attempt asks for the whole area at aspect >= 2, which cannot fit a square image.
  RandomResizedCropParams p{1.0, 1.0, 2.0, 3.0};
  CropRng rng(5);
  CropRect r = RandomResizedCropRect(100, 100, p, rng);
  // in_ratio 1 < min ratio 2: w = width, h = round(100 / 2) = 50, centred.
  CHECK(r == CropRect{25, 0, 50, 100});

  RandomResizedCropParams tall{1.0, 1.0, 0.25, 0.5};
  CropRng rng2(5);
  CropRect t = RandomResizedCropRect(100, 100, tall, rng2);
  // in_ratio 1 > max ratio 0.5: h = height, w = round(100 * 0.5) = 50.
  CHECK(t == CropRect{0, 25, 100, 50});
}

TEST_CASE("CenterCropRect matches torchvision's rounding and padding") {
  CHECK(CenterCropRect(10, 10, 4, 4) == CropRect{3, 3, 4, 4});
  // (9 - 4) / 2 = 2.5 rounds half to even -> 2; (11 - 4) / 2 = 3.5 -> 4.
  CHECK(CenterCropRect(9, 11, 4, 4) == CropRect{2, 4, 4, 4});
  // Larger crop: offset -floor(excess / 2).
  CHECK(CenterCropRect(5, 10, 8, 4) == CropRect{-1, 3, 8, 4});
  CHECK(CenterCropRect(4, 4, 8, 8) == CropRect{-2, -2, 8, 8});
}

TEST_CASE("RandomCropRect places the crop uniformly inside the image") {
  std::set<int64_t> ys, xs;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    CropRng rng(seed);
    CropRect r = RandomCropRect(10, 12, 8, 8, rng);
    REQUIRE(r.h == 8);
    REQUIRE(r.w == 8);
    REQUIRE(r.y + 8 <= 10);
    REQUIRE(r.x + 8 <= 12);
    ys.insert(r.y);
    xs.insert(r.x);
  }
  CHECK(ys.size() == 3);
  CHECK(xs.size() == 5);
}

TEST_CASE("ShorterSideSize keeps the aspect ratio like torchvision") {
  int64_t h = 0, w = 0;
  ShorterSideSize(375, 500, 256, &h, &w);
  CHECK(h == 256);
  CHECK(w == 341);  // int(256 * 500 / 375) = 341
  ShorterSideSize(640, 480, 224, &h, &w);
  CHECK(w == 224);
  CHECK(h == 298);
}

TEST_CASE("FlipDecision honours probability 0 and 1 and is roughly fair at 0.5") {
  int flips = 0;
  for (uint64_t s = 0; s < 1000; ++s) {
    CHECK_FALSE(FlipDecision(s, 0.0));
    CHECK(FlipDecision(s, 1.0));
    flips += FlipDecision(s, 0.5) ? 1 : 0;
  }
  CHECK(flips > 400);
  CHECK(flips < 600);
}

}  // namespace
}  // namespace sluice::pipeline::image
