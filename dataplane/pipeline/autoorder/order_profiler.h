// AutoOrder's measurements on real input: a sample of the elements that reach a segment, each
// unit's cost and effect on them in the order as written, and whole candidate orders run through
// the real executor (with its fusions and seeds) to compare their outputs and CPU.
//
// Everything runs on the calling thread (maps at parallelism 1, no prefetch or parallel
// interleave), so thread CPU time measures exactly the work. Not thread-safe across calls that
// share a Sample; separate calls are independent.
#ifndef SLUICE_DATAPLANE_PIPELINE_AUTOORDER_ORDER_PROFILER_H_
#define SLUICE_DATAPLANE_PIPELINE_AUTOORDER_ORDER_PROFILER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/autoorder/chain.h"
#include "dataplane/pipeline/autoorder/order_optimizer.h"
#include "dataplane/pipeline/tensor.h"
#include "pipeline.pb.h"

namespace sluice::pipeline::autoorder {

using Sample = std::shared_ptr<const std::vector<Element>>;

// `count` elements that reach unit `first_unit` of `chain` (built from `def`, whose ops carry seed
// slots): the pipeline before it as written, without the steps that only reorder or repeat
// elements (shuffle, repeat, prefetch, cache, interleave), run on up to 8 source splits spread
// over the input, an equal share from each (input is often sorted).
absl::StatusOr<Sample> CollectSample(const PipelineDef& def, const Chain& chain, size_t first_unit, int64_t count);

// The average size of every field of `elements`.
FieldSizes MeasureFields(const std::vector<Element>& elements);

// Runs the segment's units one by one, in the order as written, over `sample`: each unit
// `repetitions` times on the same input, keeping the least CPU (the least disturbed run). Errors
// name the unit when an op fails on an element its map would not skip.
absl::StatusOr<std::vector<UnitProfile>> ProfileUnits(const PipelineDef& def, const Chain& chain, const Segment& segment,
                                                      const Sample& sample, int repetitions);

// One run of a segment in some order through the executor.
struct SegmentRun {
  std::vector<Element> outputs;
  double cpu_ns = 0;  // all stages but the in-memory source
};
// `order` lists the segment's units (indices into chain.units).
absl::StatusOr<SegmentRun> RunSegment(const PipelineDef& def, const Chain& chain, const std::vector<size_t>& order,
                                      const Sample& sample);

// How two runs' outputs differ.
struct OutputDiff {
  bool identical = true;       // same elements, keys, fields, dtypes, shapes and bytes
  bool same_structure = true;  // all but numeric values agree
  double max_abs = 0;          // over numeric values
  double mean_abs = 0;
  std::string first_difference;  // e.g. "element 3 (key 0x..), field 'image': max abs diff 2"
};
OutputDiff CompareOutputs(const std::vector<Element>& a, const std::vector<Element>& b);

}  // namespace sluice::pipeline::autoorder

#endif  // SLUICE_DATAPLANE_PIPELINE_AUTOORDER_ORDER_PROFILER_H_
