// Unit tests of the multi-process harness itself: logfmt fields and
// ChildProcess (output capture, exit status, exec failures, process-group kill).
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "e2e_dataplane/child_process.h"
#include "testing/test_util.h"

namespace sluice::local {
namespace {

ChildProcessOptions Command(std::vector<std::string> argv, std::string working_dir = "") {
  ChildProcessOptions options;
  options.argv = std::move(argv);
  options.working_dir = std::move(working_dir);
  return options;
}

TEST_CASE("LogfmtField finds plain and quoted values") {
  const std::string line =
      "ts=2026-01-01T00:00:00Z level=info component=worker msg=listening port=4242 metrics_port=17 "
      "worker_address=127.0.0.1:4242 note=\"a b \\\"c\\\"\"";
  CHECK(LogfmtField(line, "port") == "4242");
  CHECK(LogfmtField(line, "metrics_port") == "17");
  CHECK(LogfmtField(line, "msg") == "listening");
  CHECK(LogfmtField(line, "note") == "a b \"c\"");
  CHECK(!LogfmtField(line, "missing").has_value());
  CHECK(!LogfmtField("no fields here", "port").has_value());
}

TEST_CASE("ChildProcess captures output lines and the exit status") {
  auto child = ChildProcess::Start(Command({"/bin/sh", "-c", "echo one; echo two >&2; printf tail; exit 3"}));
  REQUIRE(child.ok());
  auto line = (*child)->WaitForLine("two", absl::Seconds(30));
  REQUIRE(line.ok());
  CHECK(*line == "two");
  auto status = (*child)->Wait(absl::Seconds(30));
  REQUIRE(status.ok());
  CHECK(DescribeWaitStatus(*status) == "exit 3");
  CHECK((*child)->Exited());
  // Output ended without such a line: a clear error rather than a wait to the deadline.
  auto missing = (*child)->WaitForLine("never printed", absl::Seconds(30));
  CHECK(absl::IsFailedPrecondition(missing.status()));
  CHECK(absl::StrContains((*child)->Output(), "one\ntwo\ntail\n"));
}

TEST_CASE("ChildProcess reports programs that cannot run") {
  auto missing = ChildProcess::Start(Command({"/nonexistent/sluice-nothing"}));
  REQUIRE(!missing.ok());
  CHECK(absl::StrContains(missing.status().message(), "/nonexistent/sluice-nothing"));
  auto bad_dir = ChildProcess::Start(Command({"/bin/true"}, "/nonexistent/dir"));
  REQUIRE(!bad_dir.ok());
  CHECK(absl::StrContains(bad_dir.status().message(), "/nonexistent/dir"));
  CHECK(!ChildProcess::Start(ChildProcessOptions()).ok());
}

TEST_CASE("ChildProcess runs in a working directory and its destructor kills the whole group") {
  sluice::testing::TempDir tmp;
  pid_t grandchild = 0;
  {
    // The shell starts a long sleep in the background and reports its pid, then waits.
    auto child = ChildProcess::Start(
        Command({"/bin/sh", "-c", "pwd; sleep 1000 & echo grandchild=$!; wait"}, tmp.path().string()));
    REQUIRE(child.ok());
    REQUIRE((*child)->WaitForLine(tmp.path().string(), absl::Seconds(30)).ok());
    auto line = (*child)->WaitForLine("grandchild=", absl::Seconds(30));
    REQUIRE(line.ok());
    REQUIRE(absl::SimpleAtoi(line->substr(line->find('=') + 1), &grandchild));
    REQUIRE(::kill(grandchild, 0) == 0);
    auto still = (*child)->Wait(absl::ZeroDuration());
    CHECK(absl::IsDeadlineExceeded(still.status()));
  }
  // The grandchild was killed with the group. It is re-parented to init (or a subreaper), which
  // reaps it; until then it may linger as a zombie, which kill(pid, 0) still finds. Wait for it.
  bool gone = false;
  for (int i = 0; i < 3000 && !gone; ++i) {
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/stat", grandchild);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) {
      gone = true;
      break;
    }
    char state = '?';
    int ignored_pid;
    char comm[256];
    if (std::fscanf(f, "%d %255s %c", &ignored_pid, comm, &state) == 3 && state == 'Z') gone = true;
    std::fclose(f);
    if (!gone) ::usleep(10000);
  }
  CHECK(gone);
}

TEST_CASE("ChildProcess: SIGTERM and Wait with a deadline") {
  auto child = ChildProcess::Start(Command({"/bin/sh", "-c", "echo ready; exec sleep 1000"}));
  REQUIRE(child.ok());
  REQUIRE((*child)->WaitForLine("ready", absl::Seconds(30)).ok());
  (*child)->Signal(SIGTERM);
  auto status = (*child)->Wait(absl::Seconds(30));
  REQUIRE(status.ok());
  CHECK(DescribeWaitStatus(*status) == "signal 15");
}

}  // namespace
}  // namespace sluice::local
