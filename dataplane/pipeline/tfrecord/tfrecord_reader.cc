#include "dataplane/pipeline/tfrecord/tfrecord_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dataplane/pipeline/tfrecord/crc32c.h"

namespace sluice::pipeline {
namespace {

uint64_t LoadLittleEndian64(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

uint32_t LoadLittleEndian32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

std::string Where(absl::string_view name, uint64_t offset) {
  return absl::StrCat(name, ": record at byte offset ", offset);
}

// Checks a record header. Returns the data length.
absl::StatusOr<uint64_t> ParseHeader(const uint8_t* header, bool verify_crc,
                                     absl::string_view name, uint64_t offset) {
  const uint64_t length = LoadLittleEndian64(header);
  if (verify_crc) {
    const uint32_t stored = UnmaskCrc(LoadLittleEndian32(header + 8));
    const uint32_t computed = Crc32c(header, 8);
    if (stored != computed) {
      return absl::DataLossError(absl::StrFormat(
          "%s: length CRC mismatch (stored 0x%08x, computed 0x%08x); the rest of the file cannot "
          "be framed",
          Where(name, offset), stored, computed));
    }
  }
  return length;
}

absl::Status CheckData(const uint8_t* data, uint64_t length, bool verify_crc,
                       absl::string_view name, uint64_t offset) {
  if (!verify_crc) return absl::OkStatus();
  const uint32_t stored = UnmaskCrc(LoadLittleEndian32(data + length));
  const uint32_t computed = Crc32c(data, length);
  if (stored == computed) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat("%s: data CRC mismatch (stored 0x%08x, computed 0x%08x)",
                                             Where(name, offset), stored, computed));
}

absl::Status OversizeError(absl::string_view name, uint64_t offset, uint64_t length,
                           uint64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      Where(name, offset), ": record of ", length, " bytes exceeds the limit of ", limit,
      " bytes (options.max_element_bytes); raise the limit or write smaller records"));
}

absl::Status TruncatedHeaderError(absl::string_view name, uint64_t offset, uint64_t remaining) {
  return absl::DataLossError(absl::StrCat(Where(name, offset), ": truncated record header (",
                                          remaining, " of ", kTFRecordHeaderBytes,
                                          " bytes before the end of the file)"));
}

absl::Status TruncatedRecordError(absl::string_view name, uint64_t offset, uint64_t length,
                                  uint64_t remaining) {
  return absl::DataLossError(absl::StrCat(Where(name, offset), ": truncated record (length ",
                                          length, " needs ", kTFRecordOverheadBytes,
                                          " + ", length, " bytes, only ", remaining,
                                          " remain in the file)"));
}

// Whether a record of `length` data bytes fits into `remaining` bytes (header included).
bool Fits(uint64_t length, uint64_t remaining) {
  return remaining >= kTFRecordOverheadBytes && length <= remaining - kTFRecordOverheadBytes;
}

class BufferTFRecordReader : public TFRecordReader {
 public:
  BufferTFRecordReader(Buffer buffer, std::string name, TFRecordReaderOptions options,
                       uint64_t begin, uint64_t end)
      : buffer_(std::move(buffer)), name_(std::move(name)), options_(options), position_(begin),
        end_(std::min<uint64_t>(end, buffer_.size)) {}

  absl::StatusOr<std::optional<TFRecord>> Next() override {
    if (position_ >= end_) return std::nullopt;
    const uint64_t offset = position_;
    const uint64_t remaining = buffer_.size - offset;
    const uint8_t* header = buffer_.data + offset;
    if (remaining < kTFRecordHeaderBytes) {
      position_ = end_;
      return TruncatedHeaderError(name_, offset, remaining);
    }
    auto length = ParseHeader(header, options_.verify_crc, name_, offset);
    if (!length.ok()) {
      position_ = end_;
      return length.status();
    }
    const uint64_t index = index_++;
    if (options_.max_record_bytes != 0 && *length > options_.max_record_bytes) {
      position_ = Fits(*length, remaining) ? offset + kTFRecordOverheadBytes + *length : end_;
      return OversizeError(name_, offset, *length, options_.max_record_bytes);
    }
    if (!Fits(*length, remaining)) {
      position_ = end_;
      return TruncatedRecordError(name_, offset, *length, remaining);
    }
    position_ = offset + kTFRecordOverheadBytes + *length;
    const uint8_t* data = header + kTFRecordHeaderBytes;
    if (auto status = CheckData(data, *length, options_.verify_crc, name_, offset); !status.ok()) {
      return status;
    }
    return TFRecord{buffer_.owner,
                    absl::string_view(reinterpret_cast<const char*>(data), *length), offset,
                    index};
  }

