#include "dataplane/pipeline/tfrecord/byte_stream.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"

namespace sluice::pipeline {
namespace {

// zlib window bits: 15 = 32 KiB window; +16 selects the gzip wrapper.
int WindowBits(ZlibFormat format) { return format == ZlibFormat::kGzip ? 15 + 16 : 15; }

absl::string_view FormatName(ZlibFormat format) {
  return format == ZlibFormat::kGzip ? "gzip" : "zlib";
}

class FileByteStream : public ByteStream {
 public:
  FileByteStream(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileByteStream() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(uint8_t* dst, size_t size) override {
    while (true) {
      const ssize_t n = ::read(fd_, dst, size);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat(path_, ": read failed: ", std::strerror(errno)));
    }
  }

 private:
  const int fd_;
  const std::string path_;
};

class MemoryByteStream : public ByteStream {
 public:
  explicit MemoryByteStream(absl::string_view bytes) : bytes_(bytes) {}

  absl::StatusOr<size_t> Read(uint8_t* dst, size_t size) override {
    const size_t n = std::min(size, bytes_.size());
    if (n > 0) std::memcpy(dst, bytes_.data(), n);
    bytes_.remove_prefix(n);
    return n;
  }

 private:
  absl::string_view bytes_;
};

class InflateByteStream : public ByteStream {
 public:
  static constexpr size_t kInputBlockBytes = 256 * 1024;

  InflateByteStream(std::unique_ptr<ByteStream> compressed, ZlibFormat format, std::string name)
      : compressed_(std::move(compressed)), format_(format), name_(std::move(name)),
        input_(kInputBlockBytes) {}

  ~InflateByteStream() override {
    if (initialised_) inflateEnd(&z_);
  }

  absl::StatusOr<size_t> Read(uint8_t* dst, size_t size) override {
    if (!error_.ok()) return error_;
    if (finished_ || size == 0) return 0;
    if (!initialised_) {
      std::memset(&z_, 0, sizeof(z_));
      if (inflateInit2(&z_, WindowBits(format_)) != Z_OK) {
        return Fail(absl::InternalError(absl::StrCat(name_, ": cannot initialise zlib")));
      }
      initialised_ = true;
    }
    z_.next_out = dst;
    z_.avail_out = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    while (z_.avail_out > 0) {
      if (z_.avail_in == 0) {
        auto n = compressed_->Read(input_.data(), input_.size());
        if (!n.ok()) return Fail(n.status());
        if (*n == 0) {
          // End of the compressed input.
          if (!member_started_) {
            finished_ = true;  // an empty file, or the end after complete members
            break;
          }
          return Fail(absl::DataLossError(absl::StrCat(
              name_, ": ", FormatName(format_), " stream truncated at compressed byte offset ",
              consumed_before_block_ + static_cast<uint64_t>(block_size_),
              " (the file ends inside a compressed member)")));
        }
        consumed_before_block_ += block_size_;
        block_size_ = *n;
        z_.next_in = input_.data();
        z_.avail_in = static_cast<uInt>(*n);
      }
      member_started_ = true;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        // Another member may follow (concatenated gzip files).
        member_started_ = false;
        if (inflateReset(&z_) != Z_OK) {
          return Fail(absl::InternalError(absl::StrCat(name_, ": cannot reset zlib")));
        }
        continue;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        const uint64_t offset = consumed_before_block_ + (block_size_ - z_.avail_in);
        return Fail(absl::DataLossError(absl::StrCat(
            name_, ": corrupt ", FormatName(format_), " data at compressed byte offset ", offset,
            ": ", z_.msg != nullptr ? z_.msg : zError(rc))));
      }
    }
    return size - z_.avail_out;
  }

 private:
  absl::Status Fail(absl::Status status) {
    error_ = status;
    return status;
  }

  std::unique_ptr<ByteStream> compressed_;
  const ZlibFormat format_;
  const std::string name_;
  std::vector<uint8_t> input_;
  z_stream z_;
  bool initialised_ = false;
  bool member_started_ = false;  // inflate has seen bytes of a member not yet finished
  bool finished_ = false;
  uint64_t consumed_before_block_ = 0;  // compressed bytes before the current input block
  size_t block_size_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<size_t> ByteStream::ReadFully(uint8_t* dst, size_t size) {
  size_t total = 0;
  while (total < size) {
    auto n = Read(dst + total, size - total);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    total += *n;
  }
  return total;
}

absl::StatusOr<std::unique_ptr<ByteStream>> OpenFileByteStream(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<ByteStream>(new FileByteStream(fd, path));
}

std::unique_ptr<ByteStream> NewMemoryByteStream(absl::string_view bytes) {
  return std::make_unique<MemoryByteStream>(bytes);
}

std::unique_ptr<ByteStream> NewInflateByteStream(std::unique_ptr<ByteStream> compressed,
                                                 ZlibFormat format, std::string name) {
  return std::make_unique<InflateByteStream>(std::move(compressed), format, std::move(name));
}

struct DeflateBuffer::State {
  z_stream z;
  bool initialised = false;
};

DeflateBuffer::DeflateBuffer(ZlibFormat format, std::string* output, int level)
    : state_(std::make_unique<State>()), output_(output) {
  std::memset(&state_->z, 0, sizeof(state_->z));
  state_->initialised = deflateInit2(&state_->z, level, Z_DEFLATED, WindowBits(format), 8,
                                     Z_DEFAULT_STRATEGY) == Z_OK;
}

DeflateBuffer::~DeflateBuffer() {
  if (state_->initialised) deflateEnd(&state_->z);
}

absl::Status DeflateBuffer::Run(absl::string_view bytes, int flush) {
  if (!state_->initialised) return absl::InternalError("cannot initialise zlib deflate");
  if (finished_) return absl::FailedPreconditionError("compressed stream already finished");
  z_stream& z = state_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  uint8_t block[64 * 1024];
  while (true) {
    z.next_out = block;
    z.avail_out = sizeof(block);
    const int rc = deflate(&z, flush);
    if (rc == Z_STREAM_ERROR) return absl::InternalError("zlib deflate failed");
    output_->append(reinterpret_cast<const char*>(block), sizeof(block) - z.avail_out);
    if (flush == Z_FINISH) {
      if (rc == Z_STREAM_END) break;
    } else if (z.avail_in == 0 && z.avail_out > 0) {
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status DeflateBuffer::Append(absl::string_view bytes) {
  // zlib counts input in uInt; feed very large inputs in pieces.
  constexpr size_t kPiece = 1u << 30;
  while (bytes.size() > kPiece) {
    if (auto status = Run(bytes.substr(0, kPiece), Z_NO_FLUSH); !status.ok()) return status;
    bytes.remove_prefix(kPiece);
  }
  return Run(bytes, Z_NO_FLUSH);
}

absl::Status DeflateBuffer::Finish() {
  auto status = Run({}, Z_FINISH);
  finished_ = true;
  return status;
}

}  // namespace sluice::pipeline
