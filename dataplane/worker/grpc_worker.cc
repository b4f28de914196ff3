#include "dataplane/worker/grpc_worker.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <deque>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "dataplane/worker/response_encoder.h"
#include "dataplane/worker/shm_stream.h"

namespace sluice::worker {
namespace {

std::chrono::system_clock::time_point ToChrono(absl::Time t) { return absl::ToChronoTime(t); }

// gRPC slices over the ranges of `bytes`: each slice holds a reference to its range's owner, which
// gRPC releases when it has sent the bytes. Nothing is copied.
grpc::ByteBuffer ToByteBuffer(const pipeline::WireBytes& bytes) {
  std::vector<grpc::Slice> slices;
  slices.reserve(bytes.ranges().size());
  for (const pipeline::WireBytes::Range& r : bytes.ranges()) {
    auto* owner = new std::shared_ptr<const void>(r.owner);
    slices.emplace_back(
        const_cast<char*>(r.data), r.size, +[](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); },
        owner);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The GetElements request of a raw (ByteBuffer) call.
absl::StatusOr<service::GetElementsRequest> ParseRequest(const grpc::ByteBuffer* request) {
  service::GetElementsRequest parsed;
  grpc::ByteBuffer copy(*request);  // shares the slices
  grpc::Status s = grpc::GenericDeserialize<grpc::ProtoBufferReader, service::GetElementsRequest>(&copy, &parsed);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("GetElementsRequest does not parse (", request->Length(),
                                                   " bytes): ", s.error_message()));
  }
  return parsed;
}

// Runs one unary call through the stub's callback API, waiting for it while honouring the token.
template <typename Request, typename Response, typename Start>
absl::StatusOr<Response> Call(const Request& request, const CallOptions& options, absl::Duration timeout, Start start) {
  grpc::ClientContext context;
  context.set_deadline(ToChrono(std::min(options.deadline, absl::Now() + timeout)));
  Response response;
  grpc::Status status;
  absl::Notification done;
  start(&context, &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  {
    CancelCallback on_cancel(options.cancel, [&context] { context.TryCancel(); });
    done.WaitForNotification();
  }
  if (!status.ok()) return rpc::ToAbsl(status);
  return response;
}

}  // namespace

// ---------------------------------------------------------------- GrpcDispatcherClient

GrpcDispatcherClient::GrpcDispatcherClient(std::shared_ptr<grpc::Channel> channel, absl::Duration call_timeout)
    : stub_(service::Dispatcher::NewStub(std::move(channel))), call_timeout_(call_timeout) {}

absl::StatusOr<service::WorkerHeartbeatResponse> GrpcDispatcherClient::WorkerHeartbeat(
    const service::WorkerHeartbeatRequest& request, const CallOptions& options) {
  return Call<service::WorkerHeartbeatRequest, service::WorkerHeartbeatResponse>(
      request, options, call_timeout_, [this](auto* c, auto* req, auto* resp, auto cb) {
        stub_->async()->WorkerHeartbeat(c, req, resp, std::move(cb));
      });
}

absl::StatusOr<service::GetSplitsResponse> GrpcDispatcherClient::GetSplits(const service::GetSplitsRequest& request,
                                                                           const CallOptions& options) {
  return Call<service::GetSplitsRequest, service::GetSplitsResponse>(
      request, options, call_timeout_,
      [this](auto* c, auto* req, auto* resp, auto cb) { stub_->async()->GetSplits(c, req, resp, std::move(cb)); });
}

absl::Status GrpcDispatcherClient::WorkerDeregister(const service::WorkerDeregisterRequest& request,
                                                    const CallOptions& options) {
  return Call<service::WorkerDeregisterRequest, service::WorkerDeregisterResponse>(
             request, options, call_timeout_,
             [this](auto* c, auto* req, auto* resp, auto cb) {
               stub_->async()->WorkerDeregister(c, req, resp, std::move(cb));
             })
      .status();
}

// ---------------------------------------------------------------- CallThreads

void CallThreads::Spawn(std::function<void()> fn) {
  std::list<Entry> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), threads_, it);
      it = next;
    }
    threads_.emplace_back();
    Entry* entry = &threads_.back();  // list nodes do not move
    ++active_;
    entry->thread = std::thread([this, entry, fn = std::move(fn)] {
      fn();
      absl::MutexLock lock(&mu_);
      entry->done = true;
      --active_;
    });
  }
  for (auto& e : finished) e.thread.join();
}

size_t CallThreads::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

bool CallThreads::WaitForIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

void CallThreads::JoinAll() {
  std::list<Entry> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(threads_);
  }
  for (auto& e : all) e.thread.join();
}

// ---------------------------------------------------------------- WorkerService

