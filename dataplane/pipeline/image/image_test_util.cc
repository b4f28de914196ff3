#include "dataplane/pipeline/image/image_test_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include <jpeglib.h>
#include <png.h>

#include "dataplane/pipeline/args.h"

namespace sluice::pipeline::image::testing {

RawImage FlatImage(int64_t h, int64_t w, std::vector<uint8_t> color) {
  RawImage img{h, w, static_cast<int64_t>(color.size()), {}};
  img.pixels.resize(h * w * img.channels);
  for (int64_t i = 0; i < h * w; ++i) {
    for (int64_t c = 0; c < img.channels; ++c) img.pixels[i * img.channels + c] = color[c];
  }
  return img;
}

RawImage SmoothImage(int64_t h, int64_t w, int64_t channels) {
  RawImage img{h, w, channels, {}};
  img.pixels.resize(h * w * channels);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t c = 0; c < channels; ++c) {
        double v = 128 + 60 * std::sin((x + 2.0 * c) * 0.05 + y * 0.02 * (c + 1)) +
                   50.0 * (static_cast<double>(x + y) / static_cast<double>(w + h) - 0.5);
        img.pixels[(y * w + x) * channels + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  return img;
}

RawImage StripedImage(int64_t h, int64_t w, int seed) {
  RawImage img{h, w, 3, {}};
  img.pixels.resize(h * w * 3);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t c = 0; c < 3; ++c) img.pixels[(y * w + x) * 3 + c] = static_cast<uint8_t>((x * (c + 1) + y * 2 + seed * 40) & 0xFF);
    }
  }
  return img;
}

RawImage NoiseImage(int64_t h, int64_t w, int64_t channels, uint64_t seed) {
  RawImage img{h, w, channels, {}};
  img.pixels.resize(h * w * channels);
  std::mt19937_64 rng(seed);
  for (auto& p : img.pixels) p = static_cast<uint8_t>(rng() & 0xFF);
  return img;
}

std::string EncodeJpeg(const RawImage& image, const JpegOptions& options) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);  // test inputs are valid; libjpeg exits on errors
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  jpeg_mem_dest(&cinfo, &out, &out_size);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = static_cast<int>(image.channels);
  cinfo.in_color_space = options.cmyk ? JCS_CMYK : image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  if (options.cmyk) jpeg_set_colorspace(&cinfo, JCS_CMYK);
  jpeg_set_quality(&cinfo, options.quality, TRUE);
  if (!options.subsample && image.channels == 3) {
    for (int i = 0; i < cinfo.num_components; ++i) {
      cinfo.comp_info[i].h_samp_factor = 1;
      cinfo.comp_info[i].v_samp_factor = 1;
    }
  }
  if (options.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  const int64_t stride = image.width * image.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.pixels.data() + cinfo.next_scanline * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string bytes(reinterpret_cast<char*>(out), out_size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

namespace {
void PngWrite(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), length);
}
void PngFlush(png_structp) {}
}  // namespace

