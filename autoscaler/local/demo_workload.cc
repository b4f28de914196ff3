#include "autoscaler/local/demo_workload.h"

#include "absl/strings/str_cat.h"
#include "dataplane/pipeline/spec_parser.h"

namespace sluice::autoscaler {

std::vector<std::string> DemoWorkerFlags() {
  return {"--buffer_elements=32", "--max_undelivered_elements=128", "--shutdown_timeout_ms=30000"};
}

std::string DemoPipelineYaml(const DemoWorkload& w) {
  return absl::StrCat("name: autoscale-demo\n",
                      "source: {synthetic: {count: ", w.count, ", shape: [", w.image_size, ", ", w.image_size,
                      ", 3], dtype: uint8, split_size: ", w.split_size, "}}\n",
                      "steps:\n",
                      "  - map: {parallelism: 1, ops: [{resize: {field: data, size: [32, 32], method: area}}]}\n");
}

absl::StatusOr<pipeline::PipelineDef> DemoPipeline(const DemoWorkload& w) {
  if (w.count < 1 || w.count > 1'000'000'000) return absl::InvalidArgumentError("the element count must be in [1, 1e9]");
  if (w.image_size < 32 || w.image_size > 2048) return absl::InvalidArgumentError("the image size must be in [32, 2048]");
  if (w.split_size < 1 || w.count / w.split_size >= 1'000'000) {
    return absl::InvalidArgumentError("count / split_size must stay under 1,000,000 splits (and split_size >= 1)");
  }
  return pipeline::ParsePipelineSpec(DemoPipelineYaml(w), "<autoscale demo>");
}

}  // namespace sluice::autoscaler
