#include "sim/report/report.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sim/scenarios/scenarios.h"

namespace sluice::sim {

using json = nlohmann::json;

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> names = {"collocated", "fixed",  "hpa",    "cachew",     "pecan",
                                                 "sluice",     "sluice-remote", "oracle", "best-static"};
  return names;
}

const PolicyOutcome* ScenarioOutcome::Find(const std::string& policy) const {
  for (const PolicyOutcome& p : policies) {
    if (p.policy == policy) return &p;
  }
  return nullptr;
}

PolicyOutcome Summarize(const Scenario& scenario, const std::vector<Change>& changes, RunResult run,
                        const RunOptions& options, const ServiceLevel& level) {
  const double target_stall = level.target_stall;
  PolicyOutcome o;
  o.policy = run.policy;
  const RunTotals& t = run.totals;
  o.epochs = t.consumed / scenario.epoch_elements;
  o.stall_fraction = t.step_seconds > 0 ? t.wait_seconds / t.step_seconds : 0;
  if (o.epochs > 0) {
    o.epoch_seconds = t.job_seconds / o.epochs;
    o.cost_per_epoch = (t.accelerator_dollars + t.remote_dollars) / o.epochs;
    o.accelerator_cost_per_epoch = t.accelerator_dollars / o.epochs;
    o.preprocessing_cost_per_epoch = t.remote_dollars / o.epochs;
  }
  o.mean_local = t.local_worker_seconds / scenario.horizon_s;
  o.mean_remote = t.remote_pod_seconds / scenario.horizon_s;
  o.no_stall_run = true;
  for (const PeriodRecord& p : run.periods) {
    o.max_period_stall = std::max(o.max_period_stall, p.stall);
    o.max_period_interference = std::max(o.max_period_interference, p.interference);
    if (p.stall >= target_stall || p.interference > level.max_interference) o.no_stall_run = false;
  }
  for (size_t i = 0; i < changes.size(); ++i) {
    ChangeOutcome c;
    c.at_s = changes[i].at_s;
    c.label = changes[i].label;
    const int next = i + 1 < changes.size() ? changes[i + 1].at_s : scenario.horizon_s;
    std::vector<const PeriodRecord*> in;
    for (const PeriodRecord& p : run.periods) {
      if (p.t_end > c.at_s && p.t_end <= next) in.push_back(&p);
    }
    // The first period from which every period up to the next change is under the target.
    int k = static_cast<int>(in.size());
    while (k > 0 && in[k - 1]->stall < target_stall) --k;
    if (k < static_cast<int>(in.size()) || in.empty()) {
      c.periods = k;
      c.seconds = k * options.decision_period_s;
      int decisions = 0;
      for (const DecisionRecord& d : run.decisions) {
        if (d.act && d.t >= c.at_s && d.t < c.at_s + *c.seconds) ++decisions;
      }
      c.decisions = decisions;
      // From the onset: the first period over the target.
      int onset = 0;
      while (onset < k && in[onset]->stall < target_stall) ++onset;
      c.stalled_periods = k - onset;
      // The pods the policy added from the onset until the stall ended: the slowest kind sets the floor.
      int start_s = 0;
      for (int j = onset; j < k; ++j) {
        const PeriodRecord& before = in[j] == &run.periods.front() ? *in[j] : *(in[j] - 1);
        if (in[j]->remote_pods > before.remote_pods) start_s = std::max(start_s, scenario.remote.start_seconds);
        if (in[j]->local_pods > before.local_pods) start_s = std::max(start_s, scenario.local_start_seconds);
      }
      const int period = std::max(1, options.decision_period_s);
      c.pod_start_periods = (start_s + period - 1) / period;
      c.decision_periods = std::max(0, *c.stalled_periods - c.pod_start_periods);
    }
    o.changes.push_back(c);
  }
  o.run = std::move(run);
  return o;
}

