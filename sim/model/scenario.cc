#include "sim/model/scenario.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace sluice::sim {

const char* OutageKindName(OutageKind k) {
  switch (k) {
    case OutageKind::kPrometheusDown: return "prometheus down";
    case OutageKind::kScrapeGap: return "scrape gap";
    case OutageKind::kClientSeriesMissing: return "client series missing";
  }
  return "outage";
}

const char* EventKindName(EventKind k) {
  switch (k) {
    case EventKind::kComputeScale: return "compute scale";
    case EventKind::kInterference: return "interference";
    case EventKind::kLocalSlots: return "local slots";
    case EventKind::kOutage: return "outage";
    case EventKind::kCrashLoop: return "crash loop";
  }
  return "event";
}

namespace {

absl::Status Bad(const Scenario& s, const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("scenario '", s.name, "': ", field, " ", what));
}

bool Positive(double v) { return std::isfinite(v) && v > 0; }
bool NonNegative(double v) { return std::isfinite(v) && v >= 0; }

}  // namespace

absl::Status Validate(const Scenario& s) {
  if (s.name.empty()) return absl::InvalidArgumentError("scenario without a name: set Scenario::name");
  for (char c : s.name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) {
      return Bad(s, "name", "may hold only letters, digits and '-' (it names files)");
    }
  }
  if (s.horizon_s <= 0) return Bad(s, "horizon_s", "must be > 0 seconds");
  if (!Positive(s.epoch_elements)) return Bad(s, "epoch_elements", "must be > 0");
  if (s.max_workers < 1) return Bad(s, "max_workers", "must be >= 1");
  if (s.local_start_seconds < 0) return Bad(s, "local_start_seconds", "must be >= 0");
  const AcceleratorSpec& a = s.accelerator;
  if (!NonNegative(a.hourly)) return Bad(s, "accelerator.hourly", "must be a price >= 0 ($ per host per hour)");
  if (a.host_cores < 0 || a.trainer_cores < 0 || a.trainer_cores > a.host_cores) {
    return Bad(s, "accelerator.trainer_cores", "must be within [0, accelerator.host_cores]");
  }
  if (a.local_slots < 0) return Bad(s, "accelerator.local_slots", "must be >= 0");
  if (a.local_slots * s.remote.cores > a.host_cores - a.trainer_cores) {
    return Bad(s, "accelerator.local_slots",
               absl::StrCat("x remote.cores (", a.local_slots * s.remote.cores, ") exceeds the host's spare cores (",
                            a.host_cores - a.trainer_cores, "): lower the slots"));
  }
  if (!NonNegative(a.ingress_gbps)) return Bad(s, "accelerator.ingress_gbps", "must be >= 0 (0: unlimited)");
  if (s.remote.cores <= 0) return Bad(s, "remote.cores", "must be > 0");
  if (!NonNegative(s.remote.hourly)) return Bad(s, "remote.hourly", "must be a price >= 0");
  if (s.remote.start_seconds < 0) return Bad(s, "remote.start_seconds", "must be >= 0");
  if (s.remote.quota < 0) return Bad(s, "remote.quota", "must be >= 0 (0: no quota)");
  if (!Positive(s.pipeline.cpu_seconds_per_element)) {
    return Bad(s, "pipeline.cpu_seconds_per_element", "must be > 0 core-seconds");
  }
  if (!NonNegative(s.pipeline.bytes_per_element)) return Bad(s, "pipeline.bytes_per_element", "must be >= 0");
  if (!Positive(s.pipeline.buffer_seconds)) return Bad(s, "pipeline.buffer_seconds", "must be > 0");
  for (double sd : {s.noise.compute_jitter, s.noise.worker_jitter, s.noise.worker_spread}) {
    if (!NonNegative(sd) || sd > 0.3) return Bad(s, "noise", "standard deviations must be within [0, 0.3]");
  }
  if (s.jobs.empty()) return Bad(s, "jobs", "is empty: a scenario needs at least one trainer");
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const JobSpec& j = s.jobs[i];
    const std::string f = absl::StrCat("jobs[", i, "]");
    if (j.start_s < 0 || j.start_s >= s.horizon_s) return Bad(s, f + ".start_s", "must be within [0, horizon_s)");
    if (j.end_s != 0 && j.end_s <= j.start_s) return Bad(s, f + ".end_s", "must be after start_s (or 0: the end)");
    if (j.end_s > s.horizon_s) return Bad(s, f + ".end_s", "is after horizon_s");
    if (j.start_s % kTimeGrid != 0 || j.end_s % kTimeGrid != 0) {
      return Bad(s, f + ".start_s", absl::StrCat("and end_s must be multiples of ", kTimeGrid, " s"));
    }
    if (j.hosts < 1) return Bad(s, f + ".hosts", "must be >= 1");
    if (!Positive(j.compute_seconds_per_element)) return Bad(s, f + ".compute_seconds_per_element", "must be > 0");
    if (!NonNegative(j.interference_per_worker) || !NonNegative(j.interference_quadratic)) {
      return Bad(s, f + ".interference_per_worker", "and interference_quadratic must be >= 0");
    }
  }
  for (size_t i = 0; i < s.events.size(); ++i) {
    const ScenarioEvent& e = s.events[i];
    const std::string f = absl::StrCat("events[", i, "] (", EventKindName(e.kind), ")");
    if (e.at_s <= 0 || e.at_s >= s.horizon_s) return Bad(s, f + ".at_s", "must be within (0, horizon_s)");
    if (i > 0 && e.at_s < s.events[i - 1].at_s) return Bad(s, f + ".at_s", "is earlier than the event before: sort them");
    if (e.at_s % kTimeGrid != 0 || e.duration_s % kTimeGrid != 0) {
      return Bad(s, f + ".at_s", absl::StrCat("and duration_s must be multiples of ", kTimeGrid, " s"));
    }
    if (e.label.empty()) return Bad(s, f + ".label", "is empty: say what changes (it is shown in plots)");
    switch (e.kind) {
      case EventKind::kComputeScale:
      case EventKind::kInterference:
        if (e.job < 0 || e.job >= static_cast<int>(s.jobs.size())) {
          return Bad(s, f + ".job", absl::StrCat("must index jobs (0..", s.jobs.size() - 1, ")"));
        }
        if (e.kind == EventKind::kComputeScale ? !Positive(e.value) : !NonNegative(e.value)) {
          return Bad(s, f + ".value", e.kind == EventKind::kComputeScale ? "must be a factor > 0" : "must be >= 0");
        }
        break;
      case EventKind::kLocalSlots:
        if (!NonNegative(e.value) || e.value != std::floor(e.value)) {
          return Bad(s, f + ".value", "must be a whole number of slots >= 0");
        }
        if (e.value * s.remote.cores > a.host_cores - a.trainer_cores) {
          return Bad(s, f + ".value", "x remote.cores exceeds the host's spare cores");
        }
        break;
      case EventKind::kOutage:
        if (e.duration_s <= 0) return Bad(s, f + ".duration_s", "must be > 0");
        break;
      case EventKind::kCrashLoop:
        if (e.duration_s <= 0) return Bad(s, f + ".duration_s", "must be > 0");
        if (e.count < 1) return Bad(s, f + ".count", "must be >= 1 worker");
        if (e.run_seconds < 1) return Bad(s, f + ".run_seconds", "must be >= 1 (seconds a worker runs before it crashes)");
        break;
    }
  }
  return absl::OkStatus();
}

