#include "bench/dataservice/bench_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "bench/dataservice/bench_report.h"

namespace sluice::bench {
namespace {

struct LogDir {
  LogDir() : path(*MakeLogDir("process-test")) {}
  ~LogDir() { RemoveLogDir(path); }
  std::string path;
};

TEST_CASE("A child's log line is found, and Stop ends it with SIGTERM") {
  LogDir dir;
  auto p = BenchProcess::Start({"/bin/sh", "-c", "echo 'ts=x msg=listening port=4242 other=1' >&2; exec sleep 600"},
                               dir.path + "/child.log");
  REQUIRE(p.ok());
  const pid_t pid = (*p)->pid();
  auto line = (*p)->WaitForLogLine("msg=listening", absl::Seconds(20));
  REQUIRE(line.ok());
  auto port = IntFromLogLine(*line, "port");
  REQUIRE(port.ok());
  CHECK(*port == 4242);
  CHECK(!(*p)->Exited());
  const int status = (*p)->Stop();
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK((*p)->Exited());
  CHECK(kill(pid, 0) != 0);  // reaped: no such process any more
}

TEST_CASE("The destructor stops a running child") {
  LogDir dir;
  pid_t pid = 0;
  {
    auto p = BenchProcess::Start({"/bin/sh", "-c", "exec sleep 600"}, dir.path + "/child.log");
    REQUIRE(p.ok());
    pid = (*p)->pid();
  }
  CHECK(kill(pid, 0) != 0);
}

TEST_CASE("A child that exits before the line reports its log tail") {
  LogDir dir;
  auto p = BenchProcess::Start({"/bin/sh", "-c", "echo 'bad flag --nope' >&2; exit 2"}, dir.path + "/child.log");
  REQUIRE(p.ok());
  auto line = (*p)->WaitForLogLine("msg=listening", absl::Seconds(20));
  REQUIRE(!line.ok());
  CHECK(line.status().code() == absl::StatusCode::kUnavailable);
  CHECK(line.status().message().find("bad flag --nope") != std::string::npos);
  CHECK(line.status().message().find("sh exited") != std::string::npos);
}

TEST_CASE("A line that never comes times out naming the needle") {
  LogDir dir;
  auto p = BenchProcess::Start({"/bin/sh", "-c", "exec sleep 600"}, dir.path + "/child.log");
  REQUIRE(p.ok());
  auto line = (*p)->WaitForLogLine("never printed", absl::Milliseconds(50));
  REQUIRE(!line.ok());
  CHECK(line.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(line.status().message().find("never printed") != std::string::npos);
}

TEST_CASE("Starting a missing binary fails before forking") {
  LogDir dir;
  auto p = BenchProcess::Start({dir.path + "/no-such-binary"}, dir.path + "/child.log");
  REQUIRE(!p.ok());
  CHECK(p.status().code() == absl::StatusCode::kNotFound);
  CHECK(p.status().message().find("--bin_dir") != std::string::npos);
  CHECK(BenchProcess::Start({}, dir.path + "/x.log").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("IntFromLogLine rejects missing and malformed values") {
  CHECK(IntFromLogLine("msg=listening port=12 metrics_port=-1", "metrics_port").value() == -1);
  CHECK(IntFromLogLine("msg=listening port=12", "port").value() == 12);
  CHECK(IntFromLogLine("msg=listening", "port").status().code() == absl::StatusCode::kNotFound);
  auto bad = IntFromLogLine("msg=listening port=abc", "port");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("'port=abc' is not an integer") != std::string::npos);
  // "port" must not match inside "metrics_port".
  CHECK(IntFromLogLine("msg=x metrics_port=5", "port").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("ExecutableDir is a directory") { CHECK(!ExecutableDir().empty()); }

}  // namespace
}  // namespace sluice::bench
