// The local autoscaler closing the loop over real processes: a real sluice-dispatcher, sluice-worker
// processes under CPU quotas (local/), the real policy and the direct scrape, and a stand-in trainer
// (SteppedConsumer) reading the demo workload through the C++ client.
//  - A consumer raising its demand makes workers appear until the stall is under the target;
//    lowering it makes them go after the scale-down window — drained, nothing lost: the job is then
//    read to its end and every element arrives exactly once.
//  - A metrics outage (the dispatcher's /metrics unreachable: a MetricsRelay cut) holds the size
//    (no scale-down however long it lasts) and every decision says why; restored, the autoscaler
//    resumes and scales down.
// Every wait is on a condition with a generous deadline; no timing is asserted.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "autoscaler/local/demo_workload.h"
#include "autoscaler/local/local_autoscaler.h"
#include "autoscaler/local/metrics_relay.h"
#include "autoscaler/local/stepped_consumer.h"
#include "testing/test_util.h"

namespace sluice::autoscaler {
namespace {

constexpr double kTarget = 0.10;

local::LocalDataServiceOptions ServiceOptions(const std::string& log_dir) {
  local::LocalDataServiceOptions o;
  o.bin_dir = sluice::testing::BinaryDir() + "/bin";
  o.heartbeat_interval_ms = 200;
  o.worker_timeout_ms = 10000;
  o.dataservice = "local";
  o.worker_cpus = 0.25;
  o.worker_flags = DemoWorkerFlags();
  o.stop_timeout = absl::Seconds(kDemoWorkerStopSeconds);
  o.log_dir = log_dir;
  return o;
}

LocalAutoscalerOptions AutoscalerOptions() {
  LocalAutoscalerOptions o;
  o.period = absl::Seconds(1);
  o.window = absl::Seconds(8);
  o.recent_window = absl::Seconds(3);
  o.policy.target_stall_ratio = kTarget;
  o.policy.min_replicas = 1;
  o.policy.max_replicas = 6;
  o.policy.scale_down.stabilization_window = absl::Seconds(6);
  o.policy.settle_time = absl::Seconds(1);
  o.policy.max_signal_age = absl::Seconds(5);
  o.log_sink = [](const std::string&) {};  // History() shows the decisions on failure
  return o;
}

// Waits until `cond` holds, up to `timeout`.
bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return cond();
}

std::string History(const LocalAutoscaler& a) {
  std::string out;
  for (const LocalDecision& d : a.decisions()) absl::StrAppend(&out, DecisionLogfmt(d), "\n");
  return out;
}

struct Loop {
  sluice::testing::TempDir tmp;
  std::unique_ptr<local::LocalDataService> service;
  std::unique_ptr<MetricsRelay> relay;
  std::unique_ptr<LocalAutoscaler> autoscaler;
  std::unique_ptr<SteppedConsumer> consumer;

