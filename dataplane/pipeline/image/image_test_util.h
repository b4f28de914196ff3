// Test helpers for the image ops: in-memory JPEG/PNG encoders (libjpeg, libpng), synthetic images,
// and op construction through the registry with validated arguments.
#ifndef SLUICE_DATAPLANE_PIPELINE_IMAGE_IMAGE_TEST_UTIL_H_
#define SLUICE_DATAPLANE_PIPELINE_IMAGE_IMAGE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/tensor.h"
#include "pipeline.pb.h"

namespace sluice::pipeline::image::testing {

struct RawImage {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // HWC
  uint8_t at(int64_t y, int64_t x, int64_t c) const { return pixels[(y * width + x) * channels + c]; }
};

RawImage FlatImage(int64_t h, int64_t w, std::vector<uint8_t> color);
// Smooth, photo-like content: diagonal gradients plus low-frequency waves per channel.
RawImage SmoothImage(int64_t h, int64_t w, int64_t channels);
// Uniform random bytes from a fixed seed.
RawImage NoiseImage(int64_t h, int64_t w, int64_t channels, uint64_t seed);
// RGB diagonal stripes, (x * (c + 1) + 2 * y + 40 * seed) mod 256 per channel c: the benchmark
// tests' JPEG content (bench/pipeline, bench/autoorder).
RawImage StripedImage(int64_t h, int64_t w, int seed);

struct JpegOptions {
  int quality = 95;
  bool progressive = false;
  bool subsample = true;  // 4:2:0 chroma (libjpeg default); false: 4:4:4
  bool cmyk = false;      // pixels are CMYK (4 channels), written with an Adobe marker
};
std::string EncodeJpeg(const RawImage& image, const JpegOptions& options = {});
// bit_depth 8 or 16 (16: each byte is replicated); palette: store as a palette image (<= 256 colours).
std::string EncodePng(const RawImage& image, int bit_depth = 8, bool palette = false);

Tensor ToTensor(const RawImage& image);
RawImage FromTensor(const Tensor& t);  // uint8 [H, W, C] or [H, W]

Element EncodedElement(std::string bytes, std::string field = "image");

// Argument builders.
Value Int(int64_t v);
Value Float(double v);
Value Str(std::string v);
Value Bool(bool v);
Value Ints(std::vector<int64_t> v);
Value Floats(std::vector<double> v);
using ArgList = std::vector<std::pair<std::string, Value>>;

// Validates `args` against the op's schema (defaults filled) and keeps the map alive.
struct BuiltOp {
  std::string name;
  std::shared_ptr<ValueMap> args;
  std::unique_ptr<ElementOp> op;
};
BuiltOp MakeOp(const std::string& name, const ArgList& args = {});
// The op's fuse_with_next with the following op; null when it does not fuse.
std::unique_ptr<ElementOp> Fuse(const std::string& name, const ArgList& args, const std::string& next,
                                const ArgList& next_args);
ValueMap ValidatedArgs(const std::string& name, const ArgList& args);

// Max and mean absolute difference of two equally sized images.
struct Diff {
  int max = 0;
  double mean = 0;
};
Diff Compare(const RawImage& a, const RawImage& b);

}  // namespace sluice::pipeline::image::testing

#endif  // SLUICE_DATAPLANE_PIPELINE_IMAGE_IMAGE_TEST_UTIL_H_
