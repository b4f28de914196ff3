// The pixel ops: resize, center_crop, random_crop, random_resized_crop, random_flip, normalize,
// and the helpers they share with the decode ops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dataplane/pipeline/image/image_op_util.h"
#include "dataplane/pipeline/image/pixel_buffer.h"

namespace sluice::pipeline::image {

std::string FieldMessage(absl::string_view op, absl::string_view field, absl::string_view message) {
  return absl::StrCat(op, ": field '", field, "': ", message);
}

absl::StatusOr<ImageShape> CheckImage(const Tensor& t, absl::string_view op, absl::string_view field,
                                      bool uint8_only) {
  if (t.dtype() == DType::kString) {
    return absl::InvalidArgumentError(FieldMessage(
        op, field, "expected a decoded image but got encoded bytes (dtype string); decode it first "
                   "with decode_jpeg, decode_png or decode_image"));
  }
  if (uint8_only && t.dtype() != DType::kUInt8) {
    return absl::InvalidArgumentError(FieldMessage(
        op, field, absl::StrCat("expected a uint8 image, got dtype ", DTypeName(t.dtype()),
                                "; apply ", op, " before normalize/cast")));
  }
  if (t.rank() != 2 && t.rank() != 3) {
    return absl::InvalidArgumentError(FieldMessage(
        op, field, absl::StrCat("expected an image of shape [H, W, C] or [H, W], got shape ",
                                ShapeToString(t.shape()), " (apply image ops before batch)")));
  }
  ImageShape s;
  s.height = t.shape()[0];
  s.width = t.shape()[1];
  s.rank2 = t.rank() == 2;
  s.channels = s.rank2 ? 1 : t.shape()[2];
  if (s.height <= 0 || s.width <= 0 || s.channels <= 0) {
    return absl::InvalidArgumentError(
        FieldMessage(op, field, absl::StrCat("empty image of shape ", ShapeToString(t.shape()))));
  }
  return s;
}

absl::StatusOr<absl::string_view> EncodedBytes(const Tensor& t, absl::string_view op, absl::string_view field) {
  if (t.dtype() != DType::kString) {
    return absl::InvalidArgumentError(FieldMessage(
        op, field, absl::StrCat("expected encoded image bytes (a string scalar), got dtype ",
                                DTypeName(t.dtype()), " with shape ", ShapeToString(t.shape()))));
  }
  if (t.num_elements() != 1) {
    return absl::InvalidArgumentError(FieldMessage(
        op, field, absl::StrCat("expected one encoded image (a string scalar), got shape ",
                                ShapeToString(t.shape()), "; decode before batch")));
  }
  return t.strings()[0];
}

absl::Status ReadSize(const Args& args, absl::string_view op, int64_t* h, int64_t* w, bool* single) {
  std::vector<int64_t> size = args.IntList("size");
  if (size.empty() || size.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": size must be [size] or [height, width], got ", size.size(), " values"));
  }
  for (int64_t v : size) {
    if (v <= 0 || v > (int64_t{1} << 16)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": size entries must be between 1 and 65536, got ", v));
    }
  }
  *single = size.size() == 1;
  *h = size[0];
  *w = size.size() == 2 ? size[1] : size[0];
  return absl::OkStatus();
}

// --- crop / resize ---------------------------------------------------------------------------