ScenarioOutcome RunScenario(const Scenario& scenario, const SuiteOptions& options) {
  ScenarioOutcome out;
  out.scenario = scenario;
  out.changes = Changes(scenario);
  out.fixed_workers = FixedRemoteSize(scenario);
  const std::vector<std::string>& wanted = options.policies.empty() ? PolicyNames() : options.policies;
  for (const std::string& name : wanted) {
    std::unique_ptr<Controller> controller;
    if (name == "collocated") {
      controller = MakeCollocated();
    } else if (name == "fixed") {
      controller = MakeFixedRemote(out.fixed_workers);
    } else if (name == "hpa") {
      HpaConfig c;
      c.max_replicas = scenario.max_workers;
      controller = MakeHpa(c);
    } else if (name == "cachew" || name == "pecan") {
      HillClimbConfig c;
      c.max_replicas = scenario.max_workers;
      controller = name == "cachew" ? MakeCachew(c) : MakePecan(c);
    } else if (name == "sluice" || name == "sluice-remote") {
      autoscaler::PolicyConfig c = SluicePolicyConfig(scenario);
      if (name == "sluice-remote") c.placement.policy = autoscaler::Placement::kRemoteOnly;
      if (options.tune_sluice) options.tune_sluice(c);
      controller = std::make_unique<SluiceController>(c, name);
    } else if (name == "oracle") {
      out.oracle = FindOracle(scenario, options.run, options.level, true);
      controller = MakeScheduled(out.oracle, "oracle");
    } else if (name == "best-static") {
      out.best_static = FindOracle(scenario, options.run, options.level, false);
      controller = MakeScheduled(out.best_static, "best-static");
    } else {
      continue;  // RunSuite rejects unknown names
    }
    Simulation sim(scenario, options.run);
    RunResult r = sim.Run(*controller);
    out.policies.push_back(Summarize(scenario, out.changes, std::move(r), options.run, options.level));
    if (options.progress) {
      const PolicyOutcome& p = out.policies.back();
      options.progress(absl::StrFormat("%-22s %-13s stall %5.1f%%  $%.2f/epoch  %.1f local %.1f remote", scenario.name,
                                       name, p.stall_fraction * 100, p.cost_per_epoch, p.mean_local, p.mean_remote));
    }
  }
  return out;
}

absl::StatusOr<std::vector<ScenarioOutcome>> RunSuite(const SuiteOptions& options) {
  for (const std::string& p : options.policies) {
    if (std::find(PolicyNames().begin(), PolicyNames().end(), p) == PolicyNames().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no policy '", p, "'; the policies are: ", absl::StrJoin(PolicyNames(), ", ")));
    }
  }
  std::vector<Scenario> chosen;
  if (options.scenarios.empty()) {
    chosen = AllScenarios();
  } else {
    for (const std::string& name : options.scenarios) {
      absl::StatusOr<Scenario> s = FindScenario(name);
      if (!s.ok()) return absl::InvalidArgumentError(s.status().message());
      chosen.push_back(*s);
    }
  }
  std::vector<ScenarioOutcome> out;
  for (Scenario& s : chosen) {
    if (options.tune_scenario) options.tune_scenario(s);
    if (absl::Status st = Validate(s); !st.ok()) return st;
    out.push_back(RunScenario(s, options));
  }
  return out;
}

PecanHeadline ComputePecanHeadline(const std::vector<ScenarioOutcome>& outcomes) {
  PecanHeadline h;
  for (const ScenarioOutcome& o : outcomes) {
    const PaperNumbers& paper = o.scenario.paper;
    if (!paper.cachew_remote_workers || !paper.pecan_remote_workers) continue;
    const PolicyOutcome* cachew = o.Find("cachew");
    const PolicyOutcome* pecan = o.Find("pecan");
    const PolicyOutcome* sluice = o.Find("sluice");
    const PolicyOutcome* remote = o.Find("sluice-remote");
    if (!cachew || !pecan || !sluice || !remote) continue;
    PecanHeadline::Row r;
    r.scenario = o.scenario.name;
    r.paper_reduction = 1.0 - *paper.pecan_remote_workers / *paper.cachew_remote_workers;
    auto reduction = [](double a, double b) { return b > 0 ? 1.0 - a / b : 0.0; };
    r.pecan_vs_cachew = reduction(pecan->preprocessing_cost_per_epoch, cachew->preprocessing_cost_per_epoch);
    r.sluice_vs_remote = reduction(sluice->preprocessing_cost_per_epoch, remote->preprocessing_cost_per_epoch);
    r.sluice_remote_workers = sluice->mean_remote;
    r.sluice_local_workers = sluice->mean_local;
    h.rows.push_back(r);
  }
  for (const PecanHeadline::Row& r : h.rows) {
    h.paper_mean += r.paper_reduction / h.rows.size();
    h.pecan_mean += r.pecan_vs_cachew / h.rows.size();
    h.sluice_mean += r.sluice_vs_remote / h.rows.size();
  }
  return h;
}

