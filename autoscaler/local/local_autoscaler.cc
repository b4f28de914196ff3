#include "autoscaler/local/local_autoscaler.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace sluice::autoscaler {

namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// A logfmt value: bare when it needs no quotes.
std::string Value(const std::string& s) {
  if (s.empty()) return "\"\"";
  for (char c : s) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || c == '\n') return Quote(s);
  }
  return s;
}

std::string Num(const std::optional<double>& v) { return v ? absl::StrFormat("%.4g", *v) : "unknown"; }
std::string Num(const Measurement& m) { return m.known() ? absl::StrFormat("%.4g", *m) : "unknown"; }

}  // namespace

PolicyConfig LocalPolicy(PolicyConfig policy, double worker_cpus) {
  policy.placement.policy = Placement::kRemoteOnly;  // one pool: every worker is on this machine
  policy.placement.worker_cpus = worker_cpus;
  return policy;
}

Target TargetFromWorkers(const std::vector<local::WorkerStatus>& workers,
                         const std::map<std::string, absl::Time>& started) {
  Target t;
  for (const local::WorkerStatus& w : workers) {
    if (!w.serving()) continue;
    WorkerCandidate c;
    c.name = w.name;
    c.local = false;
    c.ready = true;
    auto it = started.find(w.name);
    if (it != started.end()) c.created = it->second;
    t.workers.push_back(std::move(c));
  }
  t.replicas = static_cast<int32_t>(t.workers.size());
  t.local = 0;
  t.consumer_nodes = 1;
  return t;
}

ObserveRequest ScrapeRequest(const std::string& ns, const std::string& name, const std::string& dispatcher_url,
                             const std::vector<local::WorkerStatus>& workers, const std::string& host) {
  ObserveRequest r;
  r.ns = ns;
  r.name = name;
  r.dispatcher_metrics_url = dispatcher_url;
  for (const local::WorkerStatus& w : workers) {
    // Draining workers still serve their buffers: their production belongs to the window.
    if (w.exited || w.state == local::WorkerState::kStopped || w.metrics_port <= 0) continue;
    r.worker_metrics_urls[w.name] = absl::StrCat("http://", host, ":", w.metrics_port);
  }
  return r;
}

Signals MergeRecent(Signals window, const Signals& recent) {
  window.recent_window = recent.window;
  window.recent_stall_ratio = recent.stall_ratio;
  window.recent_demand = recent.demand;
  window.recent_supply = recent.supply;
  window.recent_worker_cpu = recent.worker_cpu;
  window.recent_workers = recent.workers;
  return window;
}

bool IsScaleDownOnMissingData(const Decision& d) {
  if (d.direction != Direction::kDown) return false;
  if (d.holding) return true;
  if (d.Has(Reason::kIdle)) return false;  // demand known to be zero
  return !d.missing.empty() || !d.arithmetic.stall_ratio || !d.arithmetic.demand;
}

std::string DecisionLogfmt(const LocalDecision& d) {
  const Decision& x = d.decision;
  const Arithmetic& a = x.arithmetic;
  std::vector<std::string> reasons;
  for (const ReasonNote& n : x.reasons) reasons.push_back(ReasonName(n.reason));
  std::vector<std::string> messages;
  for (const ReasonNote& n : x.reasons) messages.push_back(absl::StrCat(ReasonName(n.reason), ": ", n.message));
  std::string line = absl::StrCat("msg=decision n=", d.number, " workers=", d.workers_before, "->", d.workers_after,
                                  " direction=", DirectionName(x.direction), " acted=", x.act ? "true" : "false",
                                  " reason=", Value(absl::StrJoin(reasons, ",")));
  absl::StrAppend(&line, " stall=", Num(d.signals.stall_ratio), " recent_stall=", Num(d.signals.recent_stall_ratio),
                  " demand=", Num(d.signals.demand), " recent_demand=", Num(d.signals.recent_demand),
                  " supply=", Num(d.signals.supply), " worker_cpu=", Num(d.signals.worker_cpu),
                  " buffered=", Num(d.signals.buffered));
  absl::StrAppend(&line, " true_demand=", Num(a.true_demand), " capacity_per_worker=", Num(a.capacity_per_worker),
                  " capacity_source=", Value(a.capacity_source.empty() ? "none" : a.capacity_source),
                  " needed=", Num(a.needed_exact), " sized_from=", Value(a.sized_from.empty() ? "none" : a.sized_from),
                  " raw=", a.raw, " stabilized=", a.stabilized, " limited=", a.limited);
  if (!d.added.empty()) absl::StrAppend(&line, " added=", absl::StrJoin(d.added, ","));
  if (!d.removed.empty()) absl::StrAppend(&line, " removed=", absl::StrJoin(d.removed, ","));
  if (!d.still_draining.empty()) absl::StrAppend(&line, " still_draining=", absl::StrJoin(d.still_draining, ","));
  if (!d.removed.empty()) absl::StrAppend(&line, " elements_lost=", d.elements_lost);
  if (x.holding) absl::StrAppend(&line, " holding=true");
  if (!x.missing.empty()) absl::StrAppend(&line, " missing=", Quote(absl::StrJoin(x.missing, "; ")));
  if (!d.source_errors.empty()) absl::StrAppend(&line, " source_error=", Quote(absl::StrJoin(d.source_errors, "; ")));
  if (!d.action_error.empty()) absl::StrAppend(&line, " action_error=", Quote(d.action_error));
  absl::StrAppend(&line, " why=", Quote(absl::StrJoin(messages, "; ")));
  return line;
}

