// A child process for the data-service benchmarks (sluice-dispatcher, sluice-worker, the raw gRPC
// server): started with fork+exec, its stdout and stderr appended to a log file, killed (SIGKILL)
// by the kernel if the benchmark dies (PR_SET_PDEATHSIG), and stopped with SIGTERM, then SIGKILL
// after a grace period, when the object is destroyed.
//
// Threading: one owner thread. Start it from a thread that lives as long as the child (the death
// signal follows the thread that forked). The log helpers only read the file.
#ifndef SLUICE_BENCH_DATASERVICE_BENCH_PROCESS_H_
#define SLUICE_BENCH_DATASERVICE_BENCH_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::bench {

class BenchProcess {
 public:
  // argv[0] is the binary's path. `log_file` is created or truncated.
  static absl::StatusOr<std::unique_ptr<BenchProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::string& log_file);
  ~BenchProcess();
  BenchProcess(const BenchProcess&) = delete;
  BenchProcess& operator=(const BenchProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& log_file() const { return log_file_; }

  // The first log line containing `needle`, waiting for it until `timeout`. Fails early, with the
  // log's tail, when the process exits first.
  absl::StatusOr<std::string> WaitForLogLine(absl::string_view needle, absl::Duration timeout);
  // SIGTERM, then SIGKILL if it has not exited within `grace`. Returns the wait status (or -1 when
  // the process was already reaped). Idempotent.
  int Stop(absl::Duration grace = absl::Seconds(3));
  bool Exited();
  std::string LogTail(size_t max_bytes = 2000) const;

 private:
  BenchProcess(pid_t pid, std::string name, std::string log_file)
      : pid_(pid), name_(std::move(name)), log_file_(std::move(log_file)) {}
  pid_t pid_;
  std::string name_;
  std::string log_file_;
  bool reaped_ = false;
  int wait_status_ = -1;
};

// The integer after " key=" in a logfmt line, e.g. IntFromLogLine("msg=listening port=4242", "port").
absl::StatusOr<int> IntFromLogLine(absl::string_view line, absl::string_view key);

// The directory holding the running executable (where the build puts sluice-worker and friends).
std::string ExecutableDir();

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_DATASERVICE_BENCH_PROCESS_H_