 private:
  const Buffer buffer_;
  const std::string name_;
  const TFRecordReaderOptions options_;
  uint64_t position_;
  const uint64_t end_;
  uint64_t index_ = 0;
};

class StreamTFRecordReader : public TFRecordReader {
 public:
  StreamTFRecordReader(std::unique_ptr<ByteStream> stream, std::string name,
                       TFRecordReaderOptions options)
      : stream_(std::move(stream)), name_(std::move(name)), options_(options) {
    options_.chunk_bytes = std::max<size_t>(options_.chunk_bytes, kTFRecordOverheadBytes);
  }

  absl::StatusOr<std::optional<TFRecord>> Next() override {
    if (done_) return std::nullopt;
    const uint64_t offset = offset_;
    auto available = Ensure(kTFRecordHeaderBytes);
    if (!available.ok()) return Finish(available.status());
    if (*available == 0) {
      done_ = true;
      return std::nullopt;
    }
    if (*available < kTFRecordHeaderBytes) {
      return Finish(TruncatedHeaderError(name_, offset, *available));
    }
    auto length = ParseHeader(Cursor(), options_.verify_crc, name_, offset);
    if (!length.ok()) return Finish(length.status());
    const uint64_t index = index_++;
    if (options_.max_record_bytes != 0 && *length > options_.max_record_bytes) {
      // A length this close to 2^64 cannot be skipped past: the file ends first.
      const bool fits = *length <= UINT64_MAX - kTFRecordOverheadBytes;
      auto skipped = fits ? Discard(kTFRecordOverheadBytes + *length) : false;
      if (!skipped.ok() || !*skipped) done_ = true;
      return OversizeError(name_, offset, *length, options_.max_record_bytes);
    }
    // A length near 2^64 cannot fit; asking for UINT64_MAX reads to the end, so the error reports
    // the same remaining byte count as the buffer reader.
    const uint64_t needed = *length > UINT64_MAX - kTFRecordOverheadBytes
                                ? UINT64_MAX
                                : kTFRecordOverheadBytes + *length;
    available = Ensure(needed);
    if (!available.ok()) return Finish(available.status());
    if (*available < needed) {
      return Finish(TruncatedRecordError(name_, offset, *length, *available));
    }
    const uint8_t* data = Cursor() + kTFRecordHeaderBytes;
    cursor_ += needed;
    offset_ += needed;
    if (auto status = CheckData(data, *length, options_.verify_crc, name_, offset); !status.ok()) {
      return status;
    }
    return TFRecord{chunk_, absl::string_view(reinterpret_cast<const char*>(data), *length), offset,
                    index};
  }

 private:
  const uint8_t* Cursor() const { return chunk_.get() + cursor_; }
  size_t Available() const { return chunk_size_ - cursor_; }

  absl::Status Finish(absl::Status status) {
    done_ = true;
    return status;
  }

  // Makes at least `needed` bytes available at the cursor unless the stream ends first, and
  // returns how many are available. Records already returned keep their chunk: a chunk is never
  // written after a record view into it was handed out. Grows geometrically, so a corrupt length
  // cannot make it allocate much more than the stream holds.
  absl::StatusOr<uint64_t> Ensure(uint64_t needed) {
    while (Available() < needed && !end_of_stream_) {
      const size_t available = Available();
      size_t capacity = std::max(options_.chunk_bytes, available * 2);
      if (needed < capacity) capacity = std::max<size_t>(needed, options_.chunk_bytes);
      std::shared_ptr<uint8_t[]> fresh(new uint8_t[capacity]);
      if (available > 0) std::memcpy(fresh.get(), Cursor(), available);
      auto n = stream_->ReadFully(fresh.get() + available, capacity - available);
      if (!n.ok()) return n.status();
      if (*n < capacity - available) end_of_stream_ = true;
      chunk_ = std::move(fresh);
      chunk_size_ = available + *n;
      cursor_ = 0;
    }
    return Available();
  }

  // Skips `count` bytes without keeping them. Returns false when the stream ended first.
  absl::StatusOr<bool> Discard(uint64_t count) {
    const size_t from_chunk = static_cast<size_t>(std::min<uint64_t>(count, Available()));
    cursor_ += from_chunk;
    offset_ += from_chunk;
    count -= from_chunk;
    if (count == 0) return true;
    std::unique_ptr<uint8_t[]> scratch(new uint8_t[options_.chunk_bytes]);
    while (count > 0) {
      auto n = stream_->Read(scratch.get(),
                             static_cast<size_t>(std::min<uint64_t>(count, options_.chunk_bytes)));
      if (!n.ok()) return n.status();
      if (*n == 0) return false;
      count -= *n;
      offset_ += *n;
    }
    return true;
  }