absl::StatusOr<CropResizeSpec> CropResizeSpecFromArgs(CropResizeKind kind, absl::string_view op,
                                                      const Args& args) {
  CropResizeSpec spec;
  spec.kind = kind;
  spec.op = std::string(op);
  spec.field = args.String("field", "image");
  if (spec.field.empty()) return absl::InvalidArgumentError(absl::StrCat(op, ": field must not be empty"));
  bool single = false;
  if (absl::Status st = ReadSize(args, op, &spec.size_h, &spec.size_w, &single); !st.ok()) return st;
  spec.shorter_side = kind == CropResizeKind::kResize && single;
  if (kind == CropResizeKind::kResize || kind == CropResizeKind::kRandomResizedCrop) {
    auto method = ParseResizeMethod(args.String("method", "bilinear"));
    if (!method.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", method.status().message()));
    spec.method = *method;
    spec.antialias = args.Bool("antialias", true);
  }
  if (kind == CropResizeKind::kRandomResizedCrop) {
    std::vector<double> scale = args.FloatList("scale");
    std::vector<double> ratio = args.FloatList("ratio");
    if (scale.size() != 2 || !(scale[0] > 0) || !(scale[0] <= scale[1]) || scale[1] > 1.0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": scale must be [min, max] with 0 < min <= max <= 1 (fractions of the image area)"));
    }
    if (ratio.size() != 2 || !(ratio[0] > 0) || !(ratio[0] <= ratio[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ratio must be [min, max] with 0 < min <= max (width / height)"));
    }
    spec.rrc = RandomResizedCropParams{scale[0], scale[1], ratio[0], ratio[1]};
  }
  return spec;
}

absl::StatusOr<CropResizePlan> PlanCropResize(const CropResizeSpec& spec, int64_t height, int64_t width,
                                              uint64_t seed) {
  CropResizePlan plan;
  switch (spec.kind) {
    case CropResizeKind::kResize:
      plan.rect = CropRect{0, 0, height, width};
      if (spec.shorter_side) {
        ShorterSideSize(height, width, spec.size_h, &plan.out_h, &plan.out_w);
      } else {
        plan.out_h = spec.size_h;
        plan.out_w = spec.size_w;
      }
      plan.resample = true;
      break;
    case CropResizeKind::kCenterCrop:
      plan.rect = CenterCropRect(height, width, spec.size_h, spec.size_w);
      plan.out_h = spec.size_h;
      plan.out_w = spec.size_w;
      break;
    case CropResizeKind::kRandomCrop: {
      if (spec.size_h > height || spec.size_w > width) {
        return absl::InvalidArgumentError(FieldMessage(
            spec.op, spec.field,
            absl::StrCat("crop size ", spec.size_h, "x", spec.size_w, " is larger than the image (",
                         height, "x", width, "); resize first or use center_crop, which pads")));
      }
      CropRng rng(seed);
      plan.rect = RandomCropRect(height, width, spec.size_h, spec.size_w, rng);
      plan.out_h = spec.size_h;
      plan.out_w = spec.size_w;
      break;
    }
    case CropResizeKind::kRandomResizedCrop: {
      CropRng rng(seed);
      plan.rect = RandomResizedCropRect(height, width, spec.rrc, rng);
      plan.out_h = spec.size_h;
      plan.out_w = spec.size_w;
      plan.resample = true;
      break;
    }
  }
  return plan;
}

void CopyRect(const uint8_t* rows, int64_t stride, const CropRect& valid, int64_t pixel_bytes,
              const CropRect& rect, uint8_t* out) {
  const int64_t y0 = std::max(rect.y, valid.y), y1 = std::min(rect.y + rect.h, valid.y + valid.h);
  const int64_t x0 = std::max(rect.x, valid.x), x1 = std::min(rect.x + rect.w, valid.x + valid.w);
  if (y0 >= y1 || x0 >= x1) return;
  const int64_t out_stride = rect.w * pixel_bytes;
  const int64_t bytes = (x1 - x0) * pixel_bytes;
  for (int64_t y = y0; y < y1; ++y) {
    std::memcpy(out + (y - rect.y) * out_stride + (x0 - rect.x) * pixel_bytes,
                rows + (y - valid.y) * stride + (x0 - valid.x) * pixel_bytes, bytes);
  }
}

namespace {

Shape ImageShapeOf(const ImageShape& like, int64_t h, int64_t w, int64_t c) {
  return like.rank2 ? Shape{h, w} : Shape{h, w, c};
}

}  // namespace

absl::StatusOr<Tensor> ApplyCropResize(const CropResizeSpec& spec, const Tensor& image,
                                       const ImageShape& shape, const CropResizePlan& plan) {
  if (!plan.resample) {
    const int64_t pixel_bytes = shape.channels * static_cast<int64_t>(DTypeSize(image.dtype()));
    PixelBuffer out(image.dtype(), ImageShapeOf(shape, plan.out_h, plan.out_w, shape.channels));
    const CropRect whole{0, 0, shape.height, shape.width};
    if (plan.rect.y < 0 || plan.rect.x < 0 || plan.rect.y + plan.rect.h > shape.height ||
        plan.rect.x + plan.rect.w > shape.width) {
      out.Zero();  // padding
    }
    CopyRect(image.raw(), shape.width * pixel_bytes, whole, pixel_bytes, plan.rect, out.data());
    return std::move(out).Finish();
  }
  if (image.dtype() != DType::kUInt8 && image.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(FieldMessage(
        spec.op, spec.field,
        absl::StrCat("resampling needs a uint8 or float32 image, got dtype ", DTypeName(image.dtype()),
                     "; apply ", spec.op, " before cast")));
  }
  ResampleGeometry g;
  g.box_y = static_cast<double>(plan.rect.y);
  g.box_x = static_cast<double>(plan.rect.x);
  g.box_h = static_cast<double>(plan.rect.h);
  g.box_w = static_cast<double>(plan.rect.w);
  g.clamp_y0 = plan.rect.y;
  g.clamp_y1 = plan.rect.y + plan.rect.h;
  g.clamp_x0 = plan.rect.x;
  g.clamp_x1 = plan.rect.x + plan.rect.w;
  g.out_h = plan.out_h;
  g.out_w = plan.out_w;
  g.method = spec.method;
  g.antialias = spec.antialias;
  PixelBuffer out(image.dtype(), ImageShapeOf(shape, plan.out_h, plan.out_w, shape.channels));
  if (image.dtype() == DType::kFloat32) {
    // Slower (float arithmetic, 4x the bytes): resample before normalize/cast when you can, or let
    // AutoOrder move it there (docs/autoorder.md).
    ResampleImageFloat(image.data<float>(), shape.width, static_cast<int>(shape.channels), g,
                       reinterpret_cast<float*>(out.data()));
  } else {
    ResampleImage(image.data<uint8_t>(), shape.width, static_cast<int>(shape.channels), g, out.data());
  }
  return std::move(out).Finish();
}

namespace {

absl::string_view KindName(CropResizeKind kind) {
  switch (kind) {
    case CropResizeKind::kResize: return "resize";
    case CropResizeKind::kCenterCrop: return "center_crop";
    case CropResizeKind::kRandomCrop: return "random_crop";
    case CropResizeKind::kRandomResizedCrop: return "random_resized_crop";
  }
  return "?";
}

// resize, center_crop, random_crop and random_resized_crop on decoded pixels.
class CropResizeOp : public ElementOp {
 public:
  explicit CropResizeOp(CropResizeSpec spec) : spec_(std::move(spec)) {}

  absl::Status Apply(Element& element, uint64_t seed) const override {
    auto field = GetMutableField(element, spec_.field, spec_.op);
    if (!field.ok()) return field.status();
    Tensor& image = **field;
    auto shape = CheckImage(image, spec_.op, spec_.field, /*uint8_only=*/false);
    if (!shape.ok()) return shape.status();
    auto plan = PlanCropResize(spec_, shape->height, shape->width, seed);
    if (!plan.ok()) return plan.status();
    auto out = ApplyCropResize(spec_, image, *shape, *plan);
    if (!out.ok()) return out.status();
    image = *std::move(out);
    return absl::OkStatus();
  }

  std::string Describe() const override {
    std::string size = spec_.shorter_side ? absl::StrCat("shorter side ", spec_.size_h)
                                          : absl::StrCat(spec_.size_h, "x", spec_.size_w);
    std::string method;
    if (spec_.kind == CropResizeKind::kResize || spec_.kind == CropResizeKind::kRandomResizedCrop) {
      method = absl::StrCat(", ", ResizeMethodName(spec_.method), spec_.antialias ? ", antialias" : "");
    }
    return absl::StrCat(KindName(spec_.kind), "(", spec_.field, ", ", size, method, ")");
  }

 private:
  const CropResizeSpec spec_;
};

}  // namespace

std::unique_ptr<ElementOp> MakeCropResizeOp(CropResizeSpec spec) {
  return std::make_unique<CropResizeOp>(std::move(spec));
}

// --- random_flip -------------------------------------------------------------------------------

absl::StatusOr<FlipSpec> FlipSpecFromArgs(const Args& args) {
  FlipSpec spec;
  spec.field = args.String("field", "image");
  const std::string mode = args.String("mode", "horizontal");
  if (mode != "horizontal" && mode != "vertical") {
    return absl::InvalidArgumentError(
        absl::StrCat("random_flip: mode must be horizontal or vertical, got '", mode, "'"));
  }
  spec.horizontal = mode == "horizontal";
  spec.probability = args.Float("probability", 0.5);
  if (!(spec.probability >= 0.0 && spec.probability <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("random_flip: probability must be in [0, 1], got ", spec.probability));
  }
  return spec;
}

namespace {

class FlipOp : public ElementOp {
 public:
  explicit FlipOp(FlipSpec spec) : spec_(std::move(spec)) {}

  absl::Status Apply(Element& element, uint64_t seed) const override {
    auto field = GetMutableField(element, spec_.field, "random_flip");
    if (!field.ok()) return field.status();
    Tensor& image = **field;
    auto shape = CheckImage(image, "random_flip", spec_.field, /*uint8_only=*/false);
    if (!shape.ok()) return shape.status();
    if (!FlipDecision(seed, spec_.probability)) return absl::OkStatus();
    const int64_t pixel = shape->channels * static_cast<int64_t>(DTypeSize(image.dtype()));
    const int64_t row = shape->width * pixel;
    PixelBuffer out(image.dtype(), image.shape());
    const uint8_t* src = image.raw();
    uint8_t* dst = out.data();
    for (int64_t y = 0; y < shape->height; ++y) {
      if (spec_.horizontal) {
        const uint8_t* s = src + y * row;
        uint8_t* d = dst + y * row;
        for (int64_t x = 0; x < shape->width; ++x) {
          std::memcpy(d + x * pixel, s + (shape->width - 1 - x) * pixel, pixel);
        }
      } else {
        std::memcpy(dst + y * row, src + (shape->height - 1 - y) * row, row);
      }
    }
    image = std::move(out).Finish();
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat("random_flip(", spec_.field, ", ", spec_.horizontal ? "horizontal" : "vertical",
                        ", p=", spec_.probability, ")");
  }

 private:
  const FlipSpec spec_;
};

}  // namespace

std::unique_ptr<ElementOp> MakeFlipOp(FlipSpec spec) { return std::make_unique<FlipOp>(std::move(spec)); }

// --- normalize ---------------------------------------------------------------------------------

absl::StatusOr<NormalizeSpec> NormalizeSpecFromArgs(const Args& args) {
  NormalizeSpec spec;
  spec.field = args.String("field", "image");
  spec.mean = args.FloatList("mean");
  spec.std = args.FloatList("std");
  spec.scale = args.Float("scale", 1.0 / 255.0);
  const std::string layout = args.String("layout", "chw");
  if (layout != "chw" && layout != "hwc") {
    return absl::InvalidArgumentError(absl::StrCat("normalize: layout must be chw or hwc, got '", layout, "'"));
  }
  spec.chw = layout == "chw";
  if (spec.mean.empty() || spec.std.empty()) {
    return absl::InvalidArgumentError("normalize: mean and std need at least one value (one per channel, or one for all)");
  }
  for (double s : spec.std) {
    if (s == 0.0 || !std::isfinite(s)) {
      return absl::InvalidArgumentError(absl::StrCat("normalize: std values must be finite and non-zero, got ", s));
    }
  }
  if (!std::isfinite(spec.scale)) return absl::InvalidArgumentError("normalize: scale must be finite");
  return spec;
}

namespace {

// out = (in * scale - mean[c]) / std[c], as float32, in CHW or HWC order; optionally mirrored.
class NormalizeOp : public ElementOp {
 public:
  explicit NormalizeOp(NormalizeSpec spec) : spec_(std::move(spec)) {}

  absl::Status Apply(Element& element, uint64_t seed) const override {
    auto field = GetMutableField(element, spec_.field, "normalize");
    if (!field.ok()) return field.status();
    Tensor& image = **field;
    auto shape = CheckImage(image, "normalize", spec_.field, /*uint8_only=*/false);
    if (!shape.ok()) return shape.status();
    if (image.dtype() != DType::kUInt8 && image.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(FieldMessage(
          "normalize", spec_.field,
          absl::StrCat("expected a uint8 or float32 image, got dtype ", DTypeName(image.dtype()))));
    }
    const int64_t C = shape->channels, H = shape->height, W = shape->width;
    for (const auto* list : {&spec_.mean, &spec_.std}) {
      if (list->size() != 1 && static_cast<int64_t>(list->size()) != C) {
        return absl::InvalidArgumentError(FieldMessage(
            "normalize", spec_.field,
            absl::StrCat(list == &spec_.mean ? "mean" : "std", " has ", list->size(),
                         " values but the image has ", C, " channels (give 1 or ", C, ")")));
      }
    }
    bool flip = false;
    if (spec_.flip.has_value()) flip = FlipDecision(seed, spec_.flip->probability);
    const bool flip_h = flip && spec_.flip->horizontal;
    const bool flip_v = flip && !spec_.flip->horizontal;

    std::vector<float> a(C), b(C);
    for (int64_t c = 0; c < C; ++c) {
      const double m = spec_.mean.size() == 1 ? spec_.mean[0] : spec_.mean[c];
      const double s = spec_.std.size() == 1 ? spec_.std[0] : spec_.std[c];
      a[c] = static_cast<float>(spec_.scale / s);
      b[c] = static_cast<float>(-m / s);
    }
    Shape out_shape = spec_.chw ? Shape{C, H, W} : Shape{H, W, C};
    if (shape->rank2) out_shape = Shape{H, W};
    PixelBuffer out(DType::kFloat32, out_shape);
    float* dst = out.as<float>();
    // Output strides: channel, row, column.
    const int64_t sc = spec_.chw ? H * W : 1, sy = spec_.chw ? W : W * C, sx = spec_.chw ? 1 : C;
    if (image.dtype() == DType::kUInt8) {
      std::vector<float> lut(C * 256);
      for (int64_t c = 0; c < C; ++c) {
        for (int v = 0; v < 256; ++v) lut[c * 256 + v] = static_cast<float>(v) * a[c] + b[c];
      }
      const uint8_t* src = image.data<uint8_t>();
      if (C == 3) {
        Run3(src, H, W, lut.data(), flip_h, flip_v, dst, sc, sy, sx);
      } else {
        for (int64_t y = 0; y < H; ++y) {
          const uint8_t* row = src + (flip_v ? H - 1 - y : y) * W * C;
          for (int64_t x = 0; x < W; ++x) {
            const uint8_t* p = row + (flip_h ? W - 1 - x : x) * C;
            for (int64_t c = 0; c < C; ++c) dst[c * sc + y * sy + x * sx] = lut[c * 256 + p[c]];
          }
        }
      }
    } else {
      const float* src = image.data<float>();
      for (int64_t y = 0; y < H; ++y) {
        const float* row = src + (flip_v ? H - 1 - y : y) * W * C;
        for (int64_t x = 0; x < W; ++x) {
          const float* p = row + (flip_h ? W - 1 - x : x) * C;
          for (int64_t c = 0; c < C; ++c) dst[c * sc + y * sy + x * sx] = p[c] * a[c] + b[c];
        }
      }
    }
    image = std::move(out).Finish();
    return absl::OkStatus();
  }

  std::string Describe() const override {
    std::string s = absl::StrCat("normalize(", spec_.field, ", ", spec_.chw ? "chw" : "hwc");
    if (spec_.flip.has_value()) {
      absl::StrAppend(&s, ", fused random_flip ", spec_.flip->horizontal ? "horizontal" : "vertical",
                      " p=", spec_.flip->probability);
    }
    return s + ")";
  }

 private:
  // The common 3-channel uint8 case: one pass over the pixels, three output planes (or HWC).
  static void Run3(const uint8_t* src, int64_t H, int64_t W, const float* lut, bool flip_h, bool flip_v,
                   float* dst, int64_t sc, int64_t sy, int64_t sx) {
    const float* l0 = lut;
    const float* l1 = lut + 256;
    const float* l2 = lut + 512;
    for (int64_t y = 0; y < H; ++y) {
      const uint8_t* row = src + (flip_v ? H - 1 - y : y) * W * 3;
      float* d0 = dst + y * sy;
      float* d1 = d0 + sc;
      float* d2 = d1 + sc;
      if (flip_h) {
        for (int64_t x = 0; x < W; ++x) {
          const uint8_t* p = row + (W - 1 - x) * 3;
          d0[x * sx] = l0[p[0]];
          d1[x * sx] = l1[p[1]];
          d2[x * sx] = l2[p[2]];
        }
      } else {
        for (int64_t x = 0; x < W; ++x) {
          const uint8_t* p = row + x * 3;
          d0[x * sx] = l0[p[0]];
          d1[x * sx] = l1[p[1]];
          d2[x * sx] = l2[p[2]];
        }
      }
    }
  }

  const NormalizeSpec spec_;
};

}  // namespace

std::unique_ptr<ElementOp> MakeNormalizeOp(NormalizeSpec spec) {
  return std::make_unique<NormalizeOp>(std::move(spec));
}

}  // namespace sluice::pipeline::image
