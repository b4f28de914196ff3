// JPEG and PNG decoding on images encoded in the test.
#include <catch2/catch.hpp>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "dataplane/pipeline/image/image_test_util.h"
#include "dataplane/pipeline/image/jpeg_decoder.h"
#include "dataplane/pipeline/image/png_decoder.h"

namespace sluice::pipeline::image {
namespace {

using testing::Compare;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::FlatImage;
using testing::FromTensor;
using testing::JpegOptions;
using testing::NoiseImage;
using testing::RawImage;
using testing::SmoothImage;

bool Contains(const absl::Status& st, absl::string_view text) {
  return absl::StrContains(st.message(), text);
}

TEST_CASE("A flat-colour JPEG decodes to (nearly) that colour") {
  RawImage flat = FlatImage(48, 64, {200, 100, 50});
  auto t = DecodeJpegToTensor(EncodeJpeg(flat), 3, 1);
  REQUIRE(t.ok());
  CHECK(t->dtype() == DType::kUInt8);
  CHECK(t->shape() == Shape{48, 64, 3});
  CHECK(Compare(FromTensor(*t), flat).max <= 3);
}

TEST_CASE("JPEG decode is close to the encoded pixels for smooth content, all layouts") {
  RawImage img = SmoothImage(67, 93, 3);  // odd sizes: partial MCUs
  for (bool progressive : {false, true}) {
    for (bool subsample : {true, false}) {
      JpegOptions o;
      o.progressive = progressive;
      o.subsample = subsample;
      auto t = DecodeJpegToTensor(EncodeJpeg(img, o), 3, 1);
      REQUIRE(t.ok());
      INFO("progressive " << progressive << " subsample " << subsample);
      CHECK(t->shape() == Shape{67, 93, 3});
      CHECK(Compare(FromTensor(*t), img).mean < 2.0);
    }
  }
}

TEST_CASE("JPEG channels: colour to gray, gray to RGB") {
  RawImage color = FlatImage(16, 16, {255, 0, 0});
  auto gray = DecodeJpegToTensor(EncodeJpeg(color), 1, 1);
  REQUIRE(gray.ok());
  CHECK(gray->shape() == Shape{16, 16, 1});
  // BT.601 luma of pure red is 0.299 * 255 = 76.
  CHECK(std::abs(static_cast<int>(gray->data<uint8_t>()[0]) - 76) <= 3);

  RawImage g = FlatImage(16, 16, {90});
  auto rgb = DecodeJpegToTensor(EncodeJpeg(g), 3, 1);
  REQUIRE(rgb.ok());
  CHECK(rgb->shape() == Shape{16, 16, 3});
  RawImage out = FromTensor(*rgb);
  CHECK(Compare(out, FlatImage(16, 16, {90, 90, 90})).max <= 2);
}

TEST_CASE("CMYK JPEGs (Adobe, inverted) decode to RGB") {
  // Stored as Adobe-inverted CMYK: R = C * K / 255, so (255, 0, 255, 255) is magenta.
  RawImage cmyk = FlatImage(16, 16, {255, 0, 255, 255});
  JpegOptions o;
  o.cmyk = true;
  auto t = DecodeJpegToTensor(EncodeJpeg(cmyk, o), 3, 1);
  REQUIRE(t.ok());
  CHECK(Compare(FromTensor(*t), FlatImage(16, 16, {255, 0, 255})).max <= 4);
}

TEST_CASE("DCT scaling decodes at 1/N size, rounding up") {
  RawImage img = SmoothImage(100, 150, 3);
  std::string jpeg = EncodeJpeg(img);
  for (int d : {2, 4, 8}) {
    auto t = DecodeJpegToTensor(jpeg, 3, d);
    REQUIRE(t.ok());
    CHECK(t->shape() == Shape{(100 + d - 1) / d, (150 + d - 1) / d, 3});
  }
  CHECK_FALSE(DecodeJpegToTensor(jpeg, 3, 3).ok());
}

TEST_CASE("Region decode (crop columns, skip rows) matches the same region of a full decode") {
  RawImage img = SmoothImage(240, 320, 3);
  for (bool progressive : {false, true}) {
    JpegOptions o;
    o.progressive = progressive;
    std::string jpeg = EncodeJpeg(img, o);
    auto full = DecodeJpegToTensor(jpeg, 3, 1);
    REQUIRE(full.ok());
    RawImage f = FromTensor(*full);

    JpegDecoder dec(jpeg);
    REQUIRE(dec.ReadHeader().ok());
    CHECK(dec.header().width == 320);
    CHECK(dec.header().height == 240);
    CHECK(dec.header().progressive == progressive);
    REQUIRE(dec.Start(1, 3).ok());
    int64_t ax = 0, aw = 0;
    REQUIRE(dec.CropColumns(100, 90, &ax, &aw).ok());
    CHECK(ax <= 100);
    CHECK(ax + aw >= 190);
    REQUIRE(dec.SkipRows(70).ok());
    std::vector<uint8_t> rows(50 * aw * 3);
    REQUIRE(dec.ReadRows(rows.data(), aw * 3, 50).ok());
    int max_diff = 0;
    for (int64_t y = 0; y < 50; ++y) {
      for (int64_t x = 100; x < 190; ++x) {
        for (int c = 0; c < 3; ++c) {
          int a = rows[(y * aw + (x - ax)) * 3 + c];
          int b = f.at(70 + y, x, c);
          max_diff = std::max(max_diff, std::abs(a - b));
        }
      }
    }
    INFO("progressive " << progressive);
    CHECK(max_diff <= 2);
  }
}

TEST_CASE("Corrupt and truncated JPEGs give clear errors") {
  std::string jpeg = EncodeJpeg(SmoothImage(64, 64, 3));

  auto empty = DecodeJpegToTensor("", 3, 1);
  REQUIRE_FALSE(empty.ok());
  CHECK(Contains(empty.status(), "empty"));

  auto png = DecodeJpegToTensor(EncodePng(FlatImage(4, 4, {1, 2, 3})), 3, 1);
  REQUIRE_FALSE(png.ok());
  CHECK(Contains(png.status(), "not a JPEG"));

  auto header_only = DecodeJpegToTensor(jpeg.substr(0, 40), 3, 1);
  REQUIRE_FALSE(header_only.ok());
  CHECK(Contains(header_only.status(), "corrupt JPEG"));

  auto truncated = DecodeJpegToTensor(jpeg.substr(0, jpeg.size() / 2), 3, 1);
  REQUIRE_FALSE(truncated.ok());
  CHECK(Contains(truncated.status(), "truncated"));

  std::string garbage = jpeg;
  for (size_t i = 2; i < 200 && i < garbage.size(); ++i) garbage[i] = static_cast<char>(0x5A);
  auto corrupt = DecodeJpegToTensor(garbage, 3, 1);
  REQUIRE_FALSE(corrupt.ok());
  CHECK(Contains(corrupt.status(), "JPEG"));
}

TEST_CASE("PNG decode: RGB, gray, RGBA, palette and 16-bit") {
  RawImage rgb = NoiseImage(13, 17, 3, 1);
  auto t = DecodePngToTensor(EncodePng(rgb), 3);
  REQUIRE(t.ok());
  CHECK(t->shape() == Shape{13, 17, 3});
  CHECK(Compare(FromTensor(*t), rgb).max == 0);  // lossless

  RawImage gray = NoiseImage(9, 11, 1, 2);
  auto g3 = DecodePngToTensor(EncodePng(gray), 3);
  REQUIRE(g3.ok());
  RawImage g3i = FromTensor(*g3);
  CHECK(g3i.channels == 3);
  CHECK(g3i.at(4, 5, 0) == gray.at(4, 5, 0));
  CHECK(g3i.at(4, 5, 2) == gray.at(4, 5, 0));

  RawImage rgba = NoiseImage(8, 8, 4, 3);
  auto drop = DecodePngToTensor(EncodePng(rgba), 3);
  REQUIRE(drop.ok());
  RawImage d = FromTensor(*drop);
  CHECK(d.at(3, 3, 1) == rgba.at(3, 3, 1));  // alpha dropped, colour kept
  auto keep = DecodePngToTensor(EncodePng(rgba), 4);
  REQUIRE(keep.ok());
  CHECK(Compare(FromTensor(*keep), rgba).max == 0);

  RawImage few = FlatImage(6, 6, {10, 20, 30});
  few.pixels[0] = 250;
  auto pal = DecodePngToTensor(EncodePng(few, 8, /*palette=*/true), 3);
  REQUIRE(pal.ok());
  CHECK(Compare(FromTensor(*pal), few).max == 0);

  auto deep = DecodePngToTensor(EncodePng(rgb, 16), 3);
  REQUIRE(deep.ok());
  CHECK(Compare(FromTensor(*deep), rgb).max == 0);  // high byte kept

  auto red_gray = DecodePngToTensor(EncodePng(FlatImage(4, 4, {255, 0, 0})), 1);
  REQUIRE(red_gray.ok());
  CHECK(std::abs(static_cast<int>(red_gray->data<uint8_t>()[0]) - 76) <= 2);
}

TEST_CASE("Truncated and corrupt PNGs give clear errors") {
  std::string png = EncodePng(NoiseImage(32, 32, 3, 5));
  auto truncated = DecodePngToTensor(png.substr(0, png.size() / 2), 3);
  REQUIRE_FALSE(truncated.ok());
  CHECK(Contains(truncated.status(), "truncated"));

  auto header_only = DecodePngToTensor(png.substr(0, 20), 3);
  REQUIRE_FALSE(header_only.ok());
  CHECK(Contains(header_only.status(), "PNG"));

  std::string flipped = png;
  flipped[40] = static_cast<char>(flipped[40] ^ 0xFF);  // inside IHDR/IDAT: CRC mismatch
  auto corrupt = DecodePngToTensor(flipped, 3);
  REQUIRE_FALSE(corrupt.ok());
  CHECK(Contains(corrupt.status(), "corrupt PNG"));

  auto not_png = DecodePngToTensor("GIF89a....", 3);
  REQUIRE_FALSE(not_png.ok());
  CHECK(Contains(not_png.status(), "not a PNG"));
}

}  // namespace
}  // namespace sluice::pipeline::image

