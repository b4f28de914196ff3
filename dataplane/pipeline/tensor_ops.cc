// Element ops on tensors and fields: cast, one_hot, reshape, rename, select, drop, pad, truncate.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/pipeline/op.h"

namespace sluice::pipeline {
namespace {

template <typename T>
void StoreAs(uint8_t* dst, int64_t i, double v) {
  T x = static_cast<T>(v);
  std::memcpy(dst + i * sizeof(T), &x, sizeof(T));
}

void Store(DType dtype, uint8_t* dst, int64_t i, double v) {
  switch (dtype) {
    case DType::kBool: StoreAs<uint8_t>(dst, i, v != 0 ? 1 : 0); break;
    case DType::kUInt8: StoreAs<uint8_t>(dst, i, v); break;
    case DType::kInt8: StoreAs<int8_t>(dst, i, v); break;
    case DType::kUInt16: StoreAs<uint16_t>(dst, i, v); break;
    case DType::kInt16: StoreAs<int16_t>(dst, i, v); break;
    case DType::kInt32: StoreAs<int32_t>(dst, i, v); break;
    case DType::kInt64: StoreAs<int64_t>(dst, i, v); break;
    case DType::kFloat32: StoreAs<float>(dst, i, v); break;
    case DType::kFloat64: StoreAs<double>(dst, i, v); break;
    default: break;
  }
}

// Converts a numeric tensor to another numeric dtype (C++ static_cast semantics, optional scale).
absl::StatusOr<Tensor> CastTensor(const Tensor& in, DType to, double scale, absl::string_view op) {
  if (in.dtype() == DType::kString || to == DType::kString) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": cannot cast ", DTypeName(in.dtype()), " to ", DTypeName(to)));
  }
  Tensor out = Tensor::Allocate(to, in.shape());
  int64_t n = in.num_elements();
  uint8_t* dst = out.mutable_raw();
  if (in.dtype() == DType::kUInt8 && to == DType::kFloat32) {  // the common image case, vectorisable
    const uint8_t* src = in.raw();
    float* f = reinterpret_cast<float*>(dst);
    float s = static_cast<float>(scale);
    for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(src[i]) * s;
    return out;
  }
  for (int64_t i = 0; i < n; ++i) Store(to, dst, i, in.GetAsDouble(i) * scale);
  return out;
}

class CastOp : public ElementOp {
 public:
  CastOp(std::string field, DType to, double scale) : field_(std::move(field)), to_(to), scale_(scale) {}
  absl::Status Apply(Element& e, uint64_t) const override {
    auto t = GetMutableField(e, field_, "cast");
    if (!t.ok()) return t.status();
    if ((*t)->dtype() == to_ && scale_ == 1.0) return absl::OkStatus();
    auto out = CastTensor(**t, to_, scale_, "cast");
    if (!out.ok()) return out.status();
    **t = *std::move(out);
    return absl::OkStatus();
  }
  std::string Describe() const override { return absl::StrCat("cast(", field_, "->", DTypeName(to_), ")"); }

 private:
  std::string field_;
  DType to_;
  double scale_;
};

class OneHotOp : public ElementOp {
 public:
  OneHotOp(std::string field, int64_t depth, DType dtype) : field_(std::move(field)), depth_(depth), dtype_(dtype) {}
  absl::Status Apply(Element& e, uint64_t) const override {
    auto t = GetMutableField(e, field_, "one_hot");
    if (!t.ok()) return t.status();
    const Tensor& in = **t;
    if (in.dtype() == DType::kString || in.dtype() == DType::kFloat32 || in.dtype() == DType::kFloat64) {
      return absl::InvalidArgumentError(absl::StrCat("one_hot: field '", field_, "' must be an integer tensor, got ",
                                                     DTypeName(in.dtype())));
    }
    Shape shape = in.shape();
    shape.push_back(depth_);
    Tensor out = Tensor::Allocate(dtype_, shape);
    for (int64_t i = 0; i < in.num_elements(); ++i) {
      int64_t c = static_cast<int64_t>(in.GetAsDouble(i));
      if (c < 0 || c >= depth_) {
        return absl::OutOfRangeError(absl::StrCat("one_hot: field '", field_, "' has value ", c, " outside [0, ", depth_, ")"));
      }
      Store(dtype_, out.mutable_raw(), i * depth_ + c, 1.0);
    }
    **t = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::string field_;
  int64_t depth_;
  DType dtype_;
};

class ReshapeOp : public ElementOp {
 public:
  ReshapeOp(std::string field, std::vector<int64_t> shape) : field_(std::move(field)), shape_(std::move(shape)) {}
  absl::Status Apply(Element& e, uint64_t) const override {
    auto t = GetMutableField(e, field_, "reshape");
    if (!t.ok()) return t.status();
    Shape shape(shape_.begin(), shape_.end());
    int64_t known = 1;
    int infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1) infer = static_cast<int>(i); else known *= shape[i];
    }
    if (infer >= 0) {
      if (known == 0 || (*t)->num_elements() % known != 0) {
        return absl::InvalidArgumentError(absl::StrCat("reshape: cannot infer -1 for ", (*t)->num_elements(),
                                                       " elements into ", ShapeToString(shape)));
      }
      shape[static_cast<size_t>(infer)] = (*t)->num_elements() / known;
    }
    auto out = (*t)->Reshaped(shape);
    if (!out.ok()) return absl::InvalidArgumentError(absl::StrCat("reshape(", field_, "): ", out.status().message()));
    **t = *std::move(out);
    return absl::OkStatus();
  }

 private:
  std::string field_;
  std::vector<int64_t> shape_;
};

