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
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline.pb.h"

namespace sluice::autoscaler {

struct DemoWorkload {
  int64_t count = 2'000'000;  // elements in the job (count / split_size splits: keep it well under 1,000,000)
  int image_size = 768;       // source images are image_size x image_size x 3 (the CPU per element)
  int64_t split_size = 64;
};

// Flags of the demo's workers: a small buffer ahead of the readers (--buffer_elements=32) and a
// bound on what a worker may have produced beyond its clients' receipts
// (--max_undelivered_elements=128: its buffer plus what its gRPC streams carry). A worker chosen
// for removal is stopped only once its clients received all it produced, so both bound how long a
// drain takes at low demand: without the second, the streams alone held about 1,000 elements of
// the demo's (measured), which a consumer at 25 elements/s needs most of a minute to read. And a
// long SIGTERM budget (--shutdown_timeout_ms=30000) for workers stopped without a drain.
std::vector<std::string> DemoWorkerFlags();
// The demo consumer's client buffer (DataServiceClientOptions::max_buffered_bytes): about a second
// of the peak demand. A client holding minutes of prefetched elements stops reading its streams
// (backpressure), and a draining worker's last buffered elements then wait that long to be read.
inline constexpr int64_t kDemoClientBufferBytes = 256 << 10;
// How long a supervisor must let a demo worker take to stop (above its SIGTERM budget).
inline constexpr int kDemoWorkerStopSeconds = 40;

// The pipeline spec (YAML) of `w`.
std::string DemoPipelineYaml(const DemoWorkload& w);
// Parsed; InvalidArgument for a count, size or split size out of range.
absl::StatusOr<pipeline::PipelineDef> DemoPipeline(const DemoWorkload& w);

}  // namespace sluice::autoscaler

#endif  // SLUICE_AUTOSCALER_LOCAL_DEMO_WORKLOAD_H_