  std::unique_ptr<ByteStream> stream_;
  const std::string name_;
  TFRecordReaderOptions options_;
  std::shared_ptr<uint8_t[]> chunk_;
  size_t chunk_size_ = 0;  // valid bytes in chunk_
  size_t cursor_ = 0;      // next unread byte in chunk_
  uint64_t offset_ = 0;    // stream offset of the cursor
  uint64_t index_ = 0;
  bool end_of_stream_ = false;
  bool done_ = false;
};

}  // namespace

absl::string_view TFRecordCompressionName(TFRecordCompression compression) {
  switch (compression) {
    case TFRecordCompression::kNone:
      return "none";
    case TFRecordCompression::kGzip:
      return "gzip";
    case TFRecordCompression::kZlib:
      return "zlib";
  }
  return "unknown";
}

absl::StatusOr<TFRecordCompression> ResolveTFRecordCompression(absl::string_view name,
                                                               absl::string_view path) {
  if (name == "none" || name.empty()) return TFRecordCompression::kNone;
  if (name == "gzip") return TFRecordCompression::kGzip;
  if (name == "zlib") return TFRecordCompression::kZlib;
  if (name == "auto") {
    if (absl::EndsWith(path, ".gz") || absl::EndsWith(path, ".gzip")) {
      return TFRecordCompression::kGzip;
    }
    if (absl::EndsWith(path, ".zz") || absl::EndsWith(path, ".zlib")) {
      return TFRecordCompression::kZlib;
    }
    return TFRecordCompression::kNone;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("compression: unknown value '", name, "'; use none, gzip, zlib or auto"));
}

std::unique_ptr<TFRecordReader> NewBufferTFRecordReader(Buffer buffer, std::string name,
                                                        TFRecordReaderOptions options,
                                                        uint64_t begin, uint64_t end) {
  return std::make_unique<BufferTFRecordReader>(std::move(buffer), std::move(name), options, begin,
                                                end);
}

std::unique_ptr<TFRecordReader> NewStreamTFRecordReader(std::unique_ptr<ByteStream> stream,
                                                        std::string name,
                                                        TFRecordReaderOptions options) {
  return std::make_unique<StreamTFRecordReader>(std::move(stream), std::move(name), options);
}

absl::StatusOr<Buffer> LoadFileBuffer(const std::string& path, size_t mmap_threshold_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const auto size = static_cast<size_t>(info.st_size);
  if (size == 0) return Buffer{nullptr, nullptr, 0};
  if (size >= mmap_threshold_bytes) {
    void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": cannot map ", size, " bytes: ", std::strerror(errno)));
    }
    ::madvise(address, size, MADV_SEQUENTIAL);
    std::shared_ptr<const void> mapping(address, [size](const void* p) {
      ::munmap(const_cast<void*>(p), size);
    });
    return Buffer{mapping, static_cast<const uint8_t*>(address), size};
  }
  std::shared_ptr<uint8_t[]> bytes(new uint8_t[size]);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, bytes.get() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DataLossError(absl::StrCat(path, ": read failed: ", std::strerror(errno)));
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  const uint8_t* data = bytes.get();
  return Buffer{std::shared_ptr<const void>(bytes, data), data, done};
}

absl::StatusOr<std::unique_ptr<TFRecordReader>> OpenTFRecordFile(const std::string& path,
                                                                 TFRecordCompression compression,
                                                                 TFRecordReaderOptions options,
                                                                 int64_t begin, int64_t end) {
  if (begin < 0 || (end >= 0 && end < begin)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": invalid byte range [", begin, ", ", end, ")"));
  }
  if (compression == TFRecordCompression::kNone) {
    auto buffer = LoadFileBuffer(path, options.mmap_threshold_bytes);
    if (!buffer.ok()) return buffer.status();
    if (static_cast<uint64_t>(begin) > buffer->size) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": split begins at byte ", begin,
                                                     " past the end of the file (", buffer->size,
                                                     " bytes)"));
    }
    return NewBufferTFRecordReader(*std::move(buffer), path, options,
                                   static_cast<uint64_t>(begin),
                                   end < 0 ? UINT64_MAX : static_cast<uint64_t>(end));
  }
  if (begin != 0 || end >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": byte-range splits are only supported for uncompressed TFRecord files (",
        TFRecordCompressionName(compression), " files are read whole)"));
  }
  auto stream = OpenFileByteStream(path);
  if (!stream.ok()) return stream.status();
  const ZlibFormat format =
      compression == TFRecordCompression::kGzip ? ZlibFormat::kGzip : ZlibFormat::kZlib;
  return NewStreamTFRecordReader(NewInflateByteStream(*std::move(stream), format, path), path,
                                 options);
}

}  // namespace sluice::pipeline
