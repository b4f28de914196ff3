// A throwaway data service made of real processes for the benchmarks: one sluice-dispatcher and
// any number of sluice-worker processes on loopback, their logs in a directory, all stopped
// (SIGTERM, then SIGKILL) when the object is destroyed.
//
// Threading: one owner thread (the one that lives as long as the children, see BenchProcess).
#ifndef SLUICE_BENCH_DATASERVICE_LOCAL_DATASERVICE_H_
#define SLUICE_BENCH_DATASERVICE_LOCAL_DATASERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/dataservice/bench_process.h"
#include "dataservice.grpc.pb.h"

namespace sluice::bench {

struct LocalDataServiceOptions {
  std::string bin_dir;                        // holds sluice-dispatcher and sluice-worker
  std::string log_dir;                        // the children's logs
  int64_t heartbeat_interval_ms = 100;        // workers' and dispatcher's
  std::vector<std::string> dispatcher_args;   // extra flags
  std::vector<std::string> worker_args;       // extra flags for every worker
  absl::Duration start_timeout = absl::Seconds(20);
};

class LocalDataService {
 public:
  static absl::StatusOr<std::unique_ptr<LocalDataService>> Start(LocalDataServiceOptions options);
  ~LocalDataService();

  const std::string& dispatcher_address() const { return dispatcher_address_; }
  // Where workers started from now on send heartbeats and GetSplits (default: the dispatcher; the
  // sharding benchmark puts a counting proxy in between).
  void set_worker_dispatcher_address(std::string address) { worker_dispatcher_address_ = std::move(address); }

  // Starts one worker and waits until it registered. `after_start` runs with the worker's pid right
  // after it started (e.g. to move it into a cgroup); an error stops the worker and is returned.
  absl::Status AddWorker(const std::function<absl::Status(pid_t)>& after_start = nullptr);
  int num_workers() const { return static_cast<int>(workers_.size()); }
  const BenchProcess& worker(int i) const { return *workers_[i]; }
  // Stops every worker and waits until the dispatcher no longer lists them.
  absl::Status StopWorkers();

  // The dispatcher's view (workers, jobs).
  absl::StatusOr<service::GetStateResponse> GetState();
  // Waits until the dispatcher lists exactly `n` workers, none draining.
  absl::Status WaitForWorkers(int n, absl::Duration timeout);
  // Waits until the dispatcher lists every job as finished, then two heartbeat intervals more (the
  // workers learn of it through heartbeats), so one trial's tasks are gone before the next starts.
  // Start the dispatcher with --job_gc_grace_ms=0 so released jobs finish at once.
  absl::Status WaitForJobsFinished(absl::Duration timeout);

 private:
  explicit LocalDataService(LocalDataServiceOptions options) : options_(std::move(options)) {}
  LocalDataServiceOptions options_;
  std::unique_ptr<BenchProcess> dispatcher_;
  std::string dispatcher_address_;
  std::string worker_dispatcher_address_;
  std::unique_ptr<service::Dispatcher::Stub> stub_;
  std::vector<std::unique_ptr<BenchProcess>> workers_;
  int workers_started_ = 0;
};

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_DATASERVICE_LOCAL_DATASERVICE_H_
