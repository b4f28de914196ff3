#include "dataplane/pipeline/image/jpeg_decoder.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include <jerror.h>
#include <jpeglib.h>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/image/pixel_buffer.h"

namespace sluice::pipeline::image {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // must be first: libjpeg hands back a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

extern "C" void OnJpegError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

extern "C" void OnJpegMessage(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (level < 0) {
    // Warnings: libjpeg recovers from corrupt data; only premature end of data matters to us.
    if (cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
    cinfo->err->num_warnings++;
  }
}

extern "C" void OnJpegOutput(j_common_ptr) {}

// Adobe CMYK JPEGs store inverted ink values; converts a CMYK row to RGB or gray.
void CmykToRgb(const uint8_t* cmyk, int64_t width, bool inverted, int channels, uint8_t* out) {
  for (int64_t x = 0; x < width; ++x) {
    int c = cmyk[4 * x], m = cmyk[4 * x + 1], y = cmyk[4 * x + 2], k = cmyk[4 * x + 3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    const int r = c * k / 255, g = m * k / 255, b = y * k / 255;
    if (channels == 3) {
      out[3 * x] = static_cast<uint8_t>(r);
      out[3 * x + 1] = static_cast<uint8_t>(g);
      out[3 * x + 2] = static_cast<uint8_t>(b);
    } else {
      out[x] = static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
    }
  }
}

}  // namespace

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  absl::string_view data;
  bool created = false;
  bool cmyk = false;
  int64_t row_width = 0;  // output row width in pixels after cropping
  std::vector<uint8_t> cmyk_row;
};

bool LooksLikeJpeg(absl::string_view data) {
  return data.size() >= 3 && static_cast<uint8_t>(data[0]) == 0xFF &&
         static_cast<uint8_t>(data[1]) == 0xD8 && static_cast<uint8_t>(data[2]) == 0xFF;
}

JpegDecoder::JpegDecoder(absl::string_view data) : state_(std::make_unique<State>()) {
  State* s = state_.get();
  s->data = data;
  std::memset(&s->cinfo, 0, sizeof(s->cinfo));
  s->cinfo.err = jpeg_std_error(&s->err.pub);
  s->err.pub.error_exit = OnJpegError;
  s->err.pub.emit_message = OnJpegMessage;
  s->err.pub.output_message = OnJpegOutput;
  s->err.truncated = false;
  s->err.message[0] = '\0';
}

JpegDecoder::~JpegDecoder() {
  if (state_->created) jpeg_destroy_decompress(&state_->cinfo);
}

bool JpegDecoder::truncated() const { return state_->err.truncated; }

int64_t JpegDecoder::output_width() const { return state_->row_width; }
int64_t JpegDecoder::output_height() const { return state_->cinfo.output_height; }

absl::Status JpegDecoder::ReadHeader() {
  State* s = state_.get();
  if (!LooksLikeJpeg(s->data)) {
    return absl::InvalidArgumentError(
        s->data.empty() ? "empty data, not a JPEG" : "not a JPEG (no SOI marker at the start)");
  }
  if (setjmp(s->err.jump)) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG: ", s->err.message));
  }
  jpeg_create_decompress(&s->cinfo);
  s->created = true;
  jpeg_mem_src(&s->cinfo, reinterpret_cast<const unsigned char*>(s->data.data()),
               static_cast<unsigned long>(s->data.size()));
  jpeg_read_header(&s->cinfo, TRUE);
  header_.width = s->cinfo.image_width;
  header_.height = s->cinfo.image_height;
  header_.components = s->cinfo.num_components;
  header_.progressive = s->cinfo.progressive_mode != 0;
  s->cmyk = s->cinfo.jpeg_color_space == JCS_CMYK || s->cinfo.jpeg_color_space == JCS_YCCK;
  if (header_.width <= 0 || header_.height <= 0) {
    return absl::InvalidArgumentError("corrupt JPEG: zero image size");
  }
  if (header_.width * header_.height > kMaxImagePixels) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG of ", header_.width, "x", header_.height,
                                                   " pixels exceeds the limit of ", kMaxImagePixels,
                                                   " pixels"));
  }
  return absl::OkStatus();
}

