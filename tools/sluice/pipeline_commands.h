// `sluice pipeline check|run|explain|ops`: validate, run and describe pipeline specs locally.
// Each command writes its report to `out` and progress/errors to `err`, and returns an exit code.
#ifndef SLUICE_TOOLS_SLUICE_PIPELINE_COMMANDS_H_
#define SLUICE_TOOLS_SLUICE_PIPELINE_COMMANDS_H_

#include <cstdint>
#include <iosfwd>
#include <string>

namespace sluice::cli {

// AutoOrder for `explain` and `run` (docs/autoorder.md).
struct AutoOrderFlags {
  std::string mode = "off";     // off | strict | relaxed
  int64_t sample = 64;          // elements sampled at each reorderable part
};

struct RunOptions {
  int64_t take = -1;         // stop after this many output elements (-1: all)
  int cpu_budget = 0;        // 0: the spec's
  bool autotune = true;
  bool progress = true;      // progress line on `err`
  double progress_interval_seconds = 0.5;
  bool json = false;         // print the summary as JSON instead of a table
  AutoOrderFlags auto_order;  // reorder first (the report goes to `err`)
};

int PipelineCheck(const std::string& file, std::ostream& out, std::ostream& err);
// The plan after fusions; with AutoOrder on, first the AutoOrder report (orders, measured costs,
// predicted and measured speed-up) and then the plan of the rewritten pipeline.
int PipelineExplain(const std::string& file, const AutoOrderFlags& auto_order, std::ostream& out, std::ostream& err);
int PipelineRun(const std::string& file, const RunOptions& options, std::ostream& out, std::ostream& err);
// Lists sources, steps and ops with their arguments (markdown when `markdown`).
int PipelineOps(bool markdown, std::ostream& out);
// The AutoOrder declarations of the `filter` step and every op, as Markdown tables
// (docs/autoorder-properties.md).
int PipelineOrderProperties(std::ostream& out);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_PIPELINE_COMMANDS_H_
