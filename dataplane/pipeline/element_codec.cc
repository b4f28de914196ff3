#include "dataplane/pipeline/element_codec.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <limits>

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
  Reader(absl::string_view s) : s_(s) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > s_.size()) return false;
    std::memcpy(v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetView(size_t n, absl::string_view* out) {
    if (n > s_.size() - pos_) return false;
    *out = s_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  absl::string_view s_;
  size_t pos_ = 0;
};

absl::Status Corrupt(size_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed element at byte offset ", offset, ": ", what));
}

}  // namespace

// ---------------------------------------------------------------- WireBytes

void WireBytes::Builder::AppendCopy(absl::string_view bytes) {
  if (bytes.empty()) return;
  if (segments_.empty() || !segments_.back().owned) segments_.push_back(Segment{true, owned_.size(), nullptr, 0, nullptr});
  owned_.append(bytes.data(), bytes.size());
  segments_.back().size += bytes.size();
  size_ += bytes.size();
}

void WireBytes::Builder::AdoptCopies(std::string bytes) {
  if (size_ != 0 || bytes.empty()) {
    AppendCopy(bytes);
    return;
  }
  owned_ = std::move(bytes);
  size_ = owned_.size();
  segments_.push_back(Segment{true, 0, nullptr, size_, nullptr});
}

void WireBytes::Builder::AppendZeros(size_t n) {
  static constexpr char kZeros[kAlign] = {};
  while (n > 0) {
    const size_t k = std::min(n, kAlign);
    AppendCopy(absl::string_view(kZeros, k));
    n -= k;
  }
}

void WireBytes::Builder::AppendView(const void* data, size_t size, std::shared_ptr<const void> owner,
                                    size_t min_view_bytes) {
  if (size == 0) return;
  if (size < min_view_bytes || owner == nullptr) {
    AppendCopy(absl::string_view(static_cast<const char*>(data), size));
    return;
  }
  segments_.push_back(Segment{false, 0, static_cast<const char*>(data), size, std::move(owner)});
  size_ += size;
}

void WireBytes::Builder::Append(const WireBytes& bytes, size_t min_view_bytes) {
  for (const Range& r : bytes.ranges()) AppendView(r.data, r.size, r.owner, min_view_bytes);
}

WireBytes WireBytes::Builder::Finish() && {
  WireBytes out;
  out.size_ = size_;
  auto owned = std::make_shared<std::string>(std::move(owned_));
  out.ranges_.reserve(segments_.size());
  for (Segment& s : segments_) {
    if (s.owned) {
      out.ranges_.push_back(Range{owned->data() + s.offset, s.size, owned});
    } else {
      out.ranges_.push_back(Range{s.data, s.size, std::move(s.owner)});
    }
  }
  if (segments_.size() == 1 && segments_[0].owned) out.sole_ = owned;
  return out;
}

WireBytes WireBytes::FromString(std::string bytes) {
  WireBytes out;
  if (bytes.empty()) return out;
  out.sole_ = std::make_shared<std::string>(std::move(bytes));
  out.size_ = out.sole_->size();
  out.ranges_.push_back(Range{out.sole_->data(), out.size_, out.sole_});
  return out;
}

WireBytes WireBytes::Unowned(const char* data, size_t size) {
  WireBytes out;
  if (size == 0) return out;
  out.size_ = size;
  out.ranges_.push_back(Range{data, size, nullptr});
  return out;
}

void WireBytes::SetUnowned(const char* data, size_t size) {
  ranges_.clear();
  sole_.reset();
  size_ = size;
  if (size > 0) ranges_.push_back(Range{data, size, nullptr});
}

std::string WireBytes::Flatten() const& {
  std::string out;
  out.reserve(size_);
  for (const Range& r : ranges_) out.append(r.data, r.size);
  return out;
}

std::string WireBytes::Flatten() && {
  // Move the buffer out only when nothing else can see it (this object holds the last references).
  if (sole_ != nullptr && ranges_.size() == 1 && sole_.use_count() == 2) {
    ranges_.clear();
    std::string out = std::move(*sole_);
    sole_.reset();
    size_ = 0;
    return out;
  }
  std::string out = static_cast<const WireBytes&>(*this).Flatten();
  *this = WireBytes();  // an rvalue gives its references up either way
  return out;
}

// ---------------------------------------------------------------- element encoding

