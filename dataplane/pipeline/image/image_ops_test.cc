// The registered image ops, used the way the executor uses them: built from validated arguments,
// applied to elements, and fused pairwise through fuse_with_next.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "dataplane/pipeline/image/crop_geometry.h"
#include "dataplane/pipeline/image/image_op_util.h"
#include "dataplane/pipeline/image/image_test_util.h"
#include "dataplane/pipeline/op.h"

namespace sluice::pipeline::image {
namespace {

using namespace testing;  // NOLINT: test helpers

bool Contains(const absl::Status& st, absl::string_view text) {
  return absl::StrContains(st.message(), text);
}

Element ImageElement(const RawImage& img) {
  Element e;
  e.Set("image", ToTensor(img));
  return e;
}

RawImage Field(const Element& e, absl::string_view name = "image") { return FromTensor(*e.Find(name)); }

TEST_CASE("All image ops are registered with their arguments") {
  for (const char* name : {"decode_jpeg", "decode_png", "decode_image", "resize", "center_crop", "random_crop",
                           "random_resized_crop", "random_flip", "normalize"}) {
    INFO(name);
    const OpDescriptor* d = OpRegistry::Builtin().Find(name);
    REQUIRE(d != nullptr);
    CHECK(d->factory);
    CHECK_FALSE(d->summary.empty());
  }
  CHECK(OpRegistry::Builtin().Find("random_resized_crop")->random);
  CHECK_FALSE(OpRegistry::Builtin().Find("resize")->random);
  CHECK(OpRegistry::Builtin().Find("decode_jpeg")->fuse_with_next);
}

TEST_CASE("decode_jpeg produces a uint8 HWC tensor in place of the bytes") {
  RawImage img = SmoothImage(50, 70, 3);
  auto op = MakeOp("decode_jpeg");
  Element e = EncodedElement(EncodeJpeg(img));
  REQUIRE(op.op->Apply(e, 0).ok());
  const Tensor* t = e.Find("image");
  REQUIRE(t != nullptr);
  CHECK(t->dtype() == DType::kUInt8);
  CHECK(t->shape() == Shape{50, 70, 3});
  CHECK(Compare(FromTensor(*t), img).mean < 2.0);

  auto gray = MakeOp("decode_jpeg", {{"channels", Int(1)}, {"field", Str("jpeg")}});
  Element g = EncodedElement(EncodeJpeg(img), "jpeg");
  REQUIRE(gray.op->Apply(g, 0).ok());
  CHECK(g.Find("jpeg")->shape() == Shape{50, 70, 1});

  auto half = MakeOp("decode_jpeg", {{"dct_scale", Int(2)}});
  Element h = EncodedElement(EncodeJpeg(img));
  REQUIRE(half.op->Apply(h, 0).ok());
  CHECK(h.Find("image")->shape() == Shape{25, 35, 3});
}

TEST_CASE("decode_jpeg: bad arguments are rejected at creation") {
  ValueMap bad = ValidatedArgs("decode_jpeg", {{"dct_scale", Int(3)}});
  auto op = OpRegistry::Builtin().Find("decode_jpeg")->factory(Args(bad));
  REQUIRE_FALSE(op.ok());
  CHECK(Contains(op.status(), "dct_scale"));
  CHECK_THROWS(ValidatedArgs("decode_jpeg", {{"channels", Int(4)}}));
  CHECK_THROWS(ValidatedArgs("decode_jpeg", {{"on_error", Str("ignore")}}));
}

TEST_CASE("decode_jpeg on corrupt data names the field, on_error=skip returns DataLoss") {
  std::string jpeg = EncodeJpeg(SmoothImage(64, 64, 3));
  std::string corrupt = jpeg.substr(0, 30);
  auto fail = MakeOp("decode_jpeg");
  Element e = EncodedElement(corrupt);
  absl::Status st = fail.op->Apply(e, 0);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(st, "decode_jpeg: field 'image'"));
  CHECK(Contains(st, "JPEG"));

