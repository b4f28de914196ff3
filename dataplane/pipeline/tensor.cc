#include "dataplane/pipeline/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::pipeline {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
      return 1;
    case DType::kUInt16:
    case DType::kInt16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
    case DType::kString:
    case DType::kInvalid:
      return 0;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "bool";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kString: return "string";
    case DType::kInvalid: return "invalid";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  static constexpr DType kAll[] = {DType::kBool,  DType::kUInt8,   DType::kInt8,
                                   DType::kUInt16, DType::kInt16,  DType::kInt32,
                                   DType::kInt64, DType::kFloat32, DType::kFloat64,
                                   DType::kString};
  for (DType d : kAll) {
    if (DTypeName(d) == name) return d;
  }
  if (name == "bytes") return DType::kString;
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name,
      "'; known dtypes: bool, uint8, int8, uint16, int16, int32, int64, float32, float64, string"));
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

namespace {

struct AlignedDeleter {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
};

std::shared_ptr<void> AllocateAligned(size_t bytes, bool zero) {
  void* p = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(64));
  if (zero) std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, AlignedDeleter());
}


template <typename T>
double Load(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return static_cast<double>(v);
}

}  // namespace

Tensor Tensor::Allocate(DType dtype, Shape shape) { return AllocateImpl(dtype, std::move(shape), /*zero=*/true); }

Tensor Tensor::AllocateUninitialized(DType dtype, Shape shape) {
  return AllocateImpl(dtype, std::move(shape), /*zero=*/false);
}

Tensor Tensor::AllocateImpl(DType dtype, Shape shape, bool zero) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t bytes = static_cast<size_t>(NumElements(t.shape_)) * DTypeSize(dtype);
  auto storage = AllocateAligned(bytes, zero);
  t.buffer_.data = static_cast<const uint8_t*>(storage.get());
  t.buffer_.size = bytes;
  t.buffer_.owner = std::move(storage);
  return t;
}

absl::StatusOr<Tensor> Tensor::FromBuffer(DType dtype, Shape shape, Buffer buffer) {
  if (dtype == DType::kString || dtype == DType::kInvalid) {
    return absl::InvalidArgumentError("FromBuffer needs a numeric dtype");
  }
  size_t want = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  if (want != buffer.size) {
    return absl::InvalidArgumentError(absl::StrCat("buffer of ", buffer.size, " bytes does not hold a ",
                                                   DTypeName(dtype), ShapeToString(shape), " tensor (",
                                                   want, " bytes)"));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.buffer_ = std::move(buffer);
  return t;
}

Tensor Tensor::Scalar(int64_t v) {
  Tensor t = Allocate(DType::kInt64, {});
  std::memcpy(t.mutable_raw(), &v, sizeof(v));
  return t;
}

Tensor Tensor::ScalarFloat(float v) {
  Tensor t = Allocate(DType::kFloat32, {});
  std::memcpy(t.mutable_raw(), &v, sizeof(v));
  return t;
}

Tensor Tensor::StringScalar(std::shared_ptr<const void> owner, absl::string_view bytes) {
  return Strings(std::move(owner), {bytes}, {});
}

Tensor Tensor::StringScalar(std::string bytes) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  absl::string_view view(*owned);
  return Strings(std::move(owned), {view}, {});
}

Tensor Tensor::Strings(std::shared_ptr<const void> owner, std::vector<absl::string_view> views, Shape shape) {
  Tensor t;
  t.dtype_ = DType::kString;
  t.shape_ = std::move(shape);
  t.buffer_.owner = std::move(owner);
  size_t total = 0;
  for (auto v : views) total += v.size();
  t.buffer_.size = total;
  t.buffer_.data = views.empty() ? nullptr : reinterpret_cast<const uint8_t*>(views[0].data());
  t.strings_ = std::make_shared<const std::vector<absl::string_view>>(std::move(views));
  return t;
}

Tensor Tensor::StringsCopy(const std::vector<std::string>& values, Shape shape) {
  size_t total = 0;
  for (const auto& v : values) total += v.size();
  auto storage = std::make_shared<std::string>();
  storage->reserve(total);
  for (const auto& v : values) storage->append(v);
  std::vector<absl::string_view> views;
  views.reserve(values.size());
  size_t offset = 0;
  for (const auto& v : values) {
    views.emplace_back(storage->data() + offset, v.size());
    offset += v.size();
  }
  return Strings(std::shared_ptr<const void>(storage), std::move(views), std::move(shape));
}

absl::Span<const absl::string_view> Tensor::strings() const {
  if (!strings_) return {};
  return absl::MakeConstSpan(*strings_);
}

size_t Tensor::ByteSize() const { return buffer_.size; }

