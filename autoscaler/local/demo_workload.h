// The workload of the local autoscaler's demo (`sluice up`), benchmark (`sluice bench autoscale
// --live`) and closed-loop tests: synthetic images of image_size x image_size x 3, each resized to
// 32 x 32 by area averaging — CPU-bound work per element that grows with the image size, with small
// elements to send (3 KiB), so that the workers (not the network or the consumer) are what more
// workers relieve. Every element carries its `index` (0 .. count-1) for loss checks.
//
// Pure.
#ifndef SLUICE_AUTOSCALER_LOCAL_DEMO_WORKLOAD_H_
#define SLUICE_AUTOSCALER_LOCAL_DEMO_WORKLOAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "pipeline.pb.h"

namespace sluice::autoscaler {

struct DemoWorkload {
  int64_t count = 2'000'000;  // elements in the job (count / split_size splits: keep it well under 1,000,000)
  int image_size = 160;       // source images are image_size x image_size x 3 (the CPU per element)
  int64_t split_size = 64;
};

// The pipeline spec (YAML) of `w`.
std::string DemoPipelineYaml(const DemoWorkload& w);
// Parsed; InvalidArgument for a count, size or split size out of range.
absl::StatusOr<pipeline::PipelineDef> DemoPipeline(const DemoWorkload& w);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_LOCAL_DEMO_WORKLOAD_H_