  auto skip = MakeOp("decode_jpeg", {{"on_error", Str("skip")}});
  Element s = EncodedElement(corrupt);
  absl::Status sst = skip.op->Apply(s, 0);
  CHECK(sst.code() == absl::StatusCode::kDataLoss);
  CHECK(Contains(sst, "field 'image'"));

  // Truncated data is undecodable too.
  Element t = EncodedElement(jpeg.substr(0, jpeg.size() * 2 / 3));
  CHECK(skip.op->Apply(t, 0).code() == absl::StatusCode::kDataLoss);

  // Not data errors: a missing field or a wrong dtype fail even with skip.
  Element missing = EncodedElement(jpeg, "other");
  absl::Status ms = skip.op->Apply(missing, 0);
  CHECK(ms.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(ms, "no field 'image'"));
  Element wrong = ImageElement(FlatImage(4, 4, {1, 2, 3}));
  absl::Status ws = skip.op->Apply(wrong, 0);
  CHECK(ws.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(ws, "dtype uint8"));
}

TEST_CASE("decode_png and decode_image") {
  RawImage img = NoiseImage(12, 15, 3, 4);
  auto png = MakeOp("decode_png");
  Element e = EncodedElement(EncodePng(img));
  REQUIRE(png.op->Apply(e, 0).ok());
  CHECK(Compare(Field(e), img).max == 0);

  std::string truncated = EncodePng(img);
  truncated.resize(truncated.size() - 30);
  Element t = EncodedElement(truncated);
  absl::Status st = png.op->Apply(t, 0);
  REQUIRE_FALSE(st.ok());
  CHECK(Contains(st, "decode_png: field 'image'"));
  CHECK(Contains(st, "truncated"));

  auto any = MakeOp("decode_image");
  Element j = EncodedElement(EncodeJpeg(SmoothImage(20, 30, 3)));
  Element p = EncodedElement(EncodePng(img));
  REQUIRE(any.op->Apply(j, 0).ok());
  REQUIRE(any.op->Apply(p, 0).ok());
  CHECK(j.Find("image")->shape() == Shape{20, 30, 3});
  CHECK(Compare(Field(p), img).max == 0);
  Element gif = EncodedElement("GIF89a\x01\x00\x01\x00");
  absl::Status gs = any.op->Apply(gif, 0);
  REQUIRE_FALSE(gs.ok());
  CHECK(Contains(gs, "neither JPEG nor PNG"));
}

TEST_CASE("resize and random_resized_crop on float32 images match the uint8 path within rounding") {
  const Tensor u8 = ToTensor(SmoothImage(57, 83, 3));
  Tensor f32 = Tensor::Allocate(DType::kFloat32, u8.shape());
  for (int64_t i = 0; i < u8.num_elements(); ++i) f32.mutable_data<float>()[i] = static_cast<float>(u8.data<uint8_t>()[i]);
  for (const auto& [name, args] : std::vector<std::pair<std::string, ArgList>>{
           {"resize", {{"size", Ints({20, 30})}}},
           {"resize", {{"size", Ints({100, 120})}, {"method", Str("area")}}},
           {"random_resized_crop", {{"size", Ints({24, 24})}}},
           {"random_resized_crop", {{"size", Ints({24, 24})}, {"antialias", Bool(false)}}}}) {
    auto op = MakeOp(name, args);
    for (uint64_t seed : {1u, 2u, 3u}) {
      Element a;
      a.Set("image", u8);
      Element b;
      b.Set("image", f32);
      REQUIRE(op.op->Apply(a, seed).ok());
      REQUIRE(op.op->Apply(b, seed).ok());
      const Tensor& ta = *a.Find("image");
      const Tensor& tb = *b.Find("image");
      REQUIRE(tb.dtype() == DType::kFloat32);
      REQUIRE(ta.shape() == tb.shape());
      double max_diff = 0;
      for (int64_t k = 0; k < ta.num_elements(); ++k) {
        max_diff = std::max(max_diff, std::abs(static_cast<double>(ta.data<uint8_t>()[k]) - tb.data<float>()[k]));
      }
      INFO(name << " seed " << seed);
      CHECK(max_diff <= 1.0);  // the uint8 path rounds to the nearest level; float does not round
    }
  }
}

TEST_CASE("resize: exact size, shorter side, dtype checks") {
  auto op = MakeOp("resize", {{"size", Ints({20, 30})}});
  Element e = ImageElement(FlatImage(40, 50, {10, 20, 30}));
  REQUIRE(op.op->Apply(e, 0).ok());
  CHECK(Compare(Field(e), FlatImage(20, 30, {10, 20, 30})).max == 0);

  auto shorter = MakeOp("resize", {{"size", Ints({64})}});
  Element s = ImageElement(SmoothImage(100, 200, 3));
  REQUIRE(shorter.op->Apply(s, 0).ok());
  CHECK(s.Find("image")->shape() == Shape{64, 128, 3});

  Element i16;
  i16.Set("image", Tensor::Allocate(DType::kInt16, Shape{4, 4, 3}));
  absl::Status fs = op.op->Apply(i16, 0);
  REQUIRE_FALSE(fs.ok());
  CHECK(Contains(fs, "resize: field 'image'"));
  CHECK(Contains(fs, "uint8 or float32"));

  Element enc = EncodedElement(EncodeJpeg(SmoothImage(8, 8, 3)));
  absl::Status es = op.op->Apply(enc, 0);
  REQUIRE_FALSE(es.ok());
  CHECK(Contains(es, "decode it first"));

  Element batch;
  batch.Set("image", Tensor::Allocate(DType::kUInt8, Shape{2, 4, 4, 3}));
  CHECK(Contains(op.op->Apply(batch, 0), "before batch"));

  CHECK_THROWS(MakeOp("resize", {{"size", Ints({1, 2, 3})}}));
  CHECK_THROWS(MakeOp("resize", {{"size", Ints({0, 2})}}));
  CHECK_THROWS(ValidatedArgs("resize", {{"size", Ints({2, 2})}, {"method", Str("bicubic")}}));
}

TEST_CASE("center_crop takes the centre, pads larger crops with zeros") {
  RawImage img = NoiseImage(10, 12, 3, 6);
  auto op = MakeOp("center_crop", {{"size", Ints({4, 6})}});
  Element e = ImageElement(img);
  REQUIRE(op.op->Apply(e, 0).ok());
  RawImage out = Field(e);
  REQUIRE(out.height == 4);
  REQUIRE(out.width == 6);
  for (int64_t y = 0; y < 4; ++y) {
    for (int64_t x = 0; x < 6; ++x) REQUIRE(out.at(y, x, 1) == img.at(3 + y, 3 + x, 1));
  }

  auto big = MakeOp("center_crop", {{"size", Ints({14})}});
  Element b = ImageElement(img);
  REQUIRE(big.op->Apply(b, 0).ok());
  RawImage padded = Field(b);
  REQUIRE(padded.height == 14);
  REQUIRE(padded.width == 14);
  CHECK(padded.at(0, 0, 0) == 0);    // padding row
  CHECK(padded.at(13, 13, 2) == 0);  // padding row
  CHECK(padded.at(2, 1, 0) == img.at(0, 0, 0));  // offset (-2, -1)
  CHECK(padded.at(11, 12, 2) == img.at(9, 11, 2));
}

TEST_CASE("random_crop: deterministic per seed, exact pixels, clear error when too large") {
  RawImage img = NoiseImage(30, 40, 3, 8);
  auto op = MakeOp("random_crop", {{"size", Ints({10, 10})}});
  Element a = ImageElement(img), b = ImageElement(img);
  REQUIRE(op.op->Apply(a, 77).ok());
  REQUIRE(op.op->Apply(b, 77).ok());
  CHECK(Compare(Field(a), Field(b)).max == 0);
  CropRng rng(77);
  CropRect r = RandomCropRect(30, 40, 10, 10, rng);
  RawImage out = Field(a);
  for (int64_t y = 0; y < 10; ++y) {
    for (int64_t x = 0; x < 10; ++x) REQUIRE(out.at(y, x, 0) == img.at(r.y + y, r.x + x, 0));
  }
  auto big = MakeOp("random_crop", {{"size", Ints({31, 10})}});
  Element c = ImageElement(img);
  absl::Status st = big.op->Apply(c, 1);
  REQUIRE_FALSE(st.ok());
  CHECK(Contains(st, "random_crop: field 'image'"));
  CHECK(Contains(st, "larger than the image"));
}

TEST_CASE("random_resized_crop: shape, determinism, variety, geometry") {
  RawImage img = SmoothImage(120, 160, 3);
  auto op = MakeOp("random_resized_crop", {{"size", Ints({32})}});
  Element a = ImageElement(img), b = ImageElement(img), c = ImageElement(img);
  REQUIRE(op.op->Apply(a, 5).ok());
  REQUIRE(op.op->Apply(b, 5).ok());
  REQUIRE(op.op->Apply(c, 6).ok());
  CHECK(a.Find("image")->shape() == Shape{32, 32, 3});
  CHECK(Compare(Field(a), Field(b)).max == 0);
  CHECK(Compare(Field(a), Field(c)).max > 0);

  // The output is the seed's rectangle resized: compare with crop + resize done separately.
  CropRng rng(5);
  CropRect r = RandomResizedCropRect(120, 160, RandomResizedCropParams{}, rng);
  RawImage cropped{r.h, r.w, 3, {}};
  for (int64_t y = 0; y < r.h; ++y) {
    for (int64_t x = 0; x < r.w; ++x) {
      for (int ch = 0; ch < 3; ++ch) cropped.pixels.push_back(img.at(r.y + y, r.x + x, ch));
    }
  }
  auto resize = MakeOp("resize", {{"size", Ints({32, 32})}});
  Element d = ImageElement(cropped);
  REQUIRE(resize.op->Apply(d, 0).ok());
  CHECK(Compare(Field(a), Field(d)).max == 0);

  CHECK_THROWS(MakeOp("random_resized_crop", {{"size", Ints({8})}, {"scale", Floats({0.5, 0.1})}}));
  CHECK_THROWS(MakeOp("random_resized_crop", {{"size", Ints({8})}, {"ratio", Floats({0.0, 1.0})}}));
}

TEST_CASE("random_flip flips exactly, per seed and probability") {
  RawImage img = NoiseImage(5, 7, 3, 2);
  auto always = MakeOp("random_flip", {{"probability", Float(1.0)}});
  Element e = ImageElement(img);
  REQUIRE(always.op->Apply(e, 3).ok());
  RawImage h = Field(e);
  for (int64_t y = 0; y < 5; ++y) {
    for (int64_t x = 0; x < 7; ++x) {
      for (int c = 0; c < 3; ++c) REQUIRE(h.at(y, x, c) == img.at(y, 6 - x, c));
    }
  }
  auto vertical = MakeOp("random_flip", {{"probability", Float(1.0)}, {"mode", Str("vertical")}});
  Element v = ImageElement(img);
  REQUIRE(vertical.op->Apply(v, 3).ok());
  CHECK(Field(v).at(0, 2, 1) == img.at(4, 2, 1));

  auto never = MakeOp("random_flip", {{"probability", Float(0.0)}});
  Element n = ImageElement(img);
  REQUIRE(never.op->Apply(n, 3).ok());
  CHECK(Compare(Field(n), img).max == 0);

  auto half = MakeOp("random_flip");
  int flipped = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Element x = ImageElement(img);
    REQUIRE(half.op->Apply(x, seed).ok());
    flipped += Compare(Field(x), img).max > 0 ? 1 : 0;
    Element y = ImageElement(img);
    REQUIRE(half.op->Apply(y, seed).ok());
    REQUIRE(Compare(Field(x), Field(y)).max == 0);
  }
  CHECK(flipped > 60);
  CHECK(flipped < 140);
}

