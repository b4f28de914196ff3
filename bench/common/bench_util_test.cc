// The benchmarks' shared helpers (compiled into bench_dataservice_util_test).
#include "bench/common/bench_util.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "testing/test_util.h"

namespace sluice::bench {
namespace {

namespace fs = std::filesystem;

TEST_CASE("bench_util: ReadWholeFile returns every byte, and names the file it cannot read") {
  testing::TempDir dir;
  const std::string bytes("line 1\nA\0B\r\nno newline at the end", 34);
  testing::WriteFile(dir.File("f.bin"), bytes);
  auto read = ReadWholeFile(dir.File("f.bin"));
  REQUIRE(read.ok());
  CHECK(*read == bytes);
  CHECK(ReadTextFile(dir.File("f.bin")) == bytes);
  testing::WriteFile(dir.File("empty"), "");
  auto empty = ReadWholeFile(dir.File("empty"));
  REQUIRE(empty.ok());
  CHECK(empty->empty());

  auto missing = ReadWholeFile(dir.File("missing.yaml"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(missing.status().message() == "cannot read " + dir.File("missing.yaml"));
  CHECK(ReadTextFile(dir.File("missing.yaml")).empty());
}

TEST_CASE("bench_util: WaitUntil polls until the condition holds, and gives up at the deadline") {
  int calls = 0;
  CHECK(WaitUntil([&] { return ++calls == 3; }, absl::Seconds(60), absl::Milliseconds(1)));
  CHECK(calls == 3);
  calls = 0;
  CHECK(WaitUntil([&] { return ++calls > 0; }, absl::ZeroDuration()));
  CHECK(calls == 1);  // true at once: no sleep, even with no time left
  calls = 0;
  CHECK_FALSE(WaitUntil([&] { return ++calls < 0; }, absl::ZeroDuration()));
  CHECK(calls == 1);  // asked once, then the deadline had passed
  calls = 0;
  CHECK_FALSE(WaitUntil([&] { return ++calls < 0; }, absl::Milliseconds(5), absl::Milliseconds(1)));
  CHECK(calls >= 1);
}

TEST_CASE("bench_util: RunCommand hands over each line and returns the exit code or 128 + the signal") {
  std::vector<std::string> lines;
  auto collect = [&](const std::string& line) { lines.push_back(line); };
  CHECK(RunCommand("printf 'one\\n\\ntwo\\nlast without newline'; exit 3", collect) == 3);
  CHECK(lines == std::vector<std::string>{"one", "", "two", "last without newline"});

  // A line longer than the read buffer (4096 bytes) arrives whole.
  lines.clear();
  CHECK(RunCommand("head -c 10000 /dev/zero | tr '\\0' x; echo", collect) == 0);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == std::string(10000, 'x'));

  // Standard error is not read unless the command says 2>&1.
  lines.clear();
  CHECK(RunCommand("echo out; echo err >&2", collect) == 0);
  CHECK(lines == std::vector<std::string>{"out"});
  lines.clear();
  CHECK(RunCommand("echo err >&2", collect) == 0);
  CHECK(lines.empty());
  CHECK(RunCommand("(echo err >&2) 2>&1", collect) == 0);
  CHECK(lines == std::vector<std::string>{"err"});

  lines.clear();
  CHECK(RunCommand("echo before; kill -9 $$", collect) == 128 + 9);
  CHECK(lines == std::vector<std::string>{"before"});
  CHECK(RunCommand("exec /nonexistent/program", collect) == 127);
}

TEST_CASE("bench_util: ShellQuote survives the shell unchanged") {
  CHECK(ShellQuote("plain") == "'plain'");
  CHECK(ShellQuote("it's") == "'it'\\''s'");
  CHECK(ShellQuote("") == "''");
  const std::string nasty = "a b;$HOME `id` \"q\" 'x' \\ *";
  std::vector<std::string> lines;
  CHECK(RunCommand("printf '%s\\n' " + ShellQuote(nasty), [&](const std::string& l) { lines.push_back(l); }) == 0);
  CHECK(lines == std::vector<std::string>{nasty});
}

TEST_CASE("bench_util: JpegFiles lists the regular .jpg files, sorted") {
  testing::TempDir dir;
  for (const char* name : {"b.jpg", "a.jpg", "c.jpeg", "d.JPG", "e.png", "jpg"}) testing::WriteFile(dir.File(name), "x");
  REQUIRE(mkdir(dir.File("dir.jpg").c_str(), 0755) == 0);
  testing::WriteFile(dir.File("sub/f.jpg"), "x");
  CHECK(JpegFiles(dir.path()) == std::vector<fs::path>{dir.path() / "a.jpg", dir.path() / "b.jpg"});
  CHECK(JpegFiles(dir.path() / "missing").empty());
}

TEST_CASE("bench_util: ParseCpuModel takes the first model name and CpuModelName reads this machine's") {
  const char* cpuinfo =
      "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: fpu\n\n"
      "processor\t: 1\nmodel name\t: Other\n";
  CHECK(ParseCpuModel(cpuinfo) == "Intel(R) Xeon(R) Processor");
  CHECK(ParseCpuModel("processor : 0\n") == "");
  CHECK(ParseCpuModel("model name without colon\n") == "");
  const std::string here = ParseCpuModel(ReadTextFile("/proc/cpuinfo"));
  CHECK(CpuModelName() == (here.empty() ? "unknown" : here));
}

TEST_CASE("bench_util: ThisProcessCpuSeconds grows with work done") {
  const double before = ThisProcessCpuSeconds();
  CHECK(before > 0);
  volatile double sink = 0;
  double after = before;
  // Work until the clock moves (its resolution is far below a millisecond); no time is assumed.
  for (int i = 0; after == before; ++i) {
    sink = sink + std::sqrt(static_cast<double>(i));
    after = ThisProcessCpuSeconds();
  }
  CHECK(after > before);
}

// Moved here with the helpers: SpreadOfRuns (pipeline), SpreadOf (autoorder), SpreadOfTrials
// (scaleout, sharding) and Spread (transfer, overhead) are now SpreadOfRuns and RelativeRange.
TEST_CASE("bench_util: SpreadOfRuns gives median, min, max and count") {
  RunSpread s = SpreadOfRuns({3, 1, 2, 10});
  CHECK(s.median == Approx(2.5));
  CHECK(s.min == 1);
  CHECK(s.max == 10);
  CHECK(s.n == 4);
  CHECK(SpreadOfRuns({}).n == 0);
  CHECK(SpreadOfRuns({}).median == 0);
  RunSpread odd = SpreadOfRuns({5, 1, 3});
  CHECK(odd.median == 3);
  CHECK(odd.min == 1);
  CHECK(odd.max == 5);
  CHECK(odd.n == 3);
  CHECK(odd.relative_range() == Approx(4.0 / 3.0));
  CHECK(SpreadOfRuns({2, 4}).median == 3);
  CHECK(SpreadOfRuns({7}).relative_range() == 0);
}

TEST_CASE("bench_util: RelativeRange is the range over the median") {
  CHECK(RelativeRange({1, 2, 3}) == Approx(1.0));
  CHECK(RelativeRange({5, 1, 3}) == Approx(4.0 / 3.0));
  CHECK(RelativeRange({2}) == 0);
  CHECK(RelativeRange({}) == 0);
  CHECK(RelativeRange({0, 0, 1}) == 0);    // zero median
  CHECK(RelativeRange({-3, -2, 1}) == 0);  // negative median
}

}  // namespace
}  // namespace sluice::bench
