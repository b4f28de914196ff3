// LocalDataService: the local process supervisor — a data service made of real processes on this
// machine: one sluice-dispatcher and any number of sluice-worker children (ChildProcess), on a
// loopback address with ports picked by the kernel (port 0; each process's ports are read from its
// "listening" log line). Shared by `sluice up`, the benchmarks (bench/), the multi-process tests
// (e2e_dataplane/) and the autoscaler's local actuator.
//
// It starts, SIGTERMs (graceful stop), kill -9s and restarts the dispatcher (same port, same
// journal) and workers (same name, port and flags); adds workers at any time, optionally each under
// a CPU quota (cpu_quota.h: cgroup v2, else v1, else one pinned CPU, with notes saying why);
// drains chosen workers through the dispatcher (DrainWorkers) and stops them once drained
// (DrainAndStopWorkers, worker_drain.h); reads GetState over gRPC; scrapes every process's
// /metrics; and keeps every process's output for logs and error messages. The destructor SIGKILLs
// every child's process group; StopGracefully() SIGTERMs them first.
//
// Workers have stable indices (0, 1, ... in the order they were added; a stopped worker keeps its
// index, a restarted one too) and names ("worker-<index>"). ListWorkers() is the view for callers
// on other threads; num_workers()/worker(i) suit single-threaded callers (tests, benchmarks).
//
// Threading: every method is thread-safe, e.g. an autoscaler's controller thread may add, drain
// and stop workers while a UI thread calls ListWorkers(). Process starts go through the
// supervisor's own long-lived spawner thread (ProcessSpawner), so children live as long as the
// supervisor whichever thread asked for them (PDEATHSIG follows the forking thread). No lock is
// held across an RPC, a scrape, a process start or a wait: two threads may start workers at once.
// Operations on the same worker from two threads are refused rather than interleaved
// (FailedPrecondition: "worker-3 is being stopped"). References returned by dispatcher() and
// worker(i) stay valid for the supervisor's lifetime; they describe one run of the process.
#ifndef SLUICE_LOCAL_LOCAL_DATASERVICE_H_
#define SLUICE_LOCAL_LOCAL_DATASERVICE_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_get.h"
#include "common/prometheus_text.h"
#include "dataplane/rpc/credentials.h"
#include "dataservice.pb.h"
#include "local/child_process.h"
#include "local/cpu_quota.h"
#include "local/worker_drain.h"

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
  int64_t worker_timeout_ms = 5000;       // dispatcher: a worker silent this long is removed (<= 0: its default)
  int64_t heartbeat_interval_ms = 500;    // workers' heartbeat interval (also told by the dispatcher)
  std::string dataservice;                // metrics label
  std::vector<std::string> dispatcher_flags;  // extra flags for the dispatcher
  std::vector<std::string> worker_flags;      // extra flags for every worker
  std::string log_dir;                    // non-empty: each process's output goes to <log_dir>/<name>.log too
  bool echo_logs = false;                 // also copy every process's output to stderr
  absl::Duration start_timeout = absl::Seconds(30);  // for each process's "listening" line
  rpc::TlsOptions client_tls;             // how GetState reaches a dispatcher started with TLS flags
  bool admin_servers = true;              // --metrics_port=0 (/metrics, /healthz, /readyz); false: -1 (none)
  // Where workers send heartbeats and GetSplits; empty: the dispatcher (a benchmark may put a
  // proxy in between, see set_worker_dispatcher_address).
  std::string worker_dispatcher_address;
  // CPU limit of each worker, in CPUs (0.25 = a quarter of one); 0: none. WorkerOptions::cpus
  // overrides it per worker.
  double worker_cpus = 0;
  bool cpu_quota_cgroups = true;          // false: use the taskset fallback even where cgroups work
  std::string cpu_quota_group;            // cgroup name; empty: "sluice-local-<pid>-<n>"
  // Graceful stops: how long a SIGTERMed process may take before it is SIGKILLed (an error).
  absl::Duration stop_timeout = absl::Seconds(10);
};

// How to start one worker.
struct WorkerOptions {
  std::vector<std::string> extra_flags;   // after the common ones
  std::string working_dir;                // empty: the parent's
  std::optional<double> cpus;             // CPU limit; nullopt: LocalDataServiceOptions::worker_cpus; 0: none
  bool wait_until_registered = false;     // also wait for its "registered with the dispatcher" line
};

// One run of a process and what its "listening" line said. Immutable once returned.
struct ServiceProcess {
  std::string name;                       // "dispatcher", "worker-0", ...
  std::unique_ptr<ChildProcess> process;  // never null once returned
  int port = 0;                           // gRPC
  int metrics_port = -1;                  // admin server (/metrics, /healthz, /readyz); -1: none
  std::string address;                    // host:port of the gRPC server (a worker's identity)
};

