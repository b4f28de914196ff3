// `sluice pipeline check|run|explain|ops`: validate, run and describe pipeline specs locally.
// Each command writes its report to `out` and progress/errors to `err`, and returns an exit code.
#ifndef SLUICE_TOOLS_SLUICE_PIPELINE_COMMANDS_H_
#define SLUICE_TOOLS_SLUICE_PIPELINE_COMMANDS_H_

#include <cstdint>
#include <iosfwd>
#include <string>

namespace sluice::cli {

struct RunOptions {
  int64_t take = -1;         // stop after this many output elements (-1: all)
  int cpu_budget = 0;        // 0: the spec's
  bool autotune = true;
  bool progress = true;      // progress line on `err`
  double progress_interval_seconds = 0.5;
  bool json = false;         // print the summary as JSON instead of a table
};

int PipelineCheck(const std::string& file, std::ostream& out, std::ostream& err);
int PipelineExplain(const std::string& file, std::ostream& out, std::ostream& err);
int PipelineRun(const std::string& file, const RunOptions& options, std::ostream& out, std::ostream& err);
// Lists sources, steps and ops with their arguments (markdown when `markdown`).
int PipelineOps(bool markdown, std::ostream& out);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_PIPELINE_COMMANDS_H_
