// Tensors and elements: the unit of data that flows through a pipeline.
//
// A Tensor is a typed, shaped view onto bytes owned by a shared, immutable buffer, so copies of a
// Tensor (and of an Element) are cheap and never copy data: slicing a batch, handing a record's
// bytes from a file to a parser, or exposing a tensor to NumPy all share the same memory.
// Tensors are immutable once published; ops produce new tensors. Thread-compatible: a Tensor may be
// read from many threads at once; its buffer is never written after it is published.
#ifndef SLUICE_DATAPLANE_PIPELINE_TENSOR_H_
#define SLUICE_DATAPLANE_PIPELINE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace sluice::pipeline {

enum class DType : uint8_t {
  kInvalid = 0,
  kBool,
  kUInt8,
  kInt8,
  kUInt16,
  kInt16,
  kInt32,
  kInt64,
  kFloat32,
  kFloat64,
  kString,  // variable-length byte strings
};

// Size in bytes of one element of `dtype` (0 for kString and kInvalid).
size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);
// Parses "uint8", "int64", "float32", "string", "bytes" (alias of string), ...
absl::StatusOr<DType> ParseDType(absl::string_view name);

using Shape = absl::InlinedVector<int64_t, 4>;
int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);

// Storage for a tensor's bytes. Holds an owner keeping the bytes alive (an allocation, a mapped
// file, a protobuf message, a Python object ...).
struct Buffer {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // A new zero-initialised numeric tensor with its own 64-byte aligned storage. Write into it with
  // mutable_data() before sharing it.
  static Tensor Allocate(DType dtype, Shape shape);
  // Like Allocate, without zero-filling: for outputs that are written in full (e.g. a batch).
  static Tensor AllocateUninitialized(DType dtype, Shape shape);
  // A numeric tensor viewing existing bytes (no copy). `buffer.size` must equal the shape's bytes.
  static absl::StatusOr<Tensor> FromBuffer(DType dtype, Shape shape, Buffer buffer);
  // Scalar helpers (copying).
  static Tensor Scalar(int64_t v);
  static Tensor ScalarFloat(float v);
  // A scalar string tensor; `owner` keeps `bytes` alive (no copy).
  static Tensor StringScalar(std::shared_ptr<const void> owner, absl::string_view bytes);
  // A scalar string tensor owning a copy of `bytes`.
  static Tensor StringScalar(std::string bytes);
  // A rank-1 (or given shape) string tensor of views into memory kept alive by `owner`.
  static Tensor Strings(std::shared_ptr<const void> owner, std::vector<absl::string_view> views,
                        Shape shape);
  // Copies the given strings into one owned buffer.
  static Tensor StringsCopy(const std::vector<std::string>& values, Shape shape);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t num_elements() const { return NumElements(shape_); }
  bool valid() const { return dtype_ != DType::kInvalid; }

  // Numeric data. For kString tensors use strings().
  const uint8_t* raw() const { return buffer_.data; }
  size_t nbytes() const { return buffer_.size; }
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(buffer_.data); }
  // Only valid on a tensor created by Allocate() and not yet shared.
  uint8_t* mutable_raw() { return const_cast<uint8_t*>(buffer_.data); }
  template <typename T>
  T* mutable_data() { return reinterpret_cast<T*>(mutable_raw()); }
  const Buffer& buffer() const { return buffer_; }

  // String data (kString only).
  absl::Span<const absl::string_view> strings() const;
  // Total payload bytes: nbytes() for numeric tensors, the sum of string lengths for strings.
  size_t ByteSize() const;

  // A tensor with the same bytes and a new shape of the same number of elements.
  absl::StatusOr<Tensor> Reshaped(Shape shape) const;
  // Row `i` along the first dimension (no copy).
  absl::StatusOr<Tensor> Slice(int64_t i) const;
  // The scalar value converted to int64/double (numeric scalars or 1-element tensors).
  absl::StatusOr<int64_t> AsInt64() const;
  absl::StatusOr<double> AsDouble() const;
  // Reads element `i` (flat index) of a numeric tensor as double.
  double GetAsDouble(int64_t i) const;

  std::string DebugString(size_t max_values = 8) const;

 private:
  static Tensor AllocateImpl(DType dtype, Shape shape, bool zero);
  DType dtype_ = DType::kInvalid;
  Shape shape_;
  Buffer buffer_;
  std::shared_ptr<const std::vector<absl::string_view>> strings_;
};

// An element: a small set of named tensors, plus a stable key derived from where the element came
// from (source split and position). Random ops derive their per-element seed from the key so a
// pipeline's output does not depend on thread scheduling.
class Element {
 public:
  using Field = std::pair<std::string, Tensor>;

  // User-provided, so that value-initialising an Element (Element(), emplace_back(), ...) does not
  // zero its inline field storage (~0.5 KB) before constructing it. (An aggregate holding one is
  // still zero-filled when value-initialised: give it a constructor too, as DecodedElement has.)
  Element() noexcept {}

  const Tensor* Find(absl::string_view name) const;
  Tensor* FindMutable(absl::string_view name);
  // The named field, or NotFound listing the fields that exist.
  absl::StatusOr<const Tensor*> Get(absl::string_view name) const;
  void Set(std::string name, Tensor tensor);
  bool Erase(absl::string_view name);

  const absl::InlinedVector<Field, 4>& fields() const { return fields_; }
  absl::InlinedVector<Field, 4>& mutable_fields() { return fields_; }
  size_t ByteSize() const;
  std::string FieldNames() const;

  uint64_t key() const { return key_; }
  void set_key(uint64_t key) { key_ = key; }

  std::string DebugString() const;

 private:
  absl::InlinedVector<Field, 4> fields_;
  uint64_t key_ = 0;
};

// Mixes two 64-bit values into a well-distributed 64-bit value (splitmix64 finaliser).
uint64_t MixKey(uint64_t a, uint64_t b);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TENSOR_H_
