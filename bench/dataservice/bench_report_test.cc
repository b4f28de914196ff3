#include "bench/dataservice/bench_report.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "bench/dataservice/bench_service.h"

namespace sluice::bench {
namespace {

TEST_CASE("Median of odd, even and empty inputs") {
  CHECK(Median({3, 1, 2}) == 2);
  CHECK(Median({4, 1, 3, 2}) == 2.5);
  CHECK(Median({}) == 0);
  CHECK(Median({7}) == 7);
}

TEST_CASE("Ratio guards against a failed denominator") {
  CHECK(Ratio(1, 2) == 0.5);
  CHECK(Ratio(1, 0) == 0);
  CHECK(Ratio(1, -1) == 0);
}

TEST_CASE("Round keeps the given decimals") {
  CHECK(Round(1.23456, 2) == Approx(1.23));
  CHECK(Round(0.9996, 3) == Approx(1.0));
}

TEST_CASE("Throughput converts to GB/s and elements/s") {
  Throughput t{2'000'000'000, 4, 2.0, {}};
  CHECK(t.gbps() == Approx(1.0));
  CHECK(t.elements_per_second() == Approx(2.0));
  CHECK(Throughput{}.gbps() == 0);
}

TEST_CASE("ParseLoadAvg reads three averages and rejects malformed text") {
  auto load = ParseLoadAvg("0.52 1.58 10.25 1/467 12345\n");
  REQUIRE(load.ok());
  CHECK((*load)[0] == Approx(0.52));
  CHECK((*load)[2] == Approx(10.25));
  CHECK(ParseLoadAvg("").status().message().find("expected three") != std::string::npos);
  CHECK(ParseLoadAvg("0.1 0.2").status().code() == absl::StatusCode::kInvalidArgument);
  auto bad = ParseLoadAvg("0.1 x 0.3 1/2 3");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("field 2 'x'") != std::string::npos);
  CHECK(!ParseLoadAvg("-1 0 0 1/2 3").ok());
}

TEST_CASE("ReadMachineInfo and its JSON") {
  MachineInfo m = ReadMachineInfo();
  CHECK(m.cpus >= 1);
  auto j = ToJson(m);
  CHECK(j["cpus"] == m.cpus);
  CHECK(j["load_avg"].size() == 3);
}

TEST_CASE("ParseBenchPipeline names the benchmark in errors") {
  CHECK(ParseBenchPipeline("source: {range: {stop: 3}}\n", "unit").ok());
  auto bad = ParseBenchPipeline("source: {nope: {}}\n", "unit");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("the unit pipeline is invalid") != std::string::npos);
}

TEST_CASE("MakeLogDir creates a fresh directory and RemoveLogDir removes it") {
  auto a = MakeLogDir("unit");
  auto b = MakeLogDir("unit");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a != *b);
  CHECK(std::filesystem::is_directory(*a));
  RemoveLogDir(*a);
  RemoveLogDir(*b);
  CHECK(!std::filesystem::exists(*a));
}

TEST_CASE("ParseProcStatCpuTicks counts fields after the command, which may hold spaces") {
  const char* stat = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 5 0 99 0 0";
  auto ticks = ParseProcStatCpuTicks(stat);
  REQUIRE(ticks.ok());
  CHECK(*ticks == 300);
  CHECK(ParseProcStatCpuTicks("1234 no-paren S 1").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ParseProcStatCpuTicks("1 (x) S 1 2").status().message().find("need 13") != std::string::npos);
  CHECK(ParseProcStatCpuTicks("1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 5").status().message().find("utime 'abc'") !=
        std::string::npos);
}

TEST_CASE("ProcessCpuSeconds reads this process, and names a missing one") {
  CHECK(SampleCpuSeconds({getpid(), -5}).size() == 2);
  CHECK(SampleCpuSeconds({-5})[0] == 0);
  auto self = ProcessCpuSeconds(getpid());
  REQUIRE(self.ok());
  CHECK(*self >= 0);
  CHECK(ProcessCpuSeconds(-5).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("ParseCompression takes the four names and names the flag otherwise") {
  CHECK(*ParseCompression("none") == service::COMPRESSION_NONE);
  CHECK(*ParseCompression("auto") == service::COMPRESSION_AUTO);
  CHECK(*ParseCompression("lz4") == service::COMPRESSION_LZ4);
  CHECK(*ParseCompression("zstd") == service::COMPRESSION_ZSTD);
  auto bad = ParseCompression("gzip");
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.status().message() == "--compression: 'gzip' is not one of none, auto, lz4, zstd");
}

}  // namespace
}  // namespace sluice::bench
