// ChildProcess (output capture, exit status, exec failures, process-group kill, the before-exec
// gate), ProcessSpawner (children outlive the thread that asked for them) and the logfmt helpers,
// with /bin/sh children.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <fstream>
#include <thread>

#include "local/child_process.h"
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

TEST_CASE("LogfmtInt reads integers and says what is wrong otherwise") {
  CHECK(LogfmtInt("msg=listening port=12 metrics_port=-1", "metrics_port").value() == -1);
  CHECK(LogfmtInt("msg=listening port=12", "port").value() == 12);
  CHECK(absl::IsNotFound(LogfmtInt("msg=listening", "port").status()));
  auto bad = LogfmtInt("msg=listening port=abc", "port");
  REQUIRE(!bad.ok());
  CHECK(absl::IsInvalidArgument(bad.status()));
  CHECK(absl::StrContains(bad.status().message(), "port=abc is not an integer"));
  // "port" does not match inside "metrics_port".
  CHECK(absl::IsNotFound(LogfmtInt("msg=x metrics_port=5", "port").status()));
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

TEST_CASE("ChildProcess: before_exec runs before the program, and its error kills the child") {
  sluice::testing::TempDir tmp;
  const std::string marker = tmp.File("marker");
  ChildProcessOptions options = Command({"/bin/cat", marker});
  pid_t seen = 0;
  options.before_exec = [&](pid_t pid) {
    seen = pid;
    std::ofstream(marker) << "written before exec\n";  // cat can only print it if it ran after this
    return absl::OkStatus();
  };
  auto child = ChildProcess::Start(options);
  REQUIRE(child.ok());
  CHECK(seen == (*child)->pid());
  auto status = (*child)->Wait(absl::Seconds(30));
  REQUIRE(status.ok());
  CHECK(DescribeWaitStatus(*status) == "exit 0");
  CHECK((*child)->Output() == "written before exec\n");
  CHECK((*child)->ExitStatus() == *status);

  ChildProcessOptions failing = Command({"/bin/sh", "-c", "echo ran"});
  pid_t doomed = 0;
  failing.before_exec = [&](pid_t pid) {
    doomed = pid;
    return absl::PermissionDeniedError("no cgroup for you");
  };
  auto refused = ChildProcess::Start(failing);
  REQUIRE(!refused.ok());
  CHECK(absl::IsPermissionDenied(refused.status()));
  CHECK(absl::StrContains(refused.status().message(), "no cgroup for you"));
  CHECK(absl::StrContains(refused.status().message(), "before exec"));
  REQUIRE(doomed > 0);
  CHECK(::kill(doomed, 0) != 0);  // killed and reaped: gone
}

TEST_CASE("ChildProcess: stdin is /dev/null") {
  auto child = ChildProcess::Start(Command({"/bin/sh", "-c", "if read line; then echo got; else echo eof; fi"}));
  REQUIRE(child.ok());
  REQUIRE((*child)->Wait(absl::Seconds(30)).ok());
  CHECK((*child)->Output() == "eof\n");
}

TEST_CASE("A child started from a thread that ends dies with it (PDEATHSIG), one from a ProcessSpawner lives on") {
  auto start_from_short_lived_thread = [](const std::function<absl::StatusOr<std::unique_ptr<ChildProcess>>()>& start) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child;
    std::thread t([&] { child = start(); });
    t.join();
    return child;
  };
  // Direct start: the forking thread is gone, so the kernel kills the child (SIGKILL).
  auto direct = start_from_short_lived_thread([] { return ChildProcess::Start(Command({"/bin/sh", "-c", "exec sleep 1000"})); });
  REQUIRE(direct.ok());
  auto direct_status = (*direct)->Wait(absl::Seconds(30));
  REQUIRE(direct_status.ok());
  CHECK(DescribeWaitStatus(*direct_status) == "signal 9");

  // Through a spawner: its own thread forked, and it is alive; the child ends only when we say so.
  ProcessSpawner spawner;
  auto spawned = start_from_short_lived_thread(
      [&] { return spawner.Start(Command({"/bin/sh", "-c", "echo up; exec sleep 1000"})); });
  REQUIRE(spawned.ok());
  REQUIRE((*spawned)->WaitForLine("up", absl::Seconds(30)).ok());
  (*spawned)->Signal(SIGTERM);
  auto spawned_status = (*spawned)->Wait(absl::Seconds(30));
  REQUIRE(spawned_status.ok());
  CHECK(DescribeWaitStatus(*spawned_status) == "signal 15");  // not 9: no PDEATHSIG came first
}

TEST_CASE("ProcessSpawner serves many threads at once") {
  ProcessSpawner spawner;
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto child = spawner.Start(Command({"/bin/sh", "-c", "echo child-$0", std::to_string(i)}));
      if (!child.ok()) return;
      if ((*child)->Wait(absl::Seconds(30)).ok()) outputs[static_cast<size_t>(i)] = (*child)->Output();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) CHECK(outputs[static_cast<size_t>(i)] == absl::StrCat("child-", i, "\n"));
  auto missing = spawner.Start(Command({"/nonexistent/binary"}));
  CHECK(!missing.ok());
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