namespace {

// One GetElements stream. Its sender thread runs WorkerImpl::StreamElements and queues encoded
// responses (at most kMaxQueuedWrites); gRPC allows one write in flight, and OnWriteDone starts
// the next queued one on gRPC's thread at once, so the stream never waits for the sender thread
// to wake up. OnWriteDone/OnCancel/OnDone run on gRPC's threads. The reactor deletes itself in
// OnDone, which gRPC calls only after Finish, and Finish is the sender thread's last act.
class ElementStreamReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ElementStreamReactor(WorkerImpl* worker, absl::StatusOr<service::GetElementsRequest> request,
                       const ShmConfig& shm)
      : worker_(worker), request_(std::move(request)), shm_config_(shm) {}

  void Run() {
    absl::Status status;
    if (!request_.ok()) {
      status = request_.status();
    } else if (worker_ == nullptr) {
      status = absl::UnavailableError("the worker is starting up");
    } else {
      // Same host and allowed: large payloads go through a shared-memory ring (shm_stream.h).
      std::unique_ptr<ShmStream> shm = ShmStream::Open(shm_config_, *request_);
      ElementsResponse hello = shm != nullptr ? shm->Hello() : ElementsResponse();
      if (shm != nullptr && !Write(hello)) {
        status = absl::CancelledError("the client closed the stream");
      } else {
        status = worker_->StreamElements(*request_, &cancel_, [this, &shm](ElementsResponse& r) {
          if (shm != nullptr) {
            const int64_t diverted = shm->diverted(), fallbacks = shm->fallbacks();
            shm->Divert(r);
            worker_->metrics().AddShm(shm->diverted() - diverted, shm->fallbacks() - fallbacks);
          }
          return Write(r);
        });
      }
    }
    // Every queued write must complete before Finish (and before OnDone can delete this reactor).
    if (!AwaitWritesDone() && status.ok()) status = absl::CancelledError("the client closed the stream");
    if (absl::IsCancelled(status) && cancel_.cancelled()) status = absl::CancelledError("the client cancelled the stream");
    Finish(rpc::ToGrpc(status));
  }

  void OnWriteDone(bool ok) override {
    grpc::ByteBuffer done;
    Pending next;
    {
      absl::MutexLock lock(&mu_);
      done.Swap(&in_flight_);  // released below, outside the lock
      if (!ok) {
        failed_ = true;
        queued_.clear();
        queued_batches_ = 0;
      }
      if (queued_.empty()) {
        writing_ = false;
        return;
      }
      next = std::move(queued_.front());
      queued_.pop_front();
      queued_batches_ -= next.batches;
    }
    // Encoded here, when it goes: until then the sender may have appended to it.
    grpc::ByteBuffer encoded = ToByteBuffer(EncodeElementsResponse(next.response));
    in_flight_.Swap(&encoded);
    StartWrite(&in_flight_);
  }
  void OnCancel() override { cancel_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  static constexpr size_t kMaxQueuedWrites = 2;

  // Queues `response` for writing (starting the write when none is in flight), waiting while
  // kMaxQueuedWrites responses are queued. A response queued behind the write in flight takes the
  // elements of the next one as long as it stays within the request's bounds (ElementsResponse::
  // CanAppend): when the stream is behind, batches leave as fewer, fuller messages, without
  // delaying any (none could go before the write in flight completes). Each batch still counts
  // towards kMaxQueuedWrites, so the sender waits (and the task buffer fills) as it did without
  // merging: an eager sender would wake for every element the producer pushes. False when a write
  // failed (the stream broke or was cancelled).
  bool Write(ElementsResponse& response) {
    const size_t bytes = response.bytes();
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return failed_ || !writing_ || queued_batches_ < kMaxQueuedWrites;
      };
      if (!room()) mu_.Await(absl::Condition(&room));
      if (failed_) return false;
      if (writing_) {
        ++queued_batches_;
        if (!queued_.empty() && queued_.back().response.CanAppend(response, queued_.back().bytes, bytes)) {
          Pending& last = queued_.back();
          last.response.elements.insert(last.response.elements.end(), std::make_move_iterator(response.elements.begin()),
                                        std::make_move_iterator(response.elements.end()));
          last.bytes += bytes;
          ++last.batches;
        } else {
          queued_.push_back(Pending{std::move(response), bytes, 1});
        }
        return true;
      }
      writing_ = true;
    }
    grpc::ByteBuffer next = ToByteBuffer(EncodeElementsResponse(response));
    in_flight_.Swap(&next);
    StartWrite(&in_flight_);
    return true;
  }

  // Waits until every queued write completed; false when one failed.
  bool AwaitWritesDone() {
    absl::MutexLock lock(&mu_);
    // OnWriteDone always comes, with ok=false when the stream broke or was cancelled.
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_; };
    mu_.Await(absl::Condition(&idle));
    return !failed_;
  }

  WorkerImpl* const worker_;
  const absl::StatusOr<service::GetElementsRequest> request_;
  const ShmConfig& shm_config_;
  CancelToken cancel_;
  absl::Mutex mu_;
  // The write in flight: set by whoever sets writing_ (Write) or keeps it set (OnWriteDone); only
  // one write is in flight, so only that thread touches it until the write completes.
  grpc::ByteBuffer in_flight_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  struct Pending {
    ElementsResponse response;
    size_t bytes = 0;  // response.bytes()
    size_t batches = 0;  // Write calls merged into it
  };
  std::deque<Pending> queued_ ABSL_GUARDED_BY(mu_);  // behind the write in flight, not yet encoded
  size_t queued_batches_ ABSL_GUARDED_BY(mu_) = 0;  // the sum of queued_'s batches
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

