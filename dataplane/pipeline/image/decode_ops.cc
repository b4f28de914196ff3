// decode_jpeg, decode_png, decode_image, and the fused decode + crop/resize op.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dataplane/pipeline/image/image_op_util.h"
#include "dataplane/pipeline/image/jpeg_decoder.h"
#include "dataplane/pipeline/image/pixel_buffer.h"
#include "dataplane/pipeline/image/png_decoder.h"

namespace sluice::pipeline::image {
namespace {

// An undecodable input: DataLoss when the op skips bad data (the executor then drops the element
// and counts it), InvalidArgument otherwise (the pipeline fails).
absl::Status DataError(const DecodeSpec& spec, absl::string_view message) {
  std::string text = FieldMessage(spec.op, spec.field, message);
  if (spec.skip_on_error) return absl::DataLossError(text);
  return absl::InvalidArgumentError(text);
}

std::string FirstBytes(absl::string_view data) {
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(data.size(), 8); ++i) {
    absl::StrAppendFormat(&out, "%s%02x", i == 0 ? "" : " ", static_cast<uint8_t>(data[i]));
  }
  return out;
}

// Decodes `bytes` according to spec.format (sniffing for kAny). Errors are not yet wrapped.
absl::StatusOr<Tensor> DecodeBytes(const DecodeSpec& spec, absl::string_view bytes) {
  ImageFormat format = spec.format;
  if (format == ImageFormat::kAny) {
    if (LooksLikeJpeg(bytes)) {
      format = ImageFormat::kJpeg;
    } else if (LooksLikePng(bytes)) {
      format = ImageFormat::kPng;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported or corrupt image: neither JPEG nor PNG (", bytes.size(), " bytes",
          bytes.empty() ? "" : absl::StrCat(", starting ", FirstBytes(bytes)), ")"));
    }
  }
  if (format == ImageFormat::kJpeg) {
    return DecodeJpegToTensor(bytes, spec.channels, spec.dct_scale == -1 ? 1 : spec.dct_scale);
  }
  return DecodePngToTensor(bytes, spec.channels);
}

// decode_jpeg / decode_png / decode_image: encoded bytes to uint8 [H, W, C]. Immutable after
// construction; Apply is thread-safe.
class DecodeOp : public ElementOp {
 public:
  explicit DecodeOp(DecodeSpec spec) : spec_(std::move(spec)) {}

  absl::Status Apply(Element& element, uint64_t) const override {
    auto field = GetMutableField(element, spec_.field, spec_.op);
    if (!field.ok()) return field.status();
    auto bytes = EncodedBytes(**field, spec_.op, spec_.field);
    if (!bytes.ok()) return bytes.status();
    auto decoded = DecodeBytes(spec_, *bytes);
    if (!decoded.ok()) return DataError(spec_, decoded.status().message());
    **field = *std::move(decoded);
    return absl::OkStatus();
  }

  std::string Describe() const override {
    std::string s = absl::StrCat(spec_.op, "(", spec_.field, ", channels=", spec_.channels);
    if (spec_.format != ImageFormat::kPng && spec_.dct_scale > 1) absl::StrAppend(&s, ", dct_scale=1/", spec_.dct_scale);
    if (spec_.skip_on_error) absl::StrAppend(&s, ", on_error=skip");
    return s + ")";
  }

 private:
  const DecodeSpec spec_;
};

// Scratch memory for decoded JPEG regions, reused per thread. Very large regions get a one-off
// allocation so a thread does not hold on to it.
class RegionBuffer {
 public:
  explicit RegionBuffer(size_t bytes) {
    constexpr size_t kKeepLimit = size_t{16} << 20;
    if (bytes > kKeepLimit) {
      own_.reset(new uint8_t[bytes]);
      data_ = own_.get();
      return;
    }
    thread_local std::unique_ptr<uint8_t[]> cached;
    thread_local size_t cached_size = 0;
    if (cached_size < bytes) {
      cached.reset(new uint8_t[bytes]);
      cached_size = bytes;
    }
    data_ = cached.get();
  }
  uint8_t* data() { return data_; }

 private:
  std::unique_ptr<uint8_t[]> own_;
  uint8_t* data_ = nullptr;
};

