// The controller benchmarks' cluster harness: the pure helpers, and the errors before anything starts.
// (Its servers and nodes run in bench_operator_test's and bench_autoscaler_test's small runs.)
#include "bench/kubecluster/bench_cluster.h"

#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>

#include "bench/common/bench_util.h"
#include "testing/test_util.h"

namespace sluice::bench {
namespace {

using json = nlohmann::json;

TEST_CASE("bench_cluster: HasTrueCondition reads status.conditions and tolerates malformed statuses") {
  CHECK(HasTrueCondition(json::parse(R"({"status":{"conditions":[{"type":"Ready","status":"True"}]}})"), "Ready"));
  CHECK_FALSE(HasTrueCondition(json::parse(R"({"status":{"conditions":[{"type":"Ready","status":"False"}]}})"), "Ready"));
  CHECK_FALSE(HasTrueCondition(json::parse(R"({"status":{"conditions":[{"type":"Established","status":"True"}]}})"),
                               "Ready"));
  CHECK_FALSE(HasTrueCondition(json::parse(R"({"status":{"conditions":"Ready"}})"), "Ready"));
  CHECK_FALSE(HasTrueCondition(json::parse(R"({"status":{"conditions":[7, "x", null]}})"), "Ready"));
  CHECK_FALSE(HasTrueCondition(json::parse(R"({"status":"Ready"})"), "Ready"));
  CHECK_FALSE(HasTrueCondition(json::parse(R"({})"), "Ready"));
}

TEST_CASE("bench_cluster: FindSluiceBinary prefers the explicit path, then $SLUICE_BINARY_DIR, then the build's") {
  testing::TempDir dir;
  const std::string bin_dir = dir.File("bin");
  REQUIRE(mkdir(bin_dir.c_str(), 0755) == 0);
  const std::string program = dir.File("bin/sluice-fake");
  testing::WriteFile(program, "#!/bin/sh\n");
  REQUIRE(chmod(program.c_str(), 0755) == 0);
  const std::string built = dir.File("built-sluice-fake");
  testing::WriteFile(built, "#!/bin/sh\n");
  REQUIRE(chmod(built.c_str(), 0755) == 0);

  CHECK(FindSluiceBinary("/explicit/sluice-fake", "sluice-fake", built) == "/explicit/sluice-fake");
  setenv("SLUICE_BINARY_DIR", dir.path().c_str(), 1);
  CHECK(FindSluiceBinary("", "sluice-fake", built) == program);
  unsetenv("SLUICE_BINARY_DIR");
  CHECK(FindSluiceBinary("", "sluice-fake", built) == built);
  CHECK(FindSluiceBinary("", "sluice-fake", dir.File("missing")).empty());
  const std::string not_executable = dir.File("plain");
  testing::WriteFile(not_executable, "x");
  CHECK(FindSluiceBinary("", "sluice-fake", not_executable).empty());
}

TEST_CASE("bench_cluster: FindSourceDir prefers the explicit directory, then $SLUICE_SOURCE_DIR") {
  CHECK(FindSourceDir("/given", "/built") == "/given");
  setenv("SLUICE_SOURCE_DIR", "/from-env", 1);
  CHECK(FindSourceDir("", "/built") == "/from-env");
  unsetenv("SLUICE_SOURCE_DIR");
  CHECK(FindSourceDir("", "/built") == "/built");
}

TEST_CASE("bench_cluster: ControllerBenchClusterOptions sizes the nodes for every pod and names the directory") {
  // The operator benchmark's defaults: 1000 DataServices of a dispatcher and 8 workers on 4 nodes.
  const BenchClusterOptions o = ControllerBenchClusterOptions("operator", "bench-ns", 4, 1000, 9);
  CHECK(o.temp_prefix == "sluice-bench-operator");
  CHECK(o.kubeconfig_namespace == "bench-ns");
  CHECK(o.nodes == 4);
  CHECK(o.pods == 9000);
  // The interpreter, repository and work directory are left to the caller's flags.
  const BenchClusterOptions defaults;
  CHECK(o.python == defaults.python);
  CHECK(o.source_dir.empty());
  CHECK(o.work_dir.empty());
  // The product is taken in 64 bits: 300,000 DataServices of 8,001 pods is past INT32_MAX.
  const BenchClusterOptions big = ControllerBenchClusterOptions("autoscaler", "bench", 2, 300000, 8001);
  CHECK(big.temp_prefix == "sluice-bench-autoscaler");
  CHECK(big.pods == int64_t{2400300000});
}

TEST_CASE("bench_cluster: Start names the missing repository and bad node counts before starting anything") {
  testing::TempDir dir;
  BenchClusterOptions options;
  options.source_dir = dir.path().string();
  auto missing = BenchCluster::Start(options);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find(dir.path().string()) != std::string::npos);
  CHECK(std::string(missing.status().message()).find("--source-dir") != std::string::npos);
  options.nodes = 0;
  auto no_nodes = BenchCluster::Start(options);
  REQUIRE_FALSE(no_nodes.ok());
  CHECK(std::string(no_nodes.status().message()).find("nodes must be >= 1, got 0") != std::string::npos);
}

TEST_CASE("bench_cluster: a BenchChild logs its output, reports its exit, and Stop ends its process group") {
  testing::TempDir dir;
  auto quick = BenchChild::Start({"/bin/sh", "-c", "echo hello-$GREETING"}, "", dir.File("quick.log"), {"GREETING=bench"});
  REQUIRE(quick.ok());
  REQUIRE(WaitUntil([&] { return !(*quick)->Alive(); }, absl::Seconds(30)));
  CHECK((*quick)->LogTail().find("hello-bench") != std::string::npos);

  auto sleeper = BenchChild::Start({"/bin/sh", "-c", "sleep 600 & wait"}, "", dir.File("sleeper.log"));
  REQUIRE(sleeper.ok());
  const pid_t pid = (*sleeper)->pid();
  CHECK((*sleeper)->Alive());
  (*sleeper)->Stop(absl::Seconds(10));
  CHECK_FALSE((*sleeper)->Alive());
  // The group (the shell and its sleep) goes: SIGKILLed, the orphaned sleep reaped by init.
  CHECK(WaitUntil([&] { return kill(-pid, 0) != 0 && errno == ESRCH; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace sluice::bench
