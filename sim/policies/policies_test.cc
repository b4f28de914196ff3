// The policies: Sluice's adapter returns exactly what autoscaler::Decide returns (replayed), and a
// PolicyConfig field changes the outcome; HPA's replica calculator and windows; Cachew's and Pecan's
// state machines; the oracle's schedule meets the service level at the least cost it found.
#include "sim/policies/policies.h"

#include <catch2/catch.hpp>

#include "sim/scenarios/scenarios.h"

namespace sluice::sim {
namespace {

Scenario Small() {
  Scenario s;
  s.name = "small";
  s.accelerator = {"test accelerator", 3.6, 32, 8, 2, 0};
  s.remote = {"cpu-8", 8, 0.36, 60, 0};
  s.pipeline = {"p", 0.16, 1000, 5};
  s.jobs = {{"trainer", 0, 0, 1, 0.01, 0.01, 0}};  // 2 workers' worth
  s.horizon_s = 1800;
  s.epoch_elements = 10'000;
  return s;
}

// Records what the wrapped controller saw and answered.
class Recording : public Controller {
 public:
  explicit Recording(Controller& inner) : inner_(inner) {}
  std::string Name() const override { return inner_.Name(); }
  Action Initial(const Scenario& s) override { return inner_.Initial(s); }
  Action Decide(const Observation& o) override {
    seen.push_back(o);
    Action a = inner_.Decide(o);
    answers.push_back(a);
    return a;
  }
  std::vector<Observation> seen;
  std::vector<Action> answers;

