#include "dataplane/pipeline/image/png_decoder.h"

#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

#include <png.h>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/image/jpeg_decoder.h"  // kMaxImagePixels

namespace sluice::pipeline::image {
namespace {

struct ReadContext {
  const uint8_t* data;
  size_t size;
  size_t offset;
  char message[256];
};

extern "C" void OnPngError(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<ReadContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof(ctx->message), "%s", message);
  png_longjmp(png, 1);
}

extern "C" void OnPngWarning(png_structp, png_const_charp) {}

extern "C" void OnPngRead(png_structp png, png_bytep out, png_size_t length) {
  auto* ctx = static_cast<ReadContext*>(png_get_io_ptr(png));
  if (length > ctx->size - ctx->offset) {
    png_error(png, "truncated PNG: the data ends early");
  }
  std::memcpy(out, ctx->data + ctx->offset, length);
  ctx->offset += length;
}

// Owns the libpng structs for one decode.
class PngReader {
 public:
  PngReader() = default;
  ~PngReader() {
    if (png_ != nullptr) png_destroy_read_struct(&png_, info_ != nullptr ? &info_ : nullptr, nullptr);
  }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  // All libpng calls happen inside this function, under one setjmp.
  absl::StatusOr<Tensor> Decode(absl::string_view data, int channels);

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
  ReadContext ctx_{};
  Tensor out_;
  std::vector<png_bytep> rows_;
};

absl::StatusOr<Tensor> PngReader::Decode(absl::string_view data, int channels) {
  ctx_.data = reinterpret_cast<const uint8_t*>(data.data());
  ctx_.size = data.size();
  ctx_.offset = 0;
  ctx_.message[0] = '\0';
  png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx_, OnPngError, OnPngWarning);
  if (png_ == nullptr) return absl::ResourceExhaustedError("cannot create a PNG reader");
  info_ = png_create_info_struct(png_);
  if (info_ == nullptr) return absl::ResourceExhaustedError("cannot create a PNG reader");
  if (setjmp(png_jmpbuf(png_))) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt PNG: ", ctx_.message));
  }
  png_set_read_fn(png_, &ctx_, OnPngRead);
  png_read_info(png_, info_);
  const png_uint_32 width = png_get_image_width(png_, info_);
  const png_uint_32 height = png_get_image_height(png_, info_);
  if (static_cast<int64_t>(width) * height > kMaxImagePixels) {
    std::snprintf(ctx_.message, sizeof(ctx_.message), "%ux%u pixels exceeds the limit of %lld pixels",
                  width, height, static_cast<long long>(kMaxImagePixels));
    png_longjmp(png_, 1);
  }
  const int color_type = png_get_color_type(png_, info_);
  const int bit_depth = png_get_bit_depth(png_, info_);
  if (bit_depth == 16) png_set_strip_16(png_);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png_);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png_);
  const bool has_trns = png_get_valid(png_, info_, PNG_INFO_tRNS) != 0;
  const bool source_color = (color_type & PNG_COLOR_MASK_COLOR) != 0;
  if (channels == 4) {
    if (has_trns) png_set_tRNS_to_alpha(png_);
    if (!source_color) png_set_gray_to_rgb(png_);
    png_set_add_alpha(png_, 0xFF, PNG_FILLER_AFTER);  // no-op when alpha already exists
  } else {
    png_set_strip_alpha(png_);
    if (channels == 3 && !source_color) png_set_gray_to_rgb(png_);
    // ITU-R BT.601 luma weights (what PIL's convert('L') uses), in units of 1/100000.
    if (channels == 1 && source_color) png_set_rgb_to_gray_fixed(png_, 1, 29900, 58700);
  }
  png_set_interlace_handling(png_);
  png_read_update_info(png_, info_);
  const size_t rowbytes = png_get_rowbytes(png_, info_);
  if (rowbytes != static_cast<size_t>(width) * channels) {
    std::snprintf(ctx_.message, sizeof(ctx_.message),
                  "unexpected row size %zu after conversion to %d channels", rowbytes, channels);
    png_longjmp(png_, 1);
  }
  out_ = Tensor::Allocate(DType::kUInt8, Shape{static_cast<int64_t>(height), static_cast<int64_t>(width),
                                                 static_cast<int64_t>(channels)});
  rows_.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) rows_[y] = out_.mutable_raw() + static_cast<size_t>(y) * rowbytes;
  png_read_image(png_, rows_.data());
  return std::move(out_);
}

}  // namespace

bool LooksLikePng(absl::string_view data) {
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return data.size() >= 8 && std::memcmp(data.data(), kSignature, 8) == 0;
}

absl::StatusOr<Tensor> DecodePngToTensor(absl::string_view data, int channels) {
  if (channels != 1 && channels != 3 && channels != 4) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported channel count ", channels));
  }
  if (!LooksLikePng(data)) {
    return absl::InvalidArgumentError(data.empty() ? "empty data, not a PNG"
                                                   : "not a PNG (no PNG signature at the start)");
  }
  PngReader reader;
  return reader.Decode(data, channels);
}

}  // namespace sluice::pipeline::image
