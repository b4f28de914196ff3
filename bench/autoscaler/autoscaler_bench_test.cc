// `sluice bench autoscaler` at a small scale: every DataService is decided, the numbers are there and
// sane, and the steady state writes nothing to the spec. No timing is asserted.
#include "bench/autoscaler/autoscaler_bench.h"

#include <catch2/catch.hpp>

#include "nlohmann/json.hpp"

namespace sluice::bench {
namespace {

TEST_CASE("median") {
  CHECK(PeriodMedian({}) == 0);
  CHECK(PeriodMedian({3}) == 3);
  CHECK(PeriodMedian({5, 1, 3}) == 3);
  CHECK(PeriodMedian({4, 1, 3, 2}) == 2.5);
}

TEST_CASE("a small run of 20 autoscaled DataServices", "[integration]") {
  AutoscalerBenchOptions o;
  o.dataservices = 20;
  o.workers = 2;
  o.nodes = 1;
  o.period_seconds = 2;
  o.windows = 2;
  o.timeout_seconds = 240;
  o.quiet = true;
  auto result = MeasureAutoscaler(o, nullptr);
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  CHECK(result->dataservices == 20);
  CHECK(result->pods == 60);
  REQUIRE(result->cpu_core_fraction.size() == 2);
  for (double c : result->cpu_core_fraction) CHECK(c >= 0);
  CHECK(result->peak_rss_mib > 0);
  CHECK(result->failed_requests == 0);
  // Steady state: no spec applies (the model keeps the 2 workers), only status writes, if any.
  CHECK(result->by_resource.count("patch dataservices") == 0);
  CHECK(result->prometheus_queries > 0);
  auto j = nlohmann::json::parse(AutoscalerResultJson(*result));
  CHECK(j["benchmark"] == "autoscaler");
  CHECK(j.contains("cpu_core_fraction_median"));
  CHECK(j.contains("peak_rss_mib"));
  CHECK(j["goal_rss_mib"] == 64);
}

}  // namespace
}  // namespace sluice::bench
