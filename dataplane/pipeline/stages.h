// The executor's stages: one immutable Stage per pipeline step (after fusion), each making
// StageIterators. Internal to the pipeline engine; Pipeline (pipeline.h) is the public face.
//
// Threading: a Stage is immutable and shared by all iterators. A StageIterator's Next() is called
// by one thread at a time (its consumer); parallel stages run their own threads, which they stop
// and join in their destructor. Every blocking wait also watches the shared Cancellation so that
// tearing down a pipeline never hangs.
#ifndef SLUICE_DATAPLANE_PIPELINE_STAGES_H_
#define SLUICE_DATAPLANE_PIPELINE_STAGES_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/pipeline/op.h"
#include "dataplane/pipeline/source.h"
#include "dataplane/pipeline/stats.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::pipeline {

struct Cancellation {
  std::atomic<bool> cancelled{false};
};

// A knob the autotuner turns: a map's parallelism or a prefetch buffer's depth.
struct Tunable {
  enum class Kind { kParallelism, kBuffer };
  Kind kind;
  StageStats* stats;
  std::atomic<int64_t> value{1};
  int64_t max = 1;
  std::atomic<uint64_t> consumer_waits{0};  // times the consumer found nothing ready (buffers)
  uint64_t last_cpu_ns = 0, last_elements = 0, last_waits = 0;  // autotuner's own bookkeeping
};

// One autotuning step over the tunables of a running pipeline: map parallelism is split across
// the auto maps in proportion to each one's CPU cost per element since the last step (within
// cpu_budget); a prefetch buffer whose consumer found it empty since the last step doubles, up to
// what ram_budget allows for its average element size.
void AutotuneStep(std::vector<std::shared_ptr<Tunable>>& tunables, int cpu_budget, int64_t ram_budget);

// State shared by the stage iterators of one pipeline iterator.
struct ExecContext {
  std::shared_ptr<SplitProvider> splits;
  std::shared_ptr<Cancellation> cancel;
  uint64_t seed = 0;
  int cpu_budget = 1;
  int64_t max_element_bytes = 0;
  int64_t ram_budget_bytes = 0;
  bool autotune = true;
  std::vector<std::shared_ptr<Tunable>> tunables;  // filled while iterators are made
};

using NextResult = absl::StatusOr<std::optional<Element>>;

class StageIterator {
 public:
  virtual ~StageIterator() = default;
  virtual NextResult Next() = 0;
};

class Stage {
 public:
  Stage(std::unique_ptr<Stage> input, StageStats* stats) : input_(std::move(input)), stats_(stats) {}
  virtual ~Stage() = default;
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeIterator(ExecContext& ctx) const;
  virtual std::string Describe() const = 0;
  const Stage* input() const { return input_.get(); }
  StageStats* stats() const { return stats_; }

 protected:
  virtual absl::StatusOr<std::unique_ptr<StageIterator>> MakeRawIterator(ExecContext& ctx) const = 0;
  absl::StatusOr<std::unique_ptr<StageIterator>> MakeInputIterator(ExecContext& ctx) const {
    return input_->MakeIterator(ctx);
  }

 private:
  std::unique_ptr<Stage> input_;
  StageStats* stats_;
};

// Checks an element against the size bound; the error names the stage.
absl::Status CheckElementSize(const Element& e, int64_t max_bytes, const StageStats* stats);

// Stacks elements into one batch (all fields must agree in dtype; shapes must agree unless `pad`).
absl::StatusOr<Element> StackElements(std::vector<Element>& elements, bool pad, double padding_value);

// Where one compiled op of a map draws its per-element seeds from: a map stage index and an op
// index (see SeedSlot in pipeline.proto). The seed of an op for an element is
// OpSeed(pipeline_seed, slot, element key).
struct OpSeedSlot {
  int stage = 0;
  int index = 0;
};
uint64_t OpSeed(uint64_t pipeline_seed, OpSeedSlot slot, uint64_t element_key);

// The predicate of a `filter` step with validated arguments `args` (the stage's own test).
std::unique_ptr<ElementPredicate> MakeFilterPredicate(const Args& args);

// Stage constructors.
std::unique_ptr<Stage> MakeSourceStage(std::shared_ptr<const Source> source, SourceContext sctx, StageStats* stats,
                                       std::string description);
std::unique_ptr<Stage> MakeInterleaveStage(std::shared_ptr<const Source> source, SourceContext sctx,
                                           const Args& args, StageStats* stats, std::string description);
// `seed_slots[j]` is where ops[j] draws its seeds from.
std::unique_ptr<Stage> MakeMapStage(std::unique_ptr<Stage> input, std::vector<std::unique_ptr<ElementOp>> ops,
                                    std::vector<OpSeedSlot> seed_slots, std::string ops_description, const Args& args,
                                    StageStats* stats);
std::unique_ptr<Stage> MakeFilterStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakeShuffleStage(std::unique_ptr<Stage> input, const Args& args, uint64_t pipeline_seed,
                                        StageStats* stats);
std::unique_ptr<Stage> MakeBatchStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakeUnbatchStage(std::unique_ptr<Stage> input, StageStats* stats);
std::unique_ptr<Stage> MakeRepeatStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakeTakeStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakeSkipStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakeShardStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakeCacheStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakePrefetchStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);
std::unique_ptr<Stage> MakeBucketByLengthStage(std::unique_ptr<Stage> input, const Args& args, StageStats* stats);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_STAGES_H_
