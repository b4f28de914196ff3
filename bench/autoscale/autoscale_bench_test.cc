// `sluice bench autoscale`: flags, the --live mode's bad options, bad options and outputs, and a small run
// whose last line is the JSON object with the summary fields.
#include "bench/autoscale/autoscale_bench.h"

#include <catch2/catch.hpp>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace sluice::bench {
namespace {

int Run(std::vector<std::string> args, std::string* out, std::string* err) {
  CLI::App app;
  AutoscaleBenchOptions o;
  AddAutoscaleBenchFlags(&app, o);
  std::vector<const char*> argv = {"autoscale"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  std::ostringstream os, es;
  const int rc = RunAutoscaleBenchmark(o, os, es);
  *out = os.str();
  *err = es.str();
  return rc;
}

TEST_CASE("autoscale bench: --live refuses bad options before starting anything, --smoke needs --live") {
  std::string out, err;
  CHECK(Run({"--live", "--cpus-per-worker", "0"}, &out, &err) == 2);
  CHECK(out.empty());
  CHECK(err.find("--cpus-per-worker") != std::string::npos);
  CHECK(Run({"--live", "--low-step-ms", "2", "--high-step-ms", "4"}, &out, &err) == 2);
  CHECK(err.find("--low-step-ms") != std::string::npos);
  CHECK(Run({"--live", "--live-period", "0.01"}, &out, &err) == 2);
  CHECK(err.find("--live-period") != std::string::npos);
  CHECK(Run({"--live", "--max-workers", "1"}, &out, &err) == 2);
  CHECK(err.find("--max-workers") != std::string::npos);
  CHECK(Run({"--smoke"}, &out, &err) == 2);
  CHECK(err.find("--live") != std::string::npos);
}

TEST_CASE("autoscale bench: DecisionsToNoStall counts from the stall's onset until it is under target") {
  std::vector<LivePeriod> ps = {{1, "low", 1, 0.0, 0, ""},   {2, "high", 1, 0.0, 0, ""},   // buffers hide the step
                                {3, "high", 1, 0.6, 0, ""},  {4, "high", 3, -1, 0, ""},    // onset; no steps
                                {5, "high", 3, 0.05, 0, ""}, {6, "high", 3, 0.0, 0, ""}};
  CHECK(DecisionsToNoStall(ps, "high", 0.1) == 2);
  CHECK(DecisionsToNoStall(ps, "high", 0.01) == 3);
  CHECK(DecisionsToNoStall(ps, "low", 0.1) == 0);      // never stalled
  CHECK(DecisionsToNoStall(ps, "high", 0.7) == 0);
  CHECK(DecisionsToNoStall(ps, "outage", 0.1) == -1);  // no such phase
  std::vector<LivePeriod> stuck = {{1, "high", 1, 0.5, 0, ""}, {2, "high", 1, 0.5, 0, ""}};
  CHECK(DecisionsToNoStall(stuck, "high", 0.1) == -1);
}

TEST_CASE("autoscale bench: bad names and unwritable outputs fail with the cause") {
  std::string out, err;
  CHECK(Run({"--scenario", "nope"}, &out, &err) == 2);
  CHECK(err.find("demand-step") != std::string::npos);
  CHECK(Run({"--policy", "keda", "--scenario", "pecan-asr-v3-8"}, &out, &err) == 2);
  CHECK(err.find("no policy 'keda'") != std::string::npos);
  CHECK(Run({"--period", "0"}, &out, &err) == 2);
  CHECK(err.find("--period") != std::string::npos);
  CHECK(Run({"--remote-start", "-5"}, &out, &err) == 2);
  CHECK(err.find("--remote-start") != std::string::npos);
  CHECK(Run({"--local-slots", "100000"}, &out, &err) == 2);
  CHECK(err.find("--local-slots") != std::string::npos);
  CHECK(Run({"--series-dir", "/proc/sluice-no", "--scenario", "pecan-asr-v3-8"}, &out, &err) == 2);
  CHECK(err.find("/proc/sluice-no") != std::string::npos);
}

TEST_CASE("autoscale bench: a small run prints progress and the JSON line last, writes series and table") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sluice-autoscale-bench-test";
  std::filesystem::remove_all(dir);
  std::string out, err;
  REQUIRE(Run({"--scenario", "pecan-asr-v3-8", "--policy", "sluice", "--policy", "pecan", "--policy", "cachew",
               "--policy", "oracle", "--series-dir", dir.string(), "--markdown", (dir / "table.md").string()},
              &out, &err) == 0);
  CHECK(err.find("pecan-asr-v3-8") != std::string::npos);
  REQUIRE(!out.empty());
  CHECK(out.back() == '\n');
  nlohmann::json j = nlohmann::json::parse(out);
  CHECK(j["benchmark"] == "autoscale");
  CHECK(j["mode"] == "simulator");
  CHECK(j["summary"]["sluice_vs_pecan_cost"].get<double>() > 0);
  CHECK(j["summary"]["max_decisions_to_no_stall"].is_number());
  CHECK(j["summary"]["max_decision_periods_to_no_stall"].is_number());
  CHECK(j["scenarios"][0]["policies"]["sluice"]["changes"][0].contains("pod_start_periods"));
  CHECK(std::filesystem::exists(dir / "pecan-asr-v3-8.json"));
  CHECK(nlohmann::json::parse(std::ifstream(dir / "pecan-asr-v3-8.json"))["policies"]["sluice"].contains("decisions"));
  CHECK(std::filesystem::file_size(dir / "table.md") > 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::bench
