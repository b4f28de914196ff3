// The worker's gRPC adapters around WorkerImpl (which holds all the logic):
//  - GrpcDispatcherClient: DispatcherClient over a gRPC channel (callback API; every call has a
//    deadline and is cancelled at once through its CancelToken);
//  - WorkerService: the Worker service. GetElements runs a server-streaming reactor whose sender
//    runs on a thread of its own (one per active stream): it keeps one write in flight (gRPC flow
//    control) while it prepares the next, and hands the element bytes to gRPC as slices over the
//    tensors' memory (response_encoder.h), without copying. GetElement (coordinated
//    reads) is answered on gRPC's thread when the answer is ready, else on a thread of its own, so
//    gRPC's threads never block;
//  - WorkerServer: the grpc::Server with TLS/mTLS from dataplane/rpc, and the graceful shutdown
//    sequence (drain, finish in-flight work, deregister, stop within a budget).
//
// Threading: all classes are thread-safe. Call threads are joined by WorkerServer::Shutdown.
#ifndef SLUICE_DATAPLANE_WORKER_GRPC_WORKER_H_
#define SLUICE_DATAPLANE_WORKER_GRPC_WORKER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/rpc/credentials.h"
#include "dataplane/worker/dispatcher_client.h"
#include "dataplane/worker/shm_stream.h"
#include "dataplane/worker/worker_impl.h"
#include "dataservice.grpc.pb.h"

namespace sluice::worker {

class GrpcDispatcherClient : public DispatcherClient {
 public:
  // `call_timeout` bounds every call (the options' deadline may shorten it).
  explicit GrpcDispatcherClient(std::shared_ptr<grpc::Channel> channel, absl::Duration call_timeout = absl::Seconds(5));

  absl::StatusOr<service::WorkerHeartbeatResponse> WorkerHeartbeat(const service::WorkerHeartbeatRequest& request,
                                                                   const CallOptions& options) override;
  absl::StatusOr<service::GetSplitsResponse> GetSplits(const service::GetSplitsRequest& request,
                                                       const CallOptions& options) override;
  absl::Status WorkerDeregister(const service::WorkerDeregisterRequest& request, const CallOptions& options) override;

 private:
  std::unique_ptr<service::Dispatcher::Stub> stub_;
  const absl::Duration call_timeout_;
};

// Threads serving calls, each marked done when its function returns; finished ones are joined as
// new ones start, the rest by JoinAll.
class CallThreads {
 public:
  ~CallThreads() { JoinAll(); }
  void Spawn(std::function<void()> fn);
  size_t active() const;
  // Waits until no call thread runs, or `deadline`. True when none does.
  bool WaitForIdle(absl::Time deadline);
  void JoinAll();

 private:
  struct Entry {
    std::thread thread;
    bool done = false;
  };
  mutable absl::Mutex mu_;
  std::list<Entry> threads_ ABSL_GUARDED_BY(mu_);
  size_t active_ ABSL_GUARDED_BY(mu_) = 0;
};

// GetElements is a raw method: its responses are written as bytes (response_encoder.h) so that
// element payloads go to the transport as views of the tensors' memory.
class WorkerService : public service::Worker::WithRawCallbackMethod_GetElements<service::Worker::CallbackService> {
 public:
  // Calls before SetWorker fail with UNAVAILABLE (the server starts before the worker knows its port).
  WorkerService() = default;
  void SetWorker(WorkerImpl* worker) { worker_.store(worker); }
  // Same-host shared memory for streams (shm_stream.h); before the server starts. Default: off.
  void SetShm(ShmConfig config) { shm_ = std::move(config); }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* GetElements(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetElement(grpc::CallbackServerContext* context, const service::GetElementsRequest* request,
                                       service::GetElementsResponse* response) override;

  CallThreads& threads() { return threads_; }
  int64_t streams_started() const { return streams_started_.load(); }

 private:
  std::atomic<WorkerImpl*> worker_{nullptr};
  ShmConfig shm_{"", 0};
  std::atomic<int64_t> streams_started_{0};
  CallThreads threads_;
};

struct WorkerServerOptions {
  std::string listen_address = "0.0.0.0:0";  // port 0 picks a free port
  rpc::TlsOptions tls;
  int max_message_bytes = rpc::kDefaultMaxMessageBytes;
  // Same-host shared memory (shm_stream.h). Off unless set (sluice-worker sets it from its flags).
  ShmConfig shm{"", 0};
};

class WorkerServer {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerServerOptions& options);
  ~WorkerServer();

  int port() const { return port_; }
  WorkerService& service() { return *service_; }

  // SIGTERM: drain `worker` (no new tasks; streams deliver what is buffered, then UNAVAILABLE),
  // let the bound coordinated rounds complete, deregister, shut the server down and stop the
  // worker, all within `budget` (calls still open at the end are cancelled).
  void GracefulShutdown(WorkerImpl& worker, absl::Duration budget);
  // Shuts the server down (cancelling calls still open at `deadline`) and joins the call threads.
  void Shutdown(absl::Time deadline);

 private:
  WorkerServer() = default;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_GRPC_WORKER_H_