Summary Summarize(const std::vector<ScenarioOutcome>& outcomes) {
  Summary s;
  bool never = false, never_periods = false;
  int worst = 0, worst_decision_periods = 0, worst_periods = 0;
  for (const ScenarioOutcome& o : outcomes) {
    const PolicyOutcome* sluice = o.Find("sluice");
    if (!sluice) continue;
    for (const ChangeOutcome& c : sluice->changes) {
      const std::string where = o.scenario.name + " (" + c.label + ")";
      if (!c.decision_periods) {
        never_periods = true;
        s.worst_decision_periods_scenario = s.worst_periods_scenario = where;
      } else if (!never_periods) {
        if (*c.decision_periods >= worst_decision_periods) {
          worst_decision_periods = *c.decision_periods;
          s.worst_decision_periods_scenario = where;
        }
        if (*c.stalled_periods >= worst_periods) {
          worst_periods = *c.stalled_periods;
          s.worst_periods_scenario = where;
        }
      }
      if (!c.decisions) {
        never = true;
        s.worst_decisions_scenario = o.scenario.name + " (" + c.label + ")";
      } else if (!never && *c.decisions >= worst) {
        worst = *c.decisions;
        s.worst_decisions_scenario = o.scenario.name + " (" + c.label + ")";
      }
    }
    s.sluice_scale_downs_on_missing_data += sluice->run.totals.scale_downs_on_missing_data;
    auto ratio = [&](const char* other, double& worst_ratio, std::string& where) {
      const PolicyOutcome* p = o.Find(other);
      if (!p || p->cost_per_epoch <= 0) return;
      const double r = sluice->cost_per_epoch / p->cost_per_epoch;
      if (r > worst_ratio) {
        worst_ratio = r;
        where = o.scenario.name;
      }
    };
    ratio("pecan", s.sluice_vs_pecan_cost, s.worst_pecan_scenario);
    ratio("cachew", s.sluice_vs_cachew_cost, s.worst_cachew_scenario);
    ratio("oracle", s.sluice_vs_oracle_cost, s.worst_oracle_scenario);
  }
  if (!never) s.max_decisions_to_no_stall = worst;
  if (!never_periods) {
    s.max_decision_periods_to_no_stall = worst_decision_periods;
    s.max_periods_to_no_stall = worst_periods;
  }
  s.headline = ComputePecanHeadline(outcomes);
  return s;
}