// decode_jpeg (or decode_image on JPEG data) + resize / center_crop / random_crop /
// random_resized_crop: picks the rectangle from the header's dimensions, decodes only that region
// (at a DCT-reduced size when it is at least twice the output), and resamples it.
class FusedDecodeOp : public ElementOp {
 public:
  FusedDecodeOp(DecodeSpec decode, CropResizeSpec crop) : decode_(std::move(decode)), crop_(std::move(crop)) {}

  absl::Status Apply(Element& element, uint64_t seed) const override {
    auto field = GetMutableField(element, decode_.field, decode_.op);
    if (!field.ok()) return field.status();
    auto bytes = EncodedBytes(**field, decode_.op, decode_.field);
    if (!bytes.ok()) return bytes.status();
    if (decode_.format == ImageFormat::kAny && !LooksLikeJpeg(*bytes)) return ApplyUnfused(**field, *bytes, seed);

    JpegDecoder decoder(*bytes);
    if (absl::Status st = decoder.ReadHeader(); !st.ok()) return DataError(decode_, st.message());
    const int64_t height = decoder.header().height, width = decoder.header().width;
    auto plan = PlanCropResize(crop_, height, width, seed);
    if (!plan.ok()) return plan.status();
    const int C = decode_.channels;
    PixelBuffer out(DType::kUInt8, Shape{plan->out_h, plan->out_w, C});
    absl::Status st = plan->resample ? DecodeAndResample(decoder, *plan, out.data())
                                     : DecodeAndCopy(decoder, *plan, out.data());
    if (!st.ok()) return DataError(decode_, st.message());
    if (decoder.truncated()) {
      return DataError(decode_, "truncated JPEG: the data ends before the decoded region");
    }
    **field = std::move(out).Finish();
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat(decode_.op, "+", crop_.op, "(", decode_.field, ", ", crop_.size_h, "x", crop_.size_w,
                        ", region decode, dct_scale=",
                        decode_.dct_scale == -1 ? std::string("auto") : absl::StrCat("max 1/", decode_.dct_scale),
                        ")");
  }

 private:
  absl::Status DecodeAndResample(JpegDecoder& decoder, const CropResizePlan& plan, uint8_t* out) const {
    const int scale = ChooseDctScale(plan.rect, plan.out_h, plan.out_w, decode_.dct_scale);
    const int C = decode_.channels;
    if (absl::Status st = decoder.Start(scale, C); !st.ok()) return st;
    const int64_t sw = decoder.output_width(), sh = decoder.output_height();
    const double inv = 1.0 / scale;
    ResampleGeometry g;
    g.box_y = plan.rect.y * inv;
    g.box_x = plan.rect.x * inv;
    g.box_h = plan.rect.h * inv;
    g.box_w = plan.rect.w * inv;
    g.clamp_y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(g.box_y)), 0, sh - 1);
    g.clamp_x0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(g.box_x)), 0, sw - 1);
    g.clamp_y1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(g.box_y + g.box_h)), g.clamp_y0 + 1, sh);
    g.clamp_x1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(g.box_x + g.box_w)), g.clamp_x0 + 1, sw);
    g.out_h = plan.out_h;
    g.out_w = plan.out_w;
    g.method = crop_.method;
    g.antialias = crop_.antialias;
    ResamplePlan resample(g);
    const int64_t r0 = resample.rows_begin(), r1 = resample.rows_end();
    int64_t ax = 0, aw = 0;
    if (absl::Status st = decoder.CropColumns(resample.cols_begin(), resample.cols_end() - resample.cols_begin(),
                                              &ax, &aw);
        !st.ok()) {
      return st;
    }
    if (absl::Status st = decoder.SkipRows(r0); !st.ok()) return st;
    const int64_t stride = aw * C;
    RegionBuffer buffer(static_cast<size_t>((r1 - r0) * stride));
    if (absl::Status st = decoder.ReadRows(buffer.data(), stride, r1 - r0); !st.ok()) return st;
    resample.Run(ImageView{buffer.data(), stride, C, r0, ax}, out);
    return absl::OkStatus();
  }

  absl::Status DecodeAndCopy(JpegDecoder& decoder, const CropResizePlan& plan, uint8_t* out) const {
    const int C = decode_.channels;
    const int64_t height = decoder.header().height, width = decoder.header().width;
    const bool pads = plan.rect.y < 0 || plan.rect.x < 0 || plan.rect.y + plan.rect.h > height ||
                      plan.rect.x + plan.rect.w > width;
    if (pads) std::memset(out, 0, static_cast<size_t>(plan.rect.h * plan.rect.w * C));
    CropRect valid;
    valid.y = std::max<int64_t>(plan.rect.y, 0);
    valid.x = std::max<int64_t>(plan.rect.x, 0);
    valid.h = std::min(plan.rect.y + plan.rect.h, height) - valid.y;
    valid.w = std::min(plan.rect.x + plan.rect.w, width) - valid.x;
    if (valid.h <= 0 || valid.w <= 0) return absl::OkStatus();  // all padding
    if (absl::Status st = decoder.Start(1, C); !st.ok()) return st;
    int64_t ax = 0, aw = 0;
    if (absl::Status st = decoder.CropColumns(valid.x, valid.w, &ax, &aw); !st.ok()) return st;
    if (absl::Status st = decoder.SkipRows(valid.y); !st.ok()) return st;
    const int64_t stride = aw * C;
    RegionBuffer buffer(static_cast<size_t>(valid.h * stride));
    if (absl::Status st = decoder.ReadRows(buffer.data(), stride, valid.h); !st.ok()) return st;
    CopyRect(buffer.data() + (valid.x - ax) * C, stride, valid, C, plan.rect, out);
    return absl::OkStatus();
  }

  // decode_image on PNG data: decode fully, then the plain crop/resize.
  absl::Status ApplyUnfused(Tensor& field, absl::string_view bytes, uint64_t seed) const {
    auto decoded = DecodeBytes(decode_, bytes);
    if (!decoded.ok()) return DataError(decode_, decoded.status().message());
    auto shape = CheckImage(*decoded, crop_.op, crop_.field, /*uint8_only=*/true);
    if (!shape.ok()) return shape.status();
    auto plan = PlanCropResize(crop_, shape->height, shape->width, seed);
    if (!plan.ok()) return plan.status();
    auto out = ApplyCropResize(crop_, *decoded, *shape, *plan);
    if (!out.ok()) return out.status();
    field = *std::move(out);
    return absl::OkStatus();
  }

  const DecodeSpec decode_;
  const CropResizeSpec crop_;
};

}  // namespace

