// The pipeline executor: compiles a canonical PipelineDef into a graph of stages and runs it.
//
// A Pipeline is immutable once created and may make many iterators (one per epoch, task or
// consumer). Each iterator owns the threads of its parallel stages and stops them when it is
// destroyed; destruction never hangs on a blocked producer. The iterator itself is used by one
// thread at a time. Stats() may be called from any thread while iterators run.
#ifndef SLUICE_DATAPLANE_PIPELINE_PIPELINE_H_
#define SLUICE_DATAPLANE_PIPELINE_PIPELINE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/pipeline/source.h"
#include "dataplane/pipeline/stats.h"
#include "dataplane/pipeline/tensor.h"
#include "pipeline.pb.h"

namespace sluice::pipeline {

struct RuntimeOptions {
  int cpu_budget = 0;             // overrides the spec's cpu_budget when > 0
  std::optional<bool> autotune;   // overrides the spec's autotune when set
  // Read these elements (one split, in order, keys kept) instead of the spec's source, whose
  // arguments are still validated. AutoOrder runs parts of a pipeline on a sample this way.
  std::shared_ptr<const std::vector<Element>> elements;
};

class PipelineIterator {
 public:
  virtual ~PipelineIterator() = default;
  // The next element, or std::nullopt at the end of the data.
  virtual absl::StatusOr<std::optional<Element>> Next() = 0;
};

class Pipeline {
 public:
  // `def` is canonicalised (validated) first, so defs from any origin are accepted.
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(PipelineDef def, RuntimeOptions options = {});
  ~Pipeline();

  // The source's splits (files or ranges), as the data service's dispatcher hands them out.
  absl::StatusOr<std::vector<Split>> ListSplits() const;

  // An iterator over the whole pipeline. Splits come from `splits` when given (dynamic sharding),
  // else from all of the source's splits in order.
  absl::StatusOr<std::unique_ptr<PipelineIterator>> MakeIterator(std::shared_ptr<SplitProvider> splits = nullptr);

  // Per-stage statistics, summed over all iterators made so far.
  std::vector<StageStatsSnapshot> Stats() const;
  // The plan: stages after optimisation (fusions), with their settings.
  std::string Explain() const;
  const PipelineDef& def() const { return def_; }
  const std::string& fingerprint() const { return fingerprint_; }
  int cpu_budget() const;

  class Impl;

 private:
  Pipeline() = default;
  PipelineDef def_;
  std::string fingerprint_;
  std::unique_ptr<Impl> impl_;
};

// Gives every op of `def` an explicit seed slot equal to the one the executor would derive from its
// position (see SeedSlot in pipeline.proto), keeping slots already set. The pipeline draws the same
// random numbers before and after; afterwards its ops may be moved without changing them.
void AssignSeedSlots(PipelineDef& def);

// Renders stats as an aligned text table (the CLI's per-stage table).
std::string FormatStatsTable(const std::vector<StageStatsSnapshot>& stats, double wall_seconds);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_PIPELINE_H_
