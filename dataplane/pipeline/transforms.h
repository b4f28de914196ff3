// The schemas of the pipeline's transformations (map, filter, shuffle, batch, ...), shared by the
// spec parser (validation) and the executor (construction).
#ifndef SLUICE_DATAPLANE_PIPELINE_TRANSFORMS_H_
#define SLUICE_DATAPLANE_PIPELINE_TRANSFORMS_H_

#include <string>
#include <string_view>
#include <vector>

#include "dataplane/pipeline/args.h"

namespace sluice::pipeline {

struct TransformDescriptor {
  std::string name;
  std::string summary;
  std::vector<ArgSpec> args;
};

// nullptr when `name` is not a transformation.
const TransformDescriptor* FindTransform(absl::string_view name);
const std::vector<TransformDescriptor>& AllTransforms();

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_TRANSFORMS_H_
