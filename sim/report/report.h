// Runs the policies on the scenarios and turns the runs into results: per scenario and policy the
// training time per epoch, stall fraction, cost per epoch (accelerators + remote workers), the
// decisions and time until the stall is under target after each change, scale-downs on missing
// data; a summary against the targets of issue 12; the JSON line of `sluice bench autoscale`, time
// series for the plots and the Markdown table of docs/autoscaling.md.
//
// Pure apart from the CPU it uses: no files (the caller writes what these functions return).
#ifndef SLUICE_SIM_REPORT_REPORT_H_
#define SLUICE_SIM_REPORT_REPORT_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autoscaler/policy/policy.h"
#include "sim/model/simulation.h"
#include "sim/policies/policies.h"

namespace sluice::sim {

// The policies in the order they are reported. "sluice-remote" is Sluice's policy with placement
// RemoteOnly: the ablation that isolates what local placement saves.
const std::vector<std::string>& PolicyNames();

struct SuiteOptions {
  std::vector<std::string> scenarios;  // empty: all
  std::vector<std::string> policies;   // empty: all
  RunOptions run;
  ServiceLevel level;  // the oracle's constraints, and what makes a run "within the service level"
  // Applied to the PolicyConfig of "sluice" and "sluice-remote" (tests change a field through it).
  std::function<void(autoscaler::PolicyConfig&)> tune_sluice;
  // Applied to every scenario before it is validated and run (sensitivity runs: a warm node pool's
  // start latency, more local slots...).
  std::function<void(Scenario&)> tune_scenario;
  std::function<void(const std::string&)> progress;  // one line per scenario and policy
};

// After one change of the workload: how long until the stall went under the target and stayed
// there until the next change, and how many scaling decisions the policy took in that time.
//
// Counted two ways. From the change (`seconds`, `periods`, `decisions`): what the trainers saw.
// From the stall's onset, less the pods' start (`decision_periods`): the decision periods the
// policy itself took. A change may stall the trainers only later (a crash loop's first crash), and
// no policy can end a stall before the pods it asks for have started (60 s for a remote node in
// the scenarios: four 15 s periods), so `decision_periods` = the periods from the first stalled
// period to the last, minus `pod_start_periods` (the start latency of the kind of pod the policy
// added meanwhile, in periods; 0 when it added none), never below 0.
struct ChangeOutcome {
  int at_s = 0;
  std::string label;
  std::optional<int> seconds;    // nullopt: the stall did not end before the next change
  std::optional<int> periods;    // seconds / decision period
  std::optional<int> decisions;  // scaling decisions (that acted) from the change until then
  std::optional<int> stalled_periods;   // from the first period over the target to the last (0: no stall)
  int pod_start_periods = 0;            // ceil(start latency of the pods added meanwhile / period)
  std::optional<int> decision_periods;  // stalled_periods - pod_start_periods, at least 0
};

struct PolicyOutcome {
  std::string policy;
  RunResult run;
  double epochs = 0;
  double stall_fraction = 0;
  double epoch_seconds = 0;             // trainer-seconds per epoch
  double cost_per_epoch = 0;            // accelerators + remote workers
  double accelerator_cost_per_epoch = 0;
  double preprocessing_cost_per_epoch = 0;  // remote workers only (local ones use CPU already paid for)
  double mean_local = 0, mean_remote = 0;   // workers (pods) over time
  double max_period_stall = 0;
  double max_period_interference = 0;
  bool no_stall_run = false;                // every decision period within the service level (stall and interference)
  std::vector<ChangeOutcome> changes;
};

struct ScenarioOutcome {
  Scenario scenario;
  std::vector<Change> changes;
  int fixed_workers = 0;
  OracleSchedule oracle, best_static;
  std::vector<PolicyOutcome> policies;
  const PolicyOutcome* Find(const std::string& policy) const;
};

// Runs one scenario under the chosen policies.
ScenarioOutcome RunScenario(const Scenario& scenario, const SuiteOptions& options);
// Runs the chosen scenarios; InvalidArgument names an unknown scenario or policy.
absl::StatusOr<std::vector<ScenarioOutcome>> RunSuite(const SuiteOptions& options);

// Figures from one run (exposed for tests).
PolicyOutcome Summarize(const Scenario& scenario, const std::vector<Change>& changes, RunResult run,
                        const RunOptions& options, const ServiceLevel& level);

struct PecanHeadline {
  struct Row {
    std::string scenario;
    double paper_reduction = 0;   // 1 - Pecan's / Cachew's remote workers in the paper
    double pecan_vs_cachew = 0;   // 1 - the simulated pecan's / cachew's preprocessing cost
    double sluice_vs_remote = 0;  // 1 - sluice's / sluice-remote's preprocessing cost
    double sluice_remote_workers = 0, sluice_local_workers = 0;
  };
  std::vector<Row> rows;
  double paper_mean = 0, pecan_mean = 0, sluice_mean = 0;
};
PecanHeadline ComputePecanHeadline(const std::vector<ScenarioOutcome>& outcomes);

struct Summary {
  std::optional<int> max_decisions_to_no_stall;  // nullopt: some change never reached no stall
  std::string worst_decisions_scenario;
  std::optional<int> max_decision_periods_to_no_stall;  // ChangeOutcome::decision_periods, worst change
  std::string worst_decision_periods_scenario;
  std::optional<int> max_periods_to_no_stall;  // ChangeOutcome::stalled_periods (pod start included), worst change
  std::string worst_periods_scenario;
  double sluice_vs_pecan_cost = 0, sluice_vs_cachew_cost = 0, sluice_vs_oracle_cost = 0;
  std::string worst_pecan_scenario, worst_cachew_scenario, worst_oracle_scenario;
  int sluice_scale_downs_on_missing_data = 0;
  PecanHeadline headline;
};
Summary Summarize(const std::vector<ScenarioOutcome>& outcomes);

// The JSON object `sluice bench autoscale` prints last (one line).
std::string SuiteJson(const std::vector<ScenarioOutcome>& outcomes, const SuiteOptions& options, double wall_seconds);
// One scenario's time series for the plots (JSON).
std::string SeriesJson(const ScenarioOutcome& outcome);
// The results table of docs/autoscaling.md (Markdown).
std::string MarkdownTable(const std::vector<ScenarioOutcome>& outcomes);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_REPORT_REPORT_H_