LocalAutoscaler::LocalAutoscaler(local::LocalDataService* service, LocalAutoscalerOptions options)
    : service_(service),
      options_(std::move(options)),
      policy_(LocalPolicy(options_.policy, options_.worker.cpus.value_or(service->options().worker_cpus))),
      scrape_(ScrapeOptions{options_.window, std::min(options_.period * 0.8, absl::Seconds(5)), absl::Seconds(2)}),
      scrape_recent_(ScrapeOptions{options_.recent_window, std::min(options_.period * 0.8, absl::Seconds(5)),
                                   absl::Seconds(2)}) {
  if (!options_.prometheus_url.empty()) {
    PrometheusOptions p = options_.prometheus;
    p.window = options_.window;
    p.cache_for = absl::ZeroDuration();
    prometheus_ = std::make_unique<PrometheusSource>(p);
  }
}

LocalAutoscaler::~LocalAutoscaler() { Stop(); }

void LocalAutoscaler::Start() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
  }
  Account(absl::Now(), service_->ListWorkers());  // worker-seconds count from here
  thread_ = std::thread([this] {
    absl::Time next = absl::Now() + options_.period;
    while (true) {
      // While workers drain, wake up between decisions to stop each as soon as it is drained.
      const bool draining = AnyDraining();
      const absl::Time wake = draining ? std::min(next, absl::Now() + options_.drain_poll) : next;
      {
        absl::MutexLock lock(&mu_);
        auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
        if (mu_.AwaitWithDeadline(absl::Condition(&stop), wake)) return;
      }
      if (absl::Now() < next) {
        PollDrains();
        continue;
      }
      Step(absl::Now());
      // The next decision one period after this one was due (a long drain skips periods).
      next += options_.period;
      if (next < absl::Now()) next = absl::Now() + options_.period;
    }
  });
}

void LocalAutoscaler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  Account(absl::Now(), service_->ListWorkers());
}

std::vector<LocalDecision> LocalAutoscaler::decisions() const {
  absl::MutexLock lock(&mu_);
  return {decisions_.begin(), decisions_.end()};
}

LocalAutoscalerStats LocalAutoscaler::stats() const {
  absl::MutexLock lock(&mu_);
  LocalAutoscalerStats s = stats_;
  if (last_account_ != absl::InfinitePast()) {
    s.worker_seconds += last_running_ * absl::ToDoubleSeconds(absl::Now() - last_account_);
  }
  return s;
}

void LocalAutoscaler::Account(absl::Time now, const std::vector<local::WorkerStatus>& workers) {
  int32_t running = 0, serving = 0;
  for (const local::WorkerStatus& w : workers) {
    if (!w.exited && w.state != local::WorkerState::kStopped) ++running;
    if (w.serving()) ++serving;
  }
  absl::MutexLock lock(&mu_);
  if (last_account_ != absl::InfinitePast() && now > last_account_) {
    stats_.worker_seconds += last_running_ * absl::ToDoubleSeconds(now - last_account_);
  }
  last_account_ = std::max(now, last_account_);
  last_running_ = running;
  stats_.workers = serving;
}

