#include "local/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::local {
namespace {

int OpenPidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// Writes all of `data` (best effort; used for the log file and the echo).
void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

ChildProcess::ChildProcess(std::string name, ChildProcessOptions options)
    : name_(std::move(name)), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(ChildProcessOptions options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("ChildProcessOptions.argv: give at least the program's path");
  }
  std::string name = options.argv[0].substr(options.argv[0].find_last_of('/') + 1);
  std::unique_ptr<ChildProcess> child(new ChildProcess(name, std::move(options)));
  const ChildProcessOptions& opts = child->options_;
  if (!opts.log_file.empty()) {
    child->log_fd_ = ::open(opts.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (child->log_fd_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ChildProcessOptions.log_file '", opts.log_file, "': cannot open (", strerror(errno), ")"));
    }
  }

  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<char*> argv;
  std::vector<std::string> args = opts.argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const char* cwd = opts.working_dir.empty() ? nullptr : opts.working_dir.c_str();

  // out: the child's stdout+stderr; err: exec's errno if it fails; gate: the child waits on it
  // before exec until before_exec has run (only when there is one).
  int out[2] = {-1, -1}, err[2] = {-1, -1}, gate[2] = {-1, -1};
  const bool gated = static_cast<bool>(opts.before_exec);
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1], gate[0], gate[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || (gated && ::pipe2(gate, O_CLOEXEC) != 0)) {
    const int e = errno;
    close_all();
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(e)));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    if (null_fd >= 0) ::close(null_fd);
    return absl::InternalError(absl::StrCat("fork: ", strerror(e)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the parent may block signals it sigwaits for
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    if (gated) {
      ::close(gate[1]);
      char go = 0;
      ssize_t r;
      do {
        r = ::read(gate[0], &go, 1);
      } while (r < 0 && errno == EINTR);
      if (r != 1) ::_exit(127);  // the parent gave up on us (before_exec failed)
    }
    int code = 0;
    if (cwd != nullptr && ::chdir(cwd) != 0) {
      code = errno;
    } else {
      ::execv(argv[0], argv.data());
      code = errno;
    }
    ssize_t ignored = ::write(err[1], &code, sizeof(code));
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: the group exists before Start returns, whoever runs first
  if (null_fd >= 0) ::close(null_fd);
  ::close(out[1]);
  ::close(err[1]);
  child->pid_ = pid;
  child->pidfd_ = OpenPidfd(pid);
  if (gated) {
    ::close(gate[0]);
    absl::Status prepared = opts.before_exec(pid);
    if (prepared.ok()) {
      const char go = 1;
      ssize_t w;
      do {
        w = ::write(gate[1], &go, 1);
      } while (w < 0 && errno == EINTR);
    }
    ::close(gate[1]);  // without the byte, the child exits at once
    if (!prepared.ok()) {
      ::close(out[0]);
      ::close(err[0]);
      child->KillGroup();
      return absl::Status(prepared.code(), absl::StrCat("preparing ", opts.argv[0], " (pid ", pid,
                                                        ") before exec: ", prepared.message()));
    }
  }
  int code = 0;
  ssize_t n;
  do {
    n = ::read(err[0], &code, sizeof(code));
  } while (n < 0 && errno == EINTR);
  ::close(err[0]);
  if (n == static_cast<ssize_t>(sizeof(code))) {
    ::close(out[0]);
    child->KillGroup();
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", opts.argv[0],
                                                      cwd != nullptr ? absl::StrCat(" in ", cwd) : std::string(),
                                                      ": ", strerror(code)));
  }
  child->reader_ = std::thread([c = child.get(), fd = out[0]] { c->ReadLoop(fd); });
  return child;
}

ChildProcess::~ChildProcess() {
  KillGroup();
  if (reader_.joinable()) reader_.join();
  if (pidfd_ >= 0) ::close(pidfd_);
  if (log_fd_ >= 0) ::close(log_fd_);
}

void ChildProcess::AddLine(std::string line) {
  if (log_fd_ >= 0) WriteAll(log_fd_, line + "\n");
  if (!options_.echo_prefix.empty()) WriteAll(STDERR_FILENO, absl::StrCat(options_.echo_prefix, line, "\n"));
  lines_.push_back(std::move(line));
  while (lines_.size() > std::max<size_t>(1, options_.max_lines)) lines_.pop_front();
}

void ChildProcess::ReadLoop(int fd) {
  char buf[8192];
  std::string partial;
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    absl::MutexLock lock(&mu_);
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      AddLine(partial.substr(start, nl - start));
      start = nl + 1;
    }
    partial.erase(0, start);
  }
  ::close(fd);
  absl::MutexLock lock(&mu_);
  if (!partial.empty()) AddLine(std::move(partial));
  output_ended_ = true;
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(absl::string_view text, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto find = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> const std::string* {
    for (const auto& line : lines_) {
      if (absl::StrContains(line, text)) return &line;
    }
    return nullptr;
  };
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return output_ended_ || find() != nullptr; };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  if (const std::string* line = find()) return *line;
  if (output_ended_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, " (pid ", pid_, ") ended its output without a line containing '", text, "'"));
  }
  return absl::DeadlineExceededError(absl::StrCat(name_, " (pid ", pid_, ") printed no line containing '", text,
                                                  "' within ", absl::FormatDuration(timeout)));
}