TEST_CASE("normalize computes (x * scale - mean) / std in CHW or HWC") {
  RawImage img{1, 2, 3, {0, 128, 255, 10, 20, 30}};
  auto op = MakeOp("normalize", {{"mean", Floats({0.5, 0.25, 0.0})}, {"std", Floats({0.5, 0.25, 2.0})}});
  Element e = ImageElement(img);
  REQUIRE(op.op->Apply(e, 0).ok());
  const Tensor* t = e.Find("image");
  REQUIRE(t->dtype() == DType::kFloat32);
  REQUIRE(t->shape() == Shape{3, 1, 2});
  const float* v = t->data<float>();
  auto expect = [](double x, double m, double s) { return Approx((x / 255.0 - m) / s).epsilon(1e-5); };
  CHECK(v[0] == expect(0, 0.5, 0.5));     // c0, x0
  CHECK(v[1] == expect(10, 0.5, 0.5));    // c0, x1
  CHECK(v[2] == expect(128, 0.25, 0.25)); // c1, x0
  CHECK(v[5] == expect(30, 0.0, 2.0));    // c2, x1

  auto hwc = MakeOp("normalize", {{"layout", Str("hwc")}, {"scale", Float(1.0)}, {"mean", Floats({1.0})},
                                  {"std", Floats({2.0})}});
  Element h = ImageElement(img);
  REQUIRE(hwc.op->Apply(h, 0).ok());
  REQUIRE(h.Find("image")->shape() == Shape{1, 2, 3});
  CHECK(h.Find("image")->data<float>()[2] == Approx((255.0 - 1.0) / 2.0));

  // float32 input is normalized directly.
  Element f;
  Tensor ft = Tensor::Allocate(DType::kFloat32, Shape{1, 1, 3});
  ft.mutable_data<float>()[0] = 255.0f;
  f.Set("image", ft);
  REQUIRE(op.op->Apply(f, 0).ok());
  CHECK(f.Find("image")->data<float>()[0] == expect(255, 0.5, 0.5));
}

