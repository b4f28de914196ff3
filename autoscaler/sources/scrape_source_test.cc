#include "autoscaler/sources/scrape_source.h"

#include <catch2/catch.hpp>

#include "common/admin_server.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace sluice::autoscaler {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

ScrapeSnapshot Snap(absl::Time at, double wait, double step, double elements, std::map<std::string, ScrapeSnapshot::Worker> w,
                    double removals = 0) {
  ScrapeSnapshot s;
  s.at = at;
  s.dispatcher_ok = true;
  s.client_wait = wait;
  s.client_step = step;
  s.client_elements = elements;
  s.heartbeat_removals = removals;
  s.workers = std::move(w);
  return s;
}

TEST_CASE("scrape rates: increases over the window span, like Prometheus") {
  std::deque<ScrapeSnapshot> h;
  h.push_back(Snap(kT0, 10, 100, 1000, {{"w0", {5000, 50, 3, false}}, {"w1", {4000, 40, 1, true}}}));
  h.push_back(Snap(kT0 + absl::Seconds(10), 12, 110, 1500, {{"w0", {5300, 55, 2, false}}, {"w1", {4200, 45, 4, true}}}, 1));
  Signals s = SignalsFromSnapshots(h, absl::Minutes(1), absl::Seconds(5));
  CHECK(s.at == kT0 + absl::Seconds(10));
  CHECK(*s.stall_ratio.value == Approx(0.2));        // 2 s waited of 10 s of steps
  CHECK(*s.demand.value == Approx(50));              // 500 elements in 10 s
  CHECK(*s.compute_per_element.value == Approx(8.0 / 500));
  CHECK(*s.supply.value == Approx(50));              // (300 + 200) / 10
  CHECK(*s.worker_cpu.value == Approx(1.0));         // (5 + 5) / 10
  CHECK(*s.buffered.value == 6);
  CHECK(*s.churn.value == 1);
  CHECK(*s.workers.value == 2);
  CHECK(*s.local_workers.value == 1);
}

TEST_CASE("scrape rates: a reset counter, a worker that joined mid-window, warming up, a dead dispatcher") {
  std::deque<ScrapeSnapshot> h;
  h.push_back(Snap(kT0, 0, 0, 1000, {{"w0", {5000, 50, 0, false}}}));
  SECTION("only one scrape: warming up") {
    Signals s = SignalsFromSnapshots(h, absl::Minutes(1), absl::Seconds(5));
    CHECK_FALSE(s.demand.known());
    CHECK_THAT(s.demand.missing, Catch::Contains("warming up"));
  }
  SECTION("the dispatcher restarted (its counters reset) and a worker joined") {
    h.push_back(Snap(kT0 + absl::Seconds(10), 0, 10, 200, {{"w0", {5100, 51, 0, false}}, {"w1", {10, 1, 0, false}}}));
    Signals s = SignalsFromSnapshots(h, absl::Minutes(1), absl::Seconds(5));
    CHECK(*s.demand.value == Approx(20));   // 200 since the reset, not -800
    CHECK(*s.workers.value == 1);           // w1 was not there at the window's start
    CHECK(*s.supply.value == Approx(10));
    CHECK(*s.stall_ratio.value == 0);
  }
  SECTION("no steps: the stall ratio is unknown, not zero") {
    h.push_back(Snap(kT0 + absl::Seconds(10), 0, 0, 1000, {{"w0", {5000, 50, 0, false}}}));
    Signals s = SignalsFromSnapshots(h, absl::Minutes(1), absl::Seconds(5));
    CHECK_FALSE(s.stall_ratio.known());
    CHECK(*s.demand.value == 0);
  }
  SECTION("the dispatcher did not answer the last scrape") {
    ScrapeSnapshot dead;
    dead.at = kT0 + absl::Seconds(10);
    h.push_back(dead);
    Signals s = SignalsFromSnapshots(h, absl::Minutes(1), absl::Seconds(5));
    CHECK_FALSE(s.demand.known());
    CHECK_FALSE(s.workers.known());
  }
}

