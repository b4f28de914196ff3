// A Dispatcher service that forwards every call to the real dispatcher and counts them, so the
// sharding benchmark can show how many GetSplits calls fetched how many splits (batching). Workers
// are pointed at the proxy; clients talk to the dispatcher directly.
//
// Threading: calls arrive on gRPC's threads; the counters are guarded by a mutex and may be read
// or reset from any thread.
#ifndef SLUICE_BENCH_SHARDING_COUNTING_PROXY_H_
#define SLUICE_BENCH_SHARDING_COUNTING_PROXY_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dataservice.grpc.pb.h"

namespace sluice::bench {

struct DispatcherCallCounts {
  int64_t get_splits_calls = 0;        // answered OK, of either kind:
  int64_t fetch_calls = 0;             //   asking for splits (max_splits > 0) ...
  int64_t ack_only_calls = 0;          //   ... or only acknowledging started splits (max_splits 0)
  int64_t fetches_with_splits = 0;     // fetch calls that got at least one split
  int64_t splits_handed_out = 0;       // splits in the answers
  int64_t starts_acknowledged = 0;     // started_split_indices sent
  int64_t end_of_splits_answers = 0;   // answers saying the epoch has no more splits
  int64_t empty_answers = 0;           // fetch calls answered with neither splits nor end_of_splits (polls)
  int64_t worker_heartbeats = 0;
  int64_t failed_calls = 0;            // any method, answered with an error
};

// Adds one OK GetSplits call to `counts`.
void CountGetSplits(const service::GetSplitsRequest& request, const service::GetSplitsResponse& response,
                    DispatcherCallCounts* counts);

class CountingDispatcherProxy final : public service::Dispatcher::Service {
 public:
  // Listens on 127.0.0.1 (any port) and forwards to `dispatcher_address`.
  static absl::StatusOr<std::unique_ptr<CountingDispatcherProxy>> Start(const std::string& dispatcher_address);
  ~CountingDispatcherProxy() override;

  std::string address() const;
  DispatcherCallCounts counts() const;
  void ResetCounts();

  grpc::Status RegisterDataset(grpc::ServerContext*, const service::RegisterDatasetRequest*,
                               service::RegisterDatasetResponse*) override;
  grpc::Status GetOrCreateJob(grpc::ServerContext*, const service::GetOrCreateJobRequest*,
                              service::GetOrCreateJobResponse*) override;
  grpc::Status ClientHeartbeat(grpc::ServerContext*, const service::ClientHeartbeatRequest*,
                               service::ClientHeartbeatResponse*) override;
  grpc::Status ReleaseJobClient(grpc::ServerContext*, const service::ReleaseJobClientRequest*,
                                service::ReleaseJobClientResponse*) override;
  grpc::Status WorkerHeartbeat(grpc::ServerContext*, const service::WorkerHeartbeatRequest*,
                               service::WorkerHeartbeatResponse*) override;
  grpc::Status GetSplits(grpc::ServerContext*, const service::GetSplitsRequest*, service::GetSplitsResponse*) override;
  grpc::Status WorkerDeregister(grpc::ServerContext*, const service::WorkerDeregisterRequest*,
                                service::WorkerDeregisterResponse*) override;
  grpc::Status DrainWorkers(grpc::ServerContext*, const service::DrainWorkersRequest*,
                            service::DrainWorkersResponse*) override;
  grpc::Status GetState(grpc::ServerContext*, const service::GetStateRequest*, service::GetStateResponse*) override;

 private:
  CountingDispatcherProxy() = default;
  // Forwards one call with the caller's deadline; counts failures.
  template <typename Request, typename Response, typename Method>
  grpc::Status Forward(grpc::ServerContext* server_context, const Request& request, Response* response, Method method);

  std::unique_ptr<service::Dispatcher::Stub> stub_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  mutable absl::Mutex mu_;
  DispatcherCallCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_SHARDING_COUNTING_PROXY_H_
