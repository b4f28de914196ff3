#include "sim/policies/policies.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::sim {

using autoscaler::Placement;

// --- Sluice ------------------------------------------------------------------------------------

autoscaler::PolicyConfig SluicePolicyConfig(const Scenario& scenario) {
  autoscaler::PolicyConfig c;
  c.min_replicas = 1;
  c.max_replicas = scenario.max_workers;
  c.placement.policy = Placement::kHybrid;
  c.placement.worker_cpus = scenario.remote.cores;
  c.placement.cost.accelerator_hourly = scenario.accelerator.hourly;
  c.placement.cost.remote_cpu_hourly = scenario.remote.hourly / scenario.remote.cores;
  return c;
}

SluiceController::SluiceController(autoscaler::PolicyConfig config, std::string name)
    : config_(std::move(config)), name_(std::move(name)) {}

Action SluiceController::Initial(const Scenario&) {
  Action a;
  a.act = true;
  a.replicas = std::max(1, config_.min_replicas);
  a.placement = config_.placement.policy;  // local unset: the operator places local first
  return a;
}

autoscaler::Target SluiceController::TargetFrom(const Observation& o) {
  autoscaler::Target t;
  t.replicas = o.replicas;
  int placed_local = 0;
  for (const PodView& p : o.pods) {
    if (p.draining) continue;
    placed_local += p.local ? 1 : 0;
    t.workers.push_back({p.name, p.local, p.ready, 0, SimTime(p.created_s)});
  }
  t.local = o.local.value_or(placed_local);
  std::vector<std::pair<absl::Time, absl::Time>> started;
  for (const PodView& p : o.pods) {
    if (p.ready_s >= 0) started.push_back({SimTime(p.created_s), SimTime(p.ready_s)});
  }
  t.pod_start_latency = autoscaler::ObservedStartLatency(std::move(started));
  t.local_capacity = o.local_capacity;
  t.consumer_nodes = std::max(1, o.consumer_nodes);
  return t;
}

Action SluiceController::Decide(const Observation& o) {
  // Workers kept only until a shift's replacements serve (the policy's make before break).
  const int surge = history_.surge_extra > 0 && history_.surge_total == o.replicas ? history_.surge_extra : 0;
  autoscaler::DecisionResult r = autoscaler::Decide(config_, TargetFrom(o), o.signals, history_, o.now);
  history_ = r.history;
  const autoscaler::Decision& d = r.decision;
  Action a;
  if (d.direction == autoscaler::Direction::kShift && d.replicas < o.replicas) {
    a.surge_released = std::min(surge, o.replicas - d.replicas);
  }
  a.act = d.act;
  a.replicas = d.replicas;
  a.placement = config_.placement.policy;
  a.local = d.local;
  a.remove = d.workers_to_delete;
  a.note = d.Summary();
  decisions_.push_back(d);
  return a;
}

// --- Collocated and fixed ----------------------------------------------------------------------

namespace {

class Collocated : public Controller {
 public:
  std::string Name() const override { return "collocated"; }
  Action Initial(const Scenario& s) override {
    Action a;
    a.act = true;
    a.replicas = s.max_workers;  // LocalOnly: every slot the hosts have, none remote
    a.placement = Placement::kLocalOnly;
    a.instant = true;            // in-process preprocessing: nothing to start
    a.note = "all spare host CPU";
    return a;
  }
  Action Decide(const Observation&) override { return {}; }
};

class FixedRemote : public Controller {
 public:
  explicit FixedRemote(int workers) : workers_(workers) {}
  std::string Name() const override { return "fixed"; }
  Action Initial(const Scenario&) override {
    Action a;
    a.act = true;
    a.replicas = workers_;
    a.placement = Placement::kRemoteOnly;
    a.note = absl::StrCat(workers_, " remote workers, fixed");
    return a;
  }
  Action Decide(const Observation&) override { return {}; }

 private:
  int workers_;
};

}  // namespace

std::unique_ptr<Controller> MakeCollocated() { return std::make_unique<Collocated>(); }

int FixedRemoteSize(const Scenario& s) {
  double demand = 0;
  for (const JobSpec& j : s.jobs) {
    if (j.start_s == 0) demand += 1.0 / j.compute_seconds_per_element;
  }
  const double need = demand * s.pipeline.cpu_seconds_per_element / s.remote.cores;
  return std::clamp(static_cast<int>(std::ceil(1.2 * need - 1e-9)), 1, s.max_workers);
}

std::unique_ptr<Controller> MakeFixedRemote(int workers) { return std::make_unique<FixedRemote>(workers); }

// --- HPA ---------------------------------------------------------------------------------------