std::vector<Change> Changes(const Scenario& s) {
  std::vector<Change> out{{0, "start"}};
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const JobSpec& j = s.jobs[i];
    if (j.start_s > 0) out.push_back({j.start_s, absl::StrCat(j.name, " starts")});
    if (j.end_s > 0 && j.end_s < s.horizon_s) out.push_back({j.end_s, absl::StrCat(j.name, " ends")});
  }
  for (const ScenarioEvent& e : s.events) {
    if (e.kind != EventKind::kOutage) out.push_back({e.at_s, e.label});
  }
  std::stable_sort(out.begin(), out.end(), [](const Change& a, const Change& b) { return a.at_s < b.at_s; });
  // One change per time: labels joined.
  std::vector<Change> merged;
  for (const Change& c : out) {
    if (!merged.empty() && merged.back().at_s == c.at_s) {
      if (c.label != "start") merged.back().label += ", " + c.label;
    } else {
      merged.push_back(c);
    }
  }
  return merged;
}

std::vector<int> PhaseBoundaries(const Scenario& s) {
  std::set<int> t{0};
  for (const Change& c : Changes(s)) t.insert(c.at_s);
  for (const ScenarioEvent& e : s.events) {
    t.insert(e.at_s);
    if (e.duration_s > 0 && e.at_s + e.duration_s < s.horizon_s) t.insert(e.at_s + e.duration_s);
  }
  return {t.begin(), t.end()};
}

}  // namespace sluice::sim
