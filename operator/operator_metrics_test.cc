// OperatorMetrics: what /metrics shows after reconciles, and the sourced gauges and counters that
// are refreshed on every collection.
#include "operator/operator_metrics.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <string>

#include "prometheus/text_serializer.h"

namespace sluice::op {
namespace {

std::string Scrape(const OperatorMetrics& m) {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(m.registry()->Collect());
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST_CASE("operator metrics: reconciles, errors and latency") {
  OperatorMetrics m;
  m.ObserveReconcile(absl::Milliseconds(3), true);
  m.ObserveReconcile(absl::Milliseconds(40), true);
  m.ObserveReconcile(absl::Seconds(2), false);
  m.CountApiError("create");
  m.CountDrainRpc(false);
  m.CountScaleDownDrain(true);
  m.CountScaleDownDrain(true);
  m.CountScaleDownDrain(false);
  m.SetLeader(true);
  CHECK(m.reconciles() == 3);
  CHECK(m.reconcile_errors() == 1);
  std::string text = Scrape(m);
  INFO(text);
  CHECK(Has(text, "sluice_operator_reconciles_total{result=\"success\"} 2"));
  CHECK(Has(text, "sluice_operator_reconciles_total{result=\"error\"} 1"));
  CHECK(Has(text, "sluice_operator_reconcile_errors_total 1"));
  CHECK(Has(text, "sluice_operator_reconcile_duration_seconds_count 3"));
  CHECK(Has(text, "sluice_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 1"));
  CHECK(Has(text, "sluice_operator_reconcile_duration_seconds_bucket{le=\"0.05\"} 2"));
  CHECK(Has(text, "sluice_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 3"));
  CHECK(Has(text, "sluice_operator_api_errors_total{operation=\"create\"} 1"));
  CHECK(Has(text, "sluice_operator_drain_rpcs_total{result=\"error\"} 1"));
  CHECK(Has(text, "sluice_operator_scale_down_drains_total{outcome=\"drained\"} 2"));
  CHECK(Has(text, "sluice_operator_scale_down_drains_total{outcome=\"timed_out\"} 1"));
  CHECK(Has(text, "sluice_operator_leader 1"));
}

TEST_CASE("operator metrics: queue depth and watch restarts are read at collection time") {
  OperatorMetrics m;
  std::atomic<int64_t> depth{4}, delayed{1}, restarts{0}, relists{0};
  m.SetQueueSources([&] { return depth.load(); }, [&] { return delayed.load(); });
  m.SetReflectorSources("pods", [&] { return restarts.load(); }, [&] { return relists.load(); });
  std::string text = Scrape(m);
  CHECK(Has(text, "sluice_operator_workqueue_depth 4"));
  CHECK(Has(text, "sluice_operator_workqueue_delayed 1"));
  CHECK(Has(text, "sluice_operator_watch_restarts_total{resource=\"pods\"} 0"));

  depth = 0;
  restarts = 3;
  relists = 1;
  text = Scrape(m);
  CHECK(Has(text, "sluice_operator_workqueue_depth 0"));
  CHECK(Has(text, "sluice_operator_watch_restarts_total{resource=\"pods\"} 3"));
  CHECK(Has(text, "sluice_operator_relists_total{resource=\"pods\"} 1"));

  // A controller restarted (new reflectors counting from zero): the counter keeps counting up.
  restarts = 5;
  m.ClearSources();
  std::atomic<int64_t> fresh{2};
  m.SetReflectorSources("pods", [&] { return fresh.load(); }, [] { return int64_t{0}; });
  text = Scrape(m);
  CHECK(Has(text, "sluice_operator_watch_restarts_total{resource=\"pods\"} 7"));
  CHECK(Has(text, "sluice_operator_workqueue_depth 0"));
}

}  // namespace
}  // namespace sluice::op
