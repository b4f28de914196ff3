#include "bench/dataservice/bench_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::bench {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<BenchProcess>> BenchProcess::Start(const std::vector<std::string>& argv,
                                                                   const std::string& log_file) {
  if (argv.empty()) return absl::InvalidArgumentError("BenchProcess: argv is empty");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(argv[0], " is not an executable file (", std::strerror(errno),
                                            "); build it first, or point --bin_dir at the directory holding it"));
  }
  const int log_fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot create log file ", log_file, ": ", std::strerror(errno)));
  // Everything the child needs is prepared before fork: after it only async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  return std::unique_ptr<BenchProcess>(
      new BenchProcess(pid, std::filesystem::path(argv[0]).filename().string(), log_file));
}

BenchProcess::~BenchProcess() { Stop(); }

bool BenchProcess::Exited() {
  if (reaped_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    reaped_ = true;
    wait_status_ = status;
  }
  return reaped_;
}

int BenchProcess::Stop(absl::Duration grace) {
  if (Exited()) return wait_status_;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (!Exited() && absl::Now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!Exited()) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    wait_status_ = status;
  }
  return wait_status_;
}

std::string BenchProcess::LogTail(size_t max_bytes) const {
  std::string text = ReadWholeFile(log_file_);
  if (text.size() > max_bytes) text = text.substr(text.size() - max_bytes);
  return text;
}

absl::StatusOr<std::string> BenchProcess::WaitForLogLine(absl::string_view needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    // Checked before reading the log, so a line written just before the exit is still seen.
    const bool exited = Exited();
    std::istringstream lines(ReadWholeFile(log_file_));
    for (std::string line; std::getline(lines, line);) {
      if (line.find(needle.data(), 0, needle.size()) != std::string::npos) return line;
    }
    if (exited) {
      return absl::UnavailableError(absl::StrCat(name_, " exited (wait status ", wait_status_, ") before logging '",
                                                 needle, "'; its log ", log_file_, " ends with:\n", LogTail()));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(name_, " did not log '", needle, "' within ",
                                                      absl::FormatDuration(timeout), "; its log ", log_file_,
                                                      " ends with:\n", LogTail()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::StatusOr<int> IntFromLogLine(absl::string_view line, absl::string_view key) {
  const std::string marker = absl::StrCat(" ", key, "=");
  const size_t at = line.find(marker);
  if (at == absl::string_view::npos) {
    return absl::NotFoundError(absl::StrCat("no '", key, "=' in log line: ", line));
  }
  absl::string_view rest = line.substr(at + marker.size());
  rest = rest.substr(0, rest.find(' '));
  int value = 0;
  if (!absl::SimpleAtoi(rest, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", key, "=", rest, "' is not an integer in log line: ", line));
  }
  return value;
}

std::string ExecutableDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return exe.parent_path().string();
}

}  // namespace sluice::bench
