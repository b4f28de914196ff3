// Test-only Dispatcher service for client tests (never used in production code): registers
// datasets (id = pipeline fingerprint of the canonicalised def), hands out job and job-client ids
// (one job per job_name; FAILED_PRECONDITION when a named job is asked for with different
// parameters), and answers client heartbeats with the tasks of the client's job (TaskInfo.job_id)
// and a job_finished flag the test sets.
// Records what clients sent (heartbeats with metrics and rounds, job requests, releases).
// Worker-side methods are not implemented. Thread-safe.
#ifndef SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_DISPATCHER_H_
#define SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_DISPATCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataservice.grpc.pb.h"

namespace sluice::client::testing {

class FakeDispatcher final : public service::Dispatcher::Service {
 public:
  // Called (without the lock held) when GetOrCreateJob creates a new job.
  using JobCreatedHook = std::function<void(int64_t job_id, const service::JobSpec& spec,
                                            const pipeline::PipelineDef& pipeline)>;

  void SetTasks(std::vector<service::TaskInfo> tasks);
  void AddTask(service::TaskInfo task);
  void RemoveTask(int64_t task_id);
  void SetJobFinished(bool finished);
  // When set, decides job_finished of a job on every heartbeat instead of SetJobFinished (called
  // unlocked, with the heartbeating client's job_id).
  void SetJobFinishedFunction(std::function<bool(int64_t job_id)> fn);
  // Non-OK: ClientHeartbeat fails with this status.
  void SetHeartbeatError(grpc::Status status);
  void SetJobCreatedHook(JobCreatedHook hook);
  // Requests for an iteration in [1, up_to] are answered as over (job_finished, no client made).
  void SetIterationsOver(int64_t up_to);
  // Makes job-client ids start above `id` (a restarted dispatcher that recovered its journal).
  void KnowJobClient(int64_t job_client_id);
  // Registers `def` as the default dataset (what an empty spec.dataset_id reads, as the real
  // dispatcher's --pipeline); without one an empty dataset_id is FAILED_PRECONDITION. Returns its id.
  std::string SetDefaultPipeline(const pipeline::PipelineDef& def);

  int64_t heartbeats() const;
  service::ClientHeartbeatRequest last_heartbeat() const;
  int64_t max_reported_round() const;
  std::vector<service::GetOrCreateJobRequest> job_requests() const;
  std::vector<service::RegisterDatasetRequest> register_requests() const;
  std::vector<int64_t> released() const;

  grpc::Status RegisterDataset(grpc::ServerContext*, const service::RegisterDatasetRequest* req,
                               service::RegisterDatasetResponse* resp) override;
  grpc::Status GetOrCreateJob(grpc::ServerContext*, const service::GetOrCreateJobRequest* req,
                              service::GetOrCreateJobResponse* resp) override;
  grpc::Status ClientHeartbeat(grpc::ServerContext*, const service::ClientHeartbeatRequest* req,
                               service::ClientHeartbeatResponse* resp) override;
  grpc::Status ReleaseJobClient(grpc::ServerContext*, const service::ReleaseJobClientRequest* req,
                                service::ReleaseJobClientResponse* resp) override;

 private:
  struct Job {
    int64_t id;
    service::JobSpec spec;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, pipeline::PipelineDef> datasets_ ABSL_GUARDED_BY(mu_);
  std::string default_dataset_id_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Job> named_jobs_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int64_t> job_clients_ ABSL_GUARDED_BY(mu_);  // job_client_id -> job_id
  int64_t next_job_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t iterations_over_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_job_client_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<service::TaskInfo> tasks_ ABSL_GUARDED_BY(mu_);
  bool job_finished_ ABSL_GUARDED_BY(mu_) = false;
  std::function<bool(int64_t)> job_finished_fn_ ABSL_GUARDED_BY(mu_);
  grpc::Status heartbeat_error_ ABSL_GUARDED_BY(mu_);
  JobCreatedHook job_created_ ABSL_GUARDED_BY(mu_);
  int64_t heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_round_ ABSL_GUARDED_BY(mu_) = 0;
  service::ClientHeartbeatRequest last_heartbeat_ ABSL_GUARDED_BY(mu_);
  std::vector<service::GetOrCreateJobRequest> job_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<service::RegisterDatasetRequest> register_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> released_ ABSL_GUARDED_BY(mu_);
};

// Runs gRPC services on 127.0.0.1 (port 0: a free port). The services must outlive it.
class TestServer {
 public:
  static std::unique_ptr<TestServer> Start(const std::vector<grpc::Service*>& services, int port = 0);
  ~TestServer() { Stop(); }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Shuts down, cancelling calls still running after a short grace period. Idempotent.
  void Stop();

 private:
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Polls `condition` until it holds or `timeout` passes (waiting on a condition with a deadline,
// not sleeping for a fixed time). Returns whether it held.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(10));

service::TaskInfo MakeTask(int64_t task_id, const std::string& worker_address, const std::string& worker_host = "",
                           int64_t starting_round = 0);

}  // namespace sluice::client::testing

#endif  // SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_DISPATCHER_H_
