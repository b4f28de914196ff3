#include "autoscaler/policy/policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace sluice::autoscaler {

Measurement Measurement::Of(double v) {
  if (std::isnan(v)) return Missing("NaN");
  if (std::isinf(v)) return Missing("infinite");
  return Measurement{v, ""};
}
Measurement Measurement::Missing(std::string why) { return Measurement{std::nullopt, std::move(why)}; }

const char* ModeName(Mode m) { return m == Mode::kRecommend ? "Recommend" : "Auto"; }

const char* DirectionName(Direction d) {
  switch (d) {
    case Direction::kNone: return "none";
    case Direction::kUp: return "up";
    case Direction::kDown: return "down";
    case Direction::kShift: return "shift";
  }
  return "none";
}

const char* ReasonName(Reason r) {
  switch (r) {
    case Reason::kScaledUp: return "ScaledUp";
    case Reason::kScaledDown: return "ScaledDown";
    case Reason::kShifted: return "Shifted";
    case Reason::kNoChange: return "NoChange";
    case Reason::kIdle: return "Idle";
    case Reason::kWithinTolerance: return "WithinTolerance";
    case Reason::kScaleUpStabilized: return "ScaleUpStabilized";
    case Reason::kScaleDownStabilized: return "ScaleDownStabilized";
    case Reason::kScaleUpLimited: return "ScaleUpLimited";
    case Reason::kScaleDownLimited: return "ScaleDownLimited";
    case Reason::kTooFewReplicas: return "TooFewReplicas";
    case Reason::kTooManyReplicas: return "TooManyReplicas";
    case Reason::kHeldOnMissingData: return "HeldOnMissingData";
    case Reason::kHeldOnStaleData: return "HeldOnStaleData";
    case Reason::kHeldOnChurn: return "HeldOnChurn";
    case Reason::kHeldUntilSettled: return "HeldUntilSettled";
    case Reason::kScaleUpWithoutModel: return "ScaleUpWithoutModel";
    case Reason::kFallback: return "Fallback";
    case Reason::kStallNotFromWorkers: return "StallNotFromWorkers";
    case Reason::kBrokenWorkers: return "BrokenWorkers";
    case Reason::kRecommendOnly: return "RecommendOnly";
  }
  return "NoChange";
}

bool Decision::Has(Reason r) const {
  return std::any_of(reasons.begin(), reasons.end(), [r](const ReasonNote& n) { return n.reason == r; });
}

std::string Decision::Summary() const {
  std::vector<std::string> parts;
  for (const ReasonNote& n : reasons) parts.push_back(absl::StrCat(ReasonName(n.reason), ": ", n.message));
  return absl::StrCat(replicas, " workers (", local, " local, ", remote, " remote), ", DirectionName(direction),
                      act ? "" : " (not acted on)", "; ", absl::StrJoin(parts, "; "));
}

namespace {

std::string Num(double v) { return absl::StrFormat("%.4g", v); }

// Workers at least this busy (CPU used / CPU they have) measure their capacity by CPU well enough
// to remember it.
constexpr double kBusyUtilization = 0.5;

// How long ago, for messages.
std::string Ago(absl::Time now, absl::Time then) {
  if (then == absl::InfinitePast()) return "never";
  return absl::StrCat(absl::FormatDuration(absl::Trunc(now - then, absl::Seconds(1))), " ago");
}

// Every measurement missing with the same reason.
Signals AllMissing(const Signals& s, const std::string& why) {
  Signals out = s;
  for (Measurement* m : {&out.stall_ratio, &out.demand, &out.supply, &out.worker_cpu, &out.compute_per_element,
                         &out.buffered, &out.churn, &out.workers, &out.local_workers}) {
    *m = Measurement::Missing(why);
  }
  return out;
}

void Need(const char* name, const Measurement& m, std::vector<std::string>& missing) {
  if (!m.known()) missing.push_back(absl::StrCat(name, ": ", m.missing.empty() ? "unknown" : m.missing));
}

}  // namespace