TEST_CASE("normalize rejects mismatched channel lists, zero std and bad dtypes") {
  auto op = MakeOp("normalize", {{"mean", Floats({0.1, 0.2})}, {"std", Floats({1.0})}});
  Element e = ImageElement(FlatImage(2, 2, {1, 2, 3}));
  absl::Status st = op.op->Apply(e, 0);
  REQUIRE_FALSE(st.ok());
  CHECK(Contains(st, "normalize: field 'image': mean has 2 values but the image has 3 channels"));
  CHECK_THROWS(MakeOp("normalize", {{"std", Floats({0.0})}}));
  Element i;
  i.Set("image", Tensor::Allocate(DType::kInt32, Shape{2, 2, 3}));
  auto plain = MakeOp("normalize");
  CHECK(Contains(plain.op->Apply(i, 0), "int32"));
}

TEST_CASE("random_flip fused into normalize equals flip then normalize") {
  RawImage img = NoiseImage(6, 9, 3, 12);
  ArgList flip_args = {{"probability", Float(0.5)}};
  ArgList norm_args = {{"mean", Floats({0.4, 0.5, 0.6})}, {"std", Floats({0.2, 0.3, 0.4})}};
  auto fused = Fuse("random_flip", flip_args, "normalize", norm_args);
  REQUIRE(fused != nullptr);
  auto flip = MakeOp("random_flip", flip_args);
  auto norm = MakeOp("normalize", norm_args);
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Element a = ImageElement(img), b = ImageElement(img);
    REQUIRE(fused->Apply(a, seed).ok());
    REQUIRE(flip.op->Apply(b, seed).ok());
    REQUIRE(norm.op->Apply(b, seed).ok());
    const Tensor* ta = a.Find("image");
    const Tensor* tb = b.Find("image");
    REQUIRE(ta->shape() == tb->shape());
    for (int64_t k = 0; k < ta->num_elements(); ++k) REQUIRE(ta->data<float>()[k] == tb->data<float>()[k]);
  }
  CHECK(Fuse("random_flip", {{"field", Str("a")}}, "normalize", {{"field", Str("b")}}) == nullptr);
  CHECK(Fuse("random_flip", {}, "resize", {{"size", Ints({4})}}) == nullptr);
}