Observation LocalAutoscaler::Observe(const std::vector<local::WorkerStatus>& workers, absl::Time now) {
  if (prometheus_ != nullptr) {
    // Without a namespace label, Prometheus' answers are keyed by the dataservice label alone.
    const std::string ns = options_.prometheus.namespace_label.empty() ? "" : options_.ns;
    return prometheus_->Observe({options_.prometheus_url, ns, options_.name, {}}, now);
  }
  const std::string host = service_->options().listen_host;
  std::string dispatcher_url = options_.dispatcher_metrics_url;
  if (dispatcher_url.empty()) {
    const int port = service_->dispatcher().metrics_port;
    if (port > 0) dispatcher_url = absl::StrCat("http://", host, ":", port);
  }
  const ObserveRequest request = ScrapeRequest(options_.ns, options_.name, dispatcher_url, workers, host);
  Observation out = scrape_.Observe(request, now);
  const Observation recent = scrape_recent_.Observe(request, now);
  out.signals = MergeRecent(out.signals, recent.signals);
  return out;
}

bool LocalAutoscaler::AnyDraining() const {
  for (const local::WorkerStatus& w : service_->ListWorkers()) {
    if (!w.exited && w.state == local::WorkerState::kDraining) return true;
  }
  return false;
}

std::vector<std::string> LocalAutoscaler::DrainFor(const std::vector<std::string>& names, absl::Duration wait,
                                                   std::string* error) {
  const absl::Time now = absl::Now();
  for (const std::string& n : names) draining_since_.emplace(n, now);
  std::vector<local::LocalDataService::StoppedWorker> stopped;
  const absl::Status s = service_->DrainAndStopWorkers(names, wait, &stopped);
  for (auto& w : stopped) {
    draining_since_.erase(w.name);
    started_.erase(w.name);
    pending_removed_.push_back(std::move(w));
  }
  std::vector<std::string> still;
  for (const std::string& n : names) {
    if (draining_since_.count(n)) still.push_back(n);
  }
  if (!s.ok() && !absl::IsDeadlineExceeded(s)) *error = std::string(s.message());
  // Not drained yet is the normal case; only a drain past drain_timeout is worth an error.
  std::vector<std::string> slow;
  for (const std::string& n : still) {
    const absl::Duration for_ = absl::Now() - draining_since_[n];
    if (for_ > options_.drain_timeout) slow.push_back(absl::StrCat(n, " (", absl::FormatDuration(absl::Trunc(for_, absl::Seconds(1))), ")"));
  }
  if (!slow.empty()) {
    const std::string msg = absl::StrCat("still draining after more than ", absl::FormatDuration(options_.drain_timeout),
                                         ": ", absl::StrJoin(slow, ", "), "; ", s.message());
    *error = error->empty() ? msg : absl::StrCat(*error, "; ", msg);
  }
  return still;
}

void LocalAutoscaler::PollDrains() {
  std::vector<std::string> draining;
  for (const local::WorkerStatus& w : service_->ListWorkers()) {
    if (!w.exited && w.state == local::WorkerState::kDraining) draining.push_back(w.name);
  }
  if (draining.empty()) return;
  std::string error;
  (void)DrainFor(draining, absl::ZeroDuration(), &error);  // one pass
  Account(absl::Now(), service_->ListWorkers());
}