Sizing SizeFromSignals(const PolicyConfig& config, const Signals& signals, const PolicyHistory& history,
                       bool settled) {
  Sizing out;
  Arithmetic& a = out.arithmetic;
  if (signals.stall_ratio.known()) a.stall_ratio = std::clamp(*signals.stall_ratio, 0.0, 1.0);
  if (signals.demand.known()) a.demand = std::max(0.0, *signals.demand);
  if (signals.supply.known()) a.supply = std::max(0.0, *signals.supply);

  // Idle: the trainers consume nothing and are not known to be stalled.
  if (a.demand && *a.demand <= 0 && (!a.stall_ratio || *a.stall_ratio <= config.target_stall_ratio)) {
    out.idle = true;
    out.replicas = config.min_replicas;
    a.true_demand = 0;
    a.needed_exact = 0;
    return out;
  }
  Need("demand", signals.demand, out.missing);
  Need("stall ratio", signals.stall_ratio, out.missing);
  if (!a.demand || !a.stall_ratio) return out;

  const double stall = *a.stall_ratio;
  // A stalled trainer consumes (1 - stall) of what it would without stalls. (This is the trainers'
  // step rate over their compute time per element.) The floor bounds one decision to 50x what is
  // consumed now: a job that starts on one worker and needs up to ~50 is sized in one decision.
  a.true_demand = *a.demand / std::max(1.0 - stall, 0.02);
  const bool stalled = stall > config.target_stall_ratio;

  const std::optional<double> workers =
      signals.workers.known() && *signals.workers > 0 ? std::optional<double>(*signals.workers) : std::nullopt;
  if (a.supply && workers) a.supply_per_worker = *a.supply / *workers;
  if (workers && signals.worker_cpu.known() && config.placement.worker_cpus > 0) {
    a.utilization = *signals.worker_cpu / *workers / config.placement.worker_cpus;
  }
  // Stalled while elements sit in the workers' buffers: the workers keep up, something after them
  // (the network, the client) does not.
  if (stalled && signals.buffered.known() && *signals.buffered >= std::max(1.0, *a.demand)) {
    out.stall_not_from_workers = true;
  }

  if (stalled && !out.stall_not_from_workers && a.supply_per_worker && *a.supply_per_worker > 0 &&
      (settled || (!history.capacity_per_worker && !history.cpu_capacity_per_worker))) {
    // Unsettled (workers added within the window are still starting and make little): taken only
    // when nothing better is known, else it would size from a fraction of a worker's capacity.
    a.capacity_per_worker = *a.supply_per_worker;  // the trainers wait, the buffers are empty: workers run flat out
    a.capacity_source = "saturated";
  } else if (a.utilization && *a.utilization >= 0.05 && a.supply_per_worker && *a.supply_per_worker > 0) {
    a.capacity_per_worker = *a.supply_per_worker / *a.utilization;
    a.capacity_source = "CPU";
    if (history.capacity_per_worker && *history.capacity_per_worker < *a.capacity_per_worker) {
      // A worker may not turn all its CPUs into elements (a serial stage): what it did flat out wins.
      a.capacity_per_worker = *history.capacity_per_worker;
      a.capacity_source = "CPU, capped by the last saturated measurement";
    }
  } else if (history.capacity_per_worker) {
    a.capacity_per_worker = *history.capacity_per_worker;
    a.capacity_source = "remembered";
  } else if (history.cpu_capacity_per_worker) {
    // Never saturated (the pool kept up), now idle: what a busy worker made per CPU before.
    a.capacity_per_worker = *history.cpu_capacity_per_worker;
    a.capacity_source = "remembered (CPU)";
  }
  if (!a.capacity_per_worker) {
    std::vector<std::string> why;
    Need("supply", signals.supply, why);
    Need("workers", signals.workers, why);
    if (signals.workers.known() && *signals.workers <= 0) why.push_back("workers: none registered");
    Need("worker CPU", signals.worker_cpu, why);
    if (config.placement.worker_cpus <= 0) why.push_back("worker CPUs unknown");
    if (why.empty()) why.push_back("workers idle");
    out.missing.push_back(absl::StrCat("per-worker capacity: ", absl::StrJoin(why, ", ")));
    return out;
  }
  a.needed_exact = *a.true_demand * (1.0 - config.target_stall_ratio) * (1.0 + config.headroom) /
                   *a.capacity_per_worker;
  out.replicas = std::max<int32_t>(1, static_cast<int32_t>(std::ceil(*a.needed_exact - 1e-9)));
  return out;
}