namespace {

double R(double v, int digits = 4) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

json Optional(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

std::string SuiteJson(const std::vector<ScenarioOutcome>& outcomes, const SuiteOptions& options, double wall_seconds) {
  json scenarios = json::array();
  for (const ScenarioOutcome& o : outcomes) {
    json policies = json::object();
    for (const PolicyOutcome& p : o.policies) {
      json changes = json::array();
      for (const ChangeOutcome& c : p.changes) {
        changes.push_back({{"at_s", c.at_s}, {"change", c.label}, {"decisions_to_no_stall", Optional(c.decisions)},
                           {"seconds_to_no_stall", Optional(c.seconds)}, {"periods_to_no_stall", Optional(c.periods)},
                           {"stalled_periods", Optional(c.stalled_periods)},
                           {"pod_start_periods", c.pod_start_periods},
                           {"decision_periods_to_no_stall", Optional(c.decision_periods)}});
      }
      const RunTotals& t = p.run.totals;
      policies[p.policy] = {
          {"training_seconds_per_epoch", R(p.epoch_seconds, 1)},
          {"epochs", R(p.epochs, 3)},
          {"stall_fraction", R(p.stall_fraction)},
          {"max_period_stall", R(p.max_period_stall)},
          {"max_period_interference", R(p.max_period_interference)},
          {"cost_per_epoch", R(p.cost_per_epoch, 3)},
          {"accelerator_cost_per_epoch", R(p.accelerator_cost_per_epoch, 3)},
          {"preprocessing_cost_per_epoch", R(p.preprocessing_cost_per_epoch, 3)},
          {"mean_local_workers", R(p.mean_local, 2)},
          {"mean_remote_workers", R(p.mean_remote, 2)},
          {"scaling_decisions", t.scaling_decisions},
          {"scale_downs_on_missing_data", t.scale_downs_on_missing_data},
          {"no_stall_run", p.no_stall_run},
          {"changes", changes},
          {"elements",
           {{"produced", R(t.produced, 0)}, {"consumed", R(t.consumed, 0)}, {"buffered", R(t.buffered, 0)},
            {"lost_crash", R(t.lost_crash, 0)}, {"lost_on_scale_down", R(t.lost_drain, 0)},
            {"lost_evicted", R(t.lost_evicted, 0)}}},
      };
    }
    auto mixes = [](const OracleSchedule& s) {
      json a = json::array();
      for (size_t i = 0; i < s.mixes.size(); ++i) {
        a.push_back({{"from_s", s.starts[i]}, {"local", s.mixes[i].local}, {"remote", s.mixes[i].remote}});
      }
      return a;
    };
    json scenario = {{"name", o.scenario.name},
                     {"description", o.scenario.description},
                     {"horizon_s", o.scenario.horizon_s},
                     {"fixed_workers", o.fixed_workers},
                     {"policies", policies}};
    if (!o.oracle.mixes.empty()) {
      scenario["oracle_mixes"] = mixes(o.oracle);
      scenario["oracle_never_stalls"] = o.oracle.never_stalls;
    }
    if (!o.best_static.mixes.empty()) scenario["best_static_mix"] = mixes(o.best_static);
    scenarios.push_back(scenario);
  }
  const Summary s = Summarize(outcomes);
  json headline_rows = json::array();
  for (const PecanHeadline::Row& r : s.headline.rows) {
    headline_rows.push_back({{"scenario", r.scenario},
                             {"paper_remote_worker_reduction", R(r.paper_reduction, 3)},
                             {"pecan_vs_cachew_preprocessing_reduction", R(r.pecan_vs_cachew, 3)},
                             {"sluice_vs_remote_only_preprocessing_reduction", R(r.sluice_vs_remote, 3)},
                             {"sluice_local_workers", R(r.sluice_local_workers, 2)},
                             {"sluice_remote_workers", R(r.sluice_remote_workers, 2)}});
  }
  json summary = {
      {"max_decisions_to_no_stall", Optional(s.max_decisions_to_no_stall)},
      {"max_decisions_scenario", s.worst_decisions_scenario},
      {"max_decision_periods_to_no_stall", Optional(s.max_decision_periods_to_no_stall)},
      {"max_decision_periods_scenario", s.worst_decision_periods_scenario},
      {"max_periods_to_no_stall", Optional(s.max_periods_to_no_stall)},
      {"max_periods_scenario", s.worst_periods_scenario},
      {"sluice_vs_pecan_cost", R(s.sluice_vs_pecan_cost)},
      {"sluice_vs_pecan_worst_scenario", s.worst_pecan_scenario},
      {"sluice_vs_cachew_cost", R(s.sluice_vs_cachew_cost)},
      {"sluice_vs_cachew_worst_scenario", s.worst_cachew_scenario},
      {"sluice_vs_oracle_cost", R(s.sluice_vs_oracle_cost)},
      {"sluice_vs_oracle_worst_scenario", s.worst_oracle_scenario},
      {"sluice_scale_downs_on_missing_data", s.sluice_scale_downs_on_missing_data},
      {"pecan_headline",
       {{"paper_mean_remote_worker_reduction", R(s.headline.paper_mean, 3)},
        {"pecan_vs_cachew_mean_preprocessing_reduction", R(s.headline.pecan_mean, 3)},
        {"sluice_vs_remote_only_mean_preprocessing_reduction", R(s.headline.sluice_mean, 3)},
        {"rows", headline_rows}}},
  };
  json targets = {
      {"no_stall_within_2_decisions", s.max_decisions_to_no_stall && *s.max_decisions_to_no_stall <= 2},
      {"no_stall_within_2_decision_periods_beyond_pod_start",
       s.max_decision_periods_to_no_stall && *s.max_decision_periods_to_no_stall <= 2},
      {"cost_at_most_pecan", s.sluice_vs_pecan_cost <= 1.0},
      {"cost_at_most_1_1x_oracle", s.sluice_vs_oracle_cost <= 1.1},
      {"no_scale_down_on_missing_data", s.sluice_scale_downs_on_missing_data == 0},
  };
  json out = {{"benchmark", "autoscale"},
              {"mode", "simulator"},
              {"decision_period_s", options.run.decision_period_s},
              {"scrape_interval_s", options.run.scrape_interval_s},
              {"rate_window_s", options.run.rate_window_s},
              {"target_stall_ratio", options.level.target_stall},
              {"max_interference", options.level.max_interference},
              {"wall_seconds", R(wall_seconds, 2)},
              {"scenarios", scenarios},
              {"summary", summary},
              {"targets", targets}};
  return out.dump();
}

std::string SeriesJson(const ScenarioOutcome& o) {
  json policies = json::object();
  for (const PolicyOutcome& p : o.policies) {
    json t = json::array(), local = json::array(), remote = json::array(), stall = json::array(),
         cost = json::array(), local_ready = json::array(), remote_ready = json::array();
    for (const PeriodRecord& r : p.run.periods) {
      t.push_back(r.t_end);
      local.push_back(r.local_pods);
      remote.push_back(r.remote_pods);
      local_ready.push_back(r.local_ready);
      remote_ready.push_back(r.remote_ready);
      stall.push_back(R(r.stall));
      cost.push_back(R(r.accelerator_dollars + r.remote_dollars, 3));
    }
    // The decisions that acted, and those taken on missing or stale data (held or not), with the
    // controller's note: what a reader of a plot asks "why did it do that here?" about.
    json decisions = json::array();
    for (const DecisionRecord& d : p.run.decisions) {
      if (!d.act && !d.missing_data) continue;
      decisions.push_back({{"t_s", d.t},
                           {"act", d.act},
                           {"replicas_before", d.replicas_before},
                           {"replicas_after", d.replicas_after},
                           {"local_after", d.local_after},
                           {"missing_data", d.missing_data},
                           {"note", d.note}});
    }
    policies[p.policy] = {{"t_s", t},          {"local_pods", local}, {"remote_pods", remote},
                          {"local_ready", local_ready}, {"remote_ready", remote_ready},
                          {"stall", stall},     {"cost_dollars", cost}, {"cost_per_epoch", R(p.cost_per_epoch, 3)},
                          {"decisions", decisions}};
  }
  json changes = json::array();
  for (const Change& c : o.changes) changes.push_back({{"at_s", c.at_s}, {"label", c.label}});
  json outages = json::array();
  for (const ScenarioEvent& e : o.scenario.events) {
    if (e.kind == EventKind::kOutage || e.kind == EventKind::kCrashLoop) {
      outages.push_back({{"from_s", e.at_s}, {"to_s", e.at_s + e.duration_s}, {"label", e.label}});
    }
  }
  json out = {{"scenario", o.scenario.name}, {"description", o.scenario.description}, {"horizon_s", o.scenario.horizon_s},
              {"changes", changes},          {"intervals", outages},                   {"policies", policies}};
  return out.dump();
}

std::string MarkdownTable(const std::vector<ScenarioOutcome>& outcomes) {
  std::string out;
  for (const ScenarioOutcome& o : outcomes) {
    absl::StrAppend(&out, "\n**", o.scenario.name, "** — ", o.scenario.description, "\n\n");
    absl::StrAppend(&out,
                    "| policy | min/epoch | stall | $/epoch | remote $/epoch | local | remote | decisions to no stall "
                    "| decision periods to no stall | scale-downs on missing data |\n"
                    "|---|---:|---:|---:|---:|---:|---:|---|---|---:|\n");
    for (const PolicyOutcome& p : o.policies) {
      std::vector<std::string> d, dp;
      for (const ChangeOutcome& c : p.changes) {
        d.push_back(c.decisions ? absl::StrCat(*c.decisions) : "never");
        dp.push_back(c.decision_periods ? absl::StrCat(*c.decision_periods) : "never");
      }
      absl::StrAppend(&out, absl::StrFormat("| %s | %.1f | %.1f%% | %.2f | %.2f | %.1f | %.1f | %s | %s | %d |\n",
                                            p.policy, p.epoch_seconds / 60, p.stall_fraction * 100, p.cost_per_epoch,
                                            p.preprocessing_cost_per_epoch, p.mean_local, p.mean_remote,
                                            absl::StrJoin(d, ", "), absl::StrJoin(dp, ", "),
                                            p.run.totals.scale_downs_on_missing_data));
    }
    // The scenario's figure (scripts/autoscale_plots.sh draws it into docs/img).
    absl::StrAppend(&out, "\n![", o.scenario.name, ": workers, stall and cost over time per policy](img/autoscale-",
                    o.scenario.name, ".png)\n");
  }
  return out;
}

}  // namespace sluice::sim
