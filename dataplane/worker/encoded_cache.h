// Serving a pipeline's trailing `cache` from the elements as the worker sent them.
//
// A task pipeline that ends in `cache` followed only by `repeat` steps replays the same elements
// pass after pass. The pipeline's own cache keeps them as Elements, so every replayed element is
// copied, encoded and copied into a WireEncoder slab again — at 1 KiB most of a worker's CPU. A
// worker that can plan the tail away (PlanEncodedCache) runs only the steps before the cache, keeps
// each element as it encoded it (an EncodedElementPtr: immutable, shared) and hands out those same
// elements on every later pass and task epoch (PipelineProducer in task_runner.cc).
//
// The output is the pipeline's own: the same elements in the same order, the same number of passes
// (the product of the repeats' counts; a pass with no elements ends them, as `repeat` does), and the
// cache survives task epochs as the pipeline's does. Not planned (the pipeline runs as written):
//  - a bounded cache (`max_bytes` > 0), which may give up mid-pass and read its input again;
//  - DYNAMIC sharding, where `repeat` resets the dispatcher's split provider between passes;
//  - anything after the repeats (DATA sharding appends a `shard` step, so it is never planned).
//
// Pure functions; thread-compatible.
#ifndef SLUICE_DATAPLANE_WORKER_ENCODED_CACHE_H_
#define SLUICE_DATAPLANE_WORKER_ENCODED_CACHE_H_

#include <cstdint>
#include <optional>

#include "dataservice.pb.h"
#include "pipeline.pb.h"

namespace sluice::worker {

struct EncodedCachePlan {
  pipeline::PipelineDef head;  // the def without its trailing cache and repeats
  int64_t passes = 1;          // passes over the cached elements per task epoch; -1: without end
};

// The plan for a canonical task pipeline `def` (TaskPipelineDef), or nullopt when its tail is not
// served from encoded elements (see above).
std::optional<EncodedCachePlan> PlanEncodedCache(const pipeline::PipelineDef& def, service::ShardingPolicy sharding);

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_ENCODED_CACHE_H_
