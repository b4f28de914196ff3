// The `parse_example` element op: decodes a serialized tf.train.Example held in a string field into
// one tensor per declared feature.
//
// Bytes features become string tensors viewing the record's memory (zero-copy, sharing the
// record's owner); int64 and float features are copied into int64 / float32 tensors.
// ParseExampleOp is immutable after construction; Apply() is thread-safe.
#ifndef SLUICE_DATAPLANE_PIPELINE_TFRECORD_PARSE_EXAMPLE_H_
#define SLUICE_DATAPLANE_PIPELINE_TFRECORD_PARSE_EXAMPLE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/tensor.h"
#include "pipeline.pb.h"

namespace sluice::pipeline {

struct ExampleFeatureSpec {
  std::string name;
  DType dtype = DType::kInvalid;   // kString (bytes), kInt64 or kFloat32
  std::optional<Shape> shape;      // declared shape; at most one dimension may be -1 (inferred)
  std::optional<Tensor> default_value;  // used when the feature is absent
  bool required = true;            // absent, no default: error if required, else field omitted
};

// Reads the `features` argument: a map from feature name to either a type name ("int64") or a map
// {type: bytes|int64|float, shape: [..], default: value or list, required: bool}.
// Errors name the feature and key, e.g. "features.label.type: ...".
absl::StatusOr<std::vector<ExampleFeatureSpec>> ParseExampleFeatureSpecs(const Value& features);

class ParseExampleOp : public ElementOp {
 public:
  ParseExampleOp(std::string field, std::vector<ExampleFeatureSpec> features, bool keep_record);

  absl::Status Apply(Element& element, uint64_t seed) const override;
  std::string Describe() const override;

 private:
  const std::string field_;
  const std::vector<ExampleFeatureSpec> features_;
  const bool keep_record_;
  absl::flat_hash_map<std::string, size_t> index_;  // feature name -> position in features_
};

// The descriptor registered by RegisterExampleOps().
OpDescriptor ParseExampleDescriptor();

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TFRECORD_PARSE_EXAMPLE_H_
