// LocalDataService: a data service made of real processes on this machine — one sluice-dispatcher
// and any number of sluice-worker children (ChildProcess), on 127.0.0.1 with ports picked by the
// kernel (port 0; the ports are read from each process's "listening" log line). Used by the
// multi-process tests (e2e_dataplane/) and by `sluice up`.
//
// It can kill -9 and restart the dispatcher (same port, same journal), add workers at any time,
// SIGTERM or kill -9 single workers, read GetState over gRPC and scrape every process's /metrics.
// The destructor SIGKILLs every child's process group; StopGracefully() SIGTERMs them first.
//
// Threading: not thread-safe; one owner thread calls every method (it must be a long-lived thread:
// the children die with the thread that started them, see child_process.h). GetState and the
// scrape helpers only read immutable ports and may be called from other threads too.
#ifndef SLUICE_E2E_DATAPLANE_LOCAL_DATASERVICE_H_
#define SLUICE_E2E_DATAPLANE_LOCAL_DATASERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataservice.pb.h"
#include "dataplane/rpc/credentials.h"
#include "e2e_dataplane/child_process.h"
#include "common/http_get.h"
#include "common/prometheus_text.h"

namespace sluice::local {

// The metrics helpers under the names the multi-process tests use.
using promtext::CountSamples;
using promtext::MetricSample;
using promtext::ParsePrometheusText;
using promtext::SumSamples;
using sluice::HttpGet;
using sluice::HttpResponse;
using sluice::ScrapeMetrics;

struct LocalDataServiceOptions {
  std::string bin_dir;                    // holds sluice-dispatcher and sluice-worker
  std::string listen_host = "127.0.0.1";
  std::string journal_dir;                // empty: the dispatcher keeps its state in memory only
  std::string dispatcher_working_dir;     // empty: the parent's
  int64_t worker_timeout_ms = 5000;       // dispatcher: a worker silent this long is removed
  int64_t heartbeat_interval_ms = 500;    // workers' heartbeat interval (also told by the dispatcher)
  std::string dataservice;                // metrics label
  std::vector<std::string> dispatcher_flags;  // extra flags for the dispatcher
  std::vector<std::string> worker_flags;      // extra flags for every worker
  std::string log_dir;                    // non-empty: each process's output goes to <log_dir>/<name>.log too
  bool echo_logs = false;                 // also copy every process's output to stderr
  absl::Duration start_timeout = absl::Seconds(30);  // for each process's "listening" line
  rpc::TlsOptions client_tls;             // how GetState reaches a dispatcher started with TLS flags
};

// One started process and what its "listening" line said.
struct ServiceProcess {
  std::string name;                       // "dispatcher", "worker-0", ...
  std::unique_ptr<ChildProcess> process;  // null once removed
  int port = 0;                           // gRPC
  int metrics_port = -1;                  // admin server (/metrics, /healthz, /readyz)
  std::string address;                    // host:port of the gRPC server (a worker's identity)
};

class LocalDataService {
 public:
  explicit LocalDataService(LocalDataServiceOptions options);
  ~LocalDataService();
  LocalDataService(const LocalDataService&) = delete;
  LocalDataService& operator=(const LocalDataService&) = delete;

  // Starts the dispatcher; the first start picks a port, later starts (after KillDispatcher or
  // StopDispatcher) reuse it so workers and clients find the restarted dispatcher.
  absl::Status StartDispatcher();
  // Starts a worker (extra flags after the common ones; working_dir empty: the parent's) and waits
  // for its "listening" line. Returns its index.
  absl::StatusOr<int> AddWorker(const std::vector<std::string>& extra_flags = {}, const std::string& working_dir = "");

  const std::string& dispatcher_address() const { return dispatcher_.address; }
  ServiceProcess& dispatcher() { return dispatcher_; }
  ServiceProcess& worker(int index) { return workers_.at(static_cast<size_t>(index)); }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  // kill -9 of the dispatcher (it can be started again).
  void KillDispatcher();
  // kill -9 of a worker.
  void KillWorker(int index);
  // SIGTERM to every worker, then the dispatcher; waits up to `timeout` for each, then SIGKILLs
  // what is left. Errors name the processes that had to be killed or exited with a failure.
  absl::Status StopGracefully(absl::Duration timeout = absl::Seconds(5));

  // The dispatcher's GetState over gRPC.
  absl::StatusOr<service::GetStateResponse> GetState(absl::Duration timeout = absl::Seconds(10)) const;
  // Waits until GetState lists exactly `n` workers (none draining). Polls GetState.
  absl::Status WaitForWorkers(int n, absl::Duration timeout);

  absl::StatusOr<std::vector<MetricSample>> ScrapeDispatcher() const;
  absl::StatusOr<std::vector<MetricSample>> ScrapeWorker(int index) const;

  // Every process's recent output, for test failure messages.
  std::string Logs() const;

 private:
  absl::StatusOr<ServiceProcess> Launch(const std::string& name, const std::string& binary,
                                        std::vector<std::string> flags, const std::string& working_dir);

  const LocalDataServiceOptions options_;
  ServiceProcess dispatcher_;
  int dispatcher_port_ = 0;  // fixed after the first start
  std::vector<ServiceProcess> workers_;
  std::vector<std::unique_ptr<ChildProcess>> retired_;  // previous dispatcher processes (their logs)
};

// The directory of the running executable (for finding sibling binaries).
std::string ExecutableDir();

}  // namespace sluice::local

#endif  // SLUICE_E2E_DATAPLANE_LOCAL_DATASERVICE_H_
