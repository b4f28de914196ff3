// `sluice bench autoscale --live --smoke`: the closed loop with real processes (a short schedule),
// its JSON line and the figures that must hold whatever the machine's speed: no scale-down on
// missing data, nothing lost, no scale-down during the outage.
#include <catch2/catch.hpp>

#include <sstream>

#include "bench/autoscale/live_bench.h"
#include "nlohmann/json.hpp"
#include "testing/test_util.h"

namespace sluice::bench {
namespace {

TEST_CASE("bench autoscale --live --smoke runs the closed loop and prints the JSON line last") {
  LiveAutoscaleOptions o;
  o.smoke = true;
  o.bin_dir = sluice::testing::BinaryDir() + "/bin";
  std::ostringstream out, err;
  const int rc = RunLiveAutoscaleBenchmark(o, out, err);
  INFO(err.str());
  REQUIRE(rc == 0);
  std::string text = out.str();
  REQUIRE(!text.empty());
  text.pop_back();
  const std::string last = text.substr(text.rfind('\n') + 1);
  const nlohmann::json j = nlohmann::json::parse(last);
  CHECK(j["benchmark"] == "autoscale_live");
  for (const char* key : {"decisions_to_no_stall", "worker_seconds_vs_best_static", "scale_downs_on_missing_data",
                          "elements_lost", "worker_seconds", "peak_workers", "periods", "quota"}) {
    INFO(key);
    CHECK(j.contains(key));
  }
  CHECK(j["worker_seconds_vs_best_static"].is_null());  // --smoke runs no static counts
  CHECK(j["scale_downs_on_missing_data"] == 0);
  CHECK(j["scale_downs_during_outage"] == 0);
  CHECK(j["elements_lost"] == 0);
  CHECK(j["decisions"].get<int>() > 0);
  CHECK(j["periods"].size() == j["decisions"].get<size_t>());
  bool outage_held = false;
  for (const auto& p : j["periods"]) {
    if (p["phase"] == "outage" && p["reasons"].get<std::string>().find("HeldOnMissingData") != std::string::npos) {
      outage_held = true;
    }
  }
  CHECK(outage_held);
}

}  // namespace
}  // namespace sluice::bench