 private:
  Controller& inner_;
};

TEST_CASE("sluice: the adapter's decisions are autoscaler::Decide's, replayed from the same inputs") {
  const Scenario s = *FindScenario("second-trainer");
  const autoscaler::PolicyConfig config = SluicePolicyConfig(s);
  SluiceController sluice(config);
  Recording rec(sluice);
  Simulation(s, RunOptions{}).Run(rec);
  REQUIRE(rec.seen.size() == sluice.decisions().size());
  autoscaler::PolicyHistory history;
  int acted = 0;
  for (size_t i = 0; i < rec.seen.size(); ++i) {
    const Observation& o = rec.seen[i];
    autoscaler::DecisionResult r =
        autoscaler::Decide(config, SluiceController::TargetFrom(o), o.signals, history, o.now);
    history = r.history;
    INFO("decision " << i << " at " << o.now_s << ": " << r.decision.Summary());
    CHECK(r.decision.Summary() == sluice.decisions()[i].Summary());
    CHECK(rec.answers[i].act == r.decision.act);
    CHECK(rec.answers[i].replicas == r.decision.replicas);
    CHECK(rec.answers[i].local == r.decision.local);
    CHECK(rec.answers[i].remove == r.decision.workers_to_delete);
    acted += r.decision.act ? 1 : 0;
  }
  CHECK(acted >= 3);  // it did scale, so the replay compared real decisions
}

TEST_CASE("sluice: a PolicyConfig field changes the outcome (placement, interference tolerance)") {
  const Scenario s = *FindScenario("pecan-resnet50-v3-8");
  auto run = [&](autoscaler::PolicyConfig c) {
    SluiceController controller(c);
    return Simulation(s, RunOptions{}).Run(controller);
  };
  autoscaler::PolicyConfig hybrid = SluicePolicyConfig(s);
  autoscaler::PolicyConfig remote = hybrid;
  remote.placement.policy = autoscaler::Placement::kRemoteOnly;
  autoscaler::PolicyConfig tolerant = hybrid;
  tolerant.placement.interference_tolerance = 0.5;
  tolerant.placement.cost.accelerator_hourly.reset();  // no cost check either: the tolerance decides
  RunResult h = run(hybrid), r = run(remote), t = run(tolerant);
  CHECK(r.totals.local_worker_seconds == 0);
  CHECK(h.totals.local_worker_seconds > 0);
  // 2% per local worker: 10% allows 5 local, 50% allows all 10 slots.
  CHECK(h.periods.back().local_pods <= 6);
  CHECK(t.periods.back().local_pods == 10);
  CHECK(t.totals.remote_dollars < h.totals.remote_dollars);
}

TEST_CASE("hpa: utilization ratio, unready pods, tolerance, scale-down stabilization") {
  HpaConfig c;
  auto hpa = MakeHpa(c);
  Observation o;
  o.worker_cores = 8;
  o.replicas = 4;
  for (int i = 0; i < 4; ++i) {
    o.pods.push_back({"w" + std::to_string(i), false, true, false, 0});
    o.pod_cpu["w" + std::to_string(i)] = 8.0;  // 100%
  }
  o.now_s = 15;
  Action up = hpa->Decide(o);
  CHECK(up.act);
  CHECK(up.replicas == 5);  // ceil(4 x 1.0 / 0.8)
  // One more pod, not ready yet: counted at 0% on the way up, 4 x 100% / 5 pods = 1.0 of the target x 0.8... no change.
  o.replicas = 5;
  o.pods.push_back({"w4", false, false, false, 15});
  o.now_s = 30;
  CHECK_FALSE(hpa->Decide(o).act);
  // Within tolerance: 4 pods at 84% of their CPU (ratio 1.05).
  o.pods.pop_back();
  o.replicas = 4;
  for (auto& [name, cpu] : o.pod_cpu) cpu = 8 * 0.84;
  o.now_s = 45;
  CHECK_FALSE(hpa->Decide(o).act);
  // Low usage: the recommendation drops, but the window keeps the highest of the last 300 s.
  for (auto& [name, cpu] : o.pod_cpu) cpu = 8 * 0.2;
  o.now_s = 60;
  CHECK_FALSE(hpa->Decide(o).act);
  o.now_s = 400;
  Action down = hpa->Decide(o);
  CHECK(down.act);
  CHECK(down.replicas == 1);
  // No metrics at all: no change.
  o.pod_cpu_available = false;
  o.now_s = 415;
  CHECK_FALSE(hpa->Decide(o).act);
}

TEST_CASE("cachew climbs one worker at a time and stops when one more gains under 7%") {
  const Scenario s = Small();
  HillClimbConfig c;
  auto cachew = MakeCachew(c);
  RunResult r = Simulation(s, RunOptions{}).Run(*cachew);
  std::vector<int> sizes;
  for (const DecisionRecord& d : r.decisions) {
    if (d.act) sizes.push_back(d.replicas_after);
  }
  CHECK(sizes == std::vector<int>{2, 3});  // 1 -> 2 doubles throughput, 2 -> 3 gains nothing: stop
  CHECK(r.periods.back().remote_pods == 3);
  CHECK(r.periods.back().local_pods == 0);
}

TEST_CASE("pecan: remote climb, then local in / remote out while throughput holds, then frozen") {
  const Scenario s = Small();
  HillClimbConfig c;
  auto pecan = MakePecan(c);
  RunResult r = Simulation(s, RunOptions{}).Run(*pecan);
  // Climb to 3 remote; the 2 local slots take 2 of them; throughput holds; no remote worker left
  // beyond the third, which stays remote since the slots are full.
  CHECK(r.periods.back().local_pods == 2);
  CHECK(r.periods.back().remote_pods == 1);
  const int last_act = [&] {
    int t = 0;
    for (const DecisionRecord& d : r.decisions) t = d.act ? d.t : t;
    return t;
  }();
  CHECK(last_act < 1200);  // frozen afterwards
}

TEST_CASE("oracle: per phase, the cheapest mix that meets the service level") {
  Scenario s = Small();
  s.events = {{900, EventKind::kComputeScale, "demand x2", 0, 0.5}};
  ServiceLevel level;
  OracleSchedule o = FindOracle(s, RunOptions{}, level, true);
  REQUIRE(o.mixes.size() == 2);
  CHECK(o.never_stalls);
  // 2 workers' worth, then 4; both local slots used (1% per worker: within 10%).
  CHECK(o.mixes[0].local == 2);
  CHECK(o.mixes[0].local + o.mixes[0].remote >= 2);
  CHECK(o.mixes[0].local + o.mixes[0].remote <= 3);
  CHECK(o.mixes[1].local == 2);
  CHECK(o.mixes[1].local + o.mixes[1].remote >= 4);
  auto oracle = MakeScheduled(o, "oracle");
  RunResult r = Simulation(s, RunOptions{}).Run(*oracle);
  for (const PeriodRecord& p : r.periods) CHECK(p.stall < level.target_stall);
  OracleSchedule fixed = FindOracle(s, RunOptions{}, level, false);
  REQUIRE(fixed.mixes.size() == 1);
  CHECK(fixed.mixes[0].local + fixed.mixes[0].remote >= o.mixes[1].local + o.mixes[1].remote);
}

TEST_CASE("fixed remote provisioning is sized from the initial workload plus 20%") {
  CHECK(FixedRemoteSize(Small()) == 3);  // ceil(2 x 1.2)
  CHECK(FixedRemoteSize(*FindScenario("pecan-resnet50-v3-8")) == 36);
}

}  // namespace
}  // namespace sluice::sim
