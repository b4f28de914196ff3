#include "autoscaler/policy/policy.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

namespace sluice::autoscaler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

struct Obs {
  double stall = 0;
  double demand = 0;
  double supply = 0;
  double workers = 0;
  double cpu = 0;  // cores used by all workers
  double buffered = 0;
  double churn = 0;
  double local = 0;
  double compute = 0.1;
};

Signals At(absl::Time at, const Obs& o) {
  Signals s;
  s.at = at;
  s.window = absl::Minutes(1);
  s.stall_ratio = Measurement::Of(o.stall);
  s.demand = Measurement::Of(o.demand);
  s.supply = Measurement::Of(o.supply);
  s.worker_cpu = Measurement::Of(o.cpu);
  s.compute_per_element = Measurement::Of(o.compute);
  s.buffered = Measurement::Of(o.buffered);
  s.churn = Measurement::Of(o.churn);
  s.workers = Measurement::Of(o.workers);
  s.local_workers = Measurement::Of(o.local);
  return s;
}

PolicyConfig Config() {
  PolicyConfig c;
  c.headroom = 0.10;  // the tables below were written for 10% (the default is 5%)
  c.min_replicas = 1;
  c.max_replicas = 64;
  c.placement.worker_cpus = 1;
  c.scale_down.stabilization_window = absl::ZeroDuration();
  return c;
}

Target Replicas(int32_t n) {
  Target t;
  t.replicas = n;
  for (int32_t i = 0; i < n; ++i) t.workers.push_back({"w-" + std::to_string(i), false, true, 0, kT0});
  return t;
}

TEST_CASE("step up: a stalled job gets its size from the model in one decision") {
  // 2 saturated workers make 100 elements/s; the trainers stall half the time, so they want 200.
  DecisionResult r = Decide(Config(), Replicas(2), At(kT0, {0.5, 100, 100, 2, 2}), {}, kT0);
  const Decision& d = r.decision;
  INFO(d.Summary());
  CHECK(d.arithmetic.true_demand == Approx(200));
  CHECK(d.arithmetic.capacity_per_worker == Approx(50));
  CHECK(d.arithmetic.capacity_source == "saturated");
  CHECK(d.arithmetic.needed_exact == Approx(200 * 0.95 * 1.1 / 50));
  CHECK(d.replicas == 5);
  CHECK(d.direction == Direction::kUp);
  CHECK(d.act);
  CHECK(d.Has(Reason::kScaledUp));
  CHECK(r.history.capacity_per_worker == Approx(50));
  CHECK(r.history.last_change == kT0);
}