absl::StatusOr<Tensor> Tensor::Reshaped(Shape shape) const {
  if (NumElements(shape) != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeToString(shape_), " (",
                                                   num_elements(), " elements) to ", ShapeToString(shape)));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t i) const {
  if (shape_.empty()) return absl::InvalidArgumentError("cannot slice a scalar");
  if (i < 0 || i >= shape_[0]) {
    return absl::OutOfRangeError(absl::StrCat("index ", i, " out of range for dimension ", shape_[0]));
  }
  Tensor t;
  t.dtype_ = dtype_;
  t.shape_ = Shape(shape_.begin() + 1, shape_.end());
  int64_t row = NumElements(t.shape_);
  if (dtype_ == DType::kString) {
    std::vector<absl::string_view> views(strings_->begin() + i * row, strings_->begin() + (i + 1) * row);
    return Strings(buffer_.owner, std::move(views), t.shape_);
  }
  size_t row_bytes = static_cast<size_t>(row) * DTypeSize(dtype_);
  t.buffer_.owner = buffer_.owner;
  t.buffer_.data = buffer_.data + static_cast<size_t>(i) * row_bytes;
  t.buffer_.size = row_bytes;
  return t;
}

double Tensor::GetAsDouble(int64_t i) const {
  const uint8_t* p = buffer_.data;
  switch (dtype_) {
    case DType::kBool:
    case DType::kUInt8: return Load<uint8_t>(p, i);
    case DType::kInt8: return Load<int8_t>(p, i);
    case DType::kUInt16: return Load<uint16_t>(p, i);
    case DType::kInt16: return Load<int16_t>(p, i);
    case DType::kInt32: return Load<int32_t>(p, i);
    case DType::kInt64: return Load<int64_t>(p, i);
    case DType::kFloat32: return Load<float>(p, i);
    case DType::kFloat64: return Load<double>(p, i);
    default: return 0;
  }
}

absl::StatusOr<int64_t> Tensor::AsInt64() const {
  if (dtype_ == DType::kString || dtype_ == DType::kInvalid || num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected a numeric scalar, got ", DTypeName(dtype_),
                                                   ShapeToString(shape_)));
  }
  if (dtype_ == DType::kInt64) {
    int64_t v;
    std::memcpy(&v, buffer_.data, sizeof(v));
    return v;
  }
  return static_cast<int64_t>(GetAsDouble(0));
}

absl::StatusOr<double> Tensor::AsDouble() const {
  if (dtype_ == DType::kString || dtype_ == DType::kInvalid || num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("expected a numeric scalar, got ", DTypeName(dtype_),
                                                   ShapeToString(shape_)));
  }
  return GetAsDouble(0);
}

std::string Tensor::DebugString(size_t max_values) const {
  std::string out = absl::StrCat(DTypeName(dtype_), ShapeToString(shape_));
  if (dtype_ == DType::kString) {
    out += " {";
    size_t n = std::min(max_values, strings_ ? strings_->size() : 0);
    for (size_t i = 0; i < n; ++i) {
      absl::string_view s = (*strings_)[i];
      absl::StrAppend(&out, i ? ", " : "", "\"", s.substr(0, 32), s.size() > 32 ? "..." : "", "\"");
    }
    if (strings_ && strings_->size() > n) out += ", ...";
    return out + "}";
  }
  if (dtype_ == DType::kInvalid) return out;
  out += " {";
  int64_t n = std::min<int64_t>(static_cast<int64_t>(max_values), num_elements());
  for (int64_t i = 0; i < n; ++i) absl::StrAppend(&out, i ? ", " : "", GetAsDouble(i));
  if (num_elements() > n) out += ", ...";
  return out + "}";
}

const Tensor* Element::Find(absl::string_view name) const {
  for (const auto& f : fields_) {
    if (f.first == name) return &f.second;
  }
  return nullptr;
}

Tensor* Element::FindMutable(absl::string_view name) {
  for (auto& f : fields_) {
    if (f.first == name) return &f.second;
  }
  return nullptr;
}

absl::StatusOr<const Tensor*> Element::Get(absl::string_view name) const {
  if (const Tensor* t = Find(name)) return t;
  return absl::NotFoundError(absl::StrCat("element has no field '", name, "'; fields: ", FieldNames()));
}

void Element::Set(std::string name, Tensor tensor) {
  if (Tensor* t = FindMutable(name)) {
    *t = std::move(tensor);
    return;
  }
  fields_.emplace_back(std::move(name), std::move(tensor));
}

bool Element::Erase(absl::string_view name) {
  for (auto it = fields_.begin(); it != fields_.end(); ++it) {
    if (it->first == name) {
      fields_.erase(it);
      return true;
    }
  }
  return false;
}

size_t Element::ByteSize() const {
  size_t n = 0;
  for (const auto& f : fields_) n += f.second.ByteSize();
  return n;
}

std::string Element::FieldNames() const {
  if (fields_.empty()) return "(none)";
  return absl::StrJoin(fields_, ", ", [](std::string* out, const Field& f) { out->append(f.first); });
}

std::string Element::DebugString() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", fields_[i].first, ": ", fields_[i].second.DebugString());
  }
  return out + "}";
}

uint64_t MixKey(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace sluice::pipeline