int ChildProcess::CountLines(absl::string_view text) const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(
      std::count_if(lines_.begin(), lines_.end(), [&](const std::string& l) { return absl::StrContains(l, text); }));
}

std::string ChildProcess::Output() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& l : lines_) absl::StrAppend(&out, l, "\n");
  return out;
}

void ChildProcess::Signal(int signal) {
  absl::MutexLock lock(&reap_mu_);
  if (!reaped_ && pid_ > 0) ::kill(pid_, signal);
}

void ChildProcess::KillGroup() {
  {
    absl::MutexLock lock(&reap_mu_);
    if (reaped_ || pid_ <= 0) return;
    // The group id is the child's pid, which cannot be reused before the child is reaped.
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
  }
  ReapWithin(absl::InfiniteDuration());
}

bool ChildProcess::ReapWithin(absl::Duration timeout) {
  absl::MutexLock lock(&reap_mu_);
  if (reaped_) return true;
  if (pid_ <= 0) return false;
  if (pidfd_ >= 0 && timeout > absl::ZeroDuration()) {
    const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      pollfd p{pidfd_, POLLIN, 0};
      const int ms = left == absl::InfiniteDuration()
                         ? -1
                         : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
      const int r = ::poll(&p, 1, ms);
      if (r > 0 || (r < 0 && errno != EINTR)) break;
    }
  }
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, (timeout == absl::InfiniteDuration() && pidfd_ < 0) ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    reaped_ = true;
    wait_status_ = status;
    return true;
  }
  if (r < 0 && errno == ECHILD) {  // reaped elsewhere (should not happen): treat as gone
    reaped_ = true;
    wait_status_ = 0;
    return true;
  }
  return false;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  if (!ReapWithin(timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat(name_, " (pid ", pid_, ") still runs after ", absl::FormatDuration(timeout)));
  }
  {
    // The process is gone, but its last output may still be in the pipe: let the reader reach the
    // end (bounded: a grandchild that inherited the pipe can keep it open).
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return output_ended_; };
    mu_.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(2));
  }
  absl::MutexLock lock(&reap_mu_);
  return wait_status_;
}

bool ChildProcess::Exited() { return ReapWithin(absl::ZeroDuration()); }

std::optional<int> ChildProcess::ExitStatus() const {
  absl::MutexLock lock(&reap_mu_);
  if (!reaped_) return std::nullopt;
  return wait_status_;
}

std::optional<std::string> LogfmtField(absl::string_view line, absl::string_view key) {
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    size_t eq = line.find('=', pos);
    if (eq == absl::string_view::npos) return std::nullopt;
    const absl::string_view k = line.substr(pos, eq - pos);
    size_t v = eq + 1;
    std::string value;
    if (v < line.size() && line[v] == '"') {
      ++v;
      while (v < line.size() && line[v] != '"') {
        if (line[v] == '\\' && v + 1 < line.size()) ++v;
        value.push_back(line[v++]);
      }
      ++v;  // closing quote
    } else {
      const size_t end = std::min(line.find(' ', v), line.size());
      value = std::string(line.substr(v, end - v));
      v = end;
    }
    if (k == key) return value;
    pos = v;
  }
  return std::nullopt;
}

absl::StatusOr<int64_t> LogfmtInt(absl::string_view line, absl::string_view key) {
  std::optional<std::string> text = LogfmtField(line, key);
  if (!text) return absl::NotFoundError(absl::StrCat("no ", key, "= in the log line: ", line));
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(key, "=", *text, " is not an integer in the log line: ", line));
  }
  return value;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("status ", status);
}

struct ProcessSpawner::Request {
  ChildProcessOptions options;
  std::optional<absl::StatusOr<std::unique_ptr<ChildProcess>>> result;  // set by the spawner thread
};

ProcessSpawner::ProcessSpawner() : thread_([this] { Loop(); }) {}

ProcessSpawner::~ProcessSpawner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ProcessSpawner::Start(ChildProcessOptions options) {
  Request request{std::move(options), std::nullopt};
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("the process spawner is stopping");
  queue_.push_back(&request);
  auto done = [&request]() { return request.result.has_value(); };
  mu_.Await(absl::Condition(&done));
  return *std::move(request.result);
}

void ProcessSpawner::Loop() {
  while (true) {
    Request* request = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and nobody waits
      request = queue_.front();
      queue_.pop_front();
    }
    // Forks outside the lock: callers may queue meanwhile.
    absl::StatusOr<std::unique_ptr<ChildProcess>> started = ChildProcess::Start(std::move(request->options));
    absl::MutexLock lock(&mu_);
    request->result = std::move(started);
  }
}

}  // namespace sluice::local
