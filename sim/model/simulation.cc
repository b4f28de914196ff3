#include "sim/model/simulation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "autoscaler/placement/local_capacity.h"
#include "sim/model/rng.h"

namespace sluice::sim {

using autoscaler::Measurement;
using autoscaler::Placement;

absl::Time SimTime(int64_t seconds) { return absl::FromUnixSeconds(1'800'000'000) + absl::Seconds(seconds); }

namespace {

constexpr int kOrderScenario = 0;
constexpr int kOrderPod = 1;
constexpr int kOrderScrape = 2;
constexpr int kOrderDecision = 3;

// Noise streams.
constexpr uint64_t kStreamCompute = 1;
constexpr uint64_t kStreamWorkerTick = 2;
constexpr uint64_t kStreamWorkerSpread = 3;

}  // namespace

Simulation::Simulation(const Scenario& scenario, const RunOptions& options)
    : scenario_(scenario), options_(options) {
  for (size_t j = 0; j < scenario_.jobs.size(); ++j) {
    for (int h = 0; h < scenario_.jobs[j].hosts; ++h) hosts_.push_back({static_cast<int>(j), scenario_.accelerator.local_slots});
    compute_scale_.push_back(1.0);
    interference_.push_back(scenario_.jobs[j].interference_per_worker);
  }
}

void Simulation::Push(int t, EventType type, int index, int generation) {
  int order = kOrderPod;
  if (type == EventType::kScenario) order = kOrderScenario;
  if (type == EventType::kScrape) order = kOrderScrape;
  if (type == EventType::kDecision) order = kOrderDecision;
  events_.push({t, order, seq_++, type, index, generation});
}

bool Simulation::JobActive(int job) const {
  const JobSpec& j = scenario_.jobs[job];
  return now_s_ >= j.start_s && (j.end_s == 0 || now_s_ < j.end_s);
}

int Simulation::LocalCapacity() const {
  int c = 0;
  for (const Host& h : hosts_) {
    if (JobActive(h.job)) c += h.slots;
  }
  return c;
}

int Simulation::ActiveHosts() const {
  int n = 0;
  for (const Host& h : hosts_) n += JobActive(h.job) ? 1 : 0;
  return n;
}

void Simulation::Start(Controller& controller) {
  started_ = true;
  result_ = RunResult{};
  result_.policy = controller.Name();
  for (size_t i = 0; i < scenario_.events.size(); ++i) Push(scenario_.events[i].at_s, EventType::kScenario, static_cast<int>(i));
  for (int t = 0; t < scenario_.horizon_s; t += options_.scrape_interval_s) Push(t, EventType::kScrape);
  for (int t = options_.decision_period_s; t <= scenario_.horizon_s; t += options_.decision_period_s) {
    Push(t, EventType::kDecision);
  }
  Action initial = controller.Initial(scenario_);
  initial.act = true;
  const bool instant = initial.instant;
  initial.instant = true;  // the DataService existed before the trainers started
  Apply(initial);
  instant_ = instant;
  period_ = PeriodRecord{};
}

void Simulation::RunUntil(Controller& controller, int t_s) {
  while (now_s_ < t_s && now_s_ < scenario_.horizon_s) {
    while (!events_.empty() && events_.top().t <= now_s_) {
      Event e = events_.top();
      events_.pop();
      Handle(e, controller);
    }
    Step();
    ++now_s_;
  }
}

RunResult Simulation::Finish(Controller& controller) {
  RunUntil(controller, scenario_.horizon_s);
  // The decision event at the horizon closes the last period; a horizon off the period grid leaves
  // a partial one.
  while (!events_.empty() && events_.top().t <= now_s_) {
    Event e = events_.top();
    events_.pop();
    if (e.type == EventType::kDecision) ClosePeriod();
  }
  if (result_.periods.empty() || result_.periods.back().t_end < now_s_) ClosePeriod();
  RunTotals& t = result_.totals;
  t.consumed = consumed_;
  t.produced = produced_;
  t.wait_seconds = wait_;
  t.step_seconds = step_;
  t.buffered = 0;
  for (const Worker& w : workers_) {
    if (w.phase != Phase::kGone) t.buffered += w.buffer;
  }
  return result_;
}

RunResult Simulation::Run(Controller& controller) {
  Start(controller);
  return Finish(controller);
}

void Simulation::Handle(const Event& e, Controller& controller) {
  switch (e.type) {
    case EventType::kScenario:
      HandleScenarioEvent(scenario_.events[e.index]);
      break;
    case EventType::kScrape: {
      bool gap = false;
      for (const Outage& o : outages_) gap = gap || (o.kind == OutageKind::kScrapeGap && now_s_ < o.until_s);
      if (!gap) Scrape();
      break;
    }
    case EventType::kDecision:
      ClosePeriod();
      if (now_s_ < scenario_.horizon_s) Decide(controller);
      break;
    case EventType::kPodReady:
    case EventType::kCrash:
    case EventType::kRestart:
    case EventType::kHeartbeatTimeout: {
      Worker& w = workers_[e.index];
      if (w.generation != e.generation || w.phase == Phase::kGone) break;
      if (e.type == EventType::kPodReady && w.phase == Phase::kStarting) {
        w.phase = Phase::kReady;
        w.registered = true;
        w.ready_s = now_s_;
        if (w.crashy && now_s_ < crash_loop_until_) Push(now_s_ + crash_run_seconds_, EventType::kCrash, w.id, w.generation);
      } else if (e.type == EventType::kCrash && w.phase == Phase::kReady && w.crashy && now_s_ < crash_loop_until_) {
        Crash(w);
      } else if (e.type == EventType::kHeartbeatTimeout && w.phase == Phase::kCrashed && w.registered) {
        w.registered = false;
        heartbeat_removals_ += 1;
      } else if (e.type == EventType::kRestart && w.phase == Phase::kCrashed) {
        w.phase = Phase::kStarting;
        Push(now_s_ + options_.restart_start_s, EventType::kPodReady, w.id, w.generation);
      }
      break;
    }
  }
}

void Simulation::HandleScenarioEvent(const ScenarioEvent& ev) {
  switch (ev.kind) {
    case EventKind::kComputeScale:
      compute_scale_[ev.job] = ev.value;
      break;
    case EventKind::kInterference:
      interference_[ev.job] = ev.value;
      break;
    case EventKind::kLocalSlots:
      for (Host& h : hosts_) h.slots = static_cast<int>(ev.value);
      Reconcile();
      break;
    case EventKind::kOutage:
      outages_.push_back({ev.outage, ev.at_s + ev.duration_s});
      break;
    case EventKind::kCrashLoop: {
      crash_loop_until_ = ev.at_s + ev.duration_s;
      crash_run_seconds_ = ev.run_seconds;
      // A bad node: the oldest ready workers, remote ones first (they share the node pool).
      std::vector<Worker*> ready;
      for (Worker& w : workers_) {
        if (w.phase == Phase::kReady) ready.push_back(&w);
      }
      std::stable_sort(ready.begin(), ready.end(), [](const Worker* a, const Worker* b) {
        if (a->local != b->local) return !a->local;
        return a->created_s < b->created_s;
      });
      for (int i = 0; i < ev.count && i < static_cast<int>(ready.size()); ++i) {
        ready[i]->crashy = true;
        Push(now_s_ + ev.run_seconds, EventType::kCrash, ready[i]->id, ready[i]->generation);
      }
      break;
    }
  }
}

void Simulation::Crash(Worker& w) {
  result_.totals.lost_crash += w.buffer;
  w.buffer = 0;
  w.busy_fraction = 0;
  w.phase = Phase::kCrashed;
  ++w.crashes;
  const int backoff = std::min(options_.backoff_cap_s, options_.backoff_base_s << std::min(w.crashes - 1, 20));
  Push(now_s_ + options_.heartbeat_timeout_s, EventType::kHeartbeatTimeout, w.id, w.generation);
  Push(now_s_ + backoff, EventType::kRestart, w.id, w.generation);
}

void Simulation::Decide(Controller& controller) {
  Observation obs = Observe();
  Action a = controller.Decide(obs);
  DecisionRecord rec;
  rec.t = now_s_;
  rec.replicas_before = replicas_;
  rec.note = a.note;
  rec.missing_data = false;
  for (const Measurement* m : {&obs.signals.stall_ratio, &obs.signals.demand, &obs.signals.supply,
                               &obs.signals.worker_cpu, &obs.signals.compute_per_element, &obs.signals.buffered,
                               &obs.signals.churn, &obs.signals.workers, &obs.signals.local_workers}) {
    rec.missing_data = rec.missing_data || !m->known();
  }
  if (obs.now - obs.signals.at > absl::Minutes(2)) rec.missing_data = true;  // stale
  if (a.act) {
    a.instant = a.instant || instant_;
    Apply(a);
    ++result_.totals.scaling_decisions;
    if (replicas_ < rec.replicas_before - a.surge_released && rec.missing_data) {
      ++result_.totals.scale_downs_on_missing_data;
    }
  }
  rec.act = a.act;
  rec.replicas_after = replicas_;
  int local = 0;
  for (const Worker& w : workers_) local += (w.local && w.phase != Phase::kGone && w.phase != Phase::kDraining) ? 1 : 0;
  rec.local_after = local;
  result_.decisions.push_back(std::move(rec));
}

void Simulation::Apply(const Action& a) {
  replicas_ = std::clamp(a.replicas, 0, scenario_.max_workers);
  placement_ = a.placement;
  local_ = a.local;
  const bool was_instant = instant_;
  instant_ = a.instant;
  for (const std::string& name : a.remove) {
    for (Worker& w : workers_) {
      if (w.name == name && w.phase != Phase::kGone && w.phase != Phase::kDraining) RemoveWorker(w);
    }
  }
  Reconcile();
  instant_ = was_instant;
}

void Simulation::Reconcile() {
  // The split sluice-operator carries out, by the same rule (the placement library's).
  const autoscaler::CapacitySplit split = autoscaler::SplitByCapacity(
      {placement_, replicas_, local_ ? std::optional<int64_t>(*local_) : std::nullopt, LocalCapacity()});
  const int want_local = static_cast<int>(split.local);
  const int want_remote = static_cast<int>(split.remote);

  // Local pods beyond their host's capacity (or on a host whose job ended) go, newest first.
  std::vector<int> on_host(hosts_.size(), 0);
  for (int i = static_cast<int>(workers_.size()) - 1; i >= 0; --i) {
    Worker& w = workers_[i];
    if (!w.local || w.phase == Phase::kGone || w.phase == Phase::kDraining) continue;
    const Host& h = hosts_[w.host];
    const int cap = JobActive(h.job) ? h.slots : 0;
    int count = 0;
    for (const Worker& o : workers_) {
      count += (o.local && o.host == w.host && o.phase != Phase::kGone && o.phase != Phase::kDraining) ? 1 : 0;
    }
    if (count > cap) {
      if (!JobActive(h.job)) {
        // The host left with its trainer: the pod is gone with it.
        result_.totals.lost_evicted += w.buffer;
        w.buffer = 0;
        Gone(w);
      } else {
        RemoveWorker(w);
      }
    }
  }
  auto pool = [&](bool local) {
    std::vector<Worker*> out;
    for (Worker& w : workers_) {
      if (w.local == local && w.phase != Phase::kGone && w.phase != Phase::kDraining) out.push_back(&w);
    }
    return out;
  };
  // Trim each pool: not-ready first, then the newest.
  for (bool local : {true, false}) {
    std::vector<Worker*> p = pool(local);
    const int want = local ? want_local : want_remote;
    if (static_cast<int>(p.size()) <= want) continue;
    std::stable_sort(p.begin(), p.end(), [](const Worker* a, const Worker* b) {
      const bool ra = a->phase == Phase::kReady, rb = b->phase == Phase::kReady;
      if (ra != rb) return !ra;
      return a->created_s > b->created_s;
    });
    for (int i = 0; i < static_cast<int>(p.size()) - want; ++i) RemoveWorker(*p[i]);
  }
  // Fill: local pods on the host with the most free slots; remote pods within the quota.
  for (int n = static_cast<int>(pool(true).size()); n < want_local; ++n) {
    int best = -1, best_free = 0;
    for (size_t h = 0; h < hosts_.size(); ++h) {
      if (!JobActive(hosts_[h].job)) continue;
      int used = 0;
      for (const Worker& w : workers_) used += (w.local && w.host == static_cast<int>(h) && w.phase != Phase::kGone) ? 1 : 0;
      const int free = hosts_[h].slots - used;
      if (free > best_free) {
        best = static_cast<int>(h);
        best_free = free;
      }
    }
    if (best < 0) break;  // the draining local pods still hold the slots
    CreateWorker(true, best);
  }
  int remote_pods = 0;
  for (const Worker& w : workers_) remote_pods += (!w.local && w.phase != Phase::kGone) ? 1 : 0;
  for (int n = static_cast<int>(pool(false).size()); n < want_remote; ++n) {
    if (scenario_.remote.quota > 0 && remote_pods >= scenario_.remote.quota) break;
    CreateWorker(false, -1);
    ++remote_pods;
  }
}

void Simulation::CreateWorker(bool local, int host) {
  Worker w;
  w.id = static_cast<int>(workers_.size());
  w.local = local;
  w.host = host;
  w.name = local ? absl::StrCat("local-", next_local_name_++) : absl::StrCat("remote-", next_remote_name_++);
  w.created_s = now_s_;
  w.speed = Jitter(Key(scenario_.seed, kStreamWorkerSpread, static_cast<uint64_t>(w.id)), scenario_.noise.worker_spread);
  workers_.push_back(w);
  Worker& added = workers_.back();
  if (instant_) {
    added.phase = Phase::kReady;
    added.registered = true;
    added.ready_s = now_s_;
  } else {
    Push(now_s_ + (local ? scenario_.local_start_seconds : scenario_.remote.start_seconds), EventType::kPodReady,
         added.id, added.generation);
  }
}

void Simulation::RemoveWorker(Worker& w) {
  if (w.phase == Phase::kReady && w.buffer > 0) {
    w.phase = Phase::kDraining;  // the dispatcher drains it: its buffer is read before the pod goes
    w.drain_started_s = now_s_;
    w.busy_fraction = 0;
    return;
  }
  Gone(w);
}

void Simulation::Gone(Worker& w) {
  if (w.buffer > 0) result_.totals.lost_drain += w.buffer;
  w.buffer = 0;
  w.phase = Phase::kGone;
  w.registered = false;
  w.busy_fraction = 0;
  ++w.generation;
}

double Simulation::Slowdown(int job) const {
  const JobSpec& j = scenario_.jobs[job];
  // The slowest of the job's hosts sets the pace (synchronous data parallelism).
  double slowdown = 0;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (hosts_[h].job != job) continue;
    double busy = 0;
    for (const Worker& w : workers_) {
      if (w.local && w.host == static_cast<int>(h)) busy += w.busy_fraction;
    }
    slowdown = std::max(slowdown, interference_[job] * busy + j.interference_quadratic * busy * busy);
  }
  return slowdown;
}

double Simulation::ComputePerElement(int job) const {
  return scenario_.jobs[job].compute_seconds_per_element * compute_scale_[job] * (1.0 + Slowdown(job)) *
         Jitter(Key(scenario_.seed, kStreamCompute, static_cast<uint64_t>(now_s_), static_cast<uint64_t>(job)),
                scenario_.noise.compute_jitter);
}

void Simulation::Step() {
  const double cpe = scenario_.pipeline.cpu_seconds_per_element;
  const int cores = scenario_.remote.cores;
  // Trainers: what each would read this second without waiting.
  std::vector<double> compute(scenario_.jobs.size(), 0), wanted(scenario_.jobs.size(), 0);
  double total_wanted = 0;
  for (size_t j = 0; j < scenario_.jobs.size(); ++j) {
    if (!JobActive(static_cast<int>(j))) continue;
    compute[j] = ComputePerElement(static_cast<int>(j));
    period_.interference += Slowdown(static_cast<int>(j));
    wanted[j] = 1.0 / compute[j];
    total_wanted += wanted[j];
  }
  // Workers fill their buffers.
  for (Worker& w : workers_) {
    if (w.phase != Phase::kReady) continue;
    const double rate = cores / cpe * w.speed *
                        Jitter(Key(scenario_.seed, kStreamWorkerTick, static_cast<uint64_t>(now_s_),
                                   static_cast<uint64_t>(w.id)),
                               scenario_.noise.worker_jitter);
    const double capacity = std::max(scenario_.pipeline.buffer_seconds, 3.0) * cores / cpe * w.speed;
    const double made = std::clamp(capacity - w.buffer, 0.0, rate);
    w.buffer += made;
    produced_ += made;
    busy_ += made * cpe;
    w.busy_total += made * cpe;
    w.busy_fraction = made * cpe / cores;
  }
  // Trainers read: drained buffers first, then local ones, then remote ones up to the hosts' ingress.
  double remaining = total_wanted;
  double taken = 0;
  auto take_from = [&](auto&& select, double limit) {
    double avail = 0;
    for (const Worker& w : workers_) avail += select(w) ? w.buffer : 0;
    const double take = std::min({remaining, avail, limit});
    if (take <= 0) return 0.0;
    const double frac = take / avail;
    for (Worker& w : workers_) {
      if (select(w)) w.buffer -= w.buffer * frac;
    }
    remaining -= take;
    taken += take;
    return take;
  };
  const double inf = std::numeric_limits<double>::infinity();
  double ingress = inf;
  if (scenario_.accelerator.ingress_gbps > 0 && scenario_.pipeline.bytes_per_element > 0) {
    ingress = ActiveHosts() * scenario_.accelerator.ingress_gbps * 1e9 / 8 / scenario_.pipeline.bytes_per_element;
  }
  ingress -= take_from([](const Worker& w) { return w.phase == Phase::kDraining && !w.local; }, ingress);
  take_from([](const Worker& w) { return w.phase == Phase::kDraining && w.local; }, inf);
  take_from([](const Worker& w) { return w.phase == Phase::kReady && w.local; }, inf);
  take_from([](const Worker& w) { return w.phase == Phase::kReady && !w.local; }, std::max(0.0, ingress));
  consumed_ += taken;
  period_.consumed += taken;
  period_.wanted += total_wanted;
  for (size_t j = 0; j < scenario_.jobs.size(); ++j) {
    if (wanted[j] <= 0) continue;
    const double got = total_wanted > 0 ? taken * wanted[j] / total_wanted : 0;
    const double wait = std::clamp(1.0 - got * compute[j], 0.0, 1.0);
    wait_ += wait;
    step_ += 1.0;
    compute_ += 1.0 - wait;
    period_.step_seconds += 1.0;
    period_.stall += wait;  // divided by step_seconds when the period closes
    result_.totals.job_seconds += 1.0;
  }
  // Drains that are done or timed out.
  for (Worker& w : workers_) {
    if (w.phase != Phase::kDraining) continue;
    if (w.buffer <= 1e-9) {
      w.buffer = 0;
      Gone(w);
    } else if (now_s_ + 1 - w.drain_started_s >= options_.drain_timeout_s) {
      Gone(w);  // the rest is lost (lost_drain)
    }
  }
  // Money for this second.
  result_.totals.accelerator_dollars += ActiveHosts() * scenario_.accelerator.hourly / 3600.0;
  for (const Worker& w : workers_) {
    if (w.phase == Phase::kGone) continue;
    if (w.local) {
      result_.totals.local_worker_seconds += 1;
    } else {
      result_.totals.remote_dollars += scenario_.remote.hourly / 3600.0;
      result_.totals.remote_pod_seconds += 1;
    }
  }
}

void Simulation::ClosePeriod() {
  PeriodRecord p = period_;
  p.t_end = now_s_;
  p.stall = p.step_seconds > 0 ? p.stall / p.step_seconds : 0;
  p.interference = p.step_seconds > 0 ? p.interference / p.step_seconds : 0;
  for (const Worker& w : workers_) {
    if (w.phase == Phase::kGone) continue;
    (w.local ? p.local_pods : p.remote_pods) += 1;
    if (w.phase == Phase::kReady) (w.local ? p.local_ready : p.remote_ready) += 1;
  }
  p.replicas = replicas_;
  p.accelerator_dollars = result_.totals.accelerator_dollars;
  p.remote_dollars = result_.totals.remote_dollars;
  result_.periods.push_back(p);
  period_ = PeriodRecord{};
}

void Simulation::Scrape() {
  Sample s;
  s.t = now_s_;
  s.consumed = consumed_;
  s.wait = wait_;
  s.step = step_;
  s.compute = compute_;
  s.produced = produced_;
  s.busy = busy_;
  s.heartbeat_removals = heartbeat_removals_;
  for (const Worker& w : workers_) {
    if (!w.registered) continue;
    s.buffered += w.buffer;
    ++s.registered;
    s.registered_local += w.local ? 1 : 0;
    if (w.phase == Phase::kReady) s.pod_busy[w.name] = w.busy_total;
  }
  samples_.push_back(std::move(s));
  const int keep = std::max(options_.rate_window_s, options_.staleness_s) + options_.scrape_interval_s;
  while (!samples_.empty() && samples_.front().t < now_s_ - keep) samples_.pop_front();
}

autoscaler::Signals Simulation::Query() const {
  autoscaler::Signals s;
  bool down = false, client_missing = false;
  for (const Outage& o : outages_) {
    if (now_s_ >= o.until_s) continue;
    down = down || o.kind == OutageKind::kPrometheusDown;
    client_missing = client_missing || o.kind == OutageKind::kClientSeriesMissing;
  }
  s.window = absl::Seconds(options_.rate_window_s);
  if (down) {
    s.at = SimTime(now_s_);
    const Measurement failed = Measurement::Missing("query failed: connection refused");
    for (Measurement* m : {&s.stall_ratio, &s.demand, &s.supply, &s.worker_cpu, &s.compute_per_element, &s.buffered,
                           &s.churn, &s.workers, &s.local_workers}) {
      *m = failed;
    }
    return s;
  }
  const Sample* latest = samples_.empty() ? nullptr : &samples_.back();
  if (latest && latest->t < now_s_ - options_.staleness_s) latest = nullptr;
  s.at = latest ? SimTime(latest->t) : absl::InfinitePast();
  const Measurement no_series = Measurement::Missing("no series");
  // rate(...[W]) at now: the samples within (now - W, now]; at least two.
  auto window = [&](int w) -> std::pair<const Sample*, const Sample*> {
    const Sample* first = nullptr;
    const Sample* last = nullptr;
    for (const Sample& x : samples_) {
      if (x.t > now_s_ - w && x.t <= now_s_) {
        if (!first) first = &x;
        last = &x;
      }
    }
    if (first && last && last->t > first->t) return {first, last};
    return {nullptr, nullptr};
  };
  if (auto [first, last] = window(options_.rate_window_s); first) {
    const double dt = last->t - first->t;
    const double dstep = last->step - first->step;
    const double dconsumed = last->consumed - first->consumed;
    s.stall_ratio = Measurement::Of((last->wait - first->wait) / dstep);  // NaN when no step: 0/0
    s.demand = Measurement::Of(dconsumed / dt);
    s.compute_per_element = Measurement::Of((last->compute - first->compute) / dconsumed);
    s.supply = Measurement::Of((last->produced - first->produced) / dt);
    s.worker_cpu = Measurement::Of((last->busy - first->busy) / dt);
    s.churn = Measurement::Of(last->heartbeat_removals - first->heartbeat_removals);
  } else {
    s.stall_ratio = s.demand = s.compute_per_element = s.supply = s.worker_cpu = s.churn = no_series;
  }
  s.recent_window = absl::Seconds(options_.recent_window_s);
  if (auto [first, last] = window(options_.recent_window_s); first) {
    const double dt = last->t - first->t;
    s.recent_stall_ratio = Measurement::Of((last->wait - first->wait) / (last->step - first->step));
    s.recent_demand = Measurement::Of((last->consumed - first->consumed) / dt);
    s.recent_supply = Measurement::Of((last->produced - first->produced) / dt);
    s.recent_worker_cpu = Measurement::Of((last->busy - first->busy) / dt);
  } else {
    s.recent_stall_ratio = s.recent_demand = s.recent_supply = s.recent_worker_cpu = no_series;
  }
  if (latest) {
    s.buffered = Measurement::Of(latest->buffered);
    s.workers = Measurement::Of(latest->registered);
    s.local_workers = Measurement::Of(latest->registered_local);
  } else {
    s.buffered = s.workers = s.local_workers = no_series;
  }
  if (client_missing) {
    s.stall_ratio = s.demand = s.compute_per_element = no_series;
    s.recent_stall_ratio = s.recent_demand = no_series;
  }
  return s;
}

Observation Simulation::Observe() const {
  Observation o;
  o.now_s = now_s_;
  o.now = SimTime(now_s_);
  o.signals = Query();
  o.replicas = replicas_;
  o.local = local_;
  o.local_capacity = LocalCapacity();
  o.consumer_nodes = ActiveHosts();
  o.worker_cores = scenario_.remote.cores;
  for (const Worker& w : workers_) {
    if (w.phase == Phase::kGone) continue;
    o.pods.push_back({w.name, w.local, w.phase == Phase::kReady, w.phase == Phase::kDraining, w.created_s, w.ready_s});
  }
  // Per-pod CPU over the window (metrics API): pods present at both ends of the window.
  bool down = false;
  for (const Outage& out : outages_) {
    down = down || (now_s_ < out.until_s && out.kind != OutageKind::kClientSeriesMissing);
  }
  o.pod_cpu_available = !down;
  if (!down) {
    const Sample* first = nullptr;
    const Sample* last = nullptr;
    for (const Sample& x : samples_) {
      if (x.t > now_s_ - options_.rate_window_s && x.t <= now_s_) {
        if (!first) first = &x;
        last = &x;
      }
    }
    if (first && last && last->t > first->t) {
      for (const auto& [name, busy] : last->pod_busy) {
        auto it = first->pod_busy.find(name);
        if (it != first->pod_busy.end()) o.pod_cpu[name] = (busy - it->second) / (last->t - first->t);
      }
    } else {
      o.pod_cpu_available = false;
    }
  }
  return o;
}

}  // namespace sluice::sim