absl::Status JpegDecoder::Start(int scale_denom, int channels) {
  State* s = state_.get();
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported JPEG scale 1/", scale_denom));
  }
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported channel count ", channels));
  }
  channels_ = channels;
  if (setjmp(s->err.jump)) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG: ", s->err.message));
  }
  s->cinfo.scale_num = 1;
  s->cinfo.scale_denom = static_cast<unsigned int>(scale_denom);
  if (s->cmyk) {
    s->cinfo.out_color_space = JCS_CMYK;
  } else {
    s->cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  }
  jpeg_start_decompress(&s->cinfo);
  s->row_width = s->cinfo.output_width;
  return absl::OkStatus();
}

absl::Status JpegDecoder::CropColumns(int64_t x, int64_t w, int64_t* actual_x, int64_t* actual_w) {
  State* s = state_.get();
  if (x < 0 || w <= 0 || x + w > static_cast<int64_t>(s->cinfo.output_width)) {
    return absl::InvalidArgumentError(absl::StrCat("column range [", x, ", ", x + w,
                                                   ") outside the decoded width ",
                                                   s->cinfo.output_width));
  }
  if (x == 0 && w == static_cast<int64_t>(s->cinfo.output_width)) {
    *actual_x = 0;
    *actual_w = w;
    return absl::OkStatus();
  }
  JDIMENSION xoffset = static_cast<JDIMENSION>(x);
  JDIMENSION width = static_cast<JDIMENSION>(w);
  if (setjmp(s->err.jump)) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG: ", s->err.message));
  }
  jpeg_crop_scanline(&s->cinfo, &xoffset, &width);
  *actual_x = xoffset;
  *actual_w = width;
  s->row_width = width;
  return absl::OkStatus();
}

absl::Status JpegDecoder::SkipRows(int64_t n) {
  State* s = state_.get();
  if (n <= 0) return absl::OkStatus();
  if (setjmp(s->err.jump)) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG: ", s->err.message));
  }
  jpeg_skip_scanlines(&s->cinfo, static_cast<JDIMENSION>(n));
  return absl::OkStatus();
}

absl::Status JpegDecoder::ReadRows(uint8_t* dst, int64_t stride, int64_t n) {
  State* s = state_.get();
  if (static_cast<int64_t>(s->cinfo.output_scanline) + n > static_cast<int64_t>(s->cinfo.output_height)) {
    return absl::InvalidArgumentError("read past the last JPEG row");
  }
  if (s->cmyk && s->cmyk_row.size() < static_cast<size_t>(s->row_width) * 4) {
    s->cmyk_row.resize(static_cast<size_t>(s->row_width) * 4);
  }
  if (setjmp(s->err.jump)) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt JPEG: ", s->err.message));
  }
  for (int64_t i = 0; i < n;) {
    uint8_t* out = dst + i * stride;
    JSAMPROW row = s->cmyk ? s->cmyk_row.data() : out;
    JDIMENSION got = jpeg_read_scanlines(&s->cinfo, &row, 1);
    if (got == 0) break;  // suspension cannot happen with a memory source; be safe anyway
    if (s->cmyk) {
      CmykToRgb(s->cmyk_row.data(), s->row_width, s->cinfo.saw_Adobe_marker, channels_, out);
    }
    i += got;
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DecodeJpegToTensor(absl::string_view data, int channels, int scale_denom) {
  JpegDecoder decoder(data);
  if (absl::Status st = decoder.ReadHeader(); !st.ok()) return st;
  if (absl::Status st = decoder.Start(scale_denom, channels); !st.ok()) return st;
  const int64_t h = decoder.output_height(), w = decoder.output_width();
  PixelBuffer out(DType::kUInt8, Shape{h, w, channels});
  if (absl::Status st = decoder.ReadRows(out.data(), w * channels, h); !st.ok()) {
    return st;
  }
  if (decoder.truncated()) {
    return absl::InvalidArgumentError("truncated JPEG: the data ends before the last row");
  }
  return std::move(out).Finish();
}

}  // namespace sluice::pipeline::image
