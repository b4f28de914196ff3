// Test-only, in-process fakes of the client's RPC interfaces (service_rpc.h), for unit tests of
// the session and the readers without sockets (never used in production code).
//
// FakeDispatcherRpc answers each call with a handler the test sets (defaults: OK; GetOrCreateJob
// gives job 1, client 1) and records every request with its CallOptions. FakeWorkerRpc serves
// element streams from per-task scripts (Send a response, Close the open stream with a status);
// all streams of a task consume one script, as a real task's buffer is shared. GetElement
// (coordinated rounds) answers with a handler.
//
// Threading: thread-safe; set handlers before the code under test runs.
#ifndef SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_SERVICE_RPC_H_
#define SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_SERVICE_RPC_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/client/service_rpc.h"
#include "dataplane/pipeline/tensor.h"

namespace sluice::client::testing {

// An uncompressed ElementData of `element`.
service::ElementData RawElement(const pipeline::Element& element);
// A response with one element {"v": value} per value (element keys = values).
service::GetElementsResponse ValuesResponse(const std::vector<int64_t>& values, bool end_of_sequence = false);

class FakeDispatcherRpc final : public DispatcherRpc {
 public:
  template <typename Resp, typename Req>
  using Handler = std::function<absl::StatusOr<Resp>(const Req&, const CallOptions&)>;

  Handler<service::RegisterDatasetResponse, service::RegisterDatasetRequest> register_dataset;
  Handler<service::GetOrCreateJobResponse, service::GetOrCreateJobRequest> get_or_create_job;
  Handler<service::ClientHeartbeatResponse, service::ClientHeartbeatRequest> client_heartbeat;
  std::function<absl::Status(const service::ReleaseJobClientRequest&)> release_job_client;

  absl::StatusOr<service::RegisterDatasetResponse> RegisterDataset(const service::RegisterDatasetRequest& request,
                                                                   const CallOptions& options) override;
  absl::StatusOr<service::GetOrCreateJobResponse> GetOrCreateJob(const service::GetOrCreateJobRequest& request,
                                                                 const CallOptions& options) override;
  absl::StatusOr<service::ClientHeartbeatResponse> ClientHeartbeat(const service::ClientHeartbeatRequest& request,
                                                                   const CallOptions& options) override;
  absl::Status ReleaseJobClient(const service::ReleaseJobClientRequest& request, const CallOptions& options) override;

  // What was called, in order: "RegisterDataset", "GetOrCreateJob", "ClientHeartbeat", "ReleaseJobClient".
  std::vector<std::string> calls() const;
  // wait_for_ready of each call, in order.
  std::vector<bool> wait_for_ready() const;
  std::vector<service::ClientHeartbeatRequest> heartbeats() const;
  std::vector<service::GetOrCreateJobRequest> job_requests() const;

 private:
  void Record(const std::string& call, const CallOptions& options);
  mutable absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> wait_for_ready_ ABSL_GUARDED_BY(mu_);
  std::vector<service::ClientHeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<service::GetOrCreateJobRequest> job_requests_ ABSL_GUARDED_BY(mu_);
};

class FakeWorkerRpc final : public WorkerRpc {
 public:
  // The task's open stream (or its next one) delivers `response`.
  void Send(int64_t task_id, service::GetElementsResponse response) ABSL_LOCKS_EXCLUDED(mu_);
  // The task's open stream (or its next one) ends with `status` (OK: closed without end_of_sequence).
  void Close(int64_t task_id, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Coordinated reads: answers GetElement (default: UNIMPLEMENTED).
  std::function<absl::StatusOr<service::GetElementsResponse>(const service::GetElementsRequest&)> get_element;

  // What Connected() answers for every worker (default: true).
  void SetConnected(bool connected) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t streams_opened(int64_t task_id) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t open_streams() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<service::GetElementsRequest> element_requests() const ABSL_LOCKS_EXCLUDED(mu_);  // GetElement calls
  std::vector<bool> stream_wait_for_ready() const ABSL_LOCKS_EXCLUDED(mu_);                   // per stream opened

  std::unique_ptr<ElementStream> GetElements(const std::string& address, const service::GetElementsRequest& request,
                                             const CallOptions& options) override;
  absl::StatusOr<service::GetElementsResponse> GetElement(const std::string& address,
                                                          const service::GetElementsRequest& request,
                                                          const CallOptions& options) override;
  bool Connected(const std::string& address) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Stream;
  struct Event {
    bool close = false;
    absl::Status status;
    service::GetElementsResponse response;
  };
  mutable absl::Mutex mu_;
  std::map<int64_t, std::deque<Event>> scripts_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int64_t> opened_ ABSL_GUARDED_BY(mu_);
  int64_t open_ ABSL_GUARDED_BY(mu_) = 0;
  bool connected_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<bool> stream_wait_for_ready_ ABSL_GUARDED_BY(mu_);
  std::vector<service::GetElementsRequest> element_requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::client::testing

#endif  // SLUICE_DATAPLANE_CLIENT_TESTING_FAKE_SERVICE_RPC_H_
