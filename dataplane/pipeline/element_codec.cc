#include "dataplane/pipeline/element_codec.h"

#include <lz4.h>
#include <zstd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace sluice::pipeline {
namespace {

constexpr char kMagic[4] = {'S', 'L', 'E', '1'};
constexpr size_t kAlign = 64;
constexpr uint64_t kMaxRank = 16;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Reads fixed-size values with bounds checks.
class Reader {
 public:
  Reader(const std::string& s) : s_(s) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > s_.size()) return false;
    std::memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetBytes(size_t n, std::string* out) {
    if (n > s_.size() - pos_) return false;
    out->assign(s_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

absl::Status Corrupt(size_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed element at byte offset ", offset, ": ", what));
}

}  // namespace

std::string EncodeElement(const Element& element) {
  std::string header;
  header.append(kMagic, 4);
  Put<uint32_t>(header, static_cast<uint32_t>(element.fields().size()));
  Put<uint64_t>(header, element.key());
  size_t payload_total = 0;
  for (const auto& [name, t] : element.fields()) {
    Put<uint16_t>(header, static_cast<uint16_t>(name.size()));
    header.append(name);
    Put<uint8_t>(header, static_cast<uint8_t>(t.dtype()));
    Put<uint8_t>(header, static_cast<uint8_t>(t.rank()));
    for (int64_t d : t.shape()) Put<int64_t>(header, d);
    Put<uint64_t>(header, t.ByteSize());
    if (t.dtype() == DType::kString) {
      Put<uint64_t>(header, t.strings().size());
      for (auto s : t.strings()) Put<uint64_t>(header, s.size());
    }
    payload_total += AlignUp(t.ByteSize());
  }
  std::string out;
  out.reserve(AlignUp(header.size()) + payload_total);
  out = std::move(header);
  out.resize(AlignUp(out.size()), '\0');
  for (const auto& [name, t] : element.fields()) {
    if (t.dtype() == DType::kString) {
      for (auto s : t.strings()) out.append(s.data(), s.size());
    } else if (t.nbytes() > 0) {
      out.append(reinterpret_cast<const char*>(t.raw()), t.nbytes());
    }
    out.resize(AlignUp(out.size()), '\0');
  }
  return out;
}

absl::StatusOr<Element> DecodeElement(std::shared_ptr<const std::string> bytes) {
  const std::string& s = *bytes;
  Reader r(s);
  char magic[4];
  if (s.size() < 4 || std::memcmp(s.data(), kMagic, 4) != 0) return Corrupt(0, "bad magic (not a Sluice element)");
  r.Get(&magic);
  uint32_t count = 0;
  uint64_t key = 0;
  if (!r.Get(&count) || !r.Get(&key)) return Corrupt(r.pos(), "truncated header");
  if (count > 4096) return Corrupt(4, absl::StrCat("implausible field count ", count));
  struct FieldHeader {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t bytes;
    std::vector<uint64_t> lengths;
  };
  std::vector<FieldHeader> headers(count);
  for (auto& h : headers) {
    uint16_t name_len;
    uint8_t dtype, rank;
    if (!r.Get(&name_len) || !r.GetBytes(name_len, &h.name) || !r.Get(&dtype) || !r.Get(&rank)) {
      return Corrupt(r.pos(), "truncated field header");
    }
    if (dtype == 0 || dtype > static_cast<uint8_t>(DType::kString)) return Corrupt(r.pos(), absl::StrCat("unknown dtype ", dtype));
    if (rank > kMaxRank) return Corrupt(r.pos(), absl::StrCat("rank ", rank, " too large"));
    h.dtype = static_cast<DType>(dtype);
    for (int i = 0; i < rank; ++i) {
      int64_t d;
      if (!r.Get(&d)) return Corrupt(r.pos(), "truncated shape");
      if (d < 0 || d > (int64_t{1} << 40)) return Corrupt(r.pos(), absl::StrCat("bad dimension ", d));
      h.shape.push_back(d);
    }
    if (!r.Get(&h.bytes)) return Corrupt(r.pos(), "truncated size");
    if (h.dtype == DType::kString) {
      uint64_t n;
      if (!r.Get(&n) || n > s.size()) return Corrupt(r.pos(), "bad string count");
      if (static_cast<int64_t>(n) != NumElements(h.shape)) return Corrupt(r.pos(), "string count does not match shape");
      h.lengths.resize(n);
      uint64_t total = 0;
      for (auto& len : h.lengths) {
        if (!r.Get(&len)) return Corrupt(r.pos(), "truncated string lengths");
        total += len;
      }
      if (total != h.bytes) return Corrupt(r.pos(), "string lengths do not add up");
    } else {
      __int128 want = static_cast<__int128>(NumElements(h.shape)) * DTypeSize(h.dtype);
      if (want != h.bytes) return Corrupt(r.pos(), absl::StrCat("field '", h.name, "' size ", h.bytes, " does not match its shape"));
    }
  }
  size_t pos = AlignUp(r.pos());
  Element e;
  e.set_key(key);
  for (auto& h : headers) {
    if (pos > s.size() || h.bytes > s.size() - pos) {
      return Corrupt(pos, absl::StrCat("field '", h.name, "' payload of ", h.bytes, " bytes runs past the end (", s.size(), ")"));
    }
    const char* data = s.data() + pos;
    if (h.dtype == DType::kString) {
      std::vector<absl::string_view> views;
      size_t off = 0;
      for (uint64_t len : h.lengths) {
        views.emplace_back(data + off, len);
        off += len;
      }
      e.Set(h.name, Tensor::Strings(bytes, std::move(views), h.shape));
    } else {
      Buffer b{bytes, reinterpret_cast<const uint8_t*>(data), h.bytes};
      auto t = Tensor::FromBuffer(h.dtype, h.shape, b);
      if (!t.ok()) return Corrupt(pos, t.status().message());
      e.Set(h.name, *std::move(t));
    }
    pos = AlignUp(pos + h.bytes);
  }
  return e;
}

Codec ChooseCodec(const std::string& data) {
  if (data.size() < 4096) return Codec::kNone;
  size_t sample = std::min<size_t>(data.size(), 64 << 10);
  std::string out(static_cast<size_t>(LZ4_compressBound(static_cast<int>(sample))), '\0');
  int n = LZ4_compress_fast(data.data(), out.data(), static_cast<int>(sample), static_cast<int>(out.size()), 1);
  if (n <= 0 || static_cast<double>(n) > 0.85 * static_cast<double>(sample)) return Codec::kNone;
  return Codec::kLz4;
}

absl::StatusOr<std::string> Compress(const std::string& data, Codec codec) {
  switch (codec) {
    case Codec::kNone: return data;
    case Codec::kLz4: {
      if (data.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) return absl::InvalidArgumentError("element too large for lz4");
      std::string out(static_cast<size_t>(LZ4_compressBound(static_cast<int>(data.size()))), '\0');
      int n = LZ4_compress_default(data.data(), out.data(), static_cast<int>(data.size()), static_cast<int>(out.size()));
      if (n <= 0) return absl::InternalError("lz4 compression failed");
      out.resize(static_cast<size_t>(n));
      return out;
    }
    case Codec::kZstd: {
      std::string out(ZSTD_compressBound(data.size()), '\0');
      size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 1);
      if (ZSTD_isError(n)) return absl::InternalError(absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
      out.resize(n);
      return out;
    }
  }
  return absl::InvalidArgumentError("unknown codec");
}

absl::StatusOr<std::string> Decompress(const std::string& data, Codec codec, uint64_t uncompressed_size) {
  if (uncompressed_size > (uint64_t{1} << 34)) {
    return absl::InvalidArgumentError(absl::StrCat("implausible uncompressed size ", uncompressed_size));
  }
  switch (codec) {
    case Codec::kNone:
      if (data.size() != uncompressed_size) {
        return absl::InvalidArgumentError(absl::StrCat("element is ", data.size(), " bytes, expected ", uncompressed_size));
      }
      return data;
    case Codec::kLz4: {
      std::string out(uncompressed_size, '\0');
      int n = LZ4_decompress_safe(data.data(), out.data(), static_cast<int>(data.size()), static_cast<int>(out.size()));
      if (n < 0 || static_cast<uint64_t>(n) != uncompressed_size) {
        return absl::InvalidArgumentError("lz4 data is corrupt or does not match its declared size");
      }
      return out;
    }
    case Codec::kZstd: {
      std::string out(uncompressed_size, '\0');
      size_t n = ZSTD_decompress(out.data(), out.size(), data.data(), data.size());
      if (ZSTD_isError(n) || n != uncompressed_size) {
        return absl::InvalidArgumentError("zstd data is corrupt or does not match its declared size");
      }
      return out;
    }
  }
  return absl::InvalidArgumentError("unknown codec");
}

}  // namespace sluice::pipeline