// --- fused decode ------------------------------------------------------------------------------

RawImage DecodeThen(const std::string& jpeg, const std::string& op, const ArgList& args, uint64_t seed) {
  auto decode = MakeOp("decode_jpeg", {{"dct_scale", Int(1)}});
  auto next = MakeOp(op, args);
  Element e = EncodedElement(jpeg);
  REQUIRE(decode.op->Apply(e, seed).ok());
  REQUIRE(next.op->Apply(e, seed).ok());
  return Field(e);
}

RawImage Fused(const std::string& jpeg, const ArgList& decode_args, const std::string& op, const ArgList& args,
               uint64_t seed) {
  auto fused = Fuse("decode_jpeg", decode_args, op, args);
  REQUIRE(fused != nullptr);
  Element e = EncodedElement(jpeg);
  absl::Status st = fused->Apply(e, seed);
  INFO(st.ToString());
  REQUIRE(st.ok());
  return Field(e);
}

TEST_CASE("Fused decode_jpeg + center_crop equals decode then center_crop") {
  RawImage img = SmoothImage(150, 210, 3);
  std::string jpeg = EncodeJpeg(img);
  for (auto size : {std::vector<int64_t>{64, 64}, {100, 37}, {150, 210}, {200, 300}}) {
    ArgList args = {{"size", Ints(size)}};
    RawImage fused = Fused(jpeg, {}, "center_crop", args, 0);
    RawImage plain = DecodeThen(jpeg, "center_crop", args, 0);
    INFO("size " << size[0] << "x" << size[1]);
    REQUIRE(fused.height == size[0]);
    REQUIRE(fused.width == size[1]);
    Diff d = Compare(fused, plain);
    CHECK(d.max <= 2);
    CHECK(d.mean < 0.5);
  }
}