namespace sluice::pipeline::image {
namespace {

// Every truncation point and many random byte corruptions of valid files must give either an
// image or an error, never a crash (run under ASan/UBSan with SLUICE_SANITIZE=ON).
TEST_CASE("Mutated and truncated JPEG/PNG data never crashes the decoders") {
  const std::string jpeg = testing::EncodeJpeg(testing::SmoothImage(40, 56, 3));
  JpegOptions progressive;
  progressive.progressive = true;
  const std::string pjpeg = testing::EncodeJpeg(testing::SmoothImage(40, 56, 3), progressive);
  const std::string png = testing::EncodePng(testing::NoiseImage(20, 24, 3, 9));
  std::mt19937_64 rng(2024);
  int jpeg_errors = 0, png_errors = 0;
  for (const std::string* base : {&jpeg, &pjpeg, &png}) {
    const bool is_png = base == &png;
    auto decode = [&](const std::string& data) {
      if (is_png) return DecodePngToTensor(data, 3).status();
      // Also exercise the region path: crop, skip, read a few rows.
      JpegDecoder dec(data);
      if (absl::Status st = dec.ReadHeader(); !st.ok()) return st;
      if (absl::Status st = dec.Start(1, 3); !st.ok()) return st;
      int64_t ax = 0, aw = 0;
      const int64_t w = dec.output_width();
      if (absl::Status st = dec.CropColumns(w / 3, std::max<int64_t>(1, w / 3), &ax, &aw); !st.ok()) return st;
      if (absl::Status st = dec.SkipRows(dec.output_height() / 4); !st.ok()) return st;
      std::vector<uint8_t> rows(static_cast<size_t>(aw) * 3 * 4);
      if (absl::Status st = dec.ReadRows(rows.data(), aw * 3, 4); !st.ok()) return st;
      return DecodeJpegToTensor(data, 3, 2).status();
    };
    for (size_t cut = 0; cut < base->size(); cut += std::max<size_t>(1, base->size() / 40)) {
      absl::Status st = decode(base->substr(0, cut));
      (is_png ? png_errors : jpeg_errors) += st.ok() ? 0 : 1;
    }
    for (int i = 0; i < 150; ++i) {
      std::string data = *base;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) data[rng() % data.size()] = static_cast<char>(rng() & 0xFF);
      absl::Status st = decode(data);
      (is_png ? png_errors : jpeg_errors) += st.ok() ? 0 : 1;
    }
  }
  // Truncations before the end of the headers must all fail; corruption often does too.
  CHECK(jpeg_errors > 20);
  CHECK(png_errors > 20);
}

}  // namespace
}  // namespace sluice::pipeline::image