TEST_CASE("scrape pages: the dispatcher's and a worker's metrics are read by name and label") {
  auto page = promtext::ParsePrometheusText(
      "# TYPE sluice_client_wait_seconds_total counter\n"
      "sluice_client_wait_seconds_total{dataservice=\"d\",job=\"a\"} 1.5\n"
      "sluice_client_wait_seconds_total{dataservice=\"d\",job=\"b\"} 0.5\n"
      "sluice_client_step_seconds_total{dataservice=\"d\",job=\"a\"} 10\n"
      "sluice_client_elements_total{dataservice=\"d\",job=\"a\"} 100\n"
      "sluice_dispatcher_worker_removals_total{dataservice=\"d\",reason=\"heartbeat timeout\"} 2\n"
      "sluice_dispatcher_worker_removals_total{dataservice=\"d\",reason=\"deregistered\"} 7\n");
  REQUIRE(page.ok());
  ScrapeSnapshot snap;
  AddDispatcherPage(*page, &snap);
  CHECK(snap.client_wait == 2.0);
  CHECK(snap.heartbeat_removals == 2);
  auto worker = promtext::ParsePrometheusText(
      "sluice_worker_elements_produced_total{dataservice=\"d\",worker=\"w\",placement=\"local\"} 42\n"
      "sluice_worker_busy_seconds_total{dataservice=\"d\",worker=\"w\",placement=\"local\"} 3\n"
      "sluice_worker_buffered_elements{dataservice=\"d\",worker=\"w\",placement=\"local\"} 8\n");
  REQUIRE(worker.ok());
  AddWorkerPage("w", *worker, &snap);
  CHECK(snap.workers["w"].produced == 42);
  CHECK(snap.workers["w"].local);
}

TEST_CASE("scrape source against real admin endpoints: rates from two scrapes, errors for dead endpoints") {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& elements = prometheus::BuildCounter().Name("sluice_client_elements_total").Register(*registry).Add({{"job", "a"}});
  auto& step = prometheus::BuildCounter().Name("sluice_client_step_seconds_total").Register(*registry).Add({{"job", "a"}});
  prometheus::BuildCounter().Name("sluice_client_wait_seconds_total").Register(*registry).Add({{"job", "a"}});
  auto dispatcher = AdminServer::Start("127.0.0.1:0", registry);
  REQUIRE(dispatcher.ok());
  const std::string url = "http://127.0.0.1:" + std::to_string((*dispatcher)->port());
  ScrapeSource source({absl::Minutes(1), absl::Seconds(5), absl::Seconds(5)});
  ObserveRequest req{"ml", "d", std::nullopt, {}, url, {{"w0", "http://127.0.0.1:1"}}};
  Observation first = source.Observe(req, kT0);
  CHECK_THAT(first.signals.demand.missing, Catch::Contains("warming up"));
  REQUIRE(first.errors.size() == 1);
  CHECK_THAT(first.errors[0], Catch::Contains("no worker's /metrics answered"));
  elements.Increment(300);
  step.Increment(10);
  Observation second = source.Observe(req, kT0 + absl::Seconds(10));
  REQUIRE(second.signals.demand.known());
  CHECK(*second.signals.demand.value == Approx(30));
  CHECK(*second.signals.stall_ratio.value == 0);
  CHECK(*second.signals.workers.value == 0);

  ObserveRequest gone{"ml", "e", std::nullopt, {}, "http://127.0.0.1:1", {}};
  Observation none = source.Observe(gone, kT0);
  REQUIRE_FALSE(none.errors.empty());
  CHECK_FALSE(none.signals.demand.known());
}

TEST_CASE("scrape source keeps HTTP clients only for the pods it scrapes now") {
  // Pods come and go with new IPs (every scale-up, restart or roll); a client kept per address ever
  // scraped grew without bound in a long-running autoscaler.
  ScrapeSource source({absl::Minutes(1), absl::Seconds(5), absl::Milliseconds(200)});
  auto request = [](std::string ds, int first_worker, int workers) {
    ObserveRequest r{"ml", std::move(ds), std::nullopt, {}, "http://127.0.0.1:1", {}};
    for (int i = first_worker; i < first_worker + workers; ++i) {
      r.worker_metrics_urls["w" + std::to_string(i)] = "http://127.0.0.2:" + std::to_string(10 + i);
    }
    return r;
  };
  source.Observe(request("a", 0, 3), kT0);
  source.Observe(request("b", 0, 1), kT0);
  CHECK(source.http_clients() == 4 + 2);
  // Three new worker pods replace the three of "a" (a roll): their clients go with them.
  for (int round = 1; round <= 5; ++round) source.Observe(request("a", 3 * round, 3), kT0 + absl::Seconds(round));
  CHECK(source.http_clients() == 4 + 2);
  source.Observe(request("a", 15, 1), kT0 + absl::Seconds(6));  // scaled down to one worker
  CHECK(source.http_clients() == 2 + 2);
  source.Forget("ml", "a");  // the DataService is gone
  CHECK(source.http_clients() == 2);
  source.Forget("ml", "b");
  CHECK(source.http_clients() == 0);
}

}  // namespace
}  // namespace sluice::autoscaler