namespace {

// Kubernetes' HorizontalPodAutoscaler (v2) on CPU utilization, as pkg/controller/podautoscaler does
// it: the replica calculator (unready pods set aside, missing metrics at 0% on the way up and 100% on
// the way down, tolerance), the scale-down stabilization window over its recommendations, the
// default rate limits (up: max(4 pods, 100%) per 15 s; down: 100% per 15 s), min/max bounds.
class Hpa : public Controller {
 public:
  explicit Hpa(HpaConfig c) : c_(c) {}
  std::string Name() const override { return "hpa"; }
  Action Initial(const Scenario&) override {
    Action a;
    a.act = true;
    a.replicas = c_.min_replicas;
    a.placement = Placement::kRemoteOnly;
    return a;
  }
  Action Decide(const Observation& o) override {
    Action a;
    const int current = o.replicas;
    if (!o.pod_cpu_available) {
      a.note = "FailedGetResourceMetric: no metrics, no change";
      return a;
    }
    const double request = o.worker_cores;
    double usage = 0;
    int ready = 0, unready = 0, missing = 0;
    for (const PodView& p : o.pods) {
      if (p.draining) continue;  // deleted pods are ignored
      if (!p.ready) {
        ++unready;
        continue;
      }
      auto it = o.pod_cpu.find(p.name);
      if (it == o.pod_cpu.end()) {
        ++missing;
        continue;
      }
      usage += it->second;
      ++ready;
    }
    if (ready == 0) {
      a.note = "no pod with metrics yet";
      return a;
    }
    const double ratio = usage / (ready * request) / c_.target_utilization;
    int desired = current;
    const bool up_with_unready = unready > 0 && ratio > 1.0;
    if (!up_with_unready && missing == 0) {
      if (std::abs(1.0 - ratio) > c_.tolerance) desired = static_cast<int>(std::ceil(ratio * ready));
    } else {
      double u = usage;
      int n = ready;
      if (missing > 0) {
        if (ratio < 1.0) u += missing * request;  // scale down: missing pods at 100%
        n += missing;
      }
      if (up_with_unready) n += unready;  // at 0%
      const double fresh = u / (n * request) / c_.target_utilization;
      const bool flips = (ratio < 1.0 && fresh > 1.0) || (ratio > 1.0 && fresh < 1.0);
      if (std::abs(1.0 - fresh) > c_.tolerance && !flips) {
        const int candidate = static_cast<int>(std::ceil(fresh * n));
        if (!((fresh < 1.0 && candidate > current) || (fresh > 1.0 && candidate < current))) desired = candidate;
      }
    }
    // Stabilization: a scale-down takes the highest recommendation of the last 300 s.
    history_.push_back({o.now_s, desired});
    while (!history_.empty() && history_.front().first <= o.now_s - c_.scale_down_window_s) history_.erase(history_.begin());
    int stabilized = desired;
    if (desired < current) {
      for (const auto& [t, r] : history_) stabilized = std::max(stabilized, r);
      stabilized = std::min(stabilized, current);
    }
    // Rate limits per 15 s period, then bounds.
    int limited = std::min(stabilized, std::max(current + 4, 2 * current));
    limited = std::clamp(limited, c_.min_replicas, c_.max_replicas);
    a.note = absl::StrFormat("utilization ratio %.2f (%d ready, %d unready, %d missing): %d -> %d", ratio, ready,
                             unready, missing, current, limited);
    if (limited != current) {
      a.act = true;
      a.replicas = limited;
      a.placement = Placement::kRemoteOnly;
    }
    return a;
  }

 private:
  HpaConfig c_;
  std::vector<std::pair<int, int>> history_;
};

// Cachew's hill climb, and Pecan's AutoPlacement after it.
class HillClimb : public Controller {
 public:
  HillClimb(HillClimbConfig c, bool pecan) : c_(c), pecan_(pecan) {}
  std::string Name() const override { return pecan_ ? "pecan" : "cachew"; }
  Action Initial(const Scenario&) override { return Set("one remote worker to start"); }
  Action Decide(const Observation& o) override {
    if (stage_ == Stage::kFrozen) return {};
    // Measure only once every worker asked for runs, over a whole window after that.
    int running = 0;
    bool all_ready = true;
    for (const PodView& p : o.pods) {
      if (p.draining) continue;
      ++running;
      all_ready = all_ready && p.ready;
    }
    if (!all_ready || running != local_ + remote_) {
      ready_since_ = -1;
      return {};
    }
    if (ready_since_ < 0) ready_since_ = o.now_s;
    if (SimTime(ready_since_) > o.signals.at - o.signals.window) return {};
    if (!o.signals.demand.known()) return {};
    const double throughput = *o.signals.demand;
    ready_since_ = -1;
    if (stage_ == Stage::kClimb) {
      if (!reference_ || throughput >= *reference_ * (1.0 + c_.min_gain)) {
        reference_ = throughput;
        if (local_ + remote_ < c_.max_replicas) {
          ++remote_;
          return Set(absl::StrFormat("throughput %.1f/s: one more remote worker", throughput));
        }
      }
      // Converged: the last worker gained less than min_gain (or the bound is reached).
      if (!pecan_ || o.local_capacity <= 0 || remote_ == 0) {
        stage_ = Stage::kFrozen;
        return {};
      }
      stage_ = Stage::kPlace;
      placement_reference_ = std::max(throughput, *reference_);
      ++local_;
      --remote_;
      return Set("climb converged: one local worker in, one remote out");
    }
    // kPlace: keep shifting while throughput stays within the slack of the climb's.
    if (throughput >= placement_reference_ * (1.0 - c_.placement_slack)) {
      if (remote_ > 0 && local_ < o.local_capacity) {
        ++local_;
        --remote_;
        return Set("throughput within the slack: one more local in, one remote out");
      }
      stage_ = Stage::kFrozen;
      return {};
    }
    --local_;
    ++remote_;
    stage_ = Stage::kFrozen;
    return Set("throughput fell more than the slack: last shift reverted, frozen");
  }