TEST_CASE("Fused decode_jpeg + random_resized_crop picks the same rectangle as the plain ops") {
  RawImage img = SmoothImage(240, 320, 3);
  std::string jpeg = EncodeJpeg(img);
  ArgList args = {{"size", Ints({48, 48})}};
  for (uint64_t seed = 0; seed < 12; ++seed) {
    INFO("seed " << seed);
    // dct_scale 1: the only difference left is region vs full decoding.
    RawImage fused = Fused(jpeg, {{"dct_scale", Int(1)}}, "random_resized_crop", args, seed);
    RawImage plain = DecodeThen(jpeg, "random_resized_crop", args, seed);
    Diff d = Compare(fused, plain);
    CHECK(d.max <= 3);
    CHECK(d.mean < 0.5);
    // With DCT scaling (auto) the pixels are close, not equal.
    RawImage scaled = Fused(jpeg, {}, "random_resized_crop", args, seed);
    CHECK(Compare(scaled, plain).mean < 4.0);
  }
}

TEST_CASE("Fused decode_jpeg + resize uses DCT scaling and stays close to the plain ops") {
  RawImage img = SmoothImage(256, 384, 3);
  std::string jpeg = EncodeJpeg(img);
  for (auto size : {std::vector<int64_t>{32, 48}, {64, 96}, {100, 100}, {300, 400}}) {
    ArgList args = {{"size", Ints(size)}};
    RawImage fused = Fused(jpeg, {}, "resize", args, 0);
    RawImage plain = DecodeThen(jpeg, "resize", args, 0);
    INFO("size " << size[0] << "x" << size[1]);
    REQUIRE(fused.height == size[0]);
    REQUIRE(fused.width == size[1]);
    Diff d = Compare(fused, plain);
    CHECK(d.mean < 2.0);
    CHECK(d.max <= 16);
  }
  // Shorter-side resize computes the output size from the header.
  RawImage s = Fused(jpeg, {}, "resize", {{"size", Ints({64})}}, 0);
  CHECK(s.height == 64);
  CHECK(s.width == 96);
}