// What the supervisor did with a worker (the process may also have exited on its own: see exited).
enum class WorkerState {
  kRunning,   // started, not asked to stop
  kDraining,  // DrainAndStopWorkers drains it (or gave up waiting: it is still running, draining)
  kStopping,  // SIGTERM sent, waiting for the exit
  kStopped,   // stopped by the supervisor (SIGTERM, or SIGKILL after the stop timeout)
};
const char* WorkerStateName(WorkerState state);  // "running", "draining", "stopping", "stopped"

// A snapshot of one worker.
struct WorkerStatus {
  int index = 0;
  std::string name;
  std::string address;
  pid_t pid = -1;
  int metrics_port = -1;
  WorkerState state = WorkerState::kRunning;
  bool exited = false;        // the process is gone (stopped, killed or crashed)
  std::string exit_status;    // DescribeWaitStatus once exited ("exit 0", "signal 9")
  double cpus = 0;            // its CPU limit (0: none)
  int runs = 1;               // 1 + restarts
  // Running and not asked to stop: what an actuator counts as "a worker I have".
  bool serving() const { return state == WorkerState::kRunning && !exited; }
};

class LocalDataService {
 public:
  explicit LocalDataService(LocalDataServiceOptions options);
  // SIGKILLs every child's process group and reaps them; then removes the CPU-quota cgroups.
  ~LocalDataService();
  LocalDataService(const LocalDataService&) = delete;
  LocalDataService& operator=(const LocalDataService&) = delete;

  // --- the dispatcher
  // Starts the dispatcher; the first start picks a port, later starts (after KillDispatcher or
  // StopDispatcher) reuse it so workers and clients find the restarted dispatcher.
  absl::Status StartDispatcher();
  // kill -9 of the dispatcher (it can be started again).
  void KillDispatcher();
  // SIGTERM to the dispatcher, then waits for its exit (SIGKILL after options.stop_timeout: an error).
  absl::Status StopDispatcher();
  std::string dispatcher_address() const;
  // Its current (latest) run; before StartDispatcher an empty one (process null, address empty).
  const ServiceProcess& dispatcher() const;

  // --- workers
  // Starts a worker and waits for its "listening" line. Returns its index.
  absl::StatusOr<int> AddWorker(const std::vector<std::string>& extra_flags = {}, const std::string& working_dir = "");
  absl::StatusOr<int> AddWorker(const WorkerOptions& worker);
  // Starts `count` workers at once (all forked, then each awaited); returns their names. On an
  // error the workers that did start stay (ListWorkers shows them).
  absl::StatusOr<std::vector<std::string>> AddWorkers(int count, const WorkerOptions& worker = {});
  // Drains the named workers through the dispatcher (DrainWorkers RPC: no new tasks or splits for
  // them), waits until each has drained (worker_drain.h: clients read all it produced, its splits
  // are finished), SIGTERMs each as soon as it has, and waits for its exit — all within `timeout`
  // for the drain (the exits get options.stop_timeout more). Errors: NotFound for an unknown name,
  // FailedPrecondition for a worker that is not running or is being stopped by another call (both
  // before anything is done); DeadlineExceeded naming each worker that did not drain and why —
  // those are left running and draining (call again to keep waiting, or StopWorker to force);
  // Unavailable when the dispatcher cannot be reached.
  absl::Status DrainAndStopWorkers(const std::vector<std::string>& names, absl::Duration timeout);
  // As above, and reports for each worker that was stopped its last scrape before the SIGTERM (the
  // elements it still held then would be lost: an autoscaler counts them) and why it was judged
  // drained. `stopped` may be null.
  struct StoppedWorker {
    std::string name;
    std::optional<WorkerLoad> last_load;  // none: no admin server, or no scrape answered
    std::string drained_because;
  };
  absl::Status DrainAndStopWorkers(const std::vector<std::string>& names, absl::Duration timeout,
                                   std::vector<StoppedWorker>* stopped);
  // SIGTERM to a worker (no drain through the dispatcher: the worker's own shutdown serves what it
  // buffered, then deregisters), then waits for its exit (SIGKILL after options.stop_timeout: an error).
  absl::Status StopWorker(int index);
  // kill -9 of a worker.
  void KillWorker(int index);
  // Starts a worker that exited or was stopped again, with the same name, port, flags and CPU limit.
  absl::Status RestartWorker(int index);
  // Where workers started from now on send heartbeats and GetSplits.
  void set_worker_dispatcher_address(std::string address);

