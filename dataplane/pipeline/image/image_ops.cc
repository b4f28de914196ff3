// Registers the image ops (decode_jpeg, decode_png, decode_image, resize, center_crop, random_crop,
// random_resized_crop, random_flip, normalize) and their fusions. See docs/pipeline-image.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/pipeline/image/image_op_util.h"
#include "dataplane/pipeline/op.h"

namespace sluice::pipeline {
namespace {

using image::CropResizeKind;
using image::ImageFormat;

ArgSpec FieldArg() { return WithDefault("field", "image", "the element field holding the image"); }

ArgSpec SizeArg() {
  return Required("size", ArgType::kIntList, "output size: [height, width], or [size] for a square");
}

ArgSpec MethodArg() {
  return Choice("method", {"bilinear", "nearest", "area"}, "bilinear",
                "interpolation: bilinear (triangle filter), nearest, or area (exact pixel coverage)");
}

ArgSpec AntialiasArg() {
  return WithDefault("antialias", true,
                     "when downscaling, widen the bilinear filter by the scale factor (as Pillow does)");
}

std::vector<ArgSpec> DecodeArgs(ImageFormat format) {
  std::vector<ArgSpec> args = {
      FieldArg(),
      Bounded(WithDefault("channels", int64_t{3},
                          format == ImageFormat::kPng ? "output channels: 1 (gray), 3 (RGB) or 4 (RGBA)"
                                                      : "output channels: 1 (gray) or 3 (RGB)"),
              1, format == ImageFormat::kPng ? 4 : 3),
      Choice("on_error", {"fail", "skip"}, "fail",
             "undecodable data fails the pipeline, or (skip) the op returns DataLoss and the element is "
             "dropped and counted"),
  };
  if (format != ImageFormat::kPng) {
    args.push_back(AutoOrInt("dct_scale", kAuto,
                             "JPEG DCT-domain downscaling: 1, 2, 4 or 8 decode at 1/N size; auto decodes at "
                             "full size, or, fused with a following resize/crop, picks the largest 1/N that "
                             "keeps the region at least as large as the output"));
  }
  return args;
}

std::vector<ArgSpec> CropResizeArgs(CropResizeKind kind) {
  std::vector<ArgSpec> args = {FieldArg(), SizeArg()};
  if (kind == CropResizeKind::kRandomResizedCrop) {
    args.push_back(WithDefaultFloatList("scale", {0.08, 1.0}, "range of the crop's fraction of the image area"));
    args.push_back(WithDefaultFloatList("ratio", {3.0 / 4.0, 4.0 / 3.0}, "range of the crop's aspect ratio (width / height)"));
  }
  if (kind == CropResizeKind::kResize || kind == CropResizeKind::kRandomResizedCrop) {
    args.push_back(MethodArg());
    args.push_back(AntialiasArg());
  }
  return args;
}

bool IsCropResizeOp(absl::string_view name, CropResizeKind* kind) {
  if (name == "resize") *kind = CropResizeKind::kResize;
  else if (name == "center_crop") *kind = CropResizeKind::kCenterCrop;
  else if (name == "random_crop") *kind = CropResizeKind::kRandomCrop;
  else if (name == "random_resized_crop") *kind = CropResizeKind::kRandomResizedCrop;
  else return false;
  return true;
}

// --- AutoOrder declarations (op_properties.h, docs/autoorder.md) --------------------------------

// Whether a normalize keeps the HWC layout (chw transposes, so spatial ops after it would read the
// tensor wrongly and nothing spatial commutes with it).
bool KeepsLayout(const Args& normalize) { return ArgString(normalize, "layout", "chw") == "hwc"; }

// The largest |scale / std| over the channels: how much normalize magnifies one input level.
double NormalizeGain(const Args& normalize) {
  double gain = 0;
  const double scale = ArgFloat(normalize, "scale", 1.0 / 255.0);
  for (double s : ArgFloats(normalize, "std", {1.0})) gain = std::max(gain, std::abs(scale / s));
  return gain;
}

std::optional<Commutation> NormalizeWithMove(const Args& normalize, const Args&) {
  if (!KeepsLayout(normalize)) return std::nullopt;
  return Commutation{true, 0};
}

// center_crop pads with zeros: swapping is exact only when normalize maps 0 to +0.
std::optional<Commutation> NormalizeWithCenterCrop(const Args& normalize, const Args&) {
  if (!KeepsLayout(normalize) || ArgFloat(normalize, "scale", 1.0 / 255.0) < 0) return std::nullopt;
  for (double m : ArgFloats(normalize, "mean", {0.0})) {
    if (m != 0) return std::nullopt;
  }
  for (double s : ArgFloats(normalize, "std", {1.0})) {
    if (!(s > 0)) return std::nullopt;
  }
  return Commutation{true, 0};
}

// Resampling uint8 rounds to a level; resampling normalized floats does not.
std::optional<Commutation> NormalizeWithResample(const Args& normalize, const Args& resample) {
  if (!KeepsLayout(normalize)) return std::nullopt;
  if (ArgString(resample, "method", "bilinear") == "nearest") return Commutation{true, 0};
  return Commutation{false, 1.05 * NormalizeGain(normalize) + 1e-5};
}

std::shared_ptr<const OrderDeclaration> NormalizeOrder() {
  auto d = OneFieldDeclaration("field", "image", ShapeEffect::kSame, DTypeEffect::Fixed(DType::kFloat32),
                               SizeEffect::kLarger, CostDriver::kInput);
  const std::string resample = "layout hwc; nearest: exact; bilinear/area: within 1.05 x max abs(scale / std)";
  d->commutes = {
      {"random_flip", true, 0, "layout hwc", NormalizeWithMove},
      {"random_crop", true, 0, "layout hwc", NormalizeWithMove},
      {"center_crop", true, 0, "layout hwc, every mean 0, scale >= 0, std > 0: the padding stays 0", NormalizeWithCenterCrop},
      {"resize", false, 0, resample, NormalizeWithResample},
      {"random_resized_crop", false, 0, resample, NormalizeWithResample},
  };
  d->note = "per-channel affine: commutes with ops that move pixels (layout hwc only)";
  return d;
}

std::shared_ptr<const OrderDeclaration> CropResizeOrder(CropResizeKind kind) {
  switch (kind) {
    case CropResizeKind::kResize:
      return OneFieldDeclaration("field", "image", ShapeEffect::kFixed, DTypeEffect::Same(), SizeEffect::kDepends,
                                 CostDriver::kInput);
    case CropResizeKind::kCenterCrop:
      return OneFieldDeclaration("field", "image", ShapeEffect::kFixed, DTypeEffect::Same(), SizeEffect::kDepends,
                                 CostDriver::kOutput);
    case CropResizeKind::kRandomCrop:
      return OneFieldDeclaration("field", "image", ShapeEffect::kFixed, DTypeEffect::Same(), SizeEffect::kSmaller,
                                 CostDriver::kOutput);
    case CropResizeKind::kRandomResizedCrop:
      return OneFieldDeclaration("field", "image", ShapeEffect::kFixed, DTypeEffect::Same(), SizeEffect::kDepends,
                                 CostDriver::kInput);
  }
  return nullptr;
}

OpDescriptor DecodeDescriptor(std::string name, ImageFormat format, std::string summary) {
  OpDescriptor d;
  d.name = name;
  d.summary = std::move(summary);
  d.args = DecodeArgs(format);
  d.factory = [name, format](const Args& args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
    auto spec = image::DecodeSpecFromArgs(format, name, args);
    if (!spec.ok()) return spec.status();
    return image::MakeDecodeOp(*std::move(spec));
  };
  d.order = OneFieldDeclaration("field", "image", ShapeEffect::kData, DTypeEffect::Fixed(DType::kUInt8),
                                SizeEffect::kLarger, CostDriver::kConstant);
  if (format != ImageFormat::kPng) {
    d.fuse_with_next = [name, format](const Args& args, absl::string_view next_op,
                                      const Args& next_args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
      CropResizeKind kind;
      if (!IsCropResizeOp(next_op, &kind)) return std::unique_ptr<ElementOp>();
      auto decode = image::DecodeSpecFromArgs(format, name, args);
      if (!decode.ok()) return decode.status();
      auto crop = image::CropResizeSpecFromArgs(kind, next_op, next_args);
      if (!crop.ok()) return crop.status();
      if (crop->field != decode->field) return std::unique_ptr<ElementOp>();
      return image::MakeFusedDecodeOp(*std::move(decode), *std::move(crop));
    };
  }
  return d;
}

OpDescriptor CropResizeDescriptor(std::string name, CropResizeKind kind, std::string summary, bool random) {
  OpDescriptor d;
  d.name = name;
  d.summary = std::move(summary);
  d.args = CropResizeArgs(kind);
  d.random = random;
  d.order = CropResizeOrder(kind);
  d.factory = [name, kind](const Args& args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
    auto spec = image::CropResizeSpecFromArgs(kind, name, args);
    if (!spec.ok()) return spec.status();
    return image::MakeCropResizeOp(*std::move(spec));
  };
  return d;
}

void RegisterOrDie(OpRegistry& registry, OpDescriptor descriptor) {
  std::string name = descriptor.name;
  absl::Status st = registry.Register(std::move(descriptor));
  if (!st.ok()) {
    std::fprintf(stderr, "RegisterImageOps: cannot register '%s': %s\n", name.c_str(),
                 std::string(st.message()).c_str());
    std::abort();
  }
}

}  // namespace

void RegisterImageOps(OpRegistry& registry) {
  RegisterOrDie(registry, DecodeDescriptor("decode_jpeg", ImageFormat::kJpeg,
                                           "Decodes JPEG bytes to a uint8 [H, W, C] image (libjpeg-turbo)."));
  RegisterOrDie(registry, DecodeDescriptor("decode_png", ImageFormat::kPng,
                                           "Decodes PNG bytes to a uint8 [H, W, C] image (libpng)."));
  RegisterOrDie(registry, DecodeDescriptor("decode_image", ImageFormat::kAny,
                                           "Decodes JPEG or PNG bytes (sniffed) to a uint8 [H, W, C] image."));
  RegisterOrDie(registry, CropResizeDescriptor("resize", CropResizeKind::kResize,
                                               "Resizes a uint8 image to [height, width], or its shorter side to size.",
                                               false));
  RegisterOrDie(registry, CropResizeDescriptor("center_crop", CropResizeKind::kCenterCrop,
                                               "Crops the centre of an image, zero-padding when it is smaller.", false));
  RegisterOrDie(registry, CropResizeDescriptor("random_crop", CropResizeKind::kRandomCrop,
                                               "Crops a uniformly placed region of the given size.", true));
  RegisterOrDie(registry, CropResizeDescriptor(
                              "random_resized_crop", CropResizeKind::kRandomResizedCrop,
                              "Crops a random area/aspect region and resizes it (torchvision RandomResizedCrop).",
                              true));

  OpDescriptor flip;
  flip.name = "random_flip";
  flip.summary = "Mirrors an image horizontally or vertically with the given probability.";
  flip.args = {FieldArg(), Choice("mode", {"horizontal", "vertical"}, "horizontal", "flip direction"),
               Bounded(WithDefault("probability", 0.5, "probability of flipping"), 0.0, 1.0)};
  flip.random = true;
  flip.order = OneFieldDeclaration("field", "image", ShapeEffect::kSame, DTypeEffect::Same(), SizeEffect::kSame,
                                   CostDriver::kInput);
  flip.factory = [](const Args& args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
    auto spec = image::FlipSpecFromArgs(args);
    if (!spec.ok()) return spec.status();
    return image::MakeFlipOp(*std::move(spec));
  };
  flip.fuse_with_next = [](const Args& args, absl::string_view next_op,
                           const Args& next_args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
    if (next_op != "normalize") return std::unique_ptr<ElementOp>();
    auto flip_spec = image::FlipSpecFromArgs(args);
    if (!flip_spec.ok()) return flip_spec.status();
    auto norm = image::NormalizeSpecFromArgs(next_args);
    if (!norm.ok()) return norm.status();
    if (norm->field != flip_spec->field) return std::unique_ptr<ElementOp>();
    norm->flip = *std::move(flip_spec);
    return image::MakeNormalizeOp(*std::move(norm));
  };
  RegisterOrDie(registry, std::move(flip));

  OpDescriptor normalize;
  normalize.name = "normalize";
  normalize.summary = "(x * scale - mean) / std per channel, as float32, CHW (default) or HWC.";
  normalize.args = {FieldArg(),
                    WithDefaultFloatList("mean", {0.0}, "per-channel mean (in scaled units), or one value for all"),
                    WithDefaultFloatList("std", {1.0}, "per-channel standard deviation, or one value for all"),
                    WithDefault("scale", 1.0 / 255.0, "multiplier applied to the pixel values first"),
                    Choice("layout", {"chw", "hwc"}, "chw", "output layout")};
  normalize.order = NormalizeOrder();
  normalize.factory = [](const Args& args) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
    auto spec = image::NormalizeSpecFromArgs(args);
    if (!spec.ok()) return spec.status();
    return image::MakeNormalizeOp(*std::move(spec));
  };
  RegisterOrDie(registry, std::move(normalize));
}

}  // namespace sluice::pipeline
