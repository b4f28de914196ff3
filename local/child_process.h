// ChildProcess: runs a program as a child in its own process group with its stdout and stderr
// captured line by line (kept in memory, bounded, and optionally appended to a log file; stdin is
// /dev/null), so the local supervisor (local_dataservice.h), `sluice up`, the benchmarks and the
// multi-process tests can start real sluice-dispatcher / sluice-worker processes, wait for their
// "listening" line, signal them and never leave one behind:
//  - the child gets PR_SET_PDEATHSIG=SIGKILL, so it dies with the thread that started it;
//  - the destructor SIGKILLs the child's whole process group and reaps the child;
//  - `before_exec` runs in the parent while the child waits just before exec (e.g. to put it in a
//    cgroup), so the program never runs a single instruction outside its limits.
// Exit is observed through a pidfd (poll with a deadline; no sleeping loops).
//
// Threading: all ChildProcess methods are thread-safe. One reader thread per child drains the
// output pipe; it is joined by the destructor. PDEATHSIG follows the thread that forked, so start
// children from a thread that lives as long as they should: the main thread, or a ProcessSpawner
// (below), whose own long-lived thread forks on behalf of any caller.
#ifndef SLUICE_LOCAL_CHILD_PROCESS_H_
#define SLUICE_LOCAL_CHILD_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::local {

struct ChildProcessOptions {
  std::vector<std::string> argv;  // argv[0]: the program's path (no PATH search)
  std::string working_dir;        // empty: the parent's
  std::string log_file;           // non-empty: every output line is appended here too
  std::string echo_prefix;        // non-empty: every output line is also written to stderr after this prefix
  size_t max_lines = 20000;       // output lines kept in memory (the oldest are dropped)
  // Runs in the parent with the child's pid while the child waits before exec; an error kills the
  // child and is returned by Start.
  std::function<absl::Status(pid_t)> before_exec;
};

class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(ChildProcessOptions options);
  // SIGKILLs the process group (if the child still runs), reaps the child, joins the reader.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // The first kept output line containing `text`. DeadlineExceeded after `timeout`;
  // FailedPrecondition when the output ended (the process exited) without such a line.
  absl::StatusOr<std::string> WaitForLine(absl::string_view text, absl::Duration timeout);
  // Number of kept output lines containing `text`.
  int CountLines(absl::string_view text) const;
  // The kept output, one line per line.
  std::string Output() const;

  // Sends `signal` to the child (not its group). No-op once it was reaped.
  void Signal(int signal);
  // SIGKILL to the whole process group, then reaps the child. Idempotent.
  void KillGroup();
  // Waits for the child to exit and reaps it; returns its wait status (see waitpid). Output()
  // then holds everything it wrote (waits up to 2 s more for the pipe's end). DeadlineExceeded if
  // it is still running after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // True once the child exited (reaps it if it did).
  bool Exited();
  // Its wait status once reaped (by Exited, Wait or KillGroup); never blocks.
  std::optional<int> ExitStatus() const;

 private:
  ChildProcess(std::string name, ChildProcessOptions options);
  void ReadLoop(int fd);
  void AddLine(std::string line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reaps the child if it exited within `timeout` (zero: just checks).
  bool ReapWithin(absl::Duration timeout);

  const std::string name_;
  const ChildProcessOptions options_;
  pid_t pid_ = -1;
  int pidfd_ = -1;

  mutable absl::Mutex reap_mu_;  // serialises waitpid
  bool reaped_ ABSL_GUARDED_BY(reap_mu_) = false;
  int wait_status_ ABSL_GUARDED_BY(reap_mu_) = 0;

  mutable absl::Mutex mu_;
  std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool output_ended_ ABSL_GUARDED_BY(mu_) = false;
  int log_fd_ = -1;
  std::thread reader_;
};

// Runs ChildProcess::Start on a thread of its own that lives as long as this object, so that the
// children do not die (PDEATHSIG) when the thread that asked for them ends. Destroying the spawner
// ends that thread: children it started that still run then get SIGKILL from the kernel.
// Thread-safe: Start may be called from any thread; calls are served one at a time.
class ProcessSpawner {
 public:
  ProcessSpawner();
  ~ProcessSpawner();
  ProcessSpawner(const ProcessSpawner&) = delete;
  ProcessSpawner& operator=(const ProcessSpawner&) = delete;

  // ChildProcess::Start(options), forked on the spawner's thread (before_exec runs there too).
  absl::StatusOr<std::unique_ptr<ChildProcess>> Start(ChildProcessOptions options);

 private:
  struct Request;
  void Loop();

  absl::Mutex mu_;
  std::deque<Request*> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The value of `key` in a logfmt line (key=value or key="quoted value"), if present.
std::optional<std::string> LogfmtField(absl::string_view line, absl::string_view key);
// The integer value of `key` in a logfmt line. NotFound without the key; InvalidArgument (naming
// the key, the value and the line) when it is not an integer.
absl::StatusOr<int64_t> LogfmtInt(absl::string_view line, absl::string_view key);

// Human-readable description of a waitpid status ("exit 0", "signal 9").
std::string DescribeWaitStatus(int status);

}  // namespace sluice::local

#endif  // SLUICE_LOCAL_CHILD_PROCESS_H_