TEST_CASE("step up from one worker: a job needing 30 is sized in one decision") {
  // One saturated worker makes 96.7 elements/s of the 2900 the trainers want: stall 0.967.
  const double supply = 2900.0 / 30;
  DecisionResult r = Decide(Config(), Replicas(1), At(kT0, {1 - supply / 2900, supply, supply, 1, 1}), {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.arithmetic.true_demand == Approx(2900));
  CHECK(r.decision.replicas == static_cast<int32_t>(std::ceil(30 * 0.95 * 1.1)));
}

TEST_CASE("step down: over-provisioned workers are sized from their CPU") {
  // 10 workers at 10% CPU each make the 50 elements/s consumed: one worker can make 50.
  DecisionResult r = Decide(Config(), Replicas(10), At(kT0, {0.0, 50, 50, 10, 1.0}), {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.arithmetic.capacity_source == "CPU");
  CHECK(r.decision.arithmetic.capacity_per_worker == Approx(50));
  CHECK(r.decision.replicas == 2);
  CHECK(r.decision.direction == Direction::kDown);
  CHECK(r.decision.workers_to_delete.size() == 8);
}

TEST_CASE("a remembered saturated capacity caps the CPU estimate") {
  PolicyHistory h;
  h.capacity_per_worker = 25;  // flat out, a worker made only 25/s (a serial stage)
  DecisionResult r = Decide(Config(), Replicas(10), At(kT0, {0.0, 50, 50, 10, 1.0}), h, kT0);
  CHECK(r.decision.arithmetic.capacity_per_worker == Approx(25));
  CHECK(r.decision.replicas == 3);
}

TEST_CASE("hold on missing, NaN or stale data: never scale down on data it does not have") {
  PolicyConfig c = Config();
  Signals s = At(kT0, {0.0, 50, 50, 10, 1.0});
  SECTION("demand has no series") {
    s.demand = Measurement::Missing("no series");
  }
  SECTION("stall ratio is NaN") {
    s.stall_ratio = Measurement::Of(std::nan(""));
  }
  SECTION("churn unknown") {
    s.churn = Measurement::Missing("query failed");
  }
  SECTION("the window is stale") {
    s = At(kT0 - absl::Minutes(5), {0.0, 50, 50, 10, 1.0});
  }
  DecisionResult r = Decide(c, Replicas(10), s, {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.replicas == 10);
  CHECK(r.decision.direction == Direction::kNone);
  CHECK_FALSE(r.decision.act);
  CHECK(r.decision.holding);
  CHECK((r.decision.Has(Reason::kHeldOnMissingData) || r.decision.Has(Reason::kHeldOnStaleData)));
}

TEST_CASE("a stall known to be too high scales up one step without a model") {
  PolicyConfig c = Config();
  Signals s = At(kT0, {0.6, 40, 40, 4, 4});
  s.supply = Measurement::Missing("no series");
  s.worker_cpu = Measurement::Missing("no series");
  DecisionResult r = Decide(c, Replicas(4), s, {}, kT0);
  CHECK(r.decision.replicas == 6);  // +50%
  CHECK(r.decision.Has(Reason::kScaleUpWithoutModel));
  c.scale_up.max_step = 3;
  CHECK(Decide(c, Replicas(4), s, {}, kT0).decision.replicas == 7);
}

TEST_CASE("fallback after repeated failures raises to fallback.replicas, never lowers") {
  PolicyConfig c = Config();
  c.fallback = {3, 6};
  Signals missing;  // nothing observed yet
  PolicyHistory h;
  Target t = Replicas(2);
  for (int i = 0; i < 2; ++i) {
    DecisionResult r = Decide(c, t, missing, h, kT0 + absl::Seconds(15 * i));
    CHECK(r.decision.replicas == 2);
    h = r.history;
  }
  DecisionResult third = Decide(c, t, missing, h, kT0 + absl::Seconds(30));
  CHECK(third.decision.replicas == 6);
  CHECK(third.decision.Has(Reason::kFallback));
  // Above the fallback already: held where it is.
  CHECK(Decide(c, Replicas(9), missing, third.history, kT0 + absl::Seconds(45)).decision.replicas == 9);
}

TEST_CASE("bounds and step limits") {
  PolicyConfig c = Config();
  c.max_replicas = 4;
  DecisionResult up = Decide(c, Replicas(2), At(kT0, {0.5, 100, 100, 2, 2}), {}, kT0);
  CHECK(up.decision.replicas == 4);
  CHECK(up.decision.Has(Reason::kTooManyReplicas));

  c.max_replicas = 64;
  c.scale_up.max_step = 2;
  DecisionResult step = Decide(c, Replicas(2), At(kT0, {0.5, 100, 100, 2, 2}), {}, kT0);
  CHECK(step.decision.replicas == 4);
  CHECK(step.decision.Has(Reason::kScaleUpLimited));

  c.scale_down.max_step = 3;
  DecisionResult down = Decide(c, Replicas(10), At(kT0, {0.0, 50, 50, 10, 1.0}), {}, kT0);
  CHECK(down.decision.replicas == 7);
  CHECK(down.decision.Has(Reason::kScaleDownLimited));

  c.min_replicas = 5;
  c.scale_down.max_step = 0;
  DecisionResult floor = Decide(c, Replicas(10), At(kT0, {0.0, 50, 50, 10, 1.0}), {}, kT0);
  CHECK(floor.decision.replicas == 5);
  CHECK(floor.decision.Has(Reason::kTooFewReplicas));
}

TEST_CASE("stabilization windows: scale-down waits for the highest recent recommendation") {
  PolicyConfig c = Config();
  c.scale_down.stabilization_window = absl::Minutes(5);
  PolicyHistory h;
  h.recommendations = {{kT0 - absl::Minutes(4), 10}, {kT0 - absl::Minutes(2), 6}};
  DecisionResult r = Decide(c, Replicas(10), At(kT0, {0.0, 50, 50, 10, 1.0}), h, kT0);
  CHECK(r.decision.replicas == 10);
  CHECK(r.decision.Has(Reason::kScaleDownStabilized));
  // Once the 10 leaves the window, the 6 bounds it.
  r = Decide(c, Replicas(10), At(kT0 + absl::Minutes(2), {0.0, 50, 50, 10, 1.0}), r.history,
             kT0 + absl::Minutes(2));
  CHECK(r.decision.replicas == 6);
  // Scale-up window: the lowest recent recommendation bounds a scale-up.
  c.scale_up.stabilization_window = absl::Minutes(1);
  PolicyHistory up;
  up.recommendations = {{kT0 - absl::Seconds(30), 3}};
  DecisionResult u = Decide(c, Replicas(2), At(kT0, {0.5, 100, 100, 2, 2}), up, kT0);
  CHECK(u.decision.replicas == 3);
  CHECK(u.decision.Has(Reason::kScaleUpStabilized));
}

TEST_CASE("churn and unsettled data hold scale-down, not scale-up") {
  PolicyConfig c = Config();
  DecisionResult churn = Decide(c, Replicas(10), At(kT0, {0.0, 50, 50, 10, 1.0, 0, 2}), {}, kT0);
  CHECK(churn.decision.replicas == 10);
  CHECK(churn.decision.Has(Reason::kHeldOnChurn));
  CHECK(Decide(c, Replicas(2), At(kT0, {0.5, 100, 100, 2, 2, 0, 2}), {}, kT0).decision.replicas == 5);

  PolicyHistory h;
  h.last_change = kT0 - absl::Seconds(40);  // the 1-minute window began before the change settled
  DecisionResult unsettled = Decide(c, Replicas(10), At(kT0, {0.0, 50, 50, 10, 1.0}), h, kT0);
  CHECK(unsettled.decision.replicas == 10);
  CHECK(unsettled.decision.Has(Reason::kHeldUntilSettled));
}

TEST_CASE("workers not ready long after their creation are replaced, and are no room to scale down") {
  // 10 workers, of which 2 crash-loop (created long ago, not ready now); the 8 that serve are just
  // what the trainers need (the simulator's worker-crash-loop with 20 local slots scaled down to 9
  // here, and then stalled while 7 served).
  PolicyConfig c = Config();
  c.headroom = 0;
  c.settle_time = absl::Seconds(30);
  Target t = Replicas(10);
  t.workers[3].ready = false;
  t.workers[7].ready = false;
  const absl::Time now = kT0 + absl::Minutes(10);
  // 8 registered workers make 80 elements/s, the trainers want 80 (no stall).
  DecisionResult r = Decide(c, t, At(now, {0.0, 80, 80, 8, 8}), {}, now);
  INFO(r.decision.Summary());
  CHECK(r.decision.arithmetic.broken_workers == 2);
  CHECK(r.decision.Has(Reason::kBrokenWorkers));
  CHECK(r.decision.replicas == 10);  // not 8: the broken two are no room to scale down
  CHECK(r.decision.direction == Direction::kNone);

  // Now the trainers want 90: 9 serving workers are needed, plus the 2 broken ones.
  DecisionResult up = Decide(c, t, At(now, {0.1, 81, 81, 8, 8}), {}, now);
  INFO(up.decision.Summary());
  CHECK(up.decision.replicas == 11);
  CHECK(up.decision.direction == Direction::kUp);

  // A worker that is merely starting (created 20 s ago) is not broken.
  Target starting = Replicas(8);
  starting.workers.push_back({"new", false, false, 0, now - absl::Seconds(20)});
  starting.replicas = 9;
  DecisionResult s = Decide(c, starting, At(now, {0.0, 80, 80, 8, 8}), {}, now);
  CHECK(s.decision.arithmetic.broken_workers == 0);
  CHECK_FALSE(s.decision.Has(Reason::kBrokenWorkers));
}

TEST_CASE("tolerance: a small change is not worth a pod") {
  // 4 workers, a need of 4.2: within 10%.
  PolicyConfig c = Config();
  const double demand = 4.2 * 50 / (0.95 * 1.1);
  DecisionResult r = Decide(c, Replicas(4), At(kT0, {0.0, demand, demand, 4, 4 * demand / 4 / 50}), {}, kT0);
  CHECK(r.decision.replicas == 4);
  CHECK(r.decision.Has(Reason::kWithinTolerance));
}

TEST_CASE("idle trainers: down to the minimum on fresh evidence") {
  PolicyConfig c = Config();
  c.min_replicas = 1;
  Signals s = At(kT0, {0.0, 0.0, 0.0, 6, 0.0});
  s.stall_ratio = Measurement::Of(std::nan(""));  // no steps: 0/0
  DecisionResult r = Decide(c, Replicas(6), s, {}, kT0);
  CHECK(r.decision.replicas == 1);
  CHECK(r.decision.Has(Reason::kIdle));
}

TEST_CASE("stall with full worker buffers: more workers would not help") {
  DecisionResult r = Decide(Config(), Replicas(4), At(kT0, {0.4, 100, 100, 4, 1.0, 500}), {}, kT0);
  CHECK(r.decision.replicas == 4);
  CHECK(r.decision.Has(Reason::kStallNotFromWorkers));
}

TEST_CASE("Recommend mode computes the same decision and does not act") {
  PolicyConfig c = Config();
  c.mode = Mode::kRecommend;
  DecisionResult r = Decide(c, Replicas(2), At(kT0, {0.5, 100, 100, 2, 2}), {}, kT0);
  CHECK(r.decision.replicas == 5);
  CHECK_FALSE(r.decision.act);
  CHECK(r.decision.Has(Reason::kRecommendOnly));
  CHECK(r.history.last_change == absl::InfinitePast());
}

TEST_CASE("Hybrid through Decide: local first, shifted back to remote on interference, probed later") {
  PolicyConfig c = Config();
  c.placement.policy = Placement::kHybrid;
  c.settle_time = absl::ZeroDuration();
  auto pods = [](int local, int remote, int remote_ready) {
    Target t;
    t.replicas = local + remote;
    t.local = local;
    t.local_capacity = 8;
    for (int i = 0; i < local; ++i) t.workers.push_back({"l-" + std::to_string(i), true, true, 0, kT0});
    for (int i = 0; i < remote; ++i) t.workers.push_back({"r-" + std::to_string(i), false, i < remote_ready, 0, kT0});
    return t;
  };
  // 2 remote workers, compute 100 ms per element; demand steps up: 5 workers, local first. The 2
  // remote ones stay until the local ones serve (make before break).
  DecisionResult r = Decide(c, pods(0, 2, 2), At(kT0, {0.5, 100, 100, 2, 2, 0, 0, 0, 0.100}), {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.local == 5);
  CHECK(r.decision.remote == 2);
  CHECK(r.decision.split.remote == 0);
  // With 5 local workers the trainers compute 130 ms per element: 6% per worker, at most 1 fits.
  // 4 remote workers are asked for first; the local ones stay until they serve.
  absl::Time t1 = kT0 + absl::Minutes(2);
  r = Decide(c, pods(5, 2, 2), At(t1, {0.0, 200, 200, 7, 7 * 200.0 / 7 / 50, 0, 0, 5, 0.130}), r.history, t1);
  INFO(r.decision.Summary());
  CHECK(r.decision.split.local == 1);
  CHECK(r.decision.split.reason == SplitReason::kInterference);
  CHECK(r.decision.local == 5);
  CHECK(r.decision.remote == 4);
  CHECK(r.decision.workers_to_delete.empty());
  // The remote ones serve: 4 local workers go.
  absl::Time t2 = t1 + absl::Seconds(75);
  r = Decide(c, pods(5, 4, 4), At(t2, {0.0, 200, 200, 9, 9 * 200.0 / 9 / 50, 0, 0, 5, 0.130}), r.history, t2);
  INFO(r.decision.Summary());
  CHECK(r.decision.replicas == 5);
  CHECK(r.decision.local == 1);
  CHECK(r.decision.remote == 4);
  CHECK(r.decision.workers_to_delete.size() == 4);
  // With 1 local worker the trainers compute 106 ms: the model (6% per worker) holds.
  absl::Time t3 = t2 + absl::Minutes(2);
  r = Decide(c, pods(1, 4, 4), At(t3, {0.0, 200, 200, 5, 4.0, 0, 0, 1, 0.106}), r.history, t3);
  CHECK(r.decision.local == 1);
  CHECK(r.decision.direction == Direction::kNone);
  // The return to 1 agreed with the model, so the probe waits twice the 10 minutes: one more local worker.
  CHECK(r.history.interference.probes_confirmed == 1);
  absl::Time t4 = t3 + absl::Minutes(21);
  r = Decide(c, pods(1, 4, 4), At(t4, {0.0, 200, 200, 5, 4.0, 0, 0, 1, 0.106}), r.history, t4);
  CHECK(r.decision.split.local == 2);
  CHECK(r.decision.split.probing);
  CHECK(r.history.interference.probe_local == 2);
}

TEST_CASE("observed start latency: the median of the newest ready workers") {
  CHECK_FALSE(ObservedStartLatency({}).has_value());
  std::vector<std::pair<absl::Time, absl::Time>> pods;
  for (int i = 0; i < 15; ++i) pods.push_back({kT0 + absl::Seconds(i), kT0 + absl::Seconds(i + (i < 5 ? 100 : 40 + i % 3))});
  CHECK(*ObservedStartLatency(pods) == absl::Seconds(41));  // the 5 oldest (100 s) are not among the newest ten
}

TEST_CASE("pod start latency longer than settle_time delays scale-down evidence") {
  PolicyConfig c = Config();
  PolicyHistory h;
  h.last_change = kT0 - absl::Seconds(100);  // a window from kT0 - 60 s began 40 s after the change
  Target t = Replicas(10);
  CHECK(Decide(c, t, At(kT0, {0.0, 50, 50, 10, 1.0}), h, kT0).decision.replicas == 2);
  t.pod_start_latency = absl::Seconds(60);
  DecisionResult held = Decide(c, t, At(kT0, {0.0, 50, 50, 10, 1.0}), h, kT0);
  CHECK(held.decision.replicas == 10);
  CHECK(held.decision.Has(Reason::kHeldUntilSettled));
}

TEST_CASE("the recent window sees a demand step at once and only raises the size") {
  PolicyConfig c = Config();
  // The minute's window shows a quarter of a step (stall 0.125); the last 30 s show it all (stall 0.5).
  Signals s = At(kT0, {0.125, 87.5, 87.5, 2, 2});
  s.recent_stall_ratio = Measurement::Of(0.5);
  s.recent_demand = Measurement::Of(100);
  s.recent_supply = Measurement::Of(100);
  s.recent_worker_cpu = Measurement::Of(2);
  DecisionResult r = Decide(c, Replicas(2), s, {}, kT0);
  CHECK(r.decision.arithmetic.sized_from == "recent window");
  CHECK(r.decision.replicas == 5);
  // A quiet recent window never lowers what the minute's window asks for.
  Signals quiet = At(kT0, {0.5, 100, 100, 2, 2});
  quiet.recent_stall_ratio = Measurement::Of(0.0);
  quiet.recent_demand = Measurement::Of(10);
  quiet.recent_supply = Measurement::Of(10);
  DecisionResult q = Decide(c, Replicas(2), quiet, {}, kT0);
  CHECK(q.decision.replicas == 5);
  CHECK(q.decision.arithmetic.sized_from == "window");
}

TEST_CASE("a demand step the window still averages: the recent window sizes it before the trainers stall") {
  PolicyConfig c = Config();
  // One worker (1 CPU, flat out: 100 elements/s). The trainers' buffers still hide the step (no
  // stall yet); the window averages the step with the time before it (60/s), the recent window
  // sees what they consume now (240/s).
  Signals s = At(kT0, {0.0, 60, 100, 1, 1.0});
  s.recent_stall_ratio = Measurement::Of(0.0);
  s.recent_demand = Measurement::Of(240);
  s.recent_supply = Measurement::Of(100);
  s.recent_worker_cpu = Measurement::Of(1.0);
  DecisionResult r = Decide(c, Replicas(1), s, {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.arithmetic.sized_from == "recent window");
  CHECK(*r.decision.arithmetic.recent_needed_exact == Approx(240 * 0.95 * 1.1 / 100));
  CHECK(r.decision.replicas == 3);
  CHECK(r.decision.Has(Reason::kScaledUp));

  // Noise within the tolerance is no step: the window sizes, and 1 worker stays.
  Signals noise = At(kT0, {0.0, 90, 100, 1, 1.0});
  noise.recent_stall_ratio = Measurement::Of(0.0);
  noise.recent_demand = Measurement::Of(98);  // +8.9 %: the model would say 1.02 workers
  noise.recent_supply = Measurement::Of(100);
  noise.recent_worker_cpu = Measurement::Of(1.0);
  DecisionResult n = Decide(c, Replicas(1), noise, {}, kT0);
  INFO(n.decision.Summary());
  CHECK(n.decision.arithmetic.sized_from == "window");
  CHECK(n.decision.replicas == 1);

  // Lower recent demand never lowers the size.
  Signals lower = At(kT0, {0.0, 240, 300, 3, 3.0});
  lower.recent_stall_ratio = Measurement::Of(0.0);
  lower.recent_demand = Measurement::Of(60);
  lower.recent_supply = Measurement::Of(60);
  lower.recent_worker_cpu = Measurement::Of(0.6);
  CHECK(Decide(c, Replicas(3), lower, {}, kT0).decision.replicas == 3);
}

TEST_CASE("the recent window's supply per worker divides by the workers it covers") {
  PolicyConfig c = Config();
  // A worker started after the window began: the window covers one, the recent window both.
  Signals s = At(kT0, {0.2, 80, 80, 1, 1.0});
  s.recent_stall_ratio = Measurement::Of(0.5);
  s.recent_demand = Measurement::Of(200);
  s.recent_supply = Measurement::Of(200);
  s.recent_worker_cpu = Measurement::Of(2.0);
  s.recent_workers = Measurement::Of(2);
  DecisionResult r = Decide(c, Replicas(2), s, {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.arithmetic.sized_from == "recent window");
  CHECK(*r.decision.arithmetic.capacity_per_worker == Approx(100));  // not 200 (two workers' supply over one)
  CHECK(r.decision.replicas == 5);                                   // 400/s x 0.95 x 1.1 / 100 = 4.18
}

TEST_CASE("a pool that never saturated is sized from its remembered CPU capacity once it idles") {
  PolicyConfig c = Config();
  c.settle_time = absl::ZeroDuration();
  // 3 workers at 80 % of their CPU make 240/s for trainers that keep up (no stall): 100/s per CPU.
  DecisionResult busy = Decide(c, Replicas(3), At(kT0, {0.0, 240, 240, 3, 2.4}), {}, kT0);
  INFO(busy.decision.Summary());
  CHECK(busy.decision.arithmetic.capacity_source == "CPU");
  CHECK_FALSE(busy.history.capacity_per_worker.has_value());  // never saturated
  REQUIRE(busy.history.cpu_capacity_per_worker.has_value());
  CHECK(*busy.history.cpu_capacity_per_worker == Approx(100));
  // Demand drops; the workers' buffers are full and they idle: no capacity to measure now.
  const absl::Time t1 = kT0 + absl::Minutes(5);
  Signals idle = At(t1, {0.0, 25, 0, 3, 0.01});
  DecisionResult down = Decide(c, Replicas(3), idle, busy.history, t1);
  INFO(down.decision.Summary());
  CHECK(down.decision.arithmetic.capacity_source == "remembered (CPU)");
  CHECK(down.decision.replicas == 1);
  CHECK(down.decision.Has(Reason::kScaledDown));
  // Without it, the same decision holds on the missing capacity (never scales down on it).
  DecisionResult held = Decide(c, Replicas(3), idle, PolicyHistory{}, t1);
  CHECK(held.decision.replicas == 3);
  CHECK(held.decision.Has(Reason::kHeldOnMissingData));
  // A barely busy pool (under half its CPU) is not remembered.
  CHECK_FALSE(Decide(c, Replicas(3), At(kT0, {0.0, 30, 30, 3, 0.3}), {}, kT0).history.cpu_capacity_per_worker);
}

TEST_CASE("a stall while new workers start is not taken for their capacity when the CPU one is known") {
  PolicyConfig c = Config();
  c.settle_time = absl::Seconds(30);
  // 3 workers (1 CPU each), two of them started 2 s ago: the pool makes 90/s at 40 % of its CPU
  // while the trainers stall (0.4). Busy before, a worker made 100/s per CPU.
  PolicyHistory h;
  h.cpu_capacity_per_worker = 100;
  h.last_change = kT0 - absl::Seconds(2);
  Signals s = At(kT0, {0.4, 90, 90, 3, 1.2});
  DecisionResult r = Decide(c, Replicas(3), s, h, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.arithmetic.capacity_source != "saturated");
  CHECK(*r.decision.arithmetic.capacity_per_worker == Approx(75));  // 30/s per worker at 40 % of a CPU
  CHECK_FALSE(r.history.capacity_per_worker.has_value());           // an unsettled measurement is not kept
  // 150/s wanted x 0.95 x 1.1 / 75 = 2.09: 3 workers, not 30/s-per-worker's 6.
  CHECK(r.decision.replicas == 3);
  // Settled, the same numbers are a saturated measurement.
  h.last_change = kT0 - absl::Minutes(5);
  DecisionResult settled = Decide(c, Replicas(3), s, h, kT0);
  CHECK(settled.decision.arithmetic.capacity_source == "saturated");
}

TEST_CASE("a saturated capacity measured while workers start, with nothing better known, at most doubles the pool") {
  // Found with `sluice up --trainer`: 2 workers, one added a second ago, still loading the data set;
  // the trainer waits (stall 0.96) for the 2.7 elements/s they make: 1.3/s per worker "flat out"
  // would ask for 40. The next settled window sizes again.
  PolicyConfig c = Config();
  c.settle_time = absl::Seconds(2);
  PolicyHistory h;
  h.last_change = kT0 - absl::Seconds(1);
  Signals s = At(kT0, {0.96, 2.7, 2.7, 2, 0.12});
  DecisionResult r = Decide(c, Replicas(2), s, h, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.arithmetic.capacity_source == "saturated");
  CHECK(r.decision.replicas == 4);
  CHECK(r.decision.Has(Reason::kScaleUpLimited));
  CHECK_FALSE(r.history.capacity_per_worker.has_value());  // nor remembered
  // Settled, the same measurement is believed.
  h.last_change = kT0 - absl::Minutes(5);
  DecisionResult settled = Decide(c, Replicas(2), s, h, kT0);
  INFO(settled.decision.Summary());
  CHECK(settled.decision.replicas > 4);
  CHECK_FALSE(settled.decision.Has(Reason::kScaleUpLimited));
}

TEST_CASE("a held scale-down is no recommendation: the next step down does not wait a window more") {
  // Found with `sluice up --trainer`: after each step down the window that began before it is not
  // settled; those held decisions were recorded as "stay at 5" and held the next step a whole
  // scale-down window longer.
  PolicyConfig c = Config();
  c.settle_time = absl::Seconds(1);
  c.scale_down.stabilization_window = absl::Seconds(8);
  PolicyHistory h;
  h.last_change = kT0 - absl::Seconds(1);  // 6 -> 5 a second ago
  Signals idle = At(kT0, {0, 0, 0, 5, 0.05});
  idle.window = absl::Seconds(8);
  DecisionResult held = Decide(c, Replicas(5), idle, h, kT0);
  INFO(held.decision.Summary());
  CHECK(held.decision.Has(Reason::kHeldUntilSettled));
  CHECK(held.decision.replicas == 5);
  CHECK(held.history.recommendations.empty());
  // Settled 10 s later: straight to the minimum, nothing recorded in the window holds it.
  const absl::Time t1 = kT0 + absl::Seconds(10);
  Signals later = At(t1, {0, 0, 0, 5, 0.05});
  later.window = absl::Seconds(8);
  DecisionResult down = Decide(c, Replicas(5), later, held.history, t1);
  INFO(down.decision.Summary());
  CHECK(down.decision.replicas == 1);
  CHECK(down.decision.direction == Direction::kDown);
}

TEST_CASE("make before break: a shift adds the new pool's workers first, removes the old ones once they serve") {
  // Local capacity appears (a trainer's node has room now) under 4 remote workers: the local ones
  // are added first, and the remote ones go once the local ones serve. (A shift the other way on a
  // capacity loss is the operator's: it places at most the capacity locally; see the next case.)
  PolicyConfig c = Config();
  c.placement.policy = Placement::kHybrid;
  c.settle_time = absl::ZeroDuration();
  Target t;
  t.replicas = 4;
  t.local = 0;
  t.local_capacity = 4;
  for (int i = 0; i < 4; ++i) t.workers.push_back({"r-" + std::to_string(i), false, true, 0, kT0});
  // 4 workers are right (40 elements/s of 10 each), all remote.
  Signals s = At(kT0, {0.0, 38, 38, 4, 3.8, 0, 0, 0, 0.1});
  c.placement.worker_cpus = 1;
  DecisionResult r = Decide(c, t, s, {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.replicas == 8);  // 4 local added, the 4 remote kept
  CHECK(r.decision.local == 4);
  CHECK(r.decision.remote == 4);
  CHECK(r.decision.workers_to_delete.empty());
  CHECK(r.history.surge_extra == 4);
  // The local ones start; not ready yet: nothing changes.
  t.replicas = 8;
  t.local = 4;
  for (int i = 0; i < 4; ++i) t.workers.push_back({"l-" + std::to_string(i), true, false, 0, kT0 + absl::Seconds(15)});
  absl::Time t1 = kT0 + absl::Seconds(30);
  DecisionResult wait = Decide(c, t, At(t1, {0.0, 38, 38, 4, 3.8, 0, 0, 0, 0.1}), r.history, t1);
  INFO(wait.decision.Summary());
  CHECK(wait.decision.direction == Direction::kNone);
  CHECK(wait.history.surge_extra == 4);
  // Ready: the remote ones go, without waiting for the scale-down window or a settled window.
  for (auto& w : t.workers) w.ready = true;
  c.scale_down.stabilization_window = absl::Minutes(5);
  absl::Time t2 = kT0 + absl::Seconds(90);
  DecisionResult done = Decide(c, t, At(t2, {0.0, 38, 38, 8, 3.8, 0, 0, 4, 0.1}), wait.history, t2);
  INFO(done.decision.Summary());
  CHECK(done.decision.replicas == 4);
  CHECK(done.decision.local == 4);
  REQUIRE(done.decision.workers_to_delete.size() == 4);
  for (const std::string& name : done.decision.workers_to_delete) CHECK(name.rfind("r-", 0) == 0);
  CHECK(done.history.surge_extra == 0);
  // The size the policy decided (4) did not change: the shift completes, it is not a scale-down.
  CHECK(done.decision.direction == Direction::kShift);
  CHECK_FALSE(done.decision.Has(Reason::kScaledDown));
  CHECK(done.decision.act);

  // The same end of the shift while the metrics are missing (found by the simulator: with 20 local
  // slots, local-capacity-loss ended its shift during a window that predated it): it still happens
  // — the replacements serve — and is still not a scale-down; the decided size holds.
  Signals missing = At(t2, {0.0, 38, 38, 8, 3.8, 0, 0, 4, 0.1});
  missing.demand = Measurement::Missing("no series");
  DecisionResult held = Decide(c, t, missing, wait.history, t2);
  INFO(held.decision.Summary());
  CHECK(held.decision.replicas == 4);
  CHECK(held.decision.direction == Direction::kShift);
  CHECK(held.decision.Has(Reason::kHeldOnMissingData));
}

TEST_CASE("a capacity loss: spec.workers.local follows what the operator already placed, no surge") {
  // Found end to end (e2e/test_autoscaler.py): 5 workers, 3 local; another tenant on the trainer's
  // node leaves room for 1 local worker. The operator places at most localCapacity local workers,
  // so it replaces 2 local pods by remote ones itself. The autoscaler used to surge (7 = the 3 local
  // it meant to keep + 4 remote): the operator ran 1 local and 6 remote, and the surge's end then
  // looked for 2 local pods to remove that were gone. Now it writes local 1 at the same size.
  PolicyConfig c = Config();
  c.placement.policy = Placement::kHybrid;
  c.settle_time = absl::ZeroDuration();
  c.scale_down.stabilization_window = absl::Minutes(5);
  Target t;
  t.replicas = 5;
  t.local = 3;
  t.local_capacity = 1;
  for (int i = 0; i < 3; ++i) t.workers.push_back({"l-" + std::to_string(i), true, true, 0, kT0});
  for (int i = 0; i < 2; ++i) t.workers.push_back({"r-" + std::to_string(i), false, true, 0, kT0});
  Signals s = At(kT0, {0.0, 45, 45, 5, 4.5, 0, 0, 3, 0.1});
  DecisionResult r = Decide(c, t, s, {}, kT0);
  INFO(r.decision.Summary());
  CHECK(r.decision.replicas == 5);
  CHECK(r.decision.local == 1);
  CHECK(r.decision.remote == 4);
  CHECK(r.decision.workers_to_delete.empty());  // the operator chooses which local pods go
  CHECK(r.decision.direction == Direction::kShift);
  CHECK(r.decision.act);
  CHECK(r.history.surge_extra == 0);

  // Written: nothing more to do while the operator's remote replacements start and serve.
  t.local = 1;
  t.workers.clear();
  t.workers.push_back({"l-0", true, true, 0, kT0});
  for (int i = 0; i < 4; ++i) t.workers.push_back({"r-" + std::to_string(i), false, i < 2, 0, kT0});
  absl::Time t1 = kT0 + absl::Seconds(30);
  DecisionResult next = Decide(c, t, At(t1, {0.0, 45, 45, 3, 4.5, 0, 0, 1, 0.1}), r.history, t1);
  INFO(next.decision.Summary());
  CHECK(next.decision.direction == Direction::kNone);
  CHECK(next.decision.replicas == 5);
}

TEST_CASE("noisy signals around a steady need do not flap") {
  PolicyConfig c = Config();
  c.scale_down.stabilization_window = absl::Minutes(5);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(1.0, 0.05);
  Target t = Replicas(5);
  PolicyHistory h;
  int changes = 0;
  for (int i = 0; i < 200; ++i) {
    absl::Time now = kT0 + absl::Seconds(15 * i);
    // A need of 4.5 workers of capacity 50 each, measured with 5% noise.
    const double demand = 4.5 * 50 / (0.95 * 1.1) * noise(rng);
    const double cpu = demand / 50 * noise(rng);
    DecisionResult r = Decide(c, t, At(now, {0.01 * noise(rng), demand, demand, double(t.replicas), cpu}), h, now);
    if (r.decision.act) {
      ++changes;
      t = Replicas(r.decision.replicas);
    }
    h = r.history;
  }
  CHECK(changes <= 1);
  CHECK(t.replicas >= 5);
}

}  // namespace
}  // namespace sluice::autoscaler
