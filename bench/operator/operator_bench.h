// `sluice bench operator`: the DataService operator at scale, without a cluster.
//
// Starts the test API server (e2e/apiserver) and simulated process nodes (e2e/processnode
// --simulated --schedule: pods are bound and marked Running and Ready without running anything, as
// kwok does), installs the CRD, creates N DataServices with W workers each, then starts the real
// sluice-operator binary and measures:
//   seconds_to_ready  from the operator's start until every DataService reports Ready=True
//   API requests      the operator made (the server counts them by User-Agent), per verb and resource
//   writes_per_pod    the operator's writes (create, update, patch, delete) per pod it created
//   peak_rss_mib, cpu_seconds of the operator process (VmHWM, utime+stime when all are Ready)
// Prints progress lines, then one JSON object as the last line (see docs/benchmarks.md).
//
// Single-threaded driver; every child process (server, nodes, operator) is in its own process
// group, killed on the way out and with the driver (PR_SET_PDEATHSIG).
#ifndef SLUICE_BENCH_OPERATOR_OPERATOR_BENCH_H_
#define SLUICE_BENCH_OPERATOR_OPERATOR_BENCH_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct OperatorBenchOptions {
  int dataservices = 1000;
  int workers = 8;                 // workers per DataService
  int nodes = 4;                   // simulated process nodes
  int concurrency = 4;             // the operator's --concurrency
  double kube_qps = 0;             // the operator's --kube-qps (0: no client-side limit)
  double timeout_seconds = 900;    // give up if not all Ready by then
  std::string operator_binary;     // "" = the build's sluice-operator
  std::string source_dir;          // repository root (e2e/, crds/); "" = $SLUICE_SOURCE_DIR, else the build's
  std::string python = "/usr/bin/python3";
  std::string work_dir;            // "" = a temporary directory, removed afterwards
  bool quiet = false;              // no progress lines
};

// Registers --dataservices, --workers, --nodes, --concurrency, --kube-qps, --timeout, --operator,
// --source-dir, --python, --work-dir on `app`.
void AddOperatorBenchFlags(CLI::App* app, OperatorBenchOptions& options);

struct OperatorBenchResult {
  int dataservices = 0;
  int workers = 0;
  int nodes = 0;
  double seconds_to_ready = 0;
  int64_t pods_created = 0;
  int64_t requests = 0;                            // every request of the operator
  int64_t writes = 0;                              // create + update + patch + delete
  int64_t failed_requests = 0;                     // answered with a status >= 400
  std::map<std::string, int64_t> verbs;            // "get": n, "patch": n, ...
  std::map<std::string, int64_t> by_resource;      // "create pods": n, "patch dataservices/status": n, ...
  double writes_per_pod = 0;
  double peak_rss_mib = 0;
  double cpu_seconds = 0;
  std::string machine;                             // CPU model
  int cores = 0;
};

// Runs the whole measurement; `progress` (may be null) gets one line per step and per second.
absl::StatusOr<OperatorBenchResult> MeasureOperator(const OperatorBenchOptions& options, std::ostream* progress);

// The final JSON line (no trailing newline).
std::string OperatorResultJson(const OperatorBenchResult& result);

// Runs the benchmark, prints progress and the JSON line; returns the process exit code.
int RunOperatorBenchmark(const OperatorBenchOptions& options);

// --- pure helpers (exposed for tests) ------------------------------------------------------------

// Fills the request counts of `result` from the test API server's GET /_admin/stats answer for the
// client `agent` (its User-Agent product); errors name what is missing.
absl::Status FillRequestCounts(const std::string& stats_json, const std::string& agent, OperatorBenchResult* result);
// Kibibytes of "VmHWM:" (or another key) in /proc/<pid>/status text; -1 if absent.
int64_t ProcStatusKib(const std::string& status_text, const std::string& key);
// utime + stime in clock ticks from /proc/<pid>/stat text; -1 if malformed.
int64_t ProcStatCpuTicks(const std::string& stat_text);

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_OPERATOR_OPERATOR_BENCH_H_
