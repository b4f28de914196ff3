#include "autoscaler/controller/autoscaling_plan.h"

#include <catch2/catch.hpp>

namespace sluice::autoscaler {
namespace {

using json = nlohmann::json;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

json DataService(json autoscaling, json workers = json::object(), json placement = json::object()) {
  if (!autoscaling.contains("headroom")) autoscaling["headroom"] = 0.1;  // the numbers below assume 10%
  json w = {{"image", "sluice-worker:dev"}, {"replicas", 2}, {"minReplicas", 1}, {"maxReplicas", 20}};
  w.update(workers);
  json ds = {{"apiVersion", "sluice.dev/v1alpha1"},
             {"kind", "DataService"},
             {"metadata", {{"name", "mnist"}, {"namespace", "ml"}, {"uid", "u-1"}, {"generation", 3}}},
             {"spec",
              {{"dispatcher", {{"image", "sluice-dispatcher:dev"}}},
               {"workers", w},
               {"autoscaling", autoscaling}}}};
  if (!placement.empty()) ds["spec"]["placement"] = placement;
  return ds;
}

// Two saturated workers at 50 elements/s each; the trainers stall half the time.
Observation Stalled(absl::Time at = kNow) {
  Observation o;
  Signals& s = o.signals;
  s.at = at;
  s.window = absl::Minutes(1);
  s.stall_ratio = Measurement::Of(0.5);
  s.demand = Measurement::Of(100);
  s.supply = Measurement::Of(100);
  s.worker_cpu = Measurement::Of(2);
  s.compute_per_element = Measurement::Of(0.1);
  s.buffered = Measurement::Of(0);
  s.churn = Measurement::Of(0);
  s.workers = Measurement::Of(2);
  s.local_workers = Measurement::Of(0);
  return o;
}

std::vector<WorkerPod> Pods(int n, bool local = false) {
  std::vector<WorkerPod> pods;
  for (int i = 0; i < n; ++i) pods.push_back({"mnist-worker-" + std::to_string(i), local, true, false, kNow, "n1"});
  return pods;
}

const json* Condition(const Plan& plan, const std::string& type) {
  for (const json& c : plan.status["conditions"]) {
    if (c["type"] == type) return &c;
  }
  return nullptr;
}

TEST_CASE("plan: a stalled DataService is scaled up by server-side apply, explained in status and an Event") {
  PlanInput in{DataService({{"enabled", true}}), Pods(2), {}, Stalled(), kNow};
  Plan plan = PlanAutoscaling(in, {});
  REQUIRE(plan.spec.has_value());
  CHECK(plan.spec->replicas == 5);
  CHECK_FALSE(plan.spec->local.has_value());  // RemoteOnly: no local field
  json body = plan.spec->ApplyBody("mnist", "ml");
  CHECK(body["spec"]["workers"] == json{{"replicas", 5}});
  CHECK(body["metadata"]["name"] == "mnist");
  CHECK(plan.status["desiredReplicas"] == 5);
  CHECK(plan.status["stallRatio"] == 0.5);
  CHECK(plan.status["decision"]["direction"] == "up");
  CHECK(plan.status["decision"]["acted"] == true);
  CHECK(plan.status["arithmetic"]["capacitySource"] == "saturated");
  CHECK(plan.status["history"]["recommendations"].size() == 1);
  CHECK(plan.status["lastScaleTime"] == op::FormatKubeTime(kNow));
  REQUIRE(plan.events.size() == 1);
  CHECK(plan.events[0].reason == "ScaledUp");
  REQUIRE(Condition(plan, "ScalingActive"));
  CHECK((*Condition(plan, "ScalingActive"))["status"] == "True");
}

TEST_CASE("plan: the history in status carries the windows across a restart") {
  json ds = DataService({{"enabled", true}, {"behavior", {{"scaleDown", {{"stabilizationWindowSeconds", 300}}}}}},
                        {{"replicas", 10}});
  // A first decision recommends 10 (as many as there are)...
  Observation busy = Stalled();
  busy.signals.stall_ratio = Measurement::Of(0.0);
  busy.signals.demand = Measurement::Of(100 * 10 / (0.95 * 1.1) / 2);
  busy.signals.supply = busy.signals.demand;
  busy.signals.workers = Measurement::Of(10);
  busy.signals.worker_cpu = Measurement::Of(10 * *busy.signals.demand.value / 10 / 50);
  Plan first = PlanAutoscaling({ds, Pods(10), {}, busy, kNow}, {});
  CHECK_FALSE(first.spec.has_value());
  // ... then demand falls: a restarted autoscaler (nothing but the status) still waits the window.
  ds["status"]["autoscaler"] = first.status;
  Observation idleish = busy;
  idleish.signals.at = kNow + absl::Minutes(2);
  idleish.signals.demand = Measurement::Of(50);
  idleish.signals.supply = Measurement::Of(50);
  idleish.signals.worker_cpu = Measurement::Of(1);
  Plan later = PlanAutoscaling({ds, Pods(10), {}, idleish, kNow + absl::Minutes(2)}, {});
  CHECK_FALSE(later.spec.has_value());
  CHECK(later.status["decision"]["reasons"][0]["reason"] == "ScaleDownStabilized");
  ds["status"]["autoscaler"] = later.status;
  Plan after = PlanAutoscaling({ds, Pods(10), {}, [&] {
                                  Observation o = idleish;
                                  o.signals.at = kNow + absl::Minutes(6);
                                  return o;
                                }(),
                                kNow + absl::Minutes(6)},
                               {});
  REQUIRE(after.spec.has_value());
  CHECK(after.spec->replicas == 2);
  CHECK(after.spec->workers_to_delete.size() == 8);
  CHECK(after.events[0].reason == "ScaledDown");
}

TEST_CASE("plan: disabled, invalid settings and absurd costs take no action and say why") {
  Plan off = PlanAutoscaling({DataService({{"enabled", false}}), Pods(2), {}, Stalled(), kNow}, {});
  CHECK_FALSE(off.spec.has_value());
  CHECK((*Condition(off, "ScalingActive"))["reason"] == "Disabled");

  struct Row {
    json autoscaling;
    const char* expect;
  };
  const Row rows[] = {
      {{{"enabled", true}, {"cost", {{"acceleratorHourly", 3e6}}}}, "cost.acceleratorHourly"},
      {{{"enabled", true}, {"cost", {{"remoteCpuHourly", 500}}}}, "cost.remoteCpuHourly"},
      {{{"enabled", true}, {"cost", {{"remoteCpuHourly", 9}, {"acceleratorHourly", 4}}}}, "probably swapped"},
      {{{"enabled", true}, {"metrics", {{"prometheus", {{"url", "http://p:9090"}, {"queries", {{"stall", "x"}}}}}}}},
       "unknown query name 'stall'"},
  };
  for (const Row& r : rows) {
    Plan plan = PlanAutoscaling({DataService(r.autoscaling), Pods(2), {}, Stalled(), kNow}, {});
    INFO(r.autoscaling.dump());
    CHECK_FALSE(plan.spec.has_value());
    const json* c = Condition(plan, "ScalingActive");
    REQUIRE(c);
    CHECK((*c)["reason"] == "InvalidAutoscalingConfig");
    CHECK_THAT((*c)["message"].get<std::string>(), Catch::Contains(r.expect));
    REQUIRE(plan.events.size() == 1);
    CHECK(plan.events[0].type == "Warning");
  }
  // A spec the CRD rules refuse (a server without CEL could let it through).
  Plan invalid = PlanAutoscaling({DataService({{"enabled", true}, {"targetStallRatio", 1.5}}), Pods(2), {}, Stalled(), kNow}, {});
  CHECK_FALSE(invalid.spec.has_value());
  CHECK((*Condition(invalid, "ScalingActive"))["reason"] == "InvalidSpec");
}

TEST_CASE("plan: an HPA naming the DataService: recommend only, say so once") {
  PlanInput in{DataService({{"enabled", true}}), Pods(2), {"HorizontalPodAutoscaler ml/mnist-hpa"}, Stalled(), kNow};
  Plan plan = PlanAutoscaling(in, {});
  CHECK_FALSE(plan.spec.has_value());
  CHECK((*Condition(plan, "AbleToScale"))["status"] == "False");
  CHECK((*Condition(plan, "AbleToScale"))["reason"] == "DrivenByOther");
  CHECK(plan.status["desiredReplicas"] == 5);
  REQUIRE(plan.events.size() == 2);
  CHECK(plan.events[0].reason == "DrivenByOther");
  CHECK(plan.events[1].reason == "Recommended");
  // The next period: nothing new to say.
  in.object["status"]["autoscaler"] = plan.status;
  Plan again = PlanAutoscaling(in, {});
  CHECK(again.events.empty());
  CHECK((*Condition(again, "AbleToScale"))["lastTransitionTime"] == (*Condition(plan, "AbleToScale"))["lastTransitionTime"]);
}

TEST_CASE("plan: another manager owning spec.workers.replicas is reported") {
  json ds = DataService({{"enabled", true}});
  ds["metadata"]["managedFields"] = json::array(
      {{{"manager", "kubectl"}, {"operation", "Apply"},
        {"fieldsV1", {{"f:spec", {{"f:workers", {{"f:replicas", json::object()}}}}}}}},
       {{"manager", "sluice-operator"}, {"operation", "Update"}, {"subresource", "status"},
        {"fieldsV1", {{"f:status", json::object()}}}}});
  Plan plan = PlanAutoscaling({ds, Pods(2), {}, Stalled(), kNow}, {});
  REQUIRE(plan.spec.has_value());  // it tries; the server's 409 is reported by the controller
  CHECK((*Condition(plan, "AbleToScale"))["reason"] == "SharedOwnership");
  CHECK_THAT((*Condition(plan, "AbleToScale"))["message"].get<std::string>(), Catch::Contains("kubectl (Apply)"));
}

TEST_CASE("plan: metrics errors and missing data hold, with one Warning per change") {
  json ds = DataService({{"enabled", true}}, {{"replicas", 6}});
  Observation broken;
  broken.errors = {"query demand failed in Prometheus (HTTP 400, bad_data): parse error"};
  broken.signals.at = kNow;
  broken.signals.window = absl::Minutes(1);
  Plan plan = PlanAutoscaling({ds, Pods(6), {}, broken, kNow}, {});
  CHECK_FALSE(plan.spec.has_value());
  CHECK(plan.holding);
  CHECK((*Condition(plan, "MetricsAvailable"))["reason"] == "MetricsError");
  CHECK((*Condition(plan, "ScalingActive"))["reason"] == "HeldOnMissingData");
  REQUIRE(plan.events.size() == 2);
  ds["status"]["autoscaler"] = plan.status;
  Plan again = PlanAutoscaling({ds, Pods(6), {}, broken, kNow + absl::Seconds(15)}, {});
  CHECK(again.events.empty());
  CHECK(again.status["history"]["failuresInARow"] == 2);
}

TEST_CASE("plan: Hybrid writes the local split and keeps named removals until their pods go") {
  json placement = {{"policy", "Hybrid"},
                    {"consumerSelector", {{"matchLabels", {{"app", "trainer"}}}}},
                    {"localCpuFraction", 0.5}};
  json ds = DataService({{"enabled", true}}, {{"replicas", 2}}, placement);
  ds["status"]["localCapacity"] = 3;
  Plan plan = PlanAutoscaling({ds, Pods(2), {}, Stalled(), kNow}, {});
  REQUIRE(plan.spec.has_value());
  CHECK(plan.spec->replicas == 5);
  CHECK(plan.spec->local == 3);
  CHECK(plan.status["arithmetic"]["split"]["reason"] == "LocalCapacityLimited");

  ds["spec"]["workers"]["workersToDelete"] = {"mnist-worker-1", "gone-already"};
  Plan keep = PlanAutoscaling({ds, Pods(2), {}, Stalled(), kNow}, {});
  REQUIRE(keep.spec.has_value());
  CHECK(keep.spec->workers_to_delete == std::vector<std::string>{"mnist-worker-1"});
}

TEST_CASE("history: JSON round trip, malformed is empty") {
  PolicyHistory h;
  h.recommendations = {{kNow - absl::Seconds(30), 4}, {kNow, 6}};
  h.last_change = kNow - absl::Seconds(30);
  h.failures_in_a_row = 2;
  h.capacity_per_worker = 50;
  h.cpu_capacity_per_worker = 61.5;
  h.surge_extra = 2;
  h.surge_total = 8;
  h.interference.reference_compute = 0.1;
  h.interference.reference_local = 2;
  h.interference.probes_confirmed = 1;
  h.interference.probe_local = 3;
  h.interference.probe_started = kNow - absl::Seconds(45);
  h.interference.weight = 4;
  h.interference.slowdown_per_worker = 0.05;
  h.interference.cap = 2;
  h.interference.learnt_at = kNow;
  CHECK(HistoryFromJson(HistoryToJson(h)) == h);
  CHECK(HistoryFromJson(json("garbage")) == PolicyHistory{});
  PolicyHistory partial = HistoryFromJson({{"recommendations", {{{"time", "not a time"}, {"replicas", 3}}, 7}},
                                           {"failuresInARow", "x"}});
  CHECK(partial.recommendations.empty());
  CHECK(partial.failures_in_a_row == 0);
}

}  // namespace
}  // namespace sluice::autoscaler
