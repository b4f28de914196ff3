#include "autoscaler/placement/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autoscaler/placement/local_capacity.h"

namespace sluice::autoscaler {

const char* PlacementName(Placement p) {
  switch (p) {
    case Placement::kHybrid: return "Hybrid";
    case Placement::kRemoteOnly: return "RemoteOnly";
    case Placement::kLocalOnly: return "LocalOnly";
  }
  return "RemoteOnly";
}

const char* SplitReasonName(SplitReason r) {
  switch (r) {
    case SplitReason::kRemoteOnly: return "RemoteOnly";
    case SplitReason::kLocalOnly: return "LocalOnly";
    case SplitReason::kLocalFirst: return "LocalFirst";
    case SplitReason::kCapacityLimited: return "LocalCapacityLimited";
    case SplitReason::kInterference: return "LocalInterference";
    case SplitReason::kLocalCostsMore: return "LocalCostsMore";
    case SplitReason::kProbing: return "ProbingLocal";
    case SplitReason::kCapacityUnknown: return "LocalCapacityUnknown";
  }
  return "RemoteOnly";
}

namespace {

std::string Ms(double seconds) { return absl::StrFormat("%.3g ms", seconds * 1000.0); }
std::string Pct(double fraction) { return absl::StrFormat("%.1f%%", fraction * 100.0); }

// The cap on local workers that a slowdown of `k` per worker beyond `reference` local workers allows.
std::optional<int32_t> CapFor(double k, int32_t reference, double tolerance) {
  if (k <= 0) return std::nullopt;  // no measurable interference: no cap
  double extra = std::floor(tolerance / k + 1e-9);
  if (extra > 1e6) return std::nullopt;
  return reference + static_cast<int32_t>(extra);
}

// The local workers of `replicas` when `local` are asked for, by the rule the operator carries out
// (SplitByCapacity, Hybrid with workers.local): what this split decides, the operator runs unchanged.
int32_t LocalShare(int32_t replicas, int32_t local, int32_t capacity) {
  return static_cast<int32_t>(SplitByCapacity({Placement::kHybrid, replicas, local, capacity}).local);
}

}  // namespace

std::optional<double> InterferenceState::Baseline() const {
  if (!reference_compute) return std::nullopt;
  return *reference_compute / (1.0 + slowdown_per_worker.value_or(0) * reference_local);
}

InterferenceUpdate ObserveInterference(const InterferenceState& state, const InterferenceObservation& obs,
                                       const PlacementConfig& config) {
  InterferenceUpdate out{state, "", false, 0};
  InterferenceState& s = out.state;
  auto judge = [&] {
    out.slowdown = s.slowdown_per_worker.value_or(0) * obs.local_workers;
    out.interfering = out.slowdown > config.interference_tolerance;
  };
  if (!obs.settled || !obs.compute_per_element.has_value() || *obs.compute_per_element <= 0) {
    judge();
    return out;
  }
  const double c = *obs.compute_per_element;
  if (!s.reference_compute || obs.local_workers == s.reference_local) {
    // The first observation, or the same local count: the trainers' own compute time, not
    // interference — unless local workers run and the change is beyond noise: then it may be either,
    // and a probe now (one local worker more or fewer) tells which.
    const bool first = !s.reference_compute;
    const double drift = first ? 0 : c / *s.reference_compute - 1.0;
    if (!first && obs.local_workers > 0 && s.slowdown_per_worker && std::abs(drift) > config.interference_noise) {
      s.reference_compute = c;
      s.learnt_at = absl::InfinitePast();  // a probe is due at once
      s.probes_confirmed = 0;
      out.learnt = absl::StrCat("the trainers' compute per element moved ", Pct(drift), " (", Ms(c), ") with ",
                                obs.local_workers, " local workers: probing to tell interference from a new phase");
      judge();
      return out;
    }
    s.reference_compute = first ? c : 0.5 * *s.reference_compute + 0.5 * c;
    s.reference_local = obs.local_workers;
    if (first) {
      out.learnt = absl::StrCat("reference compute ", Ms(c), " per element with ", obs.local_workers, " local workers");
    }
    judge();
    return out;
  }

  // The local count changed since the reference: measure k across the change.
  const int32_t l1 = s.reference_local;
  const int32_t dl = obs.local_workers - l1;
  const double r = c / *s.reference_compute - 1.0;
  const double denominator = dl - r * l1;
  if (std::abs(denominator) < 1e-9) {
    judge();
    return out;
  }
  const double k_obs = std::clamp(r / denominator, 0.0, 10.0);
  bool agrees = false;
  double k = k_obs;
  if (s.slowdown_per_worker) {
    const double k_old = *s.slowdown_per_worker;
    const double predicted = (1.0 + k_old * obs.local_workers) / (1.0 + k_old * l1) - 1.0;
    agrees = std::abs(r - predicted) <= config.interference_noise;
    if (agrees) {
      // The same interference, measured again: refine, weighting each measurement by the workers it moved.
      k = (k_old * s.weight + k_obs * std::abs(dl)) / (s.weight + std::abs(dl));
      s.weight = std::min(10.0, s.weight + std::abs(dl));
    } else {
      s.weight = std::abs(dl);  // the interference changed: start over from this measurement
    }
  } else {
    s.weight = std::abs(dl);
  }
  s.slowdown_per_worker = k;
  s.cap = CapFor(k, 0, config.interference_tolerance);
  s.learnt_at = obs.at;
  if (s.probe_local && obs.local_workers == *s.probe_local) s.probe_local.reset();  // the probe is learnt
  s.probes_confirmed = agrees ? s.probes_confirmed + 1 : 0;
  out.learnt = absl::StrCat("compute ", Ms(*s.reference_compute), " per element with ", l1, " local workers, ",
                            Ms(c), " with ", obs.local_workers, ": ", absl::StrFormat("%.2f%%", k * 100.0),
                            " slowdown per local worker, so at most ",
                            s.cap.has_value() ? absl::StrCat(*s.cap) : std::string("any number of"),
                            " local workers stay within ", Pct(config.interference_tolerance));
  s.reference_compute = c;
  s.reference_local = obs.local_workers;
  judge();
  return out;
}

Split SplitWorkers(const SplitInput& in, const InterferenceState& state, const PlacementConfig& config) {
  Split out;
  const int32_t replicas = std::max<int32_t>(0, in.replicas);
  switch (config.policy) {
    case Placement::kRemoteOnly:
      out.remote = replicas;
      out.reason = SplitReason::kRemoteOnly;
      out.why = "placement RemoteOnly: every worker remote";
      return out;
    case Placement::kLocalOnly:
      out.local = replicas;
      out.reason = SplitReason::kLocalOnly;
      out.why = "placement LocalOnly: every worker local";
      return out;
    case Placement::kHybrid:
      break;
  }
  if (!in.local_capacity.has_value()) {
    out.local = std::min(replicas, std::max<int32_t>(0, in.current_local));
    out.remote = replicas - out.local;
    out.reason = SplitReason::kCapacityUnknown;
    out.why = absl::StrCat("local capacity not reported: keeping ", out.local, " local workers");
    return out;
  }
  const int32_t capacity = std::max<int32_t>(0, *in.local_capacity);
  int32_t allowed = capacity;
  out.reason = SplitReason::kLocalFirst;
  out.why = absl::StrCat("local capacity first (", capacity, " slots on the accelerator hosts)");

  if (state.probe_local) {
    // A probe in progress holds its count until an observation at it has been learnt.
    out.local = LocalShare(replicas, *state.probe_local, capacity);
    out.remote = replicas - out.local;
    out.probing = true;
    out.reason = SplitReason::kProbing;
    out.why = absl::StrCat("probe with ", out.local, " local workers in progress since ",
                           absl::FormatDuration(in.now - state.probe_started), " ago");
    return out;
  }
  const absl::Duration reprobe = config.reprobe_after * (1 << std::min<int32_t>(state.probes_confirmed, 6));
  const bool due = state.slowdown_per_worker.has_value() && in.now - state.learnt_at >= reprobe;
  if (state.cap.has_value() && *state.cap < allowed) {
    int32_t cap = *state.cap;
    if (due && cap < replicas) {
      ++cap;
      out.probing = true;
      out.reason = SplitReason::kProbing;
      out.why = absl::StrCat("interference learnt ", absl::FormatDuration(in.now - state.learnt_at),
                             " ago allowed ", *state.cap, " local workers: probing with ", cap);
    } else {
      out.reason = SplitReason::kInterference;
      out.why = absl::StrCat("at most ", cap, " local workers keep the trainers within ",
                             Pct(config.interference_tolerance), " of their compute time without local workers (",
                             absl::StrFormat("%.2f%%", state.slowdown_per_worker.value_or(0) * 100.0),
                             " per local worker)");
    }
    allowed = std::min(allowed, cap);
  } else if (due && in.current_local > 0 && std::min(replicas, allowed) == in.current_local) {
    // The cap does not bind: one local worker fewer shows whether the interference grew.
    allowed = in.current_local - 1;
    out.probing = true;
    out.reason = SplitReason::kProbing;
    out.why = absl::StrCat("interference learnt ", absl::FormatDuration(in.now - state.learnt_at),
                           " ago: probing with one local worker fewer (", allowed, ")");
  }

  // A local worker is free CPU, but its interference slows the trainers: when that accelerator
  // time costs more than a remote worker's CPU, remote is cheaper.
  if (state.slowdown_per_worker.has_value() && *state.slowdown_per_worker > 0 && config.cost.accelerator_hourly &&
      config.cost.remote_cpu_hourly && config.worker_cpus > 0) {
    const double local_cost = *state.slowdown_per_worker * *config.cost.accelerator_hourly *
                              std::max<int32_t>(1, in.consumer_nodes);
    const double remote_cost = config.worker_cpus * *config.cost.remote_cpu_hourly;
    if (local_cost > remote_cost) {
      out.reason = SplitReason::kLocalCostsMore;
      out.why = absl::StrFormat(
          "a local worker slows the trainers by %.2f%%, which costs $%.3f/h of accelerator time, more than a "
          "remote worker's $%.3f/h of CPU: remote only",
          *state.slowdown_per_worker * 100.0, local_cost, remote_cost);
      if (due && capacity > 0 && in.current_local == 0) {
        // The trainers may have changed since: one local worker shows it.
        allowed = 1;
        out.probing = true;
        out.reason = SplitReason::kProbing;
        out.why += absl::StrCat("; learnt ", absl::FormatDuration(in.now - state.learnt_at), " ago: probing with one");
      } else {
        allowed = 0;
        out.probing = false;
      }
    }
  }

  out.local = LocalShare(replicas, allowed, capacity);
  out.remote = replicas - out.local;
  if (out.reason == SplitReason::kLocalFirst && out.local < replicas) {
    out.reason = SplitReason::kCapacityLimited;
    out.why = absl::StrCat("local capacity first: ", capacity, " slots on the accelerator hosts, the other ",
                           out.remote, " remote");
  }
  return out;
}

InterferenceState StartProbe(InterferenceState state, int32_t local, absl::Time now) {
  state.probe_local = local;
  state.probe_started = now;
  return state;
}

std::vector<std::string> ChooseRemovals(const std::vector<WorkerCandidate>& workers, int32_t remove_local,
                                        int32_t remove_remote) {
  std::vector<const WorkerCandidate*> order;
  order.reserve(workers.size());
  for (const WorkerCandidate& w : workers) order.push_back(&w);
  std::sort(order.begin(), order.end(), [](const WorkerCandidate* a, const WorkerCandidate* b) {
    if (a->ready != b->ready) return !a->ready;  // not ready first
    if (a->cost_per_element != b->cost_per_element) return a->cost_per_element > b->cost_per_element;
    if (a->created != b->created) return a->created > b->created;  // newest first
    return a->name < b->name;
  });
  std::vector<std::string> out;
  for (const WorkerCandidate* w : order) {
    int32_t& left = w->local ? remove_local : remove_remote;
    if (left <= 0) continue;
    out.push_back(w->name);
    --left;
  }
  return out;
}

}  // namespace sluice::autoscaler