WireBytes EncodeElementWire(const Element& element, size_t min_view_bytes) {
  // The header goes straight into the builder's first owned buffer, sized for the copies to come.
  size_t copied = 64;
  for (const auto& [name, t] : element.fields()) {
    copied += 16 + name.size() + 8 * static_cast<size_t>(t.rank()) + kAlign;
    if (t.dtype() == DType::kString) {
      copied += 8 + 8 * t.strings().size() + t.ByteSize();
    } else if (t.nbytes() < min_view_bytes) {
      copied += t.nbytes();
    }
  }
  std::string header;
  header.reserve(copied);
  header.append(kMagic, 4);
  Put<uint32_t>(header, static_cast<uint32_t>(element.fields().size()));
  Put<uint64_t>(header, element.key());
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
  }
  WireBytes::Builder b;
  b.AdoptCopies(std::move(header));
  b.AppendZeros(AlignUp(b.size()) - b.size());
  for (const auto& [name, t] : element.fields()) {
    if (t.dtype() == DType::kString) {
      for (auto s : t.strings()) b.AppendCopy(s);
    } else if (t.nbytes() > 0) {
      b.AppendView(t.raw(), t.nbytes(), t.buffer().owner, min_view_bytes);
    }
    b.AppendZeros(AlignUp(b.size()) - b.size());
  }
  return std::move(b).Finish();
}

std::string EncodeElement(const Element& element) {
  return EncodeElementWire(element, std::numeric_limits<size_t>::max()).Flatten();
}

namespace {

// The header's bytes (before the padding to kAlign).
size_t HeaderSize(const Element& element) {
  size_t n = 4 + 4 + 8;
  for (const auto& [name, t] : element.fields()) {
    n += 2 + name.size() + 1 + 1 + 8 * static_cast<size_t>(t.rank()) + 8;
    if (t.dtype() == DType::kString) n += 8 + 8 * t.strings().size();
  }
  return n;
}

// The bytes EncodeElementWire appends for a field's payload.
size_t PayloadSize(const Tensor& t) {
  if (t.dtype() != DType::kString) return t.nbytes();
  size_t n = 0;
  for (auto s : t.strings()) n += s.size();
  return n;
}

template <typename T>
char* PutRaw(char* out, T v) {
  std::memcpy(out, &v, sizeof(T));
  return out + sizeof(T);
}

}  // namespace

size_t EncodedElementSize(const Element& element) {
  size_t n = AlignUp(HeaderSize(element));
  for (const auto& [name, t] : element.fields()) n = AlignUp(n + PayloadSize(t));
  return n;
}

void EncodeElementTo(const Element& element, char* out) {
  char* const start = out;
  auto pad = [&] {
    const size_t at = static_cast<size_t>(out - start);
    const size_t to = AlignUp(at);
    std::memset(out, 0, to - at);
    out += to - at;
  };
  std::memcpy(out, kMagic, 4);
  out += 4;
  out = PutRaw<uint32_t>(out, static_cast<uint32_t>(element.fields().size()));
  out = PutRaw<uint64_t>(out, element.key());
  for (const auto& [name, t] : element.fields()) {
    out = PutRaw<uint16_t>(out, static_cast<uint16_t>(name.size()));
    std::memcpy(out, name.data(), name.size());
    out += name.size();
    out = PutRaw<uint8_t>(out, static_cast<uint8_t>(t.dtype()));
    out = PutRaw<uint8_t>(out, static_cast<uint8_t>(t.rank()));
    for (int64_t d : t.shape()) out = PutRaw<int64_t>(out, d);
    out = PutRaw<uint64_t>(out, t.ByteSize());
    if (t.dtype() == DType::kString) {
      out = PutRaw<uint64_t>(out, t.strings().size());
      for (auto s : t.strings()) out = PutRaw<uint64_t>(out, s.size());
    }
  }
  pad();
  for (const auto& [name, t] : element.fields()) {
    if (t.dtype() == DType::kString) {
      for (auto s : t.strings()) {
        std::memcpy(out, s.data(), s.size());
        out += s.size();
      }
    } else if (t.nbytes() > 0) {
      std::memcpy(out, t.raw(), t.nbytes());
      out += t.nbytes();
    }
    pad();
  }
}

absl::StatusOr<Element> DecodeElement(std::shared_ptr<const std::string> bytes) {
  const absl::string_view s(*bytes);
  return DecodeElement(std::move(bytes), s);
}

absl::StatusOr<Element> DecodeElement(std::shared_ptr<const void> owner, absl::string_view s) {
  Element e;
  if (absl::Status status = DecodeElementTo(std::move(owner), s, &e); !status.ok()) return status;
  return e;
}