  // Every worker ever added, by index. For callers on other threads.
  std::vector<WorkerStatus> ListWorkers() const;
  // The index of the worker named `name` (e.g. "worker-3").
  std::optional<int> WorkerIndex(const std::string& name) const;
  // Workers added so far (indices 0 .. n-1), stopped ones included.
  int num_workers() const;
  // The current run of worker `index`; throws std::out_of_range for an index never added.
  const ServiceProcess& worker(int index) const;
  // The CPU limit's mechanism and notes; null until a worker was started with a limit (set up at
  // construction when options.worker_cpus > 0).
  const CpuQuota* cpu_quota() const;

  // SIGTERM to every worker, then the dispatcher; waits up to `timeout` for each, then SIGKILLs
  // what is left. Errors name the processes that had to be killed or exited with a failure.
  absl::Status StopGracefully(absl::Duration timeout = absl::Seconds(5));

  // --- observing
  // The dispatcher's GetState over gRPC.
  absl::StatusOr<service::GetStateResponse> GetState(absl::Duration timeout = absl::Seconds(10)) const;
  // Waits until GetState lists exactly `n` workers (none draining). Polls GetState.
  absl::Status WaitForWorkers(int n, absl::Duration timeout);
  // Waits until GetState lists every job as finished, then two heartbeat intervals more (the
  // workers learn of it through heartbeats), so one benchmark trial's tasks are gone before the
  // next starts. Start the dispatcher with --job_gc_grace_ms=0 so released jobs finish at once.
  absl::Status WaitForJobsFinished(absl::Duration timeout);
  absl::StatusOr<std::vector<MetricSample>> ScrapeDispatcher() const;
  absl::StatusOr<std::vector<MetricSample>> ScrapeWorker(int index) const;
  // Every process's recent output (earlier runs included), for failure messages.
  std::string Logs() const;
  const LocalDataServiceOptions& options() const { return options_; }

 private:
  // A dispatcher or worker: all its runs (the last is current) and what the supervisor does with it.
  struct Slot {
    std::vector<std::unique_ptr<ServiceProcess>> runs;
    WorkerOptions start;                    // workers: how it was started (restarts repeat it)
    double cpus = 0;                        // workers: the limit applied
    WorkerState state = WorkerState::kRunning;
    bool busy = false;                      // an operation of one thread owns it (start, drain, stop)
  };
  struct PendingStart;

  // Forks a process (through the spawner), applying `cpus` before exec when > 0.
  absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::string& name, const std::string& binary,
                                                      std::vector<std::string> flags, const std::string& working_dir,
                                                      int quota_index, double cpus);
  // Waits for a spawned process's "listening" line (and optionally its registration).
  absl::StatusOr<std::unique_ptr<ServiceProcess>> AwaitListening(const std::string& name,
                                                                 std::unique_ptr<ChildProcess> process,
                                                                 bool wait_until_registered);
  std::vector<std::string> WorkerFlags(int port, const WorkerOptions& worker) const ABSL_LOCKS_EXCLUDED(mu_);
  double LimitOf(const WorkerOptions& worker) const;
  absl::StatusOr<CpuQuota*> QuotaFor(double cpus) ABSL_LOCKS_EXCLUDED(mu_, quota_mu_);
  // Removes the cgroup of a stopped worker (if there is a quota).
  void RemoveQuota(int index) ABSL_LOCKS_EXCLUDED(quota_mu_);
  absl::StatusOr<std::vector<int>> StartWorkers(int count, const WorkerOptions& worker);
  // SIGTERM + wait + SIGKILL after the stop timeout; nullopt when it exited cleanly (or was
  // killed on purpose before), else the problem.
  std::optional<std::string> Terminate(const ServiceProcess& p, absl::Duration timeout);
  absl::Status SendDrainWorkers(const std::vector<std::string>& addresses) const;
  Slot* FindWorker(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Slot* FindWorker(int index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string WorkerDispatcherAddress() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LocalDataServiceOptions options_;
  ProcessSpawner spawner_;

  mutable absl::Mutex mu_;
  Slot dispatcher_ ABSL_GUARDED_BY(mu_);
  int dispatcher_port_ ABSL_GUARDED_BY(mu_) = 0;  // fixed after the first start
  std::string dispatcher_address_ ABSL_GUARDED_BY(mu_);
  std::string worker_dispatcher_address_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<Slot>> workers_ ABSL_GUARDED_BY(mu_);
  int next_worker_index_ ABSL_GUARDED_BY(mu_) = 0;
  // Created with the first limited worker; its set-up writes to cgroup files, so it has a lock of
  // its own rather than mu_.
  mutable absl::Mutex quota_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::unique_ptr<CpuQuota> quota_ ABSL_GUARDED_BY(quota_mu_);
};

// The directory of the running executable (for finding sibling binaries).
std::string ExecutableDir();

}  // namespace sluice::local

#endif  // SLUICE_LOCAL_LOCAL_DATASERVICE_H_