std::string EncodePng(const RawImage& image, int bit_depth, bool palette) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error("png encode failed");
  }
  png_set_write_fn(png, &out, PngWrite, PngFlush);
  const int channels = static_cast<int>(image.channels);
  int color_type = channels == 1 ? PNG_COLOR_TYPE_GRAY
                   : channels == 2 ? PNG_COLOR_TYPE_GRAY_ALPHA
                   : channels == 3 ? PNG_COLOR_TYPE_RGB
                                   : PNG_COLOR_TYPE_RGBA;
  std::vector<uint8_t> data;
  int64_t row_bytes = 0;
  if (palette) {
    // Build a palette of the distinct RGB colours (the caller keeps it <= 256).
    std::vector<png_color> colors;
    data.resize(image.height * image.width);
    for (int64_t i = 0; i < image.height * image.width; ++i) {
      png_color c{image.pixels[i * 3], image.pixels[i * 3 + 1], image.pixels[i * 3 + 2]};
      size_t k = 0;
      while (k < colors.size() &&
             !(colors[k].red == c.red && colors[k].green == c.green && colors[k].blue == c.blue)) {
        ++k;
      }
      if (k == colors.size()) colors.push_back(c);
      data[i] = static_cast<uint8_t>(k);
    }
    png_set_IHDR(png, info, image.width, image.height, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_PLTE(png, info, colors.data(), static_cast<int>(colors.size()));
    row_bytes = image.width;
  } else if (bit_depth == 16) {
    data.resize(image.pixels.size() * 2);
    for (size_t i = 0; i < image.pixels.size(); ++i) data[2 * i] = data[2 * i + 1] = image.pixels[i];
    png_set_IHDR(png, info, image.width, image.height, 16, color_type, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    row_bytes = image.width * channels * 2;
  } else {
    data = image.pixels;
    png_set_IHDR(png, info, image.width, image.height, 8, color_type, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    row_bytes = image.width * channels;
  }
  png_write_info(png, info);
  for (int64_t y = 0; y < image.height; ++y) png_write_row(png, data.data() + y * row_bytes);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Tensor ToTensor(const RawImage& image) {
  Tensor t = Tensor::Allocate(DType::kUInt8, Shape{image.height, image.width, image.channels});
  std::memcpy(t.mutable_raw(), image.pixels.data(), image.pixels.size());
  return t;
}

RawImage FromTensor(const Tensor& t) {
  RawImage img;
  img.height = t.shape()[0];
  img.width = t.shape()[1];
  img.channels = t.rank() == 3 ? t.shape()[2] : 1;
  img.pixels.assign(t.raw(), t.raw() + t.nbytes());
  return img;
}

Element EncodedElement(std::string bytes, std::string field) {
  Element e;
  e.Set(std::move(field), Tensor::StringScalar(std::move(bytes)));
  return e;
}

Value Int(int64_t v) { return IntValue(v); }
Value Float(double v) { return FloatValue(v); }
Value Str(std::string v) { return StringValue(std::move(v)); }
Value Bool(bool v) { return BoolValue(v); }
Value Ints(std::vector<int64_t> v) {
  Value out;
  auto* list = out.mutable_list_value();
  for (int64_t x : v) *list->add_values() = IntValue(x);
  return out;
}
Value Floats(std::vector<double> v) {
  Value out;
  auto* list = out.mutable_list_value();
  for (double x : v) *list->add_values() = FloatValue(x);
  return out;
}

ValueMap ValidatedArgs(const std::string& name, const ArgList& args) {
  const OpDescriptor* d = OpRegistry::Builtin().Find(name);
  if (d == nullptr) throw std::runtime_error("no op " + name);
  ValueMap map;
  for (const auto& [k, v] : args) SetArg(map, k, v);
  absl::Status st = ValidateArgs(d->args, map, name);
  if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  return map;
}

BuiltOp MakeOp(const std::string& name, const ArgList& args) {
  BuiltOp built;
  built.name = name;
  built.args = std::make_shared<ValueMap>(ValidatedArgs(name, args));
  auto op = OpRegistry::Builtin().Find(name)->factory(Args(*built.args));
  if (!op.ok()) throw std::runtime_error(std::string(op.status().message()));
  built.op = *std::move(op);
  return built;
}

std::unique_ptr<ElementOp> Fuse(const std::string& name, const ArgList& args, const std::string& next,
                                const ArgList& next_args) {
  const OpDescriptor* d = OpRegistry::Builtin().Find(name);
  if (d == nullptr || !d->fuse_with_next) return nullptr;
  ValueMap a = ValidatedArgs(name, args);
  ValueMap b = ValidatedArgs(next, next_args);
  auto op = d->fuse_with_next(Args(a), next, Args(b));
  if (!op.ok()) throw std::runtime_error(std::string(op.status().message()));
  return *std::move(op);
}

Diff Compare(const RawImage& a, const RawImage& b) {
  Diff d;
  if (a.pixels.size() != b.pixels.size()) {
    d.max = 256;
    d.mean = 256;
    return d;
  }
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    int v = std::abs(static_cast<int>(a.pixels[i]) - static_cast<int>(b.pixels[i]));
    d.max = std::max(d.max, v);
    sum += v;
  }
  d.mean = a.pixels.empty() ? 0 : sum / static_cast<double>(a.pixels.size());
  return d;
}

}  // namespace sluice::pipeline::image::testing
