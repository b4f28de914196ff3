#include "autoscaler/placement/placement.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

}  // namespace

InterferenceUpdate ObserveInterference(const InterferenceState& state, const InterferenceObservation& obs,
                                       const PlacementConfig& config) {
  InterferenceUpdate out{state, "", false, 0};
  if (!obs.settled || !obs.compute_per_element.has_value() || *obs.compute_per_element <= 0) return out;
  const double c = *obs.compute_per_element;
  InterferenceState& s = out.state;

  if (obs.local_workers == 0) {
    if (!s.baseline_compute.has_value() || s.baseline_provisional) {
      s.baseline_compute = c;
    } else {
      s.baseline_compute = 0.5 * *s.baseline_compute + 0.5 * c;  // smooth measurement noise
    }
    s.baseline_provisional = false;
    s.baseline_local = 0;
    out.learnt = absl::StrCat("baseline compute ", Ms(*s.baseline_compute), " per element without local workers");
    return out;
  }

  // A provisional baseline (never seen without local workers) is the best compute seen with the
  // fewest local workers; a better one replaces it.
  if (!s.baseline_compute.has_value() ||
      (s.baseline_provisional && (obs.local_workers < s.baseline_local ||
                                  (obs.local_workers == s.baseline_local && c < *s.baseline_compute)))) {
    s.baseline_compute = c;
    s.baseline_provisional = true;
    s.baseline_local = obs.local_workers;
    out.learnt = absl::StrCat("provisional baseline compute ", Ms(c), " per element with ", obs.local_workers,
                              " local workers (never observed without)");
    return out;
  }

  const int32_t reference = s.baseline_provisional ? s.baseline_local : 0;
  const int32_t extra = obs.local_workers - reference;
  out.slowdown = c / *s.baseline_compute - 1.0;
  out.interfering = out.slowdown > config.interference_tolerance;
  if (extra <= 0) return out;
  // Within a learnt cap and within tolerance, the observation confirms what is known; only an
  // observation above the cap (a probe) or one that interferes teaches something new.
  if (s.cap.has_value() && obs.local_workers <= *s.cap && !out.interfering) return out;

  const double k = std::max(0.0, out.slowdown) / extra;
  s.slowdown_per_worker = k;
  s.cap = CapFor(k, reference, config.interference_tolerance);
  s.learnt_at = obs.at;
  out.learnt = absl::StrCat("compute ", Ms(c), " per element with ", obs.local_workers, " local workers is ",
                            Pct(out.slowdown), " above the baseline ", Ms(*s.baseline_compute), ": ",
                            absl::StrFormat("%.2f%%", k * 100.0), " per local worker, so at most ",
                            s.cap.has_value() ? absl::StrCat(*s.cap) : std::string("any number of"),
                            " local workers stay within ", Pct(config.interference_tolerance));
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

  if (state.cap.has_value() && *state.cap < allowed) {
    int32_t cap = *state.cap;
    const bool stale = in.now - state.learnt_at >= config.reprobe_after;
    if (stale && cap < replicas) {
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
  }

  // A local worker is free CPU, but its interference slows the trainers: when that accelerator
  // time costs more than a remote worker's CPU, remote is cheaper.
  if (state.slowdown_per_worker.has_value() && *state.slowdown_per_worker > 0 && config.cost.accelerator_hourly &&
      config.cost.remote_cpu_hourly && config.worker_cpus > 0) {
    const double local_cost = *state.slowdown_per_worker * *config.cost.accelerator_hourly *
                              std::max<int32_t>(1, in.consumer_nodes);
    const double remote_cost = config.worker_cpus * *config.cost.remote_cpu_hourly;
    if (local_cost > remote_cost) {
      allowed = 0;
      out.probing = false;
      out.reason = SplitReason::kLocalCostsMore;
      out.why = absl::StrFormat(
          "a local worker slows the trainers by %.2f%%, which costs $%.3f/h of accelerator time, more than a "
          "remote worker's $%.3f/h of CPU: remote only",
          *state.slowdown_per_worker * 100.0, local_cost, remote_cost);
    }
  }

  out.local = std::min(replicas, allowed);
  out.remote = replicas - out.local;
  if (out.reason == SplitReason::kLocalFirst && out.local < replicas) {
    out.reason = SplitReason::kCapacityLimited;
    out.why = absl::StrCat("local capacity first: ", capacity, " slots on the accelerator hosts, the other ",
                           out.remote, " remote");
  }
  return out;
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