LocalDecision LocalAutoscaler::Step(absl::Time now) {
  LocalDecision d;
  std::vector<local::WorkerStatus> workers = service_->ListWorkers();
  Account(now, workers);

  // Removals still draining: one pass (stops those drained since), then decide.
  std::vector<std::string> draining;
  for (const local::WorkerStatus& w : workers) {
    if (!w.exited && w.state == local::WorkerState::kDraining) draining.push_back(w.name);
  }
  if (!draining.empty()) {
    d.still_draining = DrainFor(draining, absl::ZeroDuration(), &d.action_error);
    workers = service_->ListWorkers();
  }
  for (const auto& w : pending_removed_) {
    d.removed.push_back(w.name);
    if (w.last_load) d.elements_lost += static_cast<int64_t>(w.last_load->buffered_elements);
  }
  pending_removed_.clear();

  const Observation observation = Observe(workers, now);
  d.signals = observation.signals;
  d.source_errors = observation.errors;
  const Target target = TargetFromWorkers(workers, started_);
  d.workers_before = target.replicas;
  DecisionResult result = Decide(policy_, target, d.signals, history_, now);
  d.decision = std::move(result.decision);
  PolicyHistory next_history = std::move(result.history);
  d.scale_down_on_missing_data = IsScaleDownOnMissingData(d.decision);

  bool carried_out = true;
  if (d.decision.act && d.decision.replicas > target.replicas) {
    const int add = d.decision.replicas - target.replicas;
    auto added = service_->AddWorkers(add, options_.worker);
    if (added.ok()) {
      d.added = *added;
    } else {
      carried_out = false;
      d.action_error = absl::StrCat("starting ", add, " workers: ", added.status().message());
      // Those that did start are counted: ListWorkers shows them.
      for (const local::WorkerStatus& w : service_->ListWorkers()) {
        if (w.serving() && !started_.count(w.name) &&
            std::none_of(target.workers.begin(), target.workers.end(),
                         [&](const WorkerCandidate& c) { return c.name == w.name; })) {
          d.added.push_back(w.name);
        }
      }
    }
    for (const std::string& n : d.added) started_[n] = absl::Now();
  } else if (d.decision.act && !d.decision.workers_to_delete.empty()) {
    std::string error;
    const size_t before = pending_removed_.size();
    std::vector<std::string> still = DrainFor(d.decision.workers_to_delete, options_.drain_step_wait, &error);
    for (size_t i = before; i < pending_removed_.size(); ++i) {
      d.removed.push_back(pending_removed_[i].name);
      if (pending_removed_[i].last_load) d.elements_lost += static_cast<int64_t>(pending_removed_[i].last_load->buffered_elements);
    }
    pending_removed_.resize(before);
    d.still_draining.insert(d.still_draining.end(), still.begin(), still.end());
    if (!error.empty()) {
      // Draining began for none of them (e.g. the dispatcher refused): nothing changed.
      if (d.removed.empty() && still.empty()) carried_out = false;
      d.action_error = absl::StrCat(d.action_error, d.action_error.empty() ? "" : "; ", "removing: ", error);
    }
  }
  // A change that did not happen is not remembered as one.
  if (!carried_out) {
    next_history.last_change = history_.last_change;
    next_history.surge_extra = history_.surge_extra;
    next_history.surge_total = history_.surge_total;
  }
  history_ = std::move(next_history);

  workers = service_->ListWorkers();
  const absl::Time done = std::max(now, absl::Now());
  Account(done, workers);
  d.workers_after = static_cast<int32_t>(
      std::count_if(workers.begin(), workers.end(), [](const local::WorkerStatus& w) { return w.serving(); }));
  {
    absl::MutexLock lock(&mu_);
    d.number = ++stats_.decisions;
    d.at = now;
    if (d.decision.act && d.decision.direction == Direction::kUp) ++stats_.scale_ups;
    if (d.decision.act && d.decision.direction == Direction::kDown) ++stats_.scale_downs;
    if (d.decision.Has(Reason::kHeldOnMissingData) || d.decision.Has(Reason::kHeldOnStaleData)) {
      ++stats_.holds_on_missing_data;
    }
    if (d.scale_down_on_missing_data && d.decision.act) ++stats_.scale_downs_on_missing_data;
    stats_.workers_added += static_cast<int64_t>(d.added.size());
    stats_.workers_removed += static_cast<int64_t>(d.removed.size());
    stats_.elements_lost += d.elements_lost;
    decisions_.push_back(d);
    while (decisions_.size() > std::max<size_t>(1, options_.keep_decisions)) decisions_.pop_front();
  }
  const std::string line = absl::StrCat("ts=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", done, absl::UTCTimeZone()),
                                        " level=info component=local-autoscaler ", DecisionLogfmt(d));
  if (options_.log_sink) {
    options_.log_sink(line);
  } else {
    std::cerr << line << "\n" << std::flush;
  }
  if (options_.on_decision) options_.on_decision(d);
  return d;
}

}  // namespace sluice::autoscaler
