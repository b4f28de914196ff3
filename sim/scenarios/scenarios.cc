#include "sim/scenarios/scenarios.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::sim {
namespace {

// Prices from Pecan's evaluation: TPU v2-8 $4.96/h, v3-8 $8.8/h, n2-standard-8 $0.42/h.
// A Cloud TPU v2-8 or v3-8 VM has 96 vCPUs; the training loop and infeed are assumed to use 16 of
// them, leaving 80: 10 local workers of 8 CPUs (localCpuFraction 1).
AcceleratorSpec TpuV2() { return {"TPU v2-8", 4.96, 96, 16, 10, 32}; }
AcceleratorSpec TpuV3() { return {"TPU v3-8", 8.8, 96, 16, 10, 32}; }

// A workload whose remote-only need (demand x CPU per element / worker cores) is `remote_need`
// workers at `demand` elements/s: the CPU per element follows from the two.
PipelineSpec Calibrated(std::string name, double demand, double remote_need, double bytes) {
  return {std::move(name), remote_need * 8.0 / demand, bytes, 5};
}

Scenario Pecan(std::string name, std::string description, AcceleratorSpec accelerator, std::string pipeline,
               double demand, double cachew, double pecan, double bytes, double interference, double epoch) {
  Scenario s;
  s.name = std::move(name);
  s.description = std::move(description);
  s.accelerator = std::move(accelerator);
  s.pipeline = Calibrated(std::move(pipeline), demand, cachew, bytes);
  s.jobs = {{"trainer", 0, 0, 1, 1.0 / demand, interference, 0}};
  s.horizon_s = 7200;
  s.epoch_elements = epoch;
  s.paper = {cachew, pecan};
  return s;
}

// The dynamic scenarios share one trainer on a TPU v3-8 host: 1,000 elements/s, 64 ms of CPU per
// element (8 remote workers' worth), 6 local slots, 1% slowdown per busy local worker.
Scenario Dynamic(std::string name, std::string description) {
  Scenario s;
  s.name = std::move(name);
  s.description = std::move(description);
  s.accelerator = TpuV3();
  s.accelerator.local_slots = 6;
  s.pipeline = {"image classification", 0.064, 150'528, 5};
  s.jobs = {{"trainer", 0, 0, 1, 0.001, 0.01, 0}};
  s.horizon_s = 5400;
  s.epoch_elements = 1'281'167;
  return s;
}

std::vector<Scenario> Build() {
  std::vector<Scenario> all;
  all.push_back(Pecan("pecan-resnet50-v2-8", "ResNet-50 on ImageNet, TPU v2-8 (Pecan: Cachew 19 remote workers, Pecan 1)",
                      TpuV2(), "ResNet-50 ImageNet", 1840, 19, 1, 150'528, 0.008, 1'281'167));
  all.push_back(Pecan("pecan-resnet50-v3-8", "ResNet-50 on ImageNet, TPU v3-8 (Pecan: Cachew 30, Pecan 17)", TpuV3(),
                      "ResNet-50 ImageNet", 2900, 30, 17, 150'528, 0.02, 1'281'167));
  all.push_back(Pecan("pecan-retinanet-v3-8", "RetinaNet on COCO, TPU v3-8 (Pecan: Cachew 12, Pecan 1)", TpuV3(),
                      "RetinaNet COCO", 160, 12, 1, 1'228'800, 0.008, 118'287));
  all.push_back(Pecan("pecan-simclr-v3-8", "SimCLR on ImageNet, TPU v3-8 (Pecan: Cachew 2.6, Pecan 0)", TpuV3(),
                      "SimCLR ImageNet", 1000, 2.6, 0, 301'056, 0.008, 1'281'167));
  all.push_back(Pecan("pecan-asr-v3-8", "ASR on LibriSpeech, TPU v3-8 (Pecan: Cachew 4, Pecan 0)", TpuV3(),
                      "ASR LibriSpeech", 400, 4, 0, 200'000, 0.008, 281'241));

  {
    Scenario s = Dynamic("demand-step", "the trainer's demand doubles at 30 min and falls back at 60 min");
    s.events = {{1800, EventKind::kComputeScale, "demand x2", 0, 0.5},
                {3600, EventKind::kComputeScale, "demand back to x1", 0, 1.0}};
    all.push_back(s);
  }
  {
    Scenario s = Dynamic("second-trainer",
                         "a second trainer (its own TPU v3-8 host) joins the shared DataService at 20 min and ends at 60 min");
    s.jobs.push_back({"trainer-2", 1200, 3600, 1, 0.001, 0.01, 0});
    all.push_back(s);
  }
  {
    Scenario s = Dynamic("local-capacity-loss",
                         "another tenant takes the accelerator host's spare CPU at 30 min (0 local slots) and frees it at 60 min");
    s.events = {{1800, EventKind::kLocalSlots, "local slots 6 -> 0", 0, 0},
                {3600, EventKind::kLocalSlots, "local slots 0 -> 6", 0, 6}};
    all.push_back(s);
  }
  {
    Scenario s = Dynamic("metrics-outage",
                         "Prometheus down 30-40 min (demand halves at 35 min, unseen), the trainers' series missing "
                         "50-55 min, no scrapes 65-70 min");
    ScenarioEvent down{1800, EventKind::kOutage, "Prometheus down 10 min"};
    down.outage = OutageKind::kPrometheusDown;
    down.duration_s = 600;
    ScenarioEvent client{3000, EventKind::kOutage, "trainer series missing 5 min"};
    client.outage = OutageKind::kClientSeriesMissing;
    client.duration_s = 300;
    ScenarioEvent gap{3900, EventKind::kOutage, "no scrapes 5 min"};
    gap.outage = OutageKind::kScrapeGap;
    gap.duration_s = 300;
    s.events = {down, {2100, EventKind::kComputeScale, "demand x0.5 (during the outage)", 0, 2.0}, client, gap};
    all.push_back(s);
  }
  {
    Scenario s = Dynamic("worker-crash-loop",
                         "from 20 min, 2 workers (a bad node) crash after every 90 s of running, for 30 min");
    ScenarioEvent crash{1200, EventKind::kCrashLoop, "2 workers crash-looping 30 min"};
    crash.duration_s = 1800;
    crash.count = 2;
    crash.run_seconds = 90;
    s.events = {crash};
    all.push_back(s);
  }
  {
    Scenario s = Dynamic("interference-shift",
                         "the trainer's sensitivity to local workers rises from 1% to 5% per worker at 30 min and falls "
                         "back at 60 min");
    s.events = {{1800, EventKind::kInterference, "interference 1% -> 5% per local worker", 0, 0.05},
                {3600, EventKind::kInterference, "interference 5% -> 1% per local worker", 0, 0.01}};
    all.push_back(s);
  }
  uint64_t seed = 1;
  for (Scenario& s : all) s.seed = seed++;
  return all;
}

}  // namespace

const std::vector<Scenario>& AllScenarios() {
  static const std::vector<Scenario>* all = new std::vector<Scenario>(Build());
  return *all;
}

absl::StatusOr<Scenario> FindScenario(const std::string& name) {
  std::vector<std::string> names;
  for (const Scenario& s : AllScenarios()) {
    if (s.name == name) return s;
    names.push_back(s.name);
  }
  return absl::NotFoundError(
      absl::StrCat("no scenario '", name, "'; the scenarios are: ", absl::StrJoin(names, ", ")));
}

}  // namespace sluice::sim
