// WorkerImpl: the worker's logic, free of transport. It heartbeats to the dispatcher (which also
// registers it, and re-registers it after a dispatcher restart: heartbeats simply keep retrying and
// the dispatcher re-sends the tasks), runs a TaskRunner per assigned task, and serves element reads
// (StreamElements for GetElements, GetElement for coordinated reads). grpc_worker.h adapts it to gRPC.
//
// Shutdown, in order: BeginDrain (heartbeats say draining; producers stop; buffered elements and
// the bound round are still served), WaitForInFlightRounds, StopHeartbeats, Deregister, Stop.
//
// Threading: thread-safe. One heartbeat thread (Start/Stop); readers call from their own threads.
// Never holds its lock across a dispatcher call or a runner's blocking call.
#ifndef SLUICE_DATAPLANE_WORKER_WORKER_IMPL_H_
#define SLUICE_DATAPLANE_WORKER_WORKER_IMPL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/rpc/credentials.h"
#include "dataplane/worker/cancel_token.h"
#include "dataplane/worker/dispatcher_client.h"
#include "dataplane/worker/response_encoder.h"
#include "dataplane/worker/shared_pipeline.h"
#include "dataplane/worker/task_runner.h"
#include "dataplane/worker/worker_metrics.h"
#include "dataservice.pb.h"

namespace sluice::worker {

struct WorkerConfig {
  std::string worker_address;                 // "host:port" clients dial; the worker's identity
  std::string worker_host;                    // the host part (locality)
  service::Placement placement = service::PLACEMENT_UNSPECIFIED;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // GetElements/GetElement for a task this worker does not know yet (the client may learn of a task
  // before the worker's heartbeat does): ask for a heartbeat and wait this long before NotFound.
  absl::Duration unknown_task_wait = absl::Seconds(2);
  // Tests: runs on the thread that builds a task, before its pipeline is built (a slow build).
  std::function<void(int64_t task_id)> before_task_build;
  size_t max_response_bytes = 1 << 20;        // pack small elements up to this many bytes per response
  int max_message_bytes = rpc::kDefaultMaxMessageBytes;
  size_t sharing_window_elements = 256;
  TaskRunnerOptions runner;
};

class WorkerImpl {
 public:
  // `dispatcher` must outlive the worker. `metrics` may be null (a private registry is used).
  WorkerImpl(WorkerConfig config, DispatcherClient* dispatcher, std::shared_ptr<WorkerMetrics> metrics = nullptr);
  ~WorkerImpl();

  // Starts the heartbeat thread (the first heartbeat goes out at once).
  void Start();
  // One heartbeat now: reports progress, applies the answer (new tasks, deletions). New tasks are
  // built before it returns. (The heartbeat thread's own heartbeats hand them to the task starter
  // instead: building a pipeline can take seconds — a whole IDX data set parsed under a small CPU
  // quota — and a heartbeat loop blocked that long got the worker timed out by the dispatcher.)
  absl::Status Heartbeat(const CallOptions& options = {}) { return HeartbeatImpl(options, /*start_async=*/false); }

  // Streams the request's task: calls `write` with each response, its elements in the codec the
  // request asks for (`write` returns false when the client is gone), until end_of_sequence, an
  // error, or `cancel`. EncodeElementsResponse (response_encoder.h) makes the wire bytes.
  absl::Status StreamElements(const service::GetElementsRequest& request, CancelToken* cancel,
                              const std::function<bool(ElementsResponse&)>& write);
  // Coordinated reads: the element of request.round for request.consumer_index. With `cancel`
  // already cancelled it does not wait: CANCELLED means "not ready without waiting".
  absl::StatusOr<service::GetElementsResponse> GetElement(const service::GetElementsRequest& request,
                                                          CancelToken* cancel);

  // The runner of `task_id`, waiting up to unknown_task_wait for a heartbeat to bring it.
  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t task_id, CancelToken* cancel);

  // SIGTERM's first step: dynamic-sharding tasks hand their input back (as when the dispatcher
  // drains this worker: splits go back at their readers' positions, pipelines flush what they
  // read) and no new task is taken. Idempotent.
  void HandBackInput();
  // Waits until every task that handed its input back has produced its last element and its
  // buffer was read, or `deadline`, or `nobody_reads` (may be empty) held for 200 ms: no client
  // is there to read the rest. True when all have.
  bool WaitForHandBack(absl::Time deadline, const std::function<bool()>& nobody_reads = {});
  void BeginDrain();
  // Waits until no coordinated round is half served, or `deadline`. True when none is.
  bool WaitForInFlightRounds(absl::Time deadline);
  // Ends the heartbeat loop: lets a heartbeat in flight finish until `deadline` (then cancels it),
  // so no heartbeat can reach the dispatcher after Deregister and register the worker again.
  void StopHeartbeats(absl::Time deadline);
  absl::Status Deregister(absl::Time deadline);
  // Stops heartbeats and every task; joins threads. Idempotent.
  void Stop();

  bool registered() const;
  bool draining() const;
  size_t num_tasks() const;
  int64_t heartbeats_sent() const;
  const WorkerConfig& config() const { return config_; }
  WorkerMetrics& metrics() { return *metrics_; }

 private:
  void HeartbeatLoop();
  absl::Status HeartbeatImpl(const CallOptions& options, bool start_async);
  // Builds the runner of `task` and adds it, unless the worker is draining or stopping by then.
  void StartTask(const service::TaskDef& task);
  void StarterLoop();  // the task starter: builds the tasks the heartbeat thread hands it, in order
  class HeartbeatDone;

  const WorkerConfig config_;
  DispatcherClient* const dispatcher_;
  std::shared_ptr<WorkerMetrics> metrics_;
  SharedPipelineRegistry sharing_;
  TaskRunnerEnv env_;
  CancelToken stop_token_;  // interrupts heartbeats and waits on Stop

  mutable absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<TaskRunner>> tasks_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool input_released_ ABSL_GUARDED_BY(mu_) = false;  // the dispatcher said draining: tasks handed input back
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeat_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeats_stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeat_loop_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_);
  int64_t heartbeats_sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool heartbeat_in_flight_ ABSL_GUARDED_BY(mu_) = false;  // one heartbeat at a time
  std::thread heartbeat_thread_;
  std::deque<service::TaskDef> to_start_ ABSL_GUARDED_BY(mu_);  // handed to the task starter
  std::set<int64_t> starting_ ABSL_GUARDED_BY(mu_);              // queued or being built
  std::thread starter_thread_;                                   // started with the heartbeat thread
};

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_WORKER_IMPL_H_
