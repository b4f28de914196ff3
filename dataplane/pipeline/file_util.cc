#include "dataplane/pipeline/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sluice::pipeline {

namespace {

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr && size > 0) ::munmap(addr, size);
  }
};

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::NotFoundError(absl::StrCat(path, ": cannot ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<int64_t> FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Errno("stat", path);
  return static_cast<int64_t>(st.st_size);
}

absl::StatusOr<Buffer> MapFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Errno("stat", path);
  }
  auto mapping = std::make_shared<Mapping>();
  Buffer b;
  if (st.st_size > 0) {
    void* addr = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      ::close(fd);
      return Errno("map", path);
    }
    mapping->addr = addr;
    mapping->size = static_cast<size_t>(st.st_size);
    ::madvise(addr, mapping->size, MADV_SEQUENTIAL);
  }
  ::close(fd);
  b.data = static_cast<const uint8_t*>(mapping->addr);
  b.size = mapping->size;
  b.owner = std::move(mapping);
  return b;
}

absl::StatusOr<std::string> Inflate(const uint8_t* data, size_t size, const std::string& what) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return absl::InternalError("zlib init failed");
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  std::string out;
  out.resize(std::max<size_t>(size * 4, 1 << 16));
  int rc = Z_OK;
  while (true) {
    if (zs.total_out >= out.size()) out.resize(out.size() * 2);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + zs.total_out);
    zs.avail_out = static_cast<uInt>(out.size() - zs.total_out);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      // Concatenated gzip members: continue with the next one.
      if (zs.avail_in > 0) {
        uLong total = zs.total_out;
        inflateReset(&zs);
        zs.total_out = total;
        continue;
      }
      break;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      std::string msg = zs.msg ? zs.msg : "corrupt data";
      uLong offset = zs.total_in;
      inflateEnd(&zs);
      return absl::DataLossError(absl::StrCat(what, ": compressed data is corrupt at input byte ", offset, ": ", msg));
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      return absl::DataLossError(absl::StrCat(what, ": compressed data is truncated (after ", zs.total_in, " bytes)"));
    }
  }
  out.resize(zs.total_out);
  inflateEnd(&zs);
  return out;
}

absl::StatusOr<Buffer> ReadMaybeCompressedFile(const std::string& path) {
  auto mapped = MapFile(path);
  if (!mapped.ok()) return mapped.status();
  if (!absl::EndsWith(path, ".gz")) return mapped;
  auto inflated = Inflate(mapped->data, mapped->size, path);
  if (!inflated.ok()) return inflated.status();
  auto owned = std::make_shared<std::string>(*std::move(inflated));
  Buffer b;
  b.data = reinterpret_cast<const uint8_t*>(owned->data());
  b.size = owned->size();
  b.owner = std::move(owned);
  return b;
}

}  // namespace sluice::pipeline
