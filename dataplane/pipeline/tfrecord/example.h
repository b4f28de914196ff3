// tf.train.Example decoding and encoding, written against the protobuf wire format directly (no
// TensorFlow and no generated code), plus the `parse_example` element op built on it.
//
// The schema handled (field numbers as in TensorFlow's example.proto / feature.proto):
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                           Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
//   Int64List { repeated int64 value = 1 [packed]; }
// Packed and unpacked encodings of the numeric lists are both accepted, as are unknown fields.
// Decoded bytes values are views into the serialized record (zero-copy).
//
// All functions are pure and thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_TFRECORD_EXAMPLE_H_
#define SLUICE_DATAPLANE_PIPELINE_TFRECORD_EXAMPLE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline {

enum class FeatureKind { kEmpty, kBytes, kFloat, kInt64 };

// "bytes_list", "float_list", "int64_list" or "empty feature".
absl::string_view FeatureKindName(FeatureKind kind);

// The values of one decoded Feature. `bytes` views into the serialized record.
struct FeatureValues {
  FeatureKind kind = FeatureKind::kEmpty;
  std::vector<absl::string_view> bytes;
  std::vector<float> floats;
  std::vector<int64_t> int64s;

  size_t size() const;
};

// Calls `visit` for every entry of the Example's feature map, in wire order (a name that occurs
// twice is visited twice; the last occurrence is the one protobuf keeps). `feature` is the
// serialized Feature message and `offset` its byte offset in `example`. Stops at the first error
// from `visit`. Malformed wire data gives InvalidArgument naming the byte offset.
absl::Status ForEachFeature(
    absl::string_view example,
    const std::function<absl::Status(absl::string_view name, absl::string_view feature,
                                     uint64_t offset)>& visit);

// Decodes a serialized Feature message; `offset` (its position in the record) is used in errors.
absl::Status DecodeFeature(absl::string_view feature, uint64_t offset, FeatureValues* values);

struct ExampleEncodeOptions {
  bool packed = true;  // numeric lists packed (as TensorFlow writes them) or one tag per value
};

// Serializes an element as a tf.train.Example: string tensors become bytes_list, float tensors
// float_list (float64 narrowed to float32), integer and bool tensors int64_list. Values are
// flattened; the shape is not stored (Example has no place for it). Fields in element order.
absl::StatusOr<std::string> EncodeExample(const Element& element,
                                          const ExampleEncodeOptions& options = {});

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TFRECORD_EXAMPLE_H_
