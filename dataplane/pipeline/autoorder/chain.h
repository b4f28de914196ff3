// A pipeline as AutoOrder sees it: a chain of units (each op of a map step, each filter step, each
// other step) with their resolved order properties, cut into segments (maximal runs of movable
// units between barriers), and the inverse: a PipelineDef rebuilt from units in a new order.
//
// A unit is movable when it is an op or a filter with a declaration, not pinned by keep_position
// (on itself or its map step). Every other step (batch, shuffle, take, ...), every undeclared op
// (an older plugin) and every pinned one is a barrier: segments never span it, so nothing crosses
// it. Ops keep their map step's settings (parallelism, deterministic, on_error) wherever they go.
//
// Pure functions of their arguments; thread-compatible.
#ifndef SLUICE_DATAPLANE_PIPELINE_AUTOORDER_CHAIN_H_
#define SLUICE_DATAPLANE_PIPELINE_AUTOORDER_CHAIN_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/op_properties.h"
#include "pipeline.pb.h"

namespace sluice::pipeline::autoorder {

struct Unit {
  enum class Kind { kOp, kFilter, kStep };
  Kind kind = Kind::kStep;
  int step = 0;        // index in PipelineDef::steps
  int op = -1;         // kOp: index in the step's ops
  std::string name;    // for reports, e.g. "normalize(image)", "filter(label)", "batch"
  OrderProperties properties;  // barrier for kStep
  bool pinned = false;         // keep_position on the op or its step
  bool movable() const { return kind != Kind::kStep && !pinned && !properties.barrier(); }
};

// Units [begin, end) of Chain::units, all movable, at least two.
struct Segment {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

struct Chain {
  std::vector<Unit> units;        // in pipeline order
  std::vector<Segment> segments;  // in pipeline order
};

// `def` must be canonical. The leading interleave step (if any) is a barrier like the source.
// Errors: an op's declared dtype argument names no dtype.
absl::StatusOr<Chain> BuildChain(const PipelineDef& def);

// `def` with its steps replaced by the units `order` lists (indices into chain.units, each once):
// filters and other steps are copied, consecutive ops whose map steps have the same settings (and
// the same keep_position) become one map step. `order` may list a prefix of the units only.
PipelineDef RebuildDef(const PipelineDef& def, const Chain& chain, const std::vector<size_t>& order);

// The units' names in `order`.
std::vector<std::string> UnitNames(const Chain& chain, const std::vector<size_t>& order);

}  // namespace sluice::pipeline::autoorder

#endif  // SLUICE_DATAPLANE_PIPELINE_AUTOORDER_CHAIN_H_
