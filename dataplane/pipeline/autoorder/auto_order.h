// AutoOrder: reorders a pipeline's transformations to cut CPU per element, safely and visibly
// (docs/autoorder.md). Pecan's observation: people write ops in the order that reads naturally
// (decode, convert to float, normalize, then crop and filter), not the cheapest one (filter and crop
// first, then convert fewer pixels and fewer elements).
//
// PlanAutoOrder takes a pipeline and, segment by segment (runs of ops and filters between
// barriers):
//   1. reads a sample of the real input reaching the segment;
//   2. measures each unit there in the order as written (CPU per element, bytes in and out, elements
//      kept);
//   3. searches the legal orders (order_optimizer.h) for the cheapest per the cost model;
//   4. runs the order as written and the chosen one through the executor on the sample, alternating,
//      and compares outputs: strict mode needs bit-identical output, relaxed mode reports the
//      difference; a rewrite that does not measure faster is dropped.
// Ops keep their seed slots (the position they had as written), so a moved random op draws the same
// numbers for the same element.
//
// Modes: off (nothing), strict (exact commutations only, output verified identical), relaxed
// (approximate commutations too; the measured difference is reported).
//
// Thread-compatible: PlanAutoOrder uses only its arguments (and the op registry). It runs on the
// calling thread and reads input files; call it without holding locks.
#ifndef SLUICE_DATAPLANE_PIPELINE_AUTOORDER_AUTO_ORDER_H_
#define SLUICE_DATAPLANE_PIPELINE_AUTOORDER_AUTO_ORDER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline.pb.h"

namespace sluice::pipeline {

enum class AutoOrderMode { kOff, kStrict, kRelaxed };

// "off", "strict", "relaxed" (also "" and "false" for off, "true" for relaxed). Errors list the modes.
absl::StatusOr<AutoOrderMode> ParseAutoOrderMode(absl::string_view text);
absl::string_view AutoOrderModeName(AutoOrderMode mode);

struct AutoOrderOptions {
  AutoOrderMode mode = AutoOrderMode::kOff;
  int64_t sample_elements = 64;   // elements read at each segment's input
  int profile_repetitions = 2;    // runs per unit when measuring its cost (the least CPU counts)
  int rounds = 3;                 // alternating runs of each order when measuring the speed-up
  double min_predicted_gain = 0.03;  // orders predicted less than 3% cheaper are not tried
  double min_measured_speedup = 1.02;  // rewrites measured slower than this are not applied
};

struct AutoOrderResult {
  PipelineDef def;         // the rewritten pipeline, or the input unchanged
  AutoOrderReport report;  // what happened and why (pipeline.proto)
};

// `def` need not be canonical (it is canonicalised). Errors only for a def that does not validate;
// a pipeline AutoOrder cannot measure (unreadable data, an op failing on the sample) comes back
// unchanged with outcome "failed" and the reason.
absl::StatusOr<AutoOrderResult> PlanAutoOrder(const PipelineDef& def, const AutoOrderOptions& options);

// The report as text (what `sluice pipeline explain --auto-order` prints): mode, outcome, the
// orders, each unit's measured cost, predicted and measured speed-up, the difference.
std::string FormatAutoOrderReport(const AutoOrderReport& report);
// One line for logs and status: "applied: a -> b -> c (was c -> a -> b), measured 1.8x, predicted 2.1x".
std::string SummarizeAutoOrderReport(const AutoOrderReport& report);

}  // namespace sluice::pipeline

#endif  // SLUICE_DATAPLANE_PIPELINE_AUTOORDER_AUTO_ORDER_H_