 private:
  enum class Stage { kClimb, kPlace, kFrozen };
  Action Set(std::string why) {
    Action a;
    a.act = true;
    a.replicas = local_ + remote_;
    a.placement = pecan_ ? Placement::kHybrid : Placement::kRemoteOnly;
    if (pecan_) a.local = local_;
    a.note = std::move(why);
    return a;
  }

  HillClimbConfig c_;
  bool pecan_;
  Stage stage_ = Stage::kClimb;
  int local_ = 0, remote_ = 1;
  std::optional<double> reference_;
  double placement_reference_ = 0;
  int ready_since_ = -1;
};

}  // namespace

std::unique_ptr<Controller> MakeHpa(const HpaConfig& config) { return std::make_unique<Hpa>(config); }
std::unique_ptr<Controller> MakeCachew(const HillClimbConfig& config) {
  return std::make_unique<HillClimb>(config, false);
}
std::unique_ptr<Controller> MakePecan(const HillClimbConfig& config) {
  return std::make_unique<HillClimb>(config, true);
}

// --- Oracle ------------------------------------------------------------------------------------

namespace {

class Scheduled : public Controller {
 public:
  Scheduled(OracleSchedule s, std::string name) : s_(std::move(s)), name_(std::move(name)) {}
  std::string Name() const override { return name_; }
  Action Initial(const Scenario&) override { return For(0); }
  Action Decide(const Observation& o) override {
    for (size_t p = 1; p < s_.starts.size(); ++p) {
      if (s_.starts[p] == o.now_s) return For(p);
    }
    return {};
  }

 private:
  Action For(size_t p) const {
    Action a;
    a.act = true;
    a.instant = true;
    const Mix m = p < s_.mixes.size() ? s_.mixes[p] : Mix{};
    a.replicas = m.local + m.remote;
    a.placement = Placement::kHybrid;
    a.local = m.local;
    a.note = absl::StrCat("phase ", p, ": ", m.local, " local, ", m.remote, " remote");
    return a;
  }
  OracleSchedule s_;
  std::string name_;
};

int CapacityAt(const Scenario& s, int t) {
  int slots = s.accelerator.local_slots;
  for (const ScenarioEvent& e : s.events) {
    if (e.kind == EventKind::kLocalSlots && e.at_s <= t) slots = static_cast<int>(e.value);
  }
  int hosts = 0;
  for (const JobSpec& j : s.jobs) {
    if (t >= j.start_s && (j.end_s == 0 || t < j.end_s)) hosts += j.hosts;
  }
  return slots * hosts;
}

// Workers the jobs running at `t` need at their compute speed then (no interference, no noise).
double NeedAt(const Scenario& s, int t) {
  double demand = 0;
  for (size_t j = 0; j < s.jobs.size(); ++j) {
    const JobSpec& job = s.jobs[j];
    if (t < job.start_s || (job.end_s != 0 && t >= job.end_s)) continue;
    double scale = 1;
    for (const ScenarioEvent& e : s.events) {
      if (e.kind == EventKind::kComputeScale && e.job == static_cast<int>(j) && e.at_s <= t) scale = e.value;
    }
    demand += 1.0 / (job.compute_seconds_per_element * scale);
  }
  return demand * s.pipeline.cpu_seconds_per_element / s.remote.cores;
}

struct Evaluation {
  double max_stall = 1;
  double max_interference = 1;
  bool Meets(const ServiceLevel& l) const { return max_stall < l.target_stall && max_interference <= l.max_interference; }
  double cost_per_element = std::numeric_limits<double>::infinity();
};

// Runs `base` (positioned before the events of t0; null: a fresh start) with `schedule` to t1 and
// judges the periods in (t0, t1].
Evaluation Evaluate(const Scenario& scenario, const RunOptions& options, const Simulation* base,
                    const OracleSchedule& schedule, int t0, int t1) {
  Scheduled controller(schedule, "oracle");
  Simulation sim = base ? *base : Simulation(scenario, options);
  if (!base) sim.Start(controller);
  RunResult r;
  if (t1 >= scenario.horizon_s) {
    r = sim.Finish(controller);
  } else {
    sim.RunUntil(controller, t1 + 1);  // processes t1's decision, which closes the period ending at t1
    r = sim.progress();
  }
  Evaluation e;
  e.max_stall = 0;
  e.max_interference = 0;
  double consumed = 0, dollars_at_t0 = 0, dollars_at_t1 = 0;
  for (const PeriodRecord& p : r.periods) {
    if (p.t_end == t0) dollars_at_t0 = p.accelerator_dollars + p.remote_dollars;
    if (p.t_end > t0 && p.t_end <= t1) {
      consumed += p.consumed;
      e.max_stall = std::max(e.max_stall, p.stall);
      e.max_interference = std::max(e.max_interference, p.interference);
      dollars_at_t1 = p.accelerator_dollars + p.remote_dollars;
    }
  }
  if (consumed > 0) e.cost_per_element = (dollars_at_t1 - dollars_at_t0) / consumed;
  return e;
}

}  // namespace