std::optional<absl::Duration> ObservedStartLatency(std::vector<std::pair<absl::Time, absl::Time>> created_ready) {
  std::erase_if(created_ready, [](const auto& p) { return p.second < p.first; });
  if (created_ready.empty()) return std::nullopt;
  std::sort(created_ready.begin(), created_ready.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (created_ready.size() > 10) created_ready.resize(10);
  std::vector<absl::Duration> latencies;
  for (const auto& [created, ready] : created_ready) latencies.push_back(ready - created);
  std::sort(latencies.begin(), latencies.end());
  return latencies[latencies.size() / 2];
}

Stabilized Stabilize(const std::vector<Recommendation>& recommendations, int32_t current, int32_t recommended,
                     const PolicyConfig& config, absl::Time now) {
  int32_t up_min = recommended;
  int32_t down_max = recommended;
  for (const Recommendation& r : recommendations) {
    if (r.at > now - config.scale_up.stabilization_window) up_min = std::min(up_min, r.replicas);
    if (r.at > now - config.scale_down.stabilization_window) down_max = std::max(down_max, r.replicas);
  }
  Stabilized out{current, std::nullopt};
  if (current < up_min) {
    out.replicas = up_min;
  } else if (current > down_max) {
    out.replicas = down_max;
  }
  if (recommended > current && out.replicas < recommended) out.reason = Reason::kScaleUpStabilized;
  if (recommended < current && out.replicas > recommended) out.reason = Reason::kScaleDownStabilized;
  return out;
}

Limited LimitRate(int32_t current, int32_t desired, const PolicyConfig& config) {
  Limited out{desired, {}};
  if (out.replicas > current && config.scale_up.max_step > 0 && out.replicas - current > config.scale_up.max_step) {
    out.replicas = current + config.scale_up.max_step;
    out.reasons.push_back(Reason::kScaleUpLimited);
  }
  if (out.replicas < current && config.scale_down.max_step > 0 &&
      current - out.replicas > config.scale_down.max_step) {
    out.replicas = current - config.scale_down.max_step;
    out.reasons.push_back(Reason::kScaleDownLimited);
  }
  if (out.replicas > config.max_replicas) {
    out.replicas = config.max_replicas;
    out.reasons.push_back(Reason::kTooManyReplicas);
  }
  if (out.replicas < config.min_replicas) {
    out.replicas = config.min_replicas;
    out.reasons.push_back(Reason::kTooFewReplicas);
  }
  return out;
}

DecisionResult Decide(const PolicyConfig& config, const Target& target, const Signals& input_signals,
                      const PolicyHistory& history, absl::Time now) {
  DecisionResult result;
  Decision& d = result.decision;
  PolicyHistory& h = result.history;
  h = history;
  auto note = [&d](Reason r, std::string message) { d.reasons.push_back({r, std::move(message)}); };
  const int32_t current = std::max<int32_t>(0, target.replicas);
  // Workers added ahead of a removal (make before break, see below) are not part of the size the
  // policy decided; unless someone else changed the count since.
  const int32_t surge = h.surge_extra > 0 && h.surge_total == current ? std::min(h.surge_extra, current) : 0;
  const int32_t committed = current - surge;

  // Stale data is no data.
  const bool stale = input_signals.at == absl::InfinitePast() || now - input_signals.at > config.max_signal_age;
  const Signals signals =
      stale ? AllMissing(input_signals, input_signals.at == absl::InfinitePast()
                                            ? std::string("no observation yet")
                                            : absl::StrCat("stale: the window ended ", Ago(now, input_signals.at)))
            : input_signals;
  // After a change, pods must start and the window must refill before the data describes the new
  // size: the configured settle time, or the observed pod start latency when longer.
  const absl::Duration settle = std::max(config.settle_time, target.pod_start_latency.value_or(absl::ZeroDuration()));
  const bool settled = signals.at - signals.window >= h.last_change + settle;

  Sizing sizing = SizeFromSignals(config, signals, h, settled);
  // The recent window sees a demand step at once; it may only raise the size, and only while the
  // trainers stall now or want more now than over the window. The window's rates lag a step: they
  // average the time after it with the time before it, and the trainers' own buffers (and the
  // workers') hide the step from the stall until they run dry, so waiting for the stall (or for the
  // window) sizes late and in several steps.
  if (signals.recent_stall_ratio.known() && signals.recent_demand.known() && signals.recent_supply.known()) {
    Signals recent = signals;
    recent.stall_ratio = signals.recent_stall_ratio;
    recent.demand = signals.recent_demand;
    recent.supply = signals.recent_supply;
    recent.worker_cpu = signals.recent_worker_cpu;
    if (signals.recent_workers.known()) recent.workers = signals.recent_workers;
    Sizing fast = SizeFromSignals(config, recent, h, settled);
    const bool recent_stalled = *signals.recent_stall_ratio > config.target_stall_ratio;
    // A demand step: the true demand over the recent window is above the window's by more than the
    // tolerance (noise within it is no step).
    const bool demand_step = fast.arithmetic.true_demand && sizing.arithmetic.true_demand &&
                             *fast.arithmetic.true_demand > *sizing.arithmetic.true_demand * (1.0 + config.tolerance);
    if ((recent_stalled || demand_step) && fast.replicas && fast.arithmetic.needed_exact) {
      const std::optional<double> long_needed = sizing.arithmetic.needed_exact;
      if (!sizing.replicas || *fast.replicas > *sizing.replicas) {
        fast.arithmetic.recent_needed_exact = fast.arithmetic.needed_exact;
        fast.arithmetic.sized_from = "recent window";
        if (long_needed) fast.arithmetic.needed_exact = std::max(*long_needed, *fast.arithmetic.needed_exact);
        sizing = fast;
      } else {
        sizing.arithmetic.recent_needed_exact = fast.arithmetic.needed_exact;
      }
    }
  }
  if (sizing.replicas && sizing.arithmetic.sized_from.empty()) sizing.arithmetic.sized_from = "window";
  d.arithmetic = sizing.arithmetic;
  d.missing = sizing.missing;
  Arithmetic& a = d.arithmetic;
  // Remembered only from a settled window: one that began while workers were still starting saw a
  // fraction of their capacity and would cap every later estimate.
  if (a.capacity_source == "saturated" && settled) h.capacity_per_worker = a.capacity_per_worker;
  if (a.utilization && *a.utilization >= kBusyUtilization && a.supply_per_worker && *a.supply_per_worker > 0 &&
      !sizing.stall_not_from_workers) {
    h.cpu_capacity_per_worker = *a.supply_per_worker / *a.utilization;
  }

  // The model's recommendation, or what to do without one.
  int32_t raw = committed;
  if (sizing.replicas) {
    raw = *sizing.replicas;
    h.failures_in_a_row = 0;
    // A saturated measurement from a window that began before the last change (workers still
    // starting: a pipeline loading its data set, buffers filling) is taken only when nothing better
    // is known, and then may be a small fraction of a worker's capacity: at most double the pool on
    // it, and size again from the next settled window.
    if (a.capacity_source == "saturated" && !settled && committed > 0 && raw > 2 * committed) {
      note(Reason::kScaleUpLimited,
           absl::StrCat("the model asks for ", raw, " but measured the capacity (", Num(*a.capacity_per_worker),
                        " per worker) while workers were starting: at most doubling, ", committed, " -> ",
                        2 * committed));
      raw = 2 * committed;
    }
    if (sizing.idle) {
      note(Reason::kIdle, "the trainers consume nothing: the minimum");
    } else {
      // The model counts the workers that serve (capacity is measured per registered worker). A
      // worker that has not been ready for longer than a pod takes to start (crash-looping, stuck)
      // serves nothing: plan its replacement on top of the need, so that a crash loop neither
      // stalls the trainers nor looks like room to scale down. Removals take not-ready ones first.
      // Twice the settle time (at least a minute), so that a pod still starting (slower than any
      // observed so far) is not taken for a broken one.
      const absl::Duration broken_after = std::max(2 * settle, absl::Minutes(1));
      int32_t broken = 0;
      for (const WorkerCandidate& w : target.workers) {
        if (!w.ready && w.created != absl::InfinitePast() && now - w.created > broken_after) ++broken;
      }
      broken = std::min(broken, committed);
      if (broken > 0) {
        raw += broken;
        a.broken_workers = broken;
        note(Reason::kBrokenWorkers,
             absl::StrCat(broken, " workers not ready ", absl::FormatDuration(broken_after),
                          " after their creation (crash-looping or stuck): ", *sizing.replicas,
                          " serving workers needed, plus ", broken));
      }
    }
  } else {
    ++h.failures_in_a_row;
    const Reason held = stale ? Reason::kHeldOnStaleData : Reason::kHeldOnMissingData;
    if (!stale && a.stall_ratio && *a.stall_ratio > config.target_stall_ratio) {
      const int32_t step = config.scale_up.max_step > 0
                               ? config.scale_up.max_step
                               : std::max<int32_t>(1, static_cast<int32_t>(std::ceil(committed * 0.5)));
      raw = committed + step;
      note(Reason::kScaleUpWithoutModel,
           absl::StrCat("stall ", Num(*a.stall_ratio), " above the target ", Num(config.target_stall_ratio),
                        " but cannot size (", absl::StrJoin(d.missing, "; "), "): one step of ", step, " up"));
    } else {
      d.holding = true;
      note(held, absl::StrCat("cannot size (", absl::StrJoin(d.missing, "; "), "): holding ", committed,
                              " workers, never scaling down on data it does not have"));
    }
    if (config.fallback.failure_threshold > 0 && h.failures_in_a_row >= config.fallback.failure_threshold &&
        config.fallback.replicas > raw) {
      raw = config.fallback.replicas;
      note(Reason::kFallback, absl::StrCat(h.failures_in_a_row, " decisions in a row without the data to size: at least ",
                                           config.fallback.replicas, " workers (fallback)"));
    }
  }

  if (sizing.stall_not_from_workers) {
    note(Reason::kStallNotFromWorkers,
         absl::StrCat("stall ", Num(*a.stall_ratio), " while ", Num(*signals.buffered),
                      " elements wait in the workers' buffers: the workers keep up, more would not help"));
    raw = std::min(raw, committed);
  }

  // Scale down only on fresh, complete, settled evidence of a stall on target.
  bool held_down = false;  // a scale-down the evidence did not allow: no recommendation of its own
  if (raw < committed) {
    held_down = true;
    std::vector<std::string> unknown = d.missing;
    Need("churn", signals.churn, unknown);
    if (!sizing.idle) Need("stall ratio", signals.stall_ratio, unknown);
    if (!unknown.empty()) {
      d.holding = true;
      note(stale ? Reason::kHeldOnStaleData : Reason::kHeldOnMissingData,
           absl::StrCat("would scale down to ", raw, " but ", absl::StrJoin(unknown, "; "), ": holding ", committed));
      raw = committed;
    } else if (*signals.churn > 0) {
      d.holding = true;
      note(Reason::kHeldOnChurn, absl::StrCat(Num(*signals.churn),
                                              " workers lost to missed heartbeats in the window: no scale-down"));
      raw = committed;
    } else if (!settled) {
      note(Reason::kHeldUntilSettled,
           absl::StrCat("would scale down to ", raw, " but the window began before the last change (",
                        Ago(now, h.last_change), ") had settled"));
      raw = committed;
    } else if (a.stall_ratio && *a.stall_ratio > config.target_stall_ratio) {
      note(Reason::kNoChange, "no scale-down while the trainers stall above the target");
      raw = committed;
    } else {
      held_down = false;
    }
  }

  // Tolerance: a small relative change is not worth a pod.
  if (raw != committed && committed > 0 && a.needed_exact && !sizing.idle &&
      (!a.stall_ratio || *a.stall_ratio <= config.target_stall_ratio) &&
      std::abs((*a.needed_exact + a.broken_workers) / committed - 1.0) <= config.tolerance) {
    note(Reason::kWithinTolerance, absl::StrCat("needs ", Num(*a.needed_exact + a.broken_workers), " workers, within ",
                                                Num(config.tolerance * 100), "% of ", committed));
    raw = committed;
  }
  a.raw = raw;

  // Windows over the recommendations.
  const absl::Duration keep = std::max(config.scale_up.stabilization_window, config.scale_down.stabilization_window);
  std::vector<Recommendation> kept;
  for (const Recommendation& r : h.recommendations) {
    if (r.at > now - keep && r.at <= now) kept.push_back(r);
  }
  Stabilized stabilized = Stabilize(kept, committed, raw, config, now);
  // A held scale-down ("not settled yet", "data missing") is no recommendation to stay at the
  // current size: recorded, it would hold the next scale-down a whole window longer (after each
  // step down, the window that began before it is not settled).
  if (!held_down) kept.push_back({now, raw});
  h.recommendations = std::move(kept);
  a.stabilized = stabilized.replicas;
  if (stabilized.reason == Reason::kScaleUpStabilized) {
    note(Reason::kScaleUpStabilized, absl::StrCat("the lowest recommendation within the scale-up window (",
                                                  absl::FormatDuration(config.scale_up.stabilization_window), ") is ",
                                                  stabilized.replicas));
  } else if (stabilized.reason == Reason::kScaleDownStabilized) {
    note(Reason::kScaleDownStabilized,
         absl::StrCat("the highest recommendation within the scale-down window (",
                      absl::FormatDuration(config.scale_down.stabilization_window), ") is ", stabilized.replicas));
  }

  Limited limited = LimitRate(committed, stabilized.replicas, config);
  a.limited = limited.replicas;
  for (Reason r : limited.reasons) {
    switch (r) {
      case Reason::kScaleUpLimited:
        note(r, absl::StrCat("at most ", config.scale_up.max_step, " workers added per decision"));
        break;
      case Reason::kScaleDownLimited:
        note(r, absl::StrCat("at most ", config.scale_down.max_step, " workers removed per decision"));
        break;
      case Reason::kTooManyReplicas:
        note(r, absl::StrCat("capped at maxReplicas ", config.max_replicas));
        break;
      case Reason::kTooFewReplicas:
        note(r, absl::StrCat("raised to minReplicas ", config.min_replicas));
        break;
      default:
        break;
    }
  }
  d.replicas = limited.replicas;

  // Placement: learn from this window, then split.
  const int32_t observed_local = signals.local_workers.known() ? static_cast<int32_t>(*signals.local_workers)
                                                               : target.local;
  InterferenceUpdate learnt = ObserveInterference(
      h.interference,
      {signals.at, observed_local,
       signals.compute_per_element.known() ? std::optional<double>(*signals.compute_per_element) : std::nullopt,
       settled},
      config.placement);
  h.interference = learnt.state;
  if (h.interference.probe_local && now - h.interference.probe_started >= config.placement.reprobe_after) {
    h.interference.probe_local.reset();  // never learnt (no data at that count): give up the probe
  }
  if (!learnt.learnt.empty()) d.learnt.push_back(learnt.learnt);
  if (h.interference.slowdown_per_worker) a.interference_slowdown = learnt.slowdown;
  // The local workers there are: spec.workers.local, but the operator places at most the local
  // capacity there (operator/reconciler.cc), so when the capacity shrank it has already moved the
  // rest remote, whatever spec.workers.local still says.
  const int32_t current_local = target.local_capacity
                                    ? std::clamp(std::min(target.local, *target.local_capacity), 0, current)
                                    : std::clamp(target.local, 0, current);
  const int32_t current_remote = current - current_local;
  d.split = SplitWorkers({d.replicas, current_local, target.local_capacity,
                          target.consumer_nodes, now},
                         h.interference, config.placement);
  d.local = d.split.local;
  d.remote = d.split.remote;

  // Make before break: a pool shrinks only once the other one has as many ready workers as it is
  // to have, so a shift between local and remote never leaves the trainers short while pods start.
  {
    const int32_t now_local = current_local;
    const int32_t now_remote = current_remote;
    int32_t ready_local = 0, ready_remote = 0;
    for (const WorkerCandidate& w : target.workers) {
      if (w.ready) (w.local ? ready_local : ready_remote) += 1;
    }
    int32_t keep_local = d.local, keep_remote = d.remote;
    if (d.local < now_local && ready_remote < d.remote) keep_local = now_local;
    if (d.remote < now_remote && ready_local < d.local) keep_remote = now_remote;
    const int32_t extra = (keep_local - d.local) + (keep_remote - d.remote);
    if (extra > 0) {
      const bool to_remote = keep_local > d.local;
      note(Reason::kShifted, absl::StrCat(extra, to_remote ? " local" : " remote", " workers stay until ",
                                          to_remote ? d.remote - ready_remote : d.local - ready_local,
                                          to_remote ? " more remote" : " more local",
                                          " ones serve (make before break)"));
    }
    d.local = keep_local;
    d.remote = keep_remote;
    d.replicas = keep_local + keep_remote;
    h.surge_extra = extra;
    h.surge_total = d.replicas;
  }

  // Workers that only a make-before-break shift kept going away is the end of that shift, not a
  // scale-down: the size the policy decided does not change (and so it may happen while data is
  // missing, which never lowers the decided size).
  const bool surge_released = surge > 0 && d.replicas < current && d.replicas >= committed;
  if (d.replicas > current) {
    d.direction = Direction::kUp;
  } else if (d.replicas < current && !surge_released) {
    d.direction = Direction::kDown;
  } else if (surge_released || d.local != current_local || d.local != std::clamp(target.local, 0, current)) {
    d.direction = Direction::kShift;
  }
  const int32_t remove_local = std::max(0, current_local - d.local);
  const int32_t remove_remote = std::max(0, current_remote - d.remote);
  if (remove_local + remove_remote > 0) d.workers_to_delete = ChooseRemovals(target.workers, remove_local, remove_remote);

  switch (d.direction) {
    case Direction::kUp:
      note(Reason::kScaledUp, absl::StrCat(current, " -> ", d.replicas, " workers"));
      break;
    case Direction::kDown:
      note(Reason::kScaledDown, absl::StrCat(current, " -> ", d.replicas, " workers"));
      break;
    case Direction::kShift:
      if (surge_released) {
        note(Reason::kShifted, absl::StrCat("the shift completes: the ", current - d.replicas,
                                            " workers kept until their replacements served go (", d.local, " local, ",
                                            d.remote, " remote)"));
      } else if (d.local == current_local) {
        note(Reason::kShifted, absl::StrCat("spec.workers.local ", target.local, " -> ", d.local, ": the local capacity (",
                                            target.local_capacity.value_or(0),
                                            ") fits no more; the operator already runs the rest remote"));
      } else {
        note(Reason::kShifted, absl::StrCat(current_local, " -> ", d.local, " local workers: ", d.split.why));
      }
      break;
    case Direction::kNone:
      if (d.reasons.empty()) note(Reason::kNoChange, absl::StrCat(current, " workers are right"));
      break;
  }
  d.act = d.direction != Direction::kNone && config.mode == Mode::kAuto;
  if (d.act && d.split.probing && !h.interference.probe_local) {
    h.interference = StartProbe(h.interference, d.split.local, now);
  }
  if (!d.act) {
    // Nothing was carried out: the surge (if any) is as before.
    h.surge_extra = history.surge_extra;
    h.surge_total = history.surge_total;
  }
  if (d.direction != Direction::kNone && config.mode == Mode::kRecommend) {
    note(Reason::kRecommendOnly, "mode Recommend: the decision is reported, not carried out");
  }
  if (d.act) h.last_change = now;
  return result;
}

}  // namespace sluice::autoscaler