class RenameOp : public ElementOp {
 public:
  explicit RenameOp(std::vector<std::pair<std::string, std::string>> mapping) : mapping_(std::move(mapping)) {}
  absl::Status Apply(Element& e, uint64_t) const override {
    for (const auto& [from, to] : mapping_) {
      if (e.Find(from) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("rename: element has no field '", from, "'; fields: ", e.FieldNames()));
      }
    }
    for (auto& [name, tensor] : e.mutable_fields()) {
      for (const auto& [from, to] : mapping_) {
        if (name == from) {
          name = to;
          break;
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::pair<std::string, std::string>> mapping_;
};

class SelectOp : public ElementOp {
 public:
  SelectOp(std::vector<std::string> fields, bool drop) : fields_(std::move(fields)), drop_(drop) {}
  absl::Status Apply(Element& e, uint64_t) const override {
    for (const auto& f : fields_) {
      if (e.Find(f) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(drop_ ? "drop" : "select", ": element has no field '", f,
                                                       "'; fields: ", e.FieldNames()));
      }
    }
    Element out;
    out.set_key(e.key());
    if (drop_) {
      for (auto& [name, t] : e.mutable_fields()) {
        if (std::find(fields_.begin(), fields_.end(), name) == fields_.end()) out.Set(name, std::move(t));
      }
    } else {
      for (const auto& f : fields_) out.Set(f, std::move(*e.FindMutable(f)));
    }
    e = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::vector<std::string> fields_;
  bool drop_;
};

// pad / truncate a field's first dimension (or a string's length) to a fixed length.
class LengthOp : public ElementOp {
 public:
  LengthOp(std::string field, int64_t length, double value, bool pad, bool truncate)
      : field_(std::move(field)), length_(length), value_(value), pad_(pad), truncate_(truncate) {}
  absl::Status Apply(Element& e, uint64_t) const override {
    const char* op = pad_ && truncate_ ? "pad_or_truncate" : pad_ ? "pad" : "truncate";
    auto t = GetMutableField(e, field_, op);
    if (!t.ok()) return t.status();
    Tensor& in = **t;
    if (in.dtype() == DType::kString) {
      if (in.rank() != 0) return absl::InvalidArgumentError(absl::StrCat(op, ": string field '", field_, "' must be a scalar"));
      std::string s(in.strings()[0]);
      if (truncate_ && static_cast<int64_t>(s.size()) > length_) s.resize(static_cast<size_t>(length_));
      if (pad_ && static_cast<int64_t>(s.size()) < length_) s.resize(static_cast<size_t>(length_), static_cast<char>(value_));
      in = Tensor::StringScalar(std::move(s));
      return absl::OkStatus();
    }
    if (in.rank() == 0) return absl::InvalidArgumentError(absl::StrCat(op, ": field '", field_, "' is a scalar"));
    int64_t rows = in.shape()[0];
    if ((rows > length_ && !truncate_) || (rows < length_ && !pad_) || rows == length_) return absl::OkStatus();
    Shape shape = in.shape();
    shape[0] = length_;
    Tensor out = Tensor::Allocate(in.dtype(), shape);
    int64_t row_elems = NumElements(Shape(shape.begin() + 1, shape.end()));
    size_t row_bytes = static_cast<size_t>(row_elems) * DTypeSize(in.dtype());
    int64_t keep = std::min(rows, length_);
    std::memcpy(out.mutable_raw(), in.raw(), static_cast<size_t>(keep) * row_bytes);
    for (int64_t i = keep * row_elems; i < length_ * row_elems; ++i) Store(in.dtype(), out.mutable_raw(), i, value_);
    in = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::string field_;
  int64_t length_;
  double value_;
  bool pad_, truncate_;
};

absl::StatusOr<DType> NumericDType(const std::string& name, absl::string_view arg) {
  auto d = ParseDType(name);
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(arg, ": ", d.status().message()));
  if (*d == DType::kString) return absl::InvalidArgumentError(absl::StrCat(arg, ": must be a numeric dtype"));
  return *d;
}

OpDescriptor WithOrder(OpDescriptor d, std::shared_ptr<const OrderDeclaration> order) {
  d.order = std::move(order);
  return d;
}

// Swapping cast with a resampling op (resize, random_resized_crop): nearest copies pixels, so the
// swap is exact; bilinear and area interpolate, so resampling uint8 then casting rounds where
// casting to float32 then resampling does not: within one input level, times the cast's scale.
std::optional<Commutation> CastWithResample(const Args& cast, const Args& resample) {
  if (ArgString(cast, "dtype", "") != "float32") return std::nullopt;  // resampling takes uint8 or float32
  if (ArgString(resample, "method", "bilinear") == "nearest") return Commutation{true, 0};
  return Commutation{false, 1.05 * std::abs(ArgFloat(cast, "scale", 1.0)) + 1e-6};
}

std::shared_ptr<const OrderDeclaration> CastOrder() {
  auto d = OneFieldDeclaration("field", "", ShapeEffect::kSame, DTypeEffect::FromArg("dtype", "float32"),
                               SizeEffect::kDepends, CostDriver::kInput);
  // The padding value must come out the same whether it is cast or not: 0, cast with scale >= 0
  // (0 * negative scale is -0.0, not the +0.0 of fresh padding).
  auto value_zero = [](const Args& cast, const Args& pad) -> std::optional<Commutation> {
    if (ArgFloat(pad, "value", 0) == 0 && ArgFloat(cast, "scale", 1.0) >= 0) return Commutation{true, 0};
    return std::nullopt;
  };
  auto scale_not_negative = [](const Args& cast, const Args&) -> std::optional<Commutation> {
    if (ArgFloat(cast, "scale", 1.0) >= 0) return Commutation{true, 0};
    return std::nullopt;  // 0 * negative scale is -0.0, not the +0.0 of the padding
  };
  const std::string resample_note =
      "casting to float32; nearest: exact; bilinear/area: within 1.05 x abs(scale), as uint8 resampling rounds";
  d->commutes = {
      {"random_flip", true, 0, "", nullptr},
      {"random_crop", true, 0, "", nullptr},
      {"center_crop", true, 0, "scale >= 0, so its zero padding casts to +0", scale_not_negative},
      {"reshape", true, 0, "", nullptr},
      {"truncate", true, 0, "", nullptr},
      {"pad", true, 0, "padding value 0, scale >= 0", value_zero},
      {"pad_or_truncate", true, 0, "padding value 0, scale >= 0", value_zero},
      {"resize", false, 0, resample_note, CastWithResample},
      {"random_resized_crop", false, 0, resample_note, CastWithResample},
  };
  d->note = "value-wise: commutes with ops that move or select values";
  return d;
}

}  // namespace

void RegisterTensorOps(OpRegistry& r) {
  (void)r.Register(WithOrder(OpDescriptor{
      "cast", "Converts a numeric field to another dtype, optionally multiplying by scale.",
      {Required("field", ArgType::kString, "field to convert"), Required("dtype", ArgType::kString, "target dtype"),
       WithDefault("scale", 1.0, "multiply values by this (e.g. 1/255)")},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
        auto d = NumericDType(a.String("dtype"), "dtype");
        if (!d.ok()) return d.status();
        return std::unique_ptr<ElementOp>(new CastOp(a.String("field"), *d, a.Float("scale", 1.0)));
      }}, CastOrder()));
  (void)r.Register(WithOrder(OpDescriptor{
      "one_hot", "Replaces integer class ids by one-hot vectors of length depth.",
      {Required("field", ArgType::kString, "integer field"),
       Bounded(Required("depth", ArgType::kInt, "number of classes"), 1, std::nullopt),
       WithDefault("dtype", "float32", "output dtype")},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
        auto d = NumericDType(a.String("dtype"), "dtype");
        if (!d.ok()) return d.status();
        return std::unique_ptr<ElementOp>(new OneHotOp(a.String("field"), a.Int("depth"), *d));
      }}, OneFieldDeclaration("field", "", ShapeEffect::kScaled, DTypeEffect::FromArg("dtype", "float32"),
                              SizeEffect::kLarger, CostDriver::kOutput)));
  (void)r.Register(WithOrder(OpDescriptor{
      "reshape", "Gives a field a new shape with the same number of values (one dimension may be -1).",
      {Required("field", ArgType::kString, "field"), Required("shape", ArgType::kIntList, "new shape")},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
        auto shape = a.IntList("shape");
        if (std::count(shape.begin(), shape.end(), -1) > 1) return absl::InvalidArgumentError("shape: at most one -1");
        for (int64_t d : shape) {
          if (d < -1) return absl::InvalidArgumentError("shape: dimensions must be >= 0 (or one -1)");
        }
        return std::unique_ptr<ElementOp>(new ReshapeOp(a.String("field"), shape));
      }}, OneFieldDeclaration("field", "", ShapeEffect::kSame, DTypeEffect::Same(), SizeEffect::kSame,
                              CostDriver::kConstant)));
  (void)r.Register(WithOrder(OpDescriptor{
      "rename", "Renames fields: {old: new, ...}.",
      {Required("fields", ArgType::kStringMap, "old name -> new name")},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
        return std::unique_ptr<ElementOp>(new RenameOp(a.StringMap("fields")));
      }}, [] {
        auto d = std::make_shared<OrderDeclaration>();
        d->reads = {FieldRef::ArgMapKeys("fields")};
        d->writes = {FieldRef::ArgMapKeys("fields"), FieldRef::ArgMapValues("fields")};
        d->cost = CostDriver::kConstant;
        return d;
      }()));
  (void)r.Register(WithOrder(OpDescriptor{
      "select", "Keeps only the listed fields, in that order.",
      {Required("fields", ArgType::kStringList, "fields to keep")},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
        return std::unique_ptr<ElementOp>(new SelectOp(a.StringList("fields"), false));
      }}, [] {
        auto d = std::make_shared<OrderDeclaration>();
        d->reads = {FieldRef::ArgList("fields")};
        d->writes = {FieldRef::All()};  // removes every other field
        d->size = SizeEffect::kSmaller;
        d->cost = CostDriver::kConstant;
        return d;
      }()));
  (void)r.Register(WithOrder(OpDescriptor{
      "drop", "Removes the listed fields.",
      {Required("fields", ArgType::kStringList, "fields to remove")},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
        return std::unique_ptr<ElementOp>(new SelectOp(a.StringList("fields"), true));
      }}, [] {
        auto d = std::make_shared<OrderDeclaration>();
        d->writes = {FieldRef::ArgList("fields")};
        d->size = SizeEffect::kSmaller;
        d->cost = CostDriver::kConstant;
        return d;
      }()));
  for (const auto& [name, pad, truncate] : {std::tuple{"pad", true, false}, std::tuple{"truncate", false, true},
                                            std::tuple{"pad_or_truncate", true, true}}) {
    bool p = pad, t = truncate;
    const SizeEffect size = p && t ? SizeEffect::kDepends : p ? SizeEffect::kLarger : SizeEffect::kSmaller;
    (void)r.Register(WithOrder(OpDescriptor{
        name, "Pads and/or truncates a field's first dimension (or a string's bytes) to length.",
        {Required("field", ArgType::kString, "field"),
         Bounded(Required("length", ArgType::kInt, "target length"), 0, std::nullopt),
         WithDefault("value", 0.0, "padding value")},
        [p, t](const Args& a) -> absl::StatusOr<std::unique_ptr<ElementOp>> {
          return std::unique_ptr<ElementOp>(new LengthOp(a.String("field"), a.Int("length"), a.Float("value"), p, t));
        }}, OneFieldDeclaration("field", "", ShapeEffect::kFixed, DTypeEffect::Same(), size, CostDriver::kOutput)));
  }
}

}  // namespace sluice::pipeline