TEST_CASE("ChooseDctScale picks the largest reduction that keeps the region >= the output") {
  CHECK(ChooseDctScale(CropRect{0, 0, 500, 500}, 224, 224, -1) == 2);
  CHECK(ChooseDctScale(CropRect{0, 0, 447, 900}, 224, 224, -1) == 1);
  CHECK(ChooseDctScale(CropRect{0, 0, 2000, 1800}, 224, 224, -1) == 8);
  CHECK(ChooseDctScale(CropRect{0, 0, 2000, 1800}, 224, 224, 2) == 2);
  CHECK(ChooseDctScale(CropRect{0, 0, 2000, 1800}, 224, 224, 1) == 1);
  CHECK(ChooseDctScale(CropRect{0, 0, 1000, 1000}, 224, 224, -1) == 4);
}

TEST_CASE("Fused decode errors: corrupt data names the field, skip gives DataLoss") {
  std::string jpeg = EncodeJpeg(SmoothImage(128, 128, 3));
  ArgList rrc = {{"size", Ints({32})}};
  auto fused = Fuse("decode_jpeg", {}, "random_resized_crop", rrc);
  Element bad = EncodedElement(jpeg.substr(0, 25));
  absl::Status st = fused->Apply(bad, 0);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(st, "decode_jpeg: field 'image'"));

  auto skip = Fuse("decode_jpeg", {{"on_error", Str("skip")}}, "random_resized_crop", rrc);
  Element bad2 = EncodedElement(jpeg.substr(0, 25));
  CHECK(skip->Apply(bad2, 0).code() == absl::StatusCode::kDataLoss);
  Element not_jpeg = EncodedElement(EncodePng(FlatImage(4, 4, {1, 2, 3})));
  CHECK(skip->Apply(not_jpeg, 0).code() == absl::StatusCode::kDataLoss);
  // Data truncated inside the region (resize reads every row).
  auto resize = Fuse("decode_jpeg", {{"on_error", Str("skip")}}, "resize", {{"size", Ints({32})}});
  Element cut = EncodedElement(jpeg.substr(0, jpeg.size() / 2));
  CHECK(resize->Apply(cut, 0).code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("decode_jpeg fuses only with crops/resizes of the same field") {
  CHECK(Fuse("decode_jpeg", {}, "normalize", {}) == nullptr);
  CHECK(Fuse("decode_jpeg", {{"field", Str("a")}}, "resize", {{"size", Ints({4})}, {"field", Str("b")}}) == nullptr);
  CHECK(Fuse("decode_png", {}, "resize", {{"size", Ints({4})}}) == nullptr);
  auto fused = Fuse("decode_jpeg", {}, "random_resized_crop", {{"size", Ints({224})}});
  REQUIRE(fused != nullptr);
  CHECK(fused->Describe().find("random_resized_crop") != std::string::npos);
}

TEST_CASE("Fused decode_image handles PNG by decoding fully, JPEG by region") {
  RawImage img = NoiseImage(40, 60, 3, 21);
  auto fused = Fuse("decode_image", {}, "center_crop", {{"size", Ints({10, 20})}});
  REQUIRE(fused != nullptr);
  Element p = EncodedElement(EncodePng(img));
  REQUIRE(fused->Apply(p, 0).ok());
  RawImage out = Field(p);
  REQUIRE(out.height == 10);
  CHECK(out.at(0, 0, 0) == img.at(15, 20, 0));
  Element j = EncodedElement(EncodeJpeg(SmoothImage(40, 60, 3)));
  REQUIRE(fused->Apply(j, 0).ok());
  CHECK(j.Find("image")->shape() == Shape{10, 20, 3});
}

TEST_CASE("Fused ops are deterministic per seed and vary across seeds") {
  std::string jpeg = EncodeJpeg(SmoothImage(200, 260, 3));
  ArgList rrc = {{"size", Ints({40})}};
  RawImage a = Fused(jpeg, {}, "random_resized_crop", rrc, 99);
  RawImage b = Fused(jpeg, {}, "random_resized_crop", rrc, 99);
  RawImage c = Fused(jpeg, {}, "random_resized_crop", rrc, 100);
  CHECK(Compare(a, b).max == 0);
  CHECK(Compare(a, c).max > 0);
}

}  // namespace
}  // namespace sluice::pipeline::image