  Loop(const DemoWorkload& workload, absl::Duration step, bool with_relay) {
    service = std::make_unique<local::LocalDataService>(ServiceOptions(tmp.File("logs")));
    std::filesystem::create_directories(tmp.File("logs"));
    REQUIRE(service->StartDispatcher().ok());
    auto w = service->AddWorker();
    INFO(service->Logs());
    REQUIRE(w.ok());
    REQUIRE(service->WaitForWorkers(1, absl::Seconds(60)).ok());
    LocalAutoscalerOptions o = AutoscalerOptions();
    if (with_relay) {
      auto r = MetricsRelay::Start("127.0.0.1", service->dispatcher().metrics_port);
      REQUIRE(r.ok());
      relay = *std::move(r);
      o.dispatcher_metrics_url = relay->url();
    }
    autoscaler = std::make_unique<LocalAutoscaler>(service.get(), o);
    auto def = DemoPipeline(workload);
    REQUIRE(def.ok());
    SteppedConsumerOptions co;
    co.client.dispatcher_address = service->dispatcher_address();
    co.client.pipeline = *def;
    co.client.job_name = "train";
    co.client.sharding = service::SHARDING_DYNAMIC;
    co.client.heartbeat_interval = absl::Milliseconds(200);
    co.client.max_buffered_bytes = kDemoClientBufferBytes;
    co.step_time = step;
    co.record_field = "index";
    auto c = SteppedConsumer::Start(co);
    REQUIRE(c.ok());
    consumer = *std::move(c);
    autoscaler->Start();
  }
  ~Loop() {
    if (autoscaler) autoscaler->Stop();
    if (consumer) consumer->Stop();
  }
  int32_t workers() const { return autoscaler->stats().workers; }
  // The newest decision.
  std::optional<LocalDecision> last() const {
    auto ds = autoscaler->decisions();
    if (ds.empty()) return std::nullopt;
    return ds.back();
  }
};

// The demand of a step time: one worker (a quarter CPU) serves the low one; the high one needs several.
constexpr absl::Duration kLowStep = absl::Milliseconds(40);
constexpr absl::Duration kHighStep = absl::Milliseconds(4);

// Raises the demand until a decision sees the stall under target with more than one worker, then
// lowers it until the autoscaler removed workers; REQUIREs both.
void UpThenDown(Loop& loop) {
  loop.consumer->set_step_time(kHighStep);
  int32_t peak = 1;
  const bool relieved = WaitFor(
      [&] {
        auto d = loop.last();
        peak = std::max(peak, loop.workers());
        return d && d->workers_before > 1 && d->signals.recent_stall_ratio.known() &&
               *d->signals.recent_stall_ratio <= kTarget && d->signals.stall_ratio.known() &&
               *d->signals.stall_ratio <= kTarget;
      },
      absl::Minutes(3));
  INFO(History(*loop.autoscaler));
  REQUIRE(relieved);
  CHECK(loop.autoscaler->stats().scale_ups >= 1);
  peak = std::max(peak, loop.workers());
  // Lower it: after the scale-down window the extra workers go (drained, then stopped).
  loop.consumer->set_step_time(kLowStep);
  REQUIRE(WaitFor([&] { return loop.workers() < peak && loop.autoscaler->stats().scale_downs >= 1; },
                  absl::Minutes(3)));
}

TEST_CASE("demand up adds workers until the stall is under target, demand down removes them, drained") {
  DemoWorkload workload;
  Loop loop(workload, kLowStep, false);
  UpThenDown(loop);
  // The drain does not block the loop: the removal is reported by a later decision once the
  // dispatcher confirmed the worker drained and it was stopped.
  REQUIRE(WaitFor([&] { return loop.autoscaler->stats().workers_removed >= 1; }, absl::Minutes(2)));
  const LocalAutoscalerStats s = loop.autoscaler->stats();
  INFO(History(*loop.autoscaler));
  CHECK(s.elements_lost == 0);  // what the removed workers still buffered when they were stopped
  CHECK(s.scale_downs_on_missing_data == 0);
  // Every removed worker was named by a scale-down decision first.
  std::set<std::string> named, removed;
  for (const LocalDecision& d : loop.autoscaler->decisions()) {
    if (d.decision.act && d.decision.Has(Reason::kScaledDown)) {
      named.insert(d.decision.workers_to_delete.begin(), d.decision.workers_to_delete.end());
    }
    removed.insert(d.removed.begin(), d.removed.end());
  }
  CHECK(!removed.empty());
  for (const std::string& w : removed) CHECK(named.count(w) == 1);
  CHECK(loop.consumer->status().ok());
}

// A worker drained through the dispatcher is stopped only once it holds no split (those it fetched
// ahead included: it reads them) and its clients received all it produced, so every element arrives
// exactly once.
TEST_CASE("after scale-downs the job read to its end has every element exactly once") {
  DemoWorkload workload;
  workload.count = 30000;
  Loop loop(workload, kLowStep, false);
  UpThenDown(loop);
  // Read the rest flat out: every element should arrive exactly once.
  loop.consumer->set_step_time(absl::ZeroDuration());
  REQUIRE(WaitFor([&] { return loop.consumer->finished() || !loop.consumer->status().ok(); }, absl::Minutes(4)));
  CHECK(loop.consumer->status().ok());
  const std::map<int64_t, int> seen = loop.consumer->recorded();
  std::string missing;
  for (int64_t i = 0, shown = 0; i < workload.count && shown < 20; ++i) {
    if (!seen.count(i) && (i == 0 || seen.count(i - 1))) {
      int64_t j = i;
      while (j + 1 < workload.count && !seen.count(j + 1)) ++j;
      absl::StrAppend(&missing, i, "-", j, " ");
      ++shown;
    }
  }
  INFO("missing: " << missing);
  int64_t repeated = 0;
  for (const auto& [index, times] : seen) {
    if (times != 1) ++repeated;
  }
  CHECK(repeated == 0);
  CHECK(seen.size() == static_cast<size_t>(workload.count));
}

TEST_CASE("a metrics outage holds the size and says so, restored the autoscaler resumes") {
  DemoWorkload workload;
  Loop loop(workload, kHighStep, true);
  // Scale up first.
  REQUIRE(WaitFor([&] { return loop.workers() > 1 && loop.autoscaler->stats().scale_ups >= 1; }, absl::Minutes(3)));
  // Settle at the size the demand needs (a decision with stall under target).
  REQUIRE(WaitFor(
      [&] {
        auto d = loop.last();
        return d && d->signals.stall_ratio.known() && *d->signals.stall_ratio <= kTarget && d->workers_before > 1;
      },
      absl::Minutes(3)));
  const int32_t before = loop.workers();
  const int64_t downs_before = loop.autoscaler->stats().scale_downs;

  // The demand drops and the dispatcher's metrics become unreachable at once: a scale-down is due,
  // but the autoscaler has no data to justify it.
  REQUIRE(loop.relay->SetAvailable(false).ok());
  loop.consumer->set_step_time(kLowStep);
  const int64_t first_in_outage = loop.autoscaler->stats().decisions + 1;
  // Longer than the rate window plus the scale-down window: without the outage it would have scaled down.
  const int64_t enough = first_in_outage + 20;
  REQUIRE(WaitFor([&] { return loop.autoscaler->stats().decisions >= enough; }, absl::Minutes(3)));
  INFO(History(*loop.autoscaler));
  CHECK(loop.autoscaler->stats().scale_downs == downs_before);
  CHECK(loop.workers() == before);
  CHECK(loop.autoscaler->stats().scale_downs_on_missing_data == 0);
  int held = 0;
  for (const LocalDecision& d : loop.autoscaler->decisions()) {
    if (d.number < first_in_outage + 1 || d.number > enough) continue;  // the first may straddle the cut
    CHECK(d.removed.empty());
    CHECK_FALSE(d.signals.stall_ratio.known());
    CHECK_FALSE(d.source_errors.empty());
    if (d.decision.Has(Reason::kHeldOnMissingData) && absl::StrContains(DecisionLogfmt(d), "holding=true")) ++held;
  }
  CHECK(held >= 15);

  // Restored: fresh data, and the scale-down follows.
  REQUIRE(loop.relay->SetAvailable(true).ok());
  REQUIRE(WaitFor([&] { return loop.autoscaler->stats().scale_downs > downs_before && loop.workers() < before; },
                  absl::Minutes(3)));
  CHECK(loop.autoscaler->stats().elements_lost == 0);
  CHECK(loop.autoscaler->stats().scale_downs_on_missing_data == 0);
}

}  // namespace
}  // namespace sluice::autoscaler