int ChooseDctScale(const CropRect& rect, int64_t out_h, int64_t out_w, int dct_scale) {
  if (dct_scale == 1) return 1;
  const int cap = dct_scale == -1 ? 8 : dct_scale;
  for (int d : {8, 4, 2}) {
    if (d <= cap && rect.h >= d * out_h && rect.w >= d * out_w) return d;
  }
  return 1;
}

absl::StatusOr<DecodeSpec> DecodeSpecFromArgs(ImageFormat format, absl::string_view op, const Args& args) {
  DecodeSpec spec;
  spec.format = format;
  spec.op = std::string(op);
  spec.field = args.String("field", "image");
  if (spec.field.empty()) return absl::InvalidArgumentError(absl::StrCat(op, ": field must not be empty"));
  spec.channels = static_cast<int>(args.Int("channels", 3));
  const bool allow_rgba = format == ImageFormat::kPng;
  if (spec.channels != 1 && spec.channels != 3 && !(allow_rgba && spec.channels == 4)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": channels must be 1 or 3", allow_rgba ? " or 4" : "",
                                                   ", got ", spec.channels));
  }
  const std::string on_error = args.String("on_error", "fail");
  if (on_error != "fail" && on_error != "skip") {
    return absl::InvalidArgumentError(absl::StrCat(op, ": on_error must be fail or skip, got '", on_error, "'"));
  }
  spec.skip_on_error = on_error == "skip";
  if (format != ImageFormat::kPng) {
    spec.dct_scale = static_cast<int>(args.Int("dct_scale", kAuto));
    if (spec.dct_scale != -1 && spec.dct_scale != 1 && spec.dct_scale != 2 && spec.dct_scale != 4 &&
        spec.dct_scale != 8) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": dct_scale must be auto, 1, 2, 4 or 8, got ", spec.dct_scale));
    }
  }
  return spec;
}

std::unique_ptr<ElementOp> MakeDecodeOp(DecodeSpec spec) { return std::make_unique<DecodeOp>(std::move(spec)); }

std::unique_ptr<ElementOp> MakeFusedDecodeOp(DecodeSpec decode, CropResizeSpec crop) {
  return std::make_unique<FusedDecodeOp>(std::move(decode), std::move(crop));
}

}  // namespace sluice::pipeline::image
