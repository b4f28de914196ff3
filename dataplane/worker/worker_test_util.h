// Test helpers for the worker: a fake dispatcher (in memory, and as a gRPC service), task defs
// from pipeline specs, element decoding and waiting on conditions with a deadline.
//
// FakeDispatcher models the dispatcher's side of dynamic sharding closely enough for the worker:
// one split queue per job, handed out in batches; end_of_splits only once every split of the epoch
// was handed out and acknowledged as started; the queue is refilled for epoch e+1 when a task
// asks for e+1 after every split of epoch e was handed out and acknowledged as started (until then
// it answers "nothing yet"); starts are recorded. Thread-safe.
#ifndef SLUICE_DATAPLANE_WORKER_WORKER_TEST_UTIL_H_
#define SLUICE_DATAPLANE_WORKER_WORKER_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/pipeline/pipeline.h"
#include "dataplane/worker/dispatcher_client.h"
#include "dataservice.grpc.pb.h"
#include "testing/tls_certificate.h"

namespace sluice::worker::testing {

class FakeDispatcher : public DispatcherClient {
 public:
  // Splits of the dynamic job; `num_epochs` epochs (-1: forever).
  void SetSplits(std::vector<pipeline::Split> splits, int64_t num_epochs = 1);
  // GetSplitsResponse.release in every answer from now on (a draining worker).
  void SetRelease(bool release);
  // The next `n` GetSplits calls fail with `code`.
  void FailNextGetSplits(int n, absl::StatusCode code = absl::StatusCode::kUnavailable);
  void FailHeartbeats(bool fail);
  // GetSplits calls block until cancelled (or until the block is lifted).
  void BlockGetSplits(bool block);
  // Tasks handed to `worker_address` by heartbeats (re-sent until the worker reports them).
  void AssignTask(const std::string& worker_address, service::TaskDef task);
  void DeleteTask(const std::string& worker_address, int64_t task_id);

  absl::StatusOr<service::WorkerHeartbeatResponse> WorkerHeartbeat(const service::WorkerHeartbeatRequest& request,
                                                                   const CallOptions& options) override;
  absl::StatusOr<service::GetSplitsResponse> GetSplits(const service::GetSplitsRequest& request,
                                                       const CallOptions& options) override;
  absl::Status WorkerDeregister(const service::WorkerDeregisterRequest& request, const CallOptions& options) override;

  int64_t get_splits_calls() const;
  int64_t calls_with_splits() const;                     // calls that handed out at least one split
  std::vector<service::GetSplitsRequest> get_splits_requests() const;
  std::vector<uint64_t> handed_out() const;              // split indices handed out, in order, all epochs
  std::multiset<uint64_t> started() const;               // acknowledged starts (GetSplits and heartbeats)
  std::map<uint64_t, int64_t> leases() const;            // acknowledged position leases: split -> lease end
  std::multiset<uint64_t> finished() const;              // acknowledged split ends
  std::vector<service::WorkerHeartbeatRequest> heartbeats() const;
  std::vector<std::string> deregistered() const;
  // How many heartbeats had arrived when the first deregistration did (-1: none yet).
  int64_t heartbeats_at_deregistration() const;
  int64_t epoch() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<pipeline::Split> splits_ ABSL_GUARDED_BY(mu_);
  std::deque<pipeline::Split> queue_ ABSL_GUARDED_BY(mu_);
  int64_t num_epochs_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_get_splits_ ABSL_GUARDED_BY(mu_) = 0;
  absl::StatusCode fail_code_ ABSL_GUARDED_BY(mu_) = absl::StatusCode::kUnavailable;
  bool fail_heartbeats_ ABSL_GUARDED_BY(mu_) = false;
  bool release_ ABSL_GUARDED_BY(mu_) = false;
  bool block_get_splits_ ABSL_GUARDED_BY(mu_) = false;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t calls_with_splits_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<service::GetSplitsRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> handed_out_ ABSL_GUARDED_BY(mu_);
  std::multiset<uint64_t> started_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, int64_t> leases_ ABSL_GUARDED_BY(mu_);
  std::multiset<uint64_t> finished_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> started_this_epoch_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<int64_t, service::TaskDef>> assigned_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<int64_t>> to_delete_ ABSL_GUARDED_BY(mu_);
  std::vector<service::WorkerHeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> deregistered_ ABSL_GUARDED_BY(mu_);
  int64_t heartbeats_at_deregistration_ ABSL_GUARDED_BY(mu_) = -1;
};

// The fake as a gRPC Dispatcher service (the methods the worker uses), on 127.0.0.1:<port>,
// plaintext unless `credentials` are given; `port` 0 picks one (a restart passes the old one).
class FakeDispatcherServer {
 public:
  explicit FakeDispatcherServer(FakeDispatcher* fake, std::shared_ptr<grpc::ServerCredentials> credentials = nullptr,
                                int port = 0);
  ~FakeDispatcherServer();
  int port() const { return port_; }
  std::string address() const;
  void Shutdown();

 private:
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Parses a pipeline spec (YAML) into a def; fails the test on errors.
pipeline::PipelineDef Spec(const std::string& yaml);
service::TaskDef MakeTask(int64_t task_id, const std::string& yaml, service::ShardingPolicy sharding = service::SHARDING_OFF);
// All splits of a spec's source.
std::vector<pipeline::Split> SplitsOf(const std::string& yaml);

// Decodes an ElementData (decompressing) and returns its int64 scalar field `field`.
int64_t DecodeInt(const service::ElementData& data, const std::string& field = "value");

// A self-signed certificate (CA:TRUE, SAN 127.0.0.1 and localhost) written as PEM files under
// `dir`: usable as server certificate, client certificate and CA at once.
using TestCertificate = sluice::testing::TestCertificate;
TestCertificate WriteSelfSignedCertificate(const std::string& dir, const std::string& name);

// Polls `condition` until it holds or `timeout` passes (a hang guard, not a timing assertion).
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(20));

}  // namespace sluice::worker::testing

#endif  // SLUICE_DATAPLANE_WORKER_WORKER_TEST_UTIL_H_