class ElementReactor : public grpc::ServerUnaryReactor {
 public:
  ElementReactor(WorkerImpl* worker, const service::GetElementsRequest* request, service::GetElementsResponse* response)
      : worker_(worker), request_(request), response_(response) {}

  void Run() {
    absl::Status status;
    if (worker_ == nullptr) {
      status = absl::UnavailableError("the worker is starting up");
    } else {
      auto result = worker_->GetElement(*request_, &cancel_);
      if (result.ok()) {
        response_->Swap(&*result);
      } else {
        status = result.status();
      }
    }
    Finish(rpc::ToGrpc(status));
  }
  void OnCancel() override { cancel_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  WorkerImpl* const worker_;
  const service::GetElementsRequest* const request_;
  service::GetElementsResponse* const response_;
  CancelToken cancel_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerService::GetElements(grpc::CallbackServerContext*,
                                                                        const grpc::ByteBuffer* request) {
  auto* reactor = new ElementStreamReactor(worker_.load(), ParseRequest(request), shm_);
  ++streams_started_;
  threads_.Spawn([reactor] { reactor->Run(); });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::GetElement(grpc::CallbackServerContext* context,
                                                    const service::GetElementsRequest* request,
                                                    service::GetElementsResponse* response) {
  WorkerImpl* worker = worker_.load();
  if (worker != nullptr) {
    // Most requests can be answered at once (the round's data is ready): do that on gRPC's thread,
    // without waiting. Only a request that has to wait gets a thread of its own.
    CancelToken no_wait;
    no_wait.Cancel();
    auto result = worker->GetElement(*request, &no_wait);
    if (!absl::IsCancelled(result.status())) {
      if (result.ok()) response->Swap(&*result);
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      reactor->Finish(rpc::ToGrpc(result.status()));
      return reactor;
    }
  }
  auto* reactor = new ElementReactor(worker, request, response);
  threads_.Spawn([reactor] { reactor->Run(); });
  return reactor;
}

// ---------------------------------------------------------------- WorkerServer

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerServerOptions& options) {
  auto creds = rpc::MakeServerCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  std::unique_ptr<WorkerServer> server(new WorkerServer());
  server->service_ = std::make_unique<WorkerService>();
  server->service_->SetShm(options.shm);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *creds, &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Clients keep idle connections alive with pings (dataplane/rpc); allow them.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address,
                                               " (port in use, or a bad address); choose another --port"));
  }
  return server;
}

WorkerServer::~WorkerServer() { Shutdown(absl::Now()); }

void WorkerServer::Shutdown(absl::Time deadline) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(ToChrono(deadline));
  service_->threads().JoinAll();
}

void WorkerServer::GracefulShutdown(WorkerImpl& worker, absl::Duration budget) {
  const absl::Time start = absl::Now();
  // Phase budgets: hand dynamic-sharding input back for up to 30%, serve buffered data and bound
  // rounds until 50%, deregister by 70%, then stop.
  const absl::Time handback_until = start + budget * 0.3;
  const absl::Time serve_until = start + budget * 0.5;
  const absl::Time deregister_until = start + budget * 0.7;
  const absl::Time shutdown_until = start + budget * 0.85;
  // Dynamic-sharding tasks first hand their input back, as in a dispatcher-requested drain: the
  // splits go back at their readers' exact positions (not past the leases, as for a lost worker),
  // the pipelines flush what they read, and the clients read it — nothing is lost if they keep
  // reading within the budget.
  worker.HandBackInput();
  // (Not waiting for readers that are not there: with no stream open the rest is for the serve phase.)
  const bool handed_back = worker.WaitForHandBack(handback_until, [this] { return service_->threads().active() == 0; });
  worker.BeginDrain();
  // Tell the dispatcher at once, so it assigns nothing new here meanwhile.
  CallOptions draining_heartbeat;
  draining_heartbeat.deadline = serve_until;
  (void)worker.Heartbeat(draining_heartbeat);
  const bool rounds_done = worker.WaitForInFlightRounds(serve_until);
  const bool streams_done = service_->threads().WaitForIdle(serve_until);
  worker.StopHeartbeats(start + budget * 0.6);
  (void)worker.Deregister(deregister_until);
  Shutdown(shutdown_until);
  worker.Stop();
  SLUICE_LOG(Info, "worker stopped")
      .With("input_handed_back", handed_back)
      .With("rounds_completed", rounds_done)
      .With("streams_finished", streams_done)
      .With("shutdown_ms", absl::ToInt64Milliseconds(absl::Now() - start));
}

}  // namespace sluice::worker