std::unique_ptr<Controller> MakeScheduled(const OracleSchedule& schedule, std::string name) {
  return std::make_unique<Scheduled>(schedule, std::move(name));
}

OracleSchedule FindOracle(const Scenario& scenario, const RunOptions& options, const ServiceLevel& level,
                          bool per_phase) {
  OracleSchedule schedule;
  schedule.starts = per_phase ? PhaseBoundaries(scenario) : std::vector<int>{0};
  schedule.mixes.assign(schedule.starts.size(), Mix{});
  std::optional<Simulation> base;
  for (size_t p = 0; p < schedule.starts.size(); ++p) {
    const int t0 = schedule.starts[p];
    const int t1 = p + 1 < schedule.starts.size() ? schedule.starts[p + 1] : scenario.horizon_s;
    int capacity = CapacityAt(scenario, t0);
    if (!per_phase) {
      capacity = 0;
      for (int t : PhaseBoundaries(scenario)) capacity = std::max(capacity, CapacityAt(scenario, t));
    }
    std::map<std::pair<int, int>, Evaluation> cache;
    auto eval = [&](Mix m) {
      auto it = cache.find({m.local, m.remote});
      if (it != cache.end()) return it->second;
      OracleSchedule trial = schedule;
      for (size_t q = p; q < trial.mixes.size(); ++q) trial.mixes[q] = m;
      Evaluation e = Evaluate(scenario, options, base ? &*base : nullptr, trial, t0, t1);
      cache[{m.local, m.remote}] = e;
      return e;
    };
    // The search starts from a generous guess of the size (clairvoyant: the need at the phase start,
    // or the most of any phase for a static mix) and falls back to every worker allowed.
    double need = NeedAt(scenario, t0);
    if (!per_phase) {
      for (int t : PhaseBoundaries(scenario)) need = std::max(need, NeedAt(scenario, t));
    }
    const int guess = static_cast<int>(std::ceil(1.5 * need)) + 2;
    std::optional<Mix> best;
    double best_cost = std::numeric_limits<double>::infinity();
    Mix least_stall{};
    double least = std::numeric_limits<double>::infinity();
    for (int local = 0; local <= std::min({capacity, scenario.max_workers, guess}); ++local) {
      const int most = scenario.max_workers - local;
      int hi = std::clamp(guess - local, 0, most);
      Evaluation top = eval({local, hi});
      if (!top.Meets(level) && hi < most) {
        hi = most;
        top = eval({local, hi});
      }
      if (top.max_stall < least) {
        least = top.max_stall;
        least_stall = {local, hi};
      }
      if (!top.Meets(level)) continue;
      int lo = 0;  // hi is known to work
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (eval({local, mid}).Meets(level)) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      const Evaluation e = eval({local, hi});
      if (e.cost_per_element < best_cost) {
        best_cost = e.cost_per_element;
        best = Mix{local, hi};
      }
    }
    if (!best) {
      schedule.never_stalls = false;
      best = least_stall;
    }
    schedule.mixes[p] = *best;
    for (size_t q = p + 1; q < schedule.mixes.size(); ++q) schedule.mixes[q] = *best;
    // Advance the base run through this phase with the chosen mix.
    Scheduled controller(schedule, "oracle");
    if (!base) {
      base.emplace(scenario, options);
      base->Start(controller);
    }
    base->RunUntil(controller, t1);
  }
  return schedule;
}

}  // namespace sluice::sim