absl::Status DecodeElementTo(std::shared_ptr<const void> owner, absl::string_view s, Element* out) {
  const std::shared_ptr<const void>& bytes = owner;
  Reader r(s);
  char magic[4];
  if (s.size() < 4 || std::memcmp(s.data(), kMagic, 4) != 0) return Corrupt(0, "bad magic (not a Sluice element)");
  r.Get(&magic);
  uint32_t count = 0;
  uint64_t key = 0;
  if (!r.Get(&count) || !r.Get(&key)) return Corrupt(r.pos(), "truncated header");
  if (count > 4096) return Corrupt(4, absl::StrCat("implausible field count ", count));
  // Names and string lengths stay where they are in `s` (no copy until the element is built).
  struct FieldHeader {
    // User-provided: `headers(count)` below would zero-fill each header first (a `rep stos` per
    // field was 30% of this function for one-field elements).
    FieldHeader() {}
    absl::string_view name;
    DType dtype;
    Shape shape;
    uint64_t bytes;
    size_t lengths_at;  // kString: offset of the uint64 lengths in `s`
    uint64_t num_strings;
  };
  absl::InlinedVector<FieldHeader, 4> headers(count);
  for (auto& h : headers) {
    uint16_t name_len;
    uint8_t dtype, rank;
    if (!r.Get(&name_len) || !r.GetView(name_len, &h.name) || !r.Get(&dtype) || !r.Get(&rank)) {
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
      h.lengths_at = r.pos();
      h.num_strings = n;
      uint64_t total = 0;
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t len;
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
  Element& e = *out;
  if (!e.fields().empty()) e = Element();
  e.set_key(key);
  for (auto& h : headers) {
    if (pos > s.size() || h.bytes > s.size() - pos) {
      return Corrupt(pos, absl::StrCat("field '", h.name, "' payload of ", h.bytes, " bytes runs past the end (", s.size(), ")"));
    }
    const char* data = s.data() + pos;
    if (h.dtype == DType::kString) {
      std::vector<absl::string_view> views;
      views.reserve(h.num_strings);
      size_t off = 0;
      for (uint64_t i = 0; i < h.num_strings; ++i) {
        uint64_t len;
        std::memcpy(&len, s.data() + h.lengths_at + i * sizeof(uint64_t), sizeof(len));
        // Checked again: `s` may be memory another process writes (a shared-memory ring), so the
        // lengths read now need not be those that added up above.
        if (len > h.bytes - off) return Corrupt(h.lengths_at, "string lengths changed while decoding");
        views.emplace_back(data + off, len);
        off += len;
      }
      e.Set(std::string(h.name), Tensor::Strings(bytes, std::move(views), std::move(h.shape)));
    } else {
      Buffer b{bytes, reinterpret_cast<const uint8_t*>(data), h.bytes};
      auto t = Tensor::FromBuffer(h.dtype, std::move(h.shape), std::move(b));
      if (!t.ok()) return Corrupt(pos, t.status().message());
      e.Set(std::string(h.name), *std::move(t));
    }
    pos = AlignUp(pos + h.bytes);
  }
  return absl::OkStatus();
}

namespace {

// lz4 unless `total` is small or the first 64 KiB of `data` barely compress.
Codec ChooseCodecFromSample(size_t total, absl::string_view data) {
  if (total < kMinCompressedBytes || data.empty()) return Codec::kNone;
  size_t sample = std::min<size_t>(data.size(), 64 << 10);
  std::string out(static_cast<size_t>(LZ4_compressBound(static_cast<int>(sample))), '\0');
  int n = LZ4_compress_fast(data.data(), out.data(), static_cast<int>(sample), static_cast<int>(out.size()), 1);
  if (n <= 0 || static_cast<double>(n) > 0.85 * static_cast<double>(sample)) return Codec::kNone;
  return Codec::kLz4;
}

}  // namespace

Codec ChooseCodec(const std::string& data) { return ChooseCodecFromSample(data.size(), data); }

Codec ChooseCodec(const WireBytes& data) {
  const WireBytes::Range* largest = nullptr;
  for (const WireBytes::Range& r : data.ranges()) {
    if (largest == nullptr || r.size > largest->size) largest = &r;
  }
  if (largest == nullptr) return Codec::kNone;
  return ChooseCodecFromSample(data.size(), absl::string_view(largest->data, largest->size));
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

absl::StatusOr<std::string> Decompress(absl::string_view data, Codec codec, uint64_t uncompressed_size) {
  if (uncompressed_size > (uint64_t{1} << 34)) {
    return absl::InvalidArgumentError(absl::StrCat("implausible uncompressed size ", uncompressed_size));
  }
  switch (codec) {
    case Codec::kNone:
      if (data.size() != uncompressed_size) {
        return absl::InvalidArgumentError(absl::StrCat("element is ", data.size(), " bytes, expected ", uncompressed_size));
      }
      return std::string(data);
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
