// Sources that need no files: `range` (integers) and `synthetic` (tensors of a given shape,
// filled deterministically), for tests, examples and benchmarks.
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/source.h"

namespace sluice::pipeline {
namespace {

// The number of ranges of `split_size` covering [0, count).
uint64_t NumRangeSplits(int64_t count, int64_t split_size) {
  if (count <= 0 || split_size <= 0) return 0;
  return static_cast<uint64_t>(count / split_size + (count % split_size != 0 ? 1 : 0));
}

// Splits [0, count) into ranges of `split_size`.
std::vector<Split> RangeSplits(int64_t count, int64_t split_size, const std::string& name) {
  std::vector<Split> splits;
  const uint64_t n = NumRangeSplits(count, split_size);
  splits.reserve(n);
  for (uint64_t index = 0; index < n; ++index) {
    const int64_t begin = static_cast<int64_t>(index) * split_size;  // < count: no overflow
    const int64_t end = count - begin <= split_size ? count : begin + split_size;
    splits.push_back(Split{index, name, begin, end});
  }
  return splits;
}

class RangeReader : public SplitReader {
 public:
  RangeReader(const Split& split, int64_t start, int64_t step) : split_(split), start_(start), step_(step), i_(split.begin) {}
  absl::StatusOr<std::optional<Element>> Next() override {
    if (i_ >= split_.end) return std::optional<Element>();
    Element e;
    e.set_key(MixKey(split_.index, static_cast<uint64_t>(i_)));
    e.Set("value", Tensor::Scalar(start_ + i_ * step_));
    ++i_;
    return std::optional<Element>(std::move(e));
  }

 private:
  Split split_;
  int64_t start_, step_, i_;
};

class RangeSource : public Source {
 public:
  // `count`: the number of values start, start+step, ... below stop.
  RangeSource(int64_t start, int64_t count, int64_t step, int64_t split_size)
      : start_(start), step_(step), split_size_(split_size), count_(count) {}
  absl::StatusOr<std::vector<Split>> ListSplits() const override { return RangeSplits(count_, split_size_, "range"); }
  absl::StatusOr<uint64_t> NumSplits() const override { return NumRangeSplits(count_, split_size_); }
  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split, const SourceContext&) const override {
    if (split.begin < 0 || split.end > count_ || split.begin > split.end) {
      return absl::OutOfRangeError(absl::StrCat("range: split ", split.DebugString(), " is outside [0, ", count_, ")"));
    }
    return std::unique_ptr<SplitReader>(new RangeReader(split, start_, step_));
  }

 private:
  int64_t start_, step_, split_size_, count_ = 0;
};

template <typename T>
void FillPattern(uint8_t* dst, int64_t n, uint64_t key) {
  T* out = reinterpret_cast<T*>(dst);
  uint64_t x = key;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = static_cast<T>(static_cast<double>(x >> 40) / static_cast<double>(1ULL << 24) * 255.0);
  }
}

class SyntheticReader : public SplitReader {
 public:
  SyntheticReader(const Split& split, DType dtype, Shape shape) : split_(split), dtype_(dtype), shape_(std::move(shape)), i_(split.begin) {}
  absl::StatusOr<std::optional<Element>> Next() override {
    if (i_ >= split_.end) return std::optional<Element>();
    Element e;
    uint64_t key = MixKey(split_.index, static_cast<uint64_t>(i_));
    e.set_key(key);
    Tensor t = Tensor::Allocate(dtype_, shape_);
    int64_t n = t.num_elements();
    switch (dtype_) {
      case DType::kFloat32: FillPattern<float>(t.mutable_raw(), n, key); break;
      case DType::kFloat64: FillPattern<double>(t.mutable_raw(), n, key); break;
      case DType::kInt32: FillPattern<int32_t>(t.mutable_raw(), n, key); break;
      case DType::kInt64: FillPattern<int64_t>(t.mutable_raw(), n, key); break;
      default: FillPattern<uint8_t>(t.mutable_raw(), static_cast<int64_t>(t.nbytes()), key); break;
    }
    e.Set("data", std::move(t));
    e.Set("index", Tensor::Scalar(i_));
    ++i_;
    return std::optional<Element>(std::move(e));
  }

 private:
  Split split_;
  DType dtype_;
  Shape shape_;
  int64_t i_;
};

class SyntheticSource : public Source {
 public:
  SyntheticSource(int64_t count, DType dtype, Shape shape, int64_t split_size)
      : count_(count), dtype_(dtype), shape_(std::move(shape)), split_size_(split_size) {}
  absl::StatusOr<std::vector<Split>> ListSplits() const override { return RangeSplits(count_, split_size_, "synthetic"); }
  absl::StatusOr<uint64_t> NumSplits() const override { return NumRangeSplits(count_, split_size_); }
  absl::StatusOr<std::unique_ptr<SplitReader>> Open(const Split& split, const SourceContext&) const override {
    if (split.begin < 0 || split.end > count_ || split.begin > split.end) {
      return absl::OutOfRangeError(absl::StrCat("synthetic: split ", split.DebugString(), " is outside [0, ", count_, ")"));
    }
    return std::unique_ptr<SplitReader>(new SyntheticReader(split, dtype_, shape_));
  }

 private:
  int64_t count_;
  DType dtype_;
  Shape shape_;
  int64_t split_size_;
};

}  // namespace

void RegisterBasicSources(SourceRegistry& registry) {
  (void)registry.Register(SourceDescriptor{
      "range",
      "Integers start, start+step, ... below stop, as field `value` (int64).",
      {WithDefault("start", int64_t{0}, "first value"), Required("stop", ArgType::kInt, "end (exclusive)"),
       WithDefault("step", int64_t{1}, "increment (non-zero)"),
       Bounded(WithDefault("split_size", int64_t{1024}, "values per split"), 1, std::nullopt)},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<Source>> {
        const int64_t start = a.Int("start"), stop = a.Int("stop"), step = a.Int("step");
        if (step == 0) return absl::InvalidArgumentError("step: must not be 0");
        // In 128 bits: start and stop may be any int64 values.
        const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
        const __int128 abs_step = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
        const __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
        if (count > std::numeric_limits<int64_t>::max()) {
          return absl::InvalidArgumentError(absl::StrCat("stop: [", start, ", ", stop, ") by ", step,
                                                         " has more than 2^63-1 values"));
        }
        return std::unique_ptr<Source>(
            new RangeSource(start, static_cast<int64_t>(count), step, a.Int("split_size")));
      }});
  (void)registry.Register(SourceDescriptor{
      "synthetic",
      "count elements with a tensor `data` of the given shape and dtype, filled deterministically, and `index`.",
      {Bounded(Required("count", ArgType::kInt, "number of elements"), 0, std::nullopt),
       WithDefaultIntList("shape", {}, "shape of `data`"),
       WithDefault("dtype", "uint8", "dtype of `data`"),
       Bounded(WithDefault("split_size", int64_t{256}, "elements per split"), 1, std::nullopt)},
      [](const Args& a) -> absl::StatusOr<std::unique_ptr<Source>> {
        auto dtype = ParseDType(a.String("dtype"));
        if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("dtype: ", dtype.status().message()));
        if (*dtype == DType::kString) return absl::InvalidArgumentError("dtype: synthetic data must be numeric");
        Shape shape;
        for (int64_t d : a.IntList("shape")) {
          if (d < 0) return absl::InvalidArgumentError("shape: dimensions must be >= 0");
          shape.push_back(d);
        }
        return std::unique_ptr<Source>(new SyntheticSource(a.Int("count"), *dtype, shape, a.Int("split_size")));
      }});
}

}  // namespace sluice::pipeline
