// The client's session with the dispatcher.
//
// Open() registers the pipeline (when one is given) and gets or creates the job, retrying while
// the dispatcher is unreachable (retry_policy.h, kDispatcherAtCreate) until create_timeout.
// Start() runs the heartbeat thread: a ClientHeartbeat every heartbeat_interval carrying what the
// listener fills in (the buffer's metrics, the round reader's round), each answer handed to the
// listener (the job's tasks, job_finished, a coordinated block_round). Failed heartbeats are
// retried with backoff (kDispatcherSession); one that cannot be retried (the dispatcher forgot
// this client, or rejects it) is handed to the listener as the client's error and ends the loop.
// Release() sends a last heartbeat with the final metrics and releases the job client, both
// within release_timeout.
//
// The dispatcher's absence: when no heartbeat has been answered for dispatcher_timeout (counted
// from the last answer, or from Open), every further failed heartbeat tells the listener
// (OnDispatcherUnreachable), which decides whether the client can end or must fail; heartbeats go
// on meanwhile.
//
// Threading: Open, Start, Cancel, Join and Release are called by the owner (Cancel from any
// thread). The listener is called on the heartbeat thread, without any lock of this class held.
// Accessors are thread-safe once Open returned.
#ifndef SLUICE_DATAPLANE_CLIENT_JOB_SESSION_H_
#define SLUICE_DATAPLANE_CLIENT_JOB_SESSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dataplane/client/cancel_token.h"
#include "dataplane/client/service_rpc.h"
#include "dataservice.pb.h"
#include "pipeline.pb.h"

namespace sluice::client {

class JobSession {
 public:
  struct Options {
    std::string dispatcher_address;  // for messages
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    absl::Duration initial_backoff = absl::Milliseconds(100);
    absl::Duration max_backoff = absl::Seconds(5);
    absl::Duration create_timeout = absl::Seconds(60);
    absl::Duration rpc_timeout = absl::Seconds(10);
    absl::Duration release_timeout = absl::Seconds(2);
    absl::Duration dispatcher_timeout = absl::Minutes(2);  // InfiniteDuration: never report the absence
  };

  class Listener {
   public:
    virtual ~Listener() = default;
    // Fills the parts of a heartbeat the readers and the buffer know (metrics, rounds).
    virtual void FillHeartbeat(service::ClientHeartbeatRequest* request) = 0;
    // A heartbeat's answer. Returns true when the next heartbeat should come sooner (a
    // coordinated consumer holds a block the dispatcher waits on): heartbeat_interval / 10.
    virtual bool OnHeartbeat(const service::ClientHeartbeatResponse& response) = 0;
    // A heartbeat failed in a way retrying cannot fix: the client's error. No more heartbeats.
    virtual void OnSessionError(absl::Status status) = 0;
    // No heartbeat has been answered for `unreachable_for` >= dispatcher_timeout; `last_error` is
    // the latest failure. Called after each failed heartbeat from then on.
    virtual void OnDispatcherUnreachable(absl::Duration unreachable_for, const absl::Status& last_error) = 0;
  };

  JobSession(Options options, std::unique_ptr<DispatcherRpc> rpc);
  ~JobSession();  // Cancel + Join (not Release)
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;

  // Registers `pipeline` if given (its id must then equal request.spec().dataset_id() when that is
  // set) and gets or creates the job of `request`.
  absl::Status Open(const std::optional<pipeline::PipelineDef>& pipeline, service::GetOrCreateJobRequest request);
  // Starts the heartbeat thread; `listener` must outlive Join().
  void Start(Listener* listener);
  // Stops the heartbeat loop (cancels a heartbeat in flight); does not wait.
  void Cancel() { stop_.Cancel(); }
  void Join();
  // The last heartbeat (`last`, job_client_id filled in here) and ReleaseJobClient.
  void Release(service::ClientHeartbeatRequest last);

  const std::string& dataset_id() const { return dataset_id_; }
  int64_t job_id() const { return job_id_; }
  int64_t job_client_id() const { return job_client_id_; }  // 0 when iteration_over()
  int64_t iteration() const { return iteration_; }
  // The requested iteration was over (GetOrCreateJobResponse.job_finished): no job client was made,
  // there is nothing to read; do not Start.
  bool iteration_over() const { return iteration_over_; }
  int64_t heartbeats_ok() const { return heartbeats_ok_.load(); }
  int64_t heartbeat_failures() const { return heartbeat_failures_.load(); }

 private:
  template <typename Response, typename Call>
  absl::StatusOr<Response> CallAtCreate(absl::string_view method, absl::Time deadline, Call call);
  void HeartbeatLoop(Listener* listener);

  const Options opts_;
  const std::unique_ptr<DispatcherRpc> rpc_;
  CancelToken stop_;
  std::thread thread_;
  // Set by Open, read-only afterwards.
  std::string dataset_id_;
  int64_t job_id_ = 0;
  int64_t job_client_id_ = 0;
  int64_t iteration_ = 0;
  bool iteration_over_ = false;
  absl::Time last_answer_ = absl::InfinitePast();  // heartbeat thread only (set by Open before it)
  std::atomic<int64_t> heartbeats_ok_{0};
  std::atomic<int64_t> heartbeat_failures_{0};
};

// `status` with `context` prepended to its message.
absl::Status WithContext(const absl::Status& status, absl::string_view context);

}  // namespace sluice::client

#endif  // SLUICE_DATAPLANE_CLIENT_JOB_SESSION_H_
