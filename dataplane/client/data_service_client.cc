#include "dataplane/client/data_service_client.h"

#include <grpcpp/grpcpp.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/runtime_tuning.h"
#include "dataplane/client/backoff.h"
#include "dataplane/client/buffer_pool.h"
#include "dataplane/client/element_decoder.h"
#include "dataplane/client/round_robin.h"
#include "dataplane/client/stall_meter.h"
#include "dataplane/client/task_selection.h"
#include "dataservice.grpc.pb.h"

namespace sluice::client {
namespace {

// Reconnecting: this client uses gRPC's synchronous API, whose calls are the only thing that
// drives (polls) a channel's connection attempts; a call that fails fast on a broken channel
// leaves the attempt to gRPC's backup poller, which runs every 5 s. So after a failure the retry
// is made with wait_for_ready: it waits, polling, until the channel connects or its deadline
// passes — a restarted dispatcher or worker is found again within one connection attempt (was
// 5-15 s). The first attempt still fails fast, so an outage is noticed at once.

// Errors that retrying cannot fix: the request or the configuration is wrong.
bool IsPermanent(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::DATA_LOSS:
      return true;
    default:
      return false;
  }
}

// What a reader does after a failed worker call.
enum class WorkerErrorAction {
  kRetry,     // transport trouble or a restarting worker: retry while the dispatcher lists the task
  kRetryFew,  // ambiguous (gRPC reports some transport failures as INTERNAL/UNKNOWN): retry a few times
  kFail,      // the worker's answer (a pipeline error, a rejected request): the client's error
};
constexpr int kMaxAmbiguousFailures = 3;

WorkerErrorAction ClassifyWorkerError(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::NOT_FOUND:  // a restarted worker that does not know the task yet
      return WorkerErrorAction::kRetry;
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      return WorkerErrorAction::kRetryFew;
    default:
      return WorkerErrorAction::kFail;
  }
}

// Errors worth retrying while Create() runs: the dispatcher is not (yet) reachable or busy.
bool IsRetriableAtCreate(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::RESOURCE_EXHAUSTED || code == grpc::StatusCode::ABORTED;
}

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace

std::string ResolveClientHost(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("SLUICE_CLIENT_HOST"); env != nullptr && env[0] != '\0') return env;
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) return name;
  return "";
}

absl::Status ValidateOptions(const DataServiceClientOptions& o) {
  auto bad = [](absl::string_view field, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("options.", field, ": ", what));
  };
  if (o.dispatcher_address.empty()) return bad("dispatcher_address", "empty; pass the dispatcher's host:port");
  // Neither a pipeline nor a dataset_id: the dispatcher's default pipeline (it refuses the job
  // with FAILED_PRECONDITION when it was started without one).
  if (!service::ShardingPolicy_IsValid(o.sharding)) return bad("sharding", absl::StrCat("unknown value ", o.sharding));
  if (!service::Compression_IsValid(o.compression)) return bad("compression", absl::StrCat("unknown value ", o.compression));
  if (!service::TargetWorkers_IsValid(o.target_workers)) {
    return bad("target_workers", absl::StrCat("unknown value ", o.target_workers));
  }
  if (o.num_consumers < 0) return bad("num_consumers", absl::StrCat("must be >= 0, got ", o.num_consumers));
  if (o.num_consumers > 0) {
    if (o.consumer_index < 0 || o.consumer_index >= o.num_consumers) {
      return bad("consumer_index", absl::StrCat("must be in [0, num_consumers=", o.num_consumers, "), got ",
                                                o.consumer_index));
    }
    if (o.job_name.empty()) {
      return bad("job_name", absl::StrCat("empty, but num_consumers is ", o.num_consumers,
                                          ": coordinated reads need the consumers to share one job — give every "
                                          "consumer the same job_name (without it each client is a job of its own "
                                          "and no round ever completes)"));
    }
    if (o.target_workers == service::TARGET_WORKERS_LOCAL) {
      return bad("target_workers", "LOCAL cannot apply to coordinated reads: every consumer reads every worker in "
                                   "round-robin order (use AUTO or ANY)");
    }
  } else if (o.consumer_index >= 0) {
    return bad("consumer_index", absl::StrCat("set to ", o.consumer_index, " but num_consumers is 0; set both"));
  }
  if (o.num_epochs == 0 || o.num_epochs < -1) {
    return bad("num_epochs", absl::StrCat("must be >= 1 or -1 (forever), got ", o.num_epochs));
  }
  if (o.cross_job_sharing.value_or(false) && o.sharding != service::SHARDING_OFF) {
    return bad("cross_job_sharing", absl::StrCat("needs sharding OFF, got ", service::ShardingPolicy_Name(o.sharding)));
  }
  if (o.max_buffered_bytes <= 0) return bad("max_buffered_bytes", "must be > 0");
  if (o.max_outstanding_requests < 0) return bad("max_outstanding_requests", "must be >= 0 (0: no bound)");
  if (o.max_elements_per_response < 0) return bad("max_elements_per_response", "must be >= 0");
  if (o.max_element_bytes == 0) return bad("max_element_bytes", "must be > 0");
  if (o.max_message_bytes <= 0) return bad("max_message_bytes", "must be > 0");
  if (o.heartbeat_interval <= absl::ZeroDuration()) return bad("heartbeat_interval", "must be > 0");
  if (o.rpc_timeout <= absl::ZeroDuration()) return bad("rpc_timeout", "must be > 0");
  return absl::OkStatus();
}

namespace {

// One task being read by a streaming GetElements call. Fields other than `info` and `thread` are
// guarded by the client's mutex.
struct TaskReader {
  service::TaskInfo info;
  bool local = false;                      // the task runs on the client's host (fixed per task)
  std::thread thread;
  bool stop = false;                       // asked to stop (task no longer selected, shutdown)
  bool done = false;                       // the thread finished its loop
  grpc::ClientContext* context = nullptr;  // the open stream's context, for TryCancel
  bool reconnecting = false;               // `context` is a retry that has received nothing yet
};

// An element waiting in the client's buffer.
struct Buffered {
  pipeline::Element element;
  int64_t bytes = 0;
  bool ends_request = false;  // last element of a response: consuming it ends that outstanding request
};

}  // namespace

class DataServiceClient::Impl {
 public:
  explicit Impl(DataServiceClientOptions options)
      : opts_(std::move(options)),
        clock_(opts_.clock ? opts_.clock : [] { return absl::Now(); }),
        coordinated_(opts_.num_consumers > 0) {}

  ~Impl() { Shutdown(); }

  // Stops everything without joining (safe while other threads are inside GetNext).
  void Cancel() {
    absl::MutexLock l(&mu_);
    CancelAllLocked();
  }

  absl::Status Start();
  absl::StatusOr<std::optional<pipeline::Element>> GetNext(std::optional<absl::Duration> timeout);
  void BeginStep() {
    absl::MutexLock l(&mu_);
    stall_.BeginStep(clock_());
  }
  void EndStep() {
    absl::MutexLock l(&mu_);
    stall_.EndStep(clock_());
  }
  ClientStats Stats() const;
  absl::Status LastError() const {
    absl::MutexLock l(&mu_);
    return last_error_;
  }

  std::string dataset_id_;
  int64_t job_id_ = 0;
  int64_t job_client_id_ = 0;
  std::string client_host_;

 private:
  void Shutdown();
  void CancelAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename Call>
  absl::Status CallDispatcherAtCreate(absl::string_view method, absl::Time deadline, Call call);
  void HeartbeatLoop();
  void ApplyHeartbeatLocked(const service::ClientHeartbeatResponse& response,
                            std::vector<std::unique_ptr<TaskReader>>* retired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartReaderLocked(const service::TaskInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReaderLoop(TaskReader* reader);
  void RoundLoop();
  std::shared_ptr<grpc::Channel> WorkerChannelLocked(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for room in the buffer and takes an outstanding-request slot; false if `stop` or shutdown.
  // `reader`: the task reader asking (null: the round reader). Under AUTO locality with sharding
  // other than OFF, a remote task's reader waits while the buffer is a quarter full or more and a
  // local task is being read: local workers serve the trainer when they keep up, remote ones fill
  // in when they do not (and, their buffers full, stop taking splits meanwhile).
  bool AcquireSlotLocked(const bool* stop, const TaskReader* reader = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool YieldsToLocalLocked(const TaskReader& reader) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { --outstanding_; }
  void PushLocked(std::vector<DecodedElement> elements) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetFatalLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FinishedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits `delay` unless `stop` or shutdown comes first; false when stopping.
  bool SleepUnlessStopped(absl::Duration delay, const bool* stop) ABSL_LOCKS_EXCLUDED(mu_);
  void FillMetricsLocked(service::ClientMetrics* metrics) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DataServiceClientOptions opts_;
  const std::function<absl::Time()> clock_;
  const bool coordinated_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  grpc::ChannelArguments channel_args_;
  std::unique_ptr<service::Dispatcher::Stub> dispatcher_;
  // Buffers of consumed elements, parsed into again (at most 256 buffers, 64 MiB).
  const std::shared_ptr<BufferPool> buffers_ = BufferPool::Create(256, 64 << 20);
  std::thread heartbeat_thread_;
  std::thread round_thread_;

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);  // the sticky error GetNext last returned
  bool heard_ ABSL_GUARDED_BY(mu_) = false;  // a heartbeat was answered
  bool job_finished_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<service::TaskInfo> tasks_ ABSL_GUARDED_BY(mu_);  // as last listed by the dispatcher
  std::map<int64_t, std::unique_ptr<TaskReader>> readers_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> finished_tasks_ ABSL_GUARDED_BY(mu_);  // end_of_sequence received
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::deque<Buffered> queue_ ABSL_GUARDED_BY(mu_);
  int64_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t backpressure_waits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t heartbeats_ok_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t heartbeat_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t elements_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waiting_consumers_ ABSL_GUARDED_BY(mu_) = 0;
  StallMeter stall_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* heartbeat_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Coordinated reads.
  grpc::ClientContext* round_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool rounds_done_ ABSL_GUARDED_BY(mu_) = false;
  int64_t current_round_ ABSL_GUARDED_BY(mu_) = 0;     // the last round started (0 before any)
  bool round_started_ ABSL_GUARDED_BY(mu_) = false;
  // A worker is joining: do not start this round (or later) before a heartbeat answer without it.
  int64_t block_round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rounds_skipped_ ABSL_GUARDED_BY(mu_) = 0;
  bool round_reader_running_ ABSL_GUARDED_BY(mu_) = false;
};

template <typename Call>
absl::Status DataServiceClient::Impl::CallDispatcherAtCreate(absl::string_view method, absl::Time deadline, Call call) {
  Backoff backoff(opts_.initial_backoff, opts_.max_backoff);
  bool retrying = false;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(std::min(absl::Now() + opts_.rpc_timeout, deadline)));
    // A retry waits for the channel to connect (see "Reconnecting" at the top).
    ctx.set_wait_for_ready(retrying);
    retrying = true;
    const grpc::Status s = call(&ctx);
    if (s.ok()) return absl::OkStatus();
    const absl::Status status =
        WithContext(rpc::ToAbsl(s), absl::StrCat(method, " at dispatcher ", opts_.dispatcher_address));
    if (!IsRetriableAtCreate(s.error_code())) return status;
    const absl::Duration delay = backoff.Next();
    if (absl::Now() + delay >= deadline) {
      // Whether the last attempt was refused or timed out, the dispatcher was not reachable.
      return absl::UnavailableError(absl::StrCat(status.message(), " (", absl::StatusCodeToString(status.code()),
                                                 "; gave up after create_timeout ",
                                                 absl::FormatDuration(opts_.create_timeout), ")"));
    }
    SLUICE_LOG(Warning, "dispatcher not reachable; retrying")
        .With("method", method)
        .With("dispatcher", opts_.dispatcher_address)
        .With("error", s.error_message());
    absl::SleepFor(delay);
  }
}

absl::Status DataServiceClient::Impl::Start() {
  if (auto s = ValidateOptions(opts_); !s.ok()) return s;
  client_host_ = ResolveClientHost(opts_.client_host);
  auto creds = rpc::MakeChannelCredentials(opts_.tls);
  if (!creds.ok()) return WithContext(creds.status(), "options.tls");
  credentials_ = *std::move(creds);
  channel_args_ = rpc::MakeChannelArguments(opts_.max_message_bytes, opts_.tls.server_name_override);
  // gRPC's own reconnect backoff follows the client's, so a restarted peer is found again promptly.
  // (gRPC ignores values under 100 ms and would fall back to its 1 s default.)
  channel_args_.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                       std::max(100, static_cast<int>(absl::ToInt64Milliseconds(opts_.initial_backoff))));
  // Not below rpc::kMinConnectTimeoutMs: gRPC uses it as the minimum connect timeout too.
  channel_args_.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                       std::max(rpc::kMinConnectTimeoutMs, static_cast<int>(absl::ToInt64Milliseconds(opts_.initial_backoff))));
  channel_args_.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(opts_.max_backoff)));
  dispatcher_ = service::Dispatcher::NewStub(
      grpc::CreateCustomChannel(opts_.dispatcher_address, credentials_, channel_args_));
  const absl::Time deadline = absl::Now() + opts_.create_timeout;

  dataset_id_ = opts_.dataset_id;
  if (opts_.pipeline) {
    service::RegisterDatasetRequest req;
    *req.mutable_pipeline() = *opts_.pipeline;
    service::RegisterDatasetResponse resp;
    auto s = CallDispatcherAtCreate("RegisterDataset", deadline, [&](grpc::ClientContext* ctx) {
      return dispatcher_->RegisterDataset(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    if (!opts_.dataset_id.empty() && resp.dataset_id() != opts_.dataset_id) {
      return absl::FailedPreconditionError(absl::StrCat("options.dataset_id '", opts_.dataset_id,
                                                        "' differs from the registered pipeline's id '",
                                                        resp.dataset_id(), "'; pass one or the other"));
    }
    dataset_id_ = resp.dataset_id();
  }

  service::GetOrCreateJobRequest job_req;
  service::JobSpec* spec = job_req.mutable_spec();
  spec->set_job_name(opts_.job_name);
  spec->set_dataset_id(dataset_id_);
  spec->set_sharding(opts_.sharding);
  spec->set_num_consumers(opts_.num_consumers);
  if (opts_.cross_job_sharing.has_value()) spec->set_cross_job_sharing(*opts_.cross_job_sharing);
  spec->set_num_epochs(opts_.num_epochs);
  spec->set_compression(opts_.compression);
  spec->set_target_workers(opts_.target_workers);
  job_req.set_client_host(client_host_);
  if (coordinated_) job_req.set_consumer_index(opts_.consumer_index);
  service::GetOrCreateJobResponse job_resp;
  auto s = CallDispatcherAtCreate("GetOrCreateJob", deadline, [&](grpc::ClientContext* ctx) {
    return dispatcher_->GetOrCreateJob(ctx, job_req, &job_resp);
  });
  if (!s.ok()) return s;
  job_id_ = job_resp.job_id();
  job_client_id_ = job_resp.job_client_id();
  // The dispatcher names the dataset it resolved (its default pipeline's when none was given).
  if (!job_resp.dataset_id().empty()) dataset_id_ = job_resp.dataset_id();
  SLUICE_LOG(Info, "data service client started")
      .With("dispatcher", opts_.dispatcher_address)
      .With("dataset_id", dataset_id_)
      .With("job_id", job_id_)
      .With("job_client_id", job_client_id_)
      .With("client_host", client_host_);

  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  if (coordinated_) {
    {
      absl::MutexLock l(&mu_);
      round_reader_running_ = true;
    }
    round_thread_ = std::thread([this] { RoundLoop(); });
  }
  return absl::OkStatus();
}

void DataServiceClient::Impl::CancelAllLocked() {
  shutting_down_ = true;
  for (auto& [id, r] : readers_) {
    r->stop = true;
    if (r->context) r->context->TryCancel();
  }
  if (heartbeat_context_) heartbeat_context_->TryCancel();
  if (round_context_) round_context_->TryCancel();
}

void DataServiceClient::Impl::Shutdown() {
  {
    absl::MutexLock l(&mu_);
    CancelAllLocked();
  }
  // The heartbeat thread starts readers; once it is joined no new reader can appear.
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (round_thread_.joinable()) round_thread_.join();
  std::map<int64_t, std::unique_ptr<TaskReader>> readers;
  {
    absl::MutexLock l(&mu_);
    readers.swap(readers_);
  }
  for (auto& [id, r] : readers) {
    if (r->thread.joinable()) r->thread.join();
  }
  if (job_client_id_ != 0 && dispatcher_) {
    const absl::Time deadline = absl::Now() + opts_.release_timeout;  // for both calls together
    {
      // A last heartbeat carries the final metrics: what was read since the previous heartbeat
      // would otherwise never reach the dispatcher's sluice_client_* counters.
      service::ClientHeartbeatRequest hb;
      {
        absl::MutexLock l(&mu_);
        hb.set_job_client_id(job_client_id_);
        hb.set_current_round(current_round_);
        FillMetricsLocked(hb.mutable_metrics());
      }
      service::ClientHeartbeatResponse ignored;
      grpc::ClientContext hb_ctx;
      hb_ctx.set_deadline(absl::ToChronoTime(deadline));
      (void)dispatcher_->ClientHeartbeat(&hb_ctx, hb, &ignored);
    }
    service::ReleaseJobClientRequest req;
    req.set_job_client_id(job_client_id_);
    service::ReleaseJobClientResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    grpc::Status s = dispatcher_->ReleaseJobClient(&ctx, req, &resp);
    if (!s.ok()) {
      SLUICE_LOG(Warning, "could not release the job client")
          .With("job_client_id", job_client_id_)
          .With("error", s.error_message());
    }
  }
}

std::shared_ptr<grpc::Channel> DataServiceClient::Impl::WorkerChannelLocked(const std::string& address) {
  auto& channel = channels_[address];
  if (!channel) channel = grpc::CreateCustomChannel(address, credentials_, channel_args_);
  return channel;
}

bool DataServiceClient::Impl::YieldsToLocalLocked(const TaskReader& reader) const {
  if (opts_.target_workers != service::TARGET_WORKERS_AUTO || opts_.sharding == service::SHARDING_OFF || coordinated_) {
    return false;
  }
  if (reader.local) return false;
  for (const auto& [id, other] : readers_) {
    if (!other->stop && !other->done && other->local) return true;
  }
  return false;
}

bool DataServiceClient::Impl::AcquireSlotLocked(const bool* stop, const TaskReader* reader) {
  auto has_room = [this, reader] {
    mu_.AssertHeld();
    // Every reader may have one read in flight: a slot held by a reader whose task has nothing to
    // send yet must not starve the others (under dynamic sharding, that task's end can depend on
    // another task's elements being read).
    const int64_t slots = std::max<int64_t>(opts_.max_outstanding_requests, static_cast<int64_t>(readers_.size()));
    const int64_t budget = (reader != nullptr && YieldsToLocalLocked(*reader)) ? opts_.max_buffered_bytes / 4
                                                                              : opts_.max_buffered_bytes;
    return buffered_bytes_ < budget && (opts_.max_outstanding_requests == 0 || outstanding_ < slots);
  };
  auto can_go = [&] {
    mu_.AssertHeld();
    return *stop || shutting_down_ || !fatal_.ok() || has_room();
  };
  if (!can_go()) {
    ++backpressure_waits_;
    mu_.Await(absl::Condition(&can_go));
  }
  if (*stop || shutting_down_ || !fatal_.ok()) return false;
  ++outstanding_;
  peak_outstanding_ = std::max(peak_outstanding_, outstanding_);
  return true;
}

void DataServiceClient::Impl::PushLocked(std::vector<DecodedElement> elements) {
  if (elements.empty()) {
    ReleaseSlotLocked();
    return;
  }
  for (size_t i = 0; i < elements.size(); ++i) {
    const int64_t bytes = static_cast<int64_t>(elements[i].bytes);
    buffered_bytes_ += bytes;
    queue_.push_back(Buffered{std::move(elements[i].element), bytes, i + 1 == elements.size()});
  }
  peak_buffered_bytes_ = std::max(peak_buffered_bytes_, buffered_bytes_);
}

void DataServiceClient::Impl::SetFatalLocked(absl::Status status) {
  if (!fatal_.ok()) return;
  SLUICE_LOG(Error, "data service client failed").With("error", std::string(status.message()));
  fatal_ = std::move(status);
  // Nothing more will be handed out: stop fetching.
  for (auto& [id, r] : readers_) {
    r->stop = true;
    if (r->context) r->context->TryCancel();
  }
  if (round_context_) round_context_->TryCancel();
}

bool DataServiceClient::Impl::FinishedLocked() const {
  if (!queue_.empty()) return false;
  if (coordinated_) return rounds_done_;
  if (!job_finished_) return false;
  for (const auto& [id, r] : readers_) {
    if (!r->done) return false;
  }
  return true;
}

bool DataServiceClient::Impl::SleepUnlessStopped(absl::Duration delay, const bool* stop) {
  absl::MutexLock l(&mu_);
  auto stopping = [&] {
    mu_.AssertHeld();
    return *stop || shutting_down_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), delay);
  return !stopping();
}

void DataServiceClient::Impl::FillMetricsLocked(service::ClientMetrics* metrics) const {
  const StallMeter::Snapshot snap = stall_.Snap(clock_());
  metrics->set_wait_seconds_total(snap.wait_seconds);
  metrics->set_step_seconds_total(snap.step_seconds);
  metrics->set_elements_total(elements_total_);
  metrics->set_bytes_total(bytes_total_);
}

void DataServiceClient::Impl::HeartbeatLoop() {
  Backoff backoff(opts_.initial_backoff, opts_.max_backoff);
  bool reconnecting = false;  // the last heartbeat failed: the next one waits for the channel
  while (true) {
    service::ClientHeartbeatRequest req;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + opts_.rpc_timeout));
    ctx.set_wait_for_ready(reconnecting);
    {
      absl::MutexLock l(&mu_);
      if (shutting_down_) break;
      req.set_job_client_id(job_client_id_);
      req.set_current_round(current_round_);
      req.set_acked_block_round(block_round_);
      FillMetricsLocked(req.mutable_metrics());
      heartbeat_context_ = &ctx;
    }
    service::ClientHeartbeatResponse resp;
    const grpc::Status s = dispatcher_->ClientHeartbeat(&ctx, req, &resp);
    absl::Duration delay = opts_.heartbeat_interval;
    bool give_up = false;
    std::vector<std::unique_ptr<TaskReader>> retired;
    {
      absl::MutexLock l(&mu_);
      heartbeat_context_ = nullptr;
      if (shutting_down_) break;
      reconnecting = !s.ok();
      if (s.ok()) {
        ++heartbeats_ok_;
        backoff.Reset();
        ApplyHeartbeatLocked(resp, &retired);
        // While a worker joins, the consumers' answers are what the dispatcher waits for.
        if (block_round_ > 0) delay = std::min(delay, std::max(absl::Milliseconds(5), opts_.heartbeat_interval / 10));
      } else if (IsPermanent(s.error_code()) || s.error_code() == grpc::StatusCode::NOT_FOUND) {
        // The dispatcher forgot this client (restarted without its journal) or rejects it.
        ++heartbeat_failures_;
        SetFatalLocked(WithContext(rpc::ToAbsl(s), absl::StrCat("ClientHeartbeat for job_client_id ", job_client_id_,
                                                                " at dispatcher ", opts_.dispatcher_address)));
        give_up = true;
      } else {
        ++heartbeat_failures_;
        delay = backoff.Next();
      }
    }
    if (!s.ok() && !give_up) {
      SLUICE_LOG(Warning, "client heartbeat failed; retrying")
          .With("dispatcher", opts_.dispatcher_address)
          .With("error", s.error_message())
          .With("retry_ms", absl::ToInt64Milliseconds(delay));
    }
    // Readers of tasks no longer read were cancelled; join them outside the lock.
    for (auto& r : retired) {
      if (r->thread.joinable()) r->thread.join();
    }
    if (give_up) break;
    const bool never = false;
    if (!SleepUnlessStopped(delay, &never)) break;
  }
}

void DataServiceClient::Impl::ApplyHeartbeatLocked(const service::ClientHeartbeatResponse& response,
                                                   std::vector<std::unique_ptr<TaskReader>>* retired) {
  heard_ = true;
  job_finished_ = response.job_finished();
  tasks_.assign(response.tasks().begin(), response.tasks().end());
  if (coordinated_) {
    // The round reader reads tasks_ itself. A proposed block is held only if this consumer has
    // not started that round; otherwise its next heartbeat (current_round past it) makes the
    // dispatcher propose a later one.
    const int64_t proposed = response.block_round();
    const bool started = round_started_ && current_round_ >= proposed;
    block_round_ = (proposed > 0 && !started) ? proposed : 0;
    return;
  }

  TaskSelectionInput input;
  input.target_workers = opts_.target_workers;
  input.sharding = opts_.sharding;
  input.coordinated = false;
  input.client_host = client_host_;
  const std::vector<int64_t> selected = SelectTasks(tasks_, input);
  const std::set<int64_t> wanted(selected.begin(), selected.end());

  for (auto it = readers_.begin(); it != readers_.end();) {
    TaskReader& r = *it->second;
    // A reader between streams of a finished job can receive nothing more: every task of a
    // finished job has handed out its last element.
    // Nor can a reconnection that has received nothing: it waits for a channel (wait_for_ready)
    // to a worker that may be gone for good, and only a cancel ends that wait.
    const bool idle_after_finish = job_finished_ && (r.context == nullptr || r.reconnecting);
    // A finished job lists no tasks, but a stream still open may carry its task's last elements
    // (popped by the worker before the task reported finished): let it run to end_of_sequence.
    const bool unlisted = !wanted.count(it->first) && !job_finished_;
    if (unlisted || (idle_after_finish && !r.done)) {
      r.stop = true;
      if (r.context) r.context->TryCancel();
    }
    if (unlisted) {
      retired->push_back(std::move(it->second));
      it = readers_.erase(it);
    } else {
      ++it;
    }
  }
  if (shutting_down_ || !fatal_.ok() || job_finished_) return;
  for (const auto& t : tasks_) {
    if (wanted.count(t.task_id()) && !readers_.count(t.task_id()) && !finished_tasks_.count(t.task_id())) {
      StartReaderLocked(t);
    }
  }
}

void DataServiceClient::Impl::StartReaderLocked(const service::TaskInfo& info) {
  auto reader = std::make_unique<TaskReader>();
  reader->info = info;
  reader->local = IsLocalTask(info, client_host_);
  TaskReader* r = reader.get();
  readers_[info.task_id()] = std::move(reader);
  r->thread = std::thread([this, r] { ReaderLoop(r); });
}

void DataServiceClient::Impl::ReaderLoop(TaskReader* r) {
  const std::string where = absl::StrCat("worker ", r->info.worker_address(), " task ", r->info.task_id());
  Backoff backoff(opts_.initial_backoff, opts_.max_backoff);
  bool first_attempt = true;
  int ambiguous_failures = 0;  // consecutive INTERNAL/UNKNOWN failures without progress
  while (true) {
    std::shared_ptr<grpc::Channel> channel;
    grpc::ClientContext ctx;
    {
      absl::MutexLock l(&mu_);
      if (r->stop || shutting_down_) break;
      if (!first_attempt && job_finished_) break;  // a finished job's broken stream has nothing left
      channel = WorkerChannelLocked(r->info.worker_address());
      r->context = &ctx;
      r->reconnecting = !first_attempt;
      if (!first_attempt) ++reconnects_;
    }
    // A reconnection waits for the channel to connect (see "Reconnecting" at the top); a stop cancels it.
    ctx.set_wait_for_ready(!first_attempt);
    first_attempt = false;
    auto stub = service::Worker::NewStub(channel);
    service::GetElementsRequest req;
    req.set_task_id(r->info.task_id());
    req.set_job_client_id(job_client_id_);
    req.set_consumer_index(-1);
    req.set_max_elements(opts_.max_elements_per_response);
    req.set_compression(opts_.compression);
    std::unique_ptr<grpc::ClientReader<service::GetElementsResponse>> stream = stub->GetElements(&ctx, req);

    bool end_of_sequence = false;
    bool progressed = false;
    absl::Status bad;
    // Reused across reads: protobuf keeps its ElementData objects, and each element's data field
    // holds a recycled buffer (buffers_) for the next parse.
    service::GetElementsResponse resp;
    while (true) {
      {
        absl::MutexLock l(&mu_);
        if (!AcquireSlotLocked(&r->stop, r)) break;
      }
      if (!stream->Read(&resp)) {
        absl::MutexLock l(&mu_);
        ReleaseSlotLocked();
        break;
      }
      if (r->reconnecting) {
        absl::MutexLock l(&mu_);
        r->reconnecting = false;
      }
      std::vector<DecodedElement> decoded;
      decoded.reserve(static_cast<size_t>(resp.elements_size()));
      for (int i = 0; i < resp.elements_size(); ++i) {
        auto d = DecodeElementData(*resp.mutable_elements(i), opts_.max_element_bytes, buffers_.get());
        if (!d.ok()) {
          bad = absl::InvalidArgumentError(
              absl::StrCat(where, ": malformed response (element ", i, "): ", d.status().message()));
          break;
        }
        decoded.push_back(*std::move(d));
      }
      absl::MutexLock l(&mu_);
      // Elements decoded before a malformed one are still delivered, then the error.
      if (bad.ok() || !decoded.empty()) progressed = true;
      PushLocked(std::move(decoded));
      if (!bad.ok()) {
        SetFatalLocked(bad);
        break;
      }
      if (resp.end_of_sequence()) {
        end_of_sequence = true;
        break;
      }
    }
    // After the last element (or a bad one) do not wait for the server to close the stream.
    if (end_of_sequence || !bad.ok()) ctx.TryCancel();
    const grpc::Status status = stream->Finish();
    stream.reset();
    {
      absl::MutexLock l(&mu_);
      r->context = nullptr;
      r->reconnecting = false;
      if (end_of_sequence) {
        finished_tasks_.insert(r->info.task_id());
        break;
      }
      if (!bad.ok() || r->stop || shutting_down_ || !fatal_.ok()) break;
      if (job_finished_) break;  // a finished job's broken stream has nothing left to deliver
      if (progressed) ambiguous_failures = 0;
      const WorkerErrorAction action =
          status.ok() ? WorkerErrorAction::kRetry : ClassifyWorkerError(status.error_code());
      if (action == WorkerErrorAction::kFail ||
          (action == WorkerErrorAction::kRetryFew && ++ambiguous_failures > kMaxAmbiguousFailures)) {
        SetFatalLocked(WithContext(rpc::ToAbsl(status), where));
        break;
      }
    }
    if (progressed) backoff.Reset();
    const absl::Duration delay = backoff.Next();
    SLUICE_LOG(Warning, "worker stream ended; reconnecting")
        .With("worker", r->info.worker_address())
        .With("task_id", r->info.task_id())
        .With("error", status.ok() ? std::string("stream closed without end_of_sequence") : status.error_message())
        .With("retry_ms", absl::ToInt64Milliseconds(delay));
    if (!SleepUnlessStopped(delay, &r->stop)) break;
  }
  absl::MutexLock l(&mu_);
  r->context = nullptr;
  r->done = true;
}

void DataServiceClient::Impl::RoundLoop() {
  Backoff backoff(opts_.initial_backoff, opts_.max_backoff);
  int64_t round = 0;
  int ambiguous_failures = 0;  // consecutive INTERNAL/UNKNOWN failures
  while (true) {
    service::TaskInfo task;
    grpc::ClientContext ctx;
    std::shared_ptr<grpc::Channel> channel;
    {
      absl::MutexLock l(&mu_);
      auto ready = [&] {
        mu_.AssertHeld();
        if (shutting_down_ || !fatal_.ok() || job_finished_) return true;
        return heard_ && !tasks_.empty() && (block_round_ == 0 || round < block_round_);
      };
      mu_.Await(absl::Condition(&ready));
      if (shutting_down_ || !fatal_.ok()) break;
      if (tasks_.empty()) break;  // the job finished with no task left
      const bool never = false;
      if (!AcquireSlotLocked(&never)) break;
      // The task list and the block may have changed while waiting for room: decide now.
      std::optional<int64_t> id = TaskForRound(tasks_, round);
      if (!id && !tasks_.empty()) {
        // Every task starts later than `round` (this consumer joined late): all consumers jump
        // to the first round a task serves.
        int64_t first = tasks_.front().starting_round();
        for (const auto& t : tasks_) first = std::min(first, t.starting_round());
        round = std::max(round, first);
        id = TaskForRound(tasks_, round);
      }
      if (!id || (block_round_ > 0 && !job_finished_ && round >= block_round_)) {
        // No task left (the job finished), or a worker is joining at or before this round: wait.
        ReleaseSlotLocked();
        if (!id && (tasks_.empty() || job_finished_)) break;
        continue;
      }
      for (const auto& t : tasks_) {
        if (t.task_id() == *id) task = t;
      }
      current_round_ = round;
      round_started_ = true;
      channel = WorkerChannelLocked(task.worker_address());
      round_context_ = &ctx;
    }
    const std::string where =
        absl::StrCat("worker ", task.worker_address(), " task ", task.task_id(), " round ", round);
    service::GetElementsRequest req;
    req.set_task_id(task.task_id());
    req.set_job_client_id(job_client_id_);
    req.set_consumer_index(opts_.consumer_index);
    req.set_round(round);
    req.set_max_elements(1);
    req.set_compression(opts_.compression);
    req.set_allow_skip_round(true);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + opts_.rpc_timeout));
    service::GetElementsResponse resp;
    const grpc::Status status = service::Worker::NewStub(channel)->GetElement(&ctx, req, &resp);

    absl::Status bad;
    std::vector<DecodedElement> decoded;
    if (status.ok() && !resp.end_of_sequence() && !resp.round_skipped()) {
      if (resp.elements_size() != 1) {
        bad = absl::InvalidArgumentError(
            absl::StrCat(where, ": malformed response: ", resp.elements_size(), " elements (want exactly 1)"));
      } else if (resp.elements(0).round() != round) {
        bad = absl::InvalidArgumentError(
            absl::StrCat(where, ": malformed response: element is for round ", resp.elements(0).round()));
      } else {
        auto d = DecodeElementData(*resp.mutable_elements(0), opts_.max_element_bytes);
        if (d.ok()) {
          decoded.push_back(*std::move(d));
        } else {
          bad = absl::InvalidArgumentError(absl::StrCat(where, ": malformed response: ", d.status().message()));
        }
      }
    }
    bool retry = false;
    if (status.ok()) ambiguous_failures = 0;
    {
      absl::MutexLock l(&mu_);
      round_context_ = nullptr;
      if (shutting_down_) {
        ReleaseSlotLocked();
        break;
      }
      if (!bad.ok()) {
        ReleaseSlotLocked();
        SetFatalLocked(bad);
        break;
      }
      if (!status.ok()) {
        ReleaseSlotLocked();
        const WorkerErrorAction action = ClassifyWorkerError(status.error_code());
        if (action == WorkerErrorAction::kFail ||
            (action == WorkerErrorAction::kRetryFew && ++ambiguous_failures > kMaxAmbiguousFailures)) {
          SetFatalLocked(WithContext(rpc::ToAbsl(status), where));
          break;
        }
        if (job_finished_) break;
        ++reconnects_;
        retry = true;
      } else if (resp.end_of_sequence()) {
        ReleaseSlotLocked();
        break;
      } else if (resp.round_skipped()) {
        ReleaseSlotLocked();
        ++rounds_skipped_;
        ++round;
      } else {
        PushLocked(std::move(decoded));
        ++round;
      }
    }
    if (retry) {
      // The worker may be restarting, or gone: the next heartbeat drops its task and the round
      // is asked of the task that serves it then.
      const absl::Duration delay = backoff.Next();
      SLUICE_LOG(Warning, "coordinated read failed; retrying")
          .With("where", where)
          .With("error", status.error_message())
          .With("retry_ms", absl::ToInt64Milliseconds(delay));
      const bool never = false;
      if (!SleepUnlessStopped(delay, &never)) break;
    } else {
      backoff.Reset();
    }
  }
  absl::MutexLock l(&mu_);
  rounds_done_ = true;
  round_reader_running_ = false;
}

absl::StatusOr<std::optional<pipeline::Element>> DataServiceClient::Impl::GetNext(
    std::optional<absl::Duration> timeout) {
  const absl::Time start = clock_();
  absl::MutexLock l(&mu_);
  auto ready = [this] {
    mu_.AssertHeld();
    return !queue_.empty() || !fatal_.ok() || shutting_down_ || FinishedLocked();
  };
  ++waiting_consumers_;
  if (timeout) {
    mu_.AwaitWithTimeout(absl::Condition(&ready), *timeout);
  } else {
    mu_.Await(absl::Condition(&ready));
  }
  --waiting_consumers_;
  const absl::Time end = clock_();
  if (shutting_down_) {
    stall_.RecordWait(start, end, StallMeter::Outcome::kNothing);
    last_error_ = absl::CancelledError("the data service client was cancelled");
    return last_error_;
  }
  if (!queue_.empty()) {
    Buffered b = std::move(queue_.front());
    queue_.pop_front();
    buffered_bytes_ -= b.bytes;
    if (b.ends_request) ReleaseSlotLocked();
    ++elements_total_;
    bytes_total_ += b.bytes;
    stall_.RecordWait(start, end, StallMeter::Outcome::kElement);
    return std::optional<pipeline::Element>(std::move(b.element));
  }
  if (!fatal_.ok()) {
    stall_.RecordWait(start, end, StallMeter::Outcome::kNothing);
    last_error_ = fatal_;
    return fatal_;
  }
  if (FinishedLocked()) {
    stall_.RecordWait(start, end, StallMeter::Outcome::kEnd);
    return std::optional<pipeline::Element>();
  }
  stall_.RecordWait(start, end, StallMeter::Outcome::kNothing);
  return absl::DeadlineExceededError(
      absl::StrCat("no element within ", absl::FormatDuration(timeout.value_or(absl::ZeroDuration()))));
}

ClientStats DataServiceClient::Impl::Stats() const {
  absl::MutexLock l(&mu_);
  ClientStats s;
  const StallMeter::Snapshot snap = stall_.Snap(clock_());
  s.wait_seconds_total = snap.wait_seconds;
  s.step_seconds_total = snap.step_seconds;
  s.steps_total = snap.steps;
  s.elements_total = elements_total_;
  s.bytes_total = bytes_total_;
  s.buffered_elements = static_cast<int64_t>(queue_.size());
  s.buffered_bytes = buffered_bytes_;
  s.peak_buffered_bytes = peak_buffered_bytes_;
  s.outstanding_requests = outstanding_;
  s.peak_outstanding_requests = peak_outstanding_;
  s.backpressure_waits = backpressure_waits_;
  for (const auto& [id, r] : readers_) {
    if (!r->done) ++s.active_readers;
  }
  if (round_reader_running_) ++s.active_readers;
  s.reconnects = reconnects_;
  s.heartbeats_ok = heartbeats_ok_;
  s.heartbeat_failures = heartbeat_failures_;
  s.current_round = current_round_;
  s.rounds_skipped = rounds_skipped_;
  s.job_finished = job_finished_;
  s.waiting_consumers = waiting_consumers_;
  return s;
}

// ---------------------------------------------------------------- public wrapper

DataServiceClient::DataServiceClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DataServiceClient::~DataServiceClient() = default;

absl::StatusOr<std::unique_ptr<DataServiceClient>> DataServiceClient::Create(DataServiceClientOptions options) {
  TuneRuntime();  // once per process; see common/runtime_tuning.h
  auto impl = std::make_unique<Impl>(std::move(options));
  if (auto s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<DataServiceClient>(new DataServiceClient(std::move(impl)));
}

absl::StatusOr<std::optional<pipeline::Element>> DataServiceClient::GetNext() { return impl_->GetNext(std::nullopt); }
absl::StatusOr<std::optional<pipeline::Element>> DataServiceClient::GetNext(absl::Duration timeout) {
  return impl_->GetNext(timeout);
}
void DataServiceClient::Cancel() { impl_->Cancel(); }
void DataServiceClient::BeginStep() { impl_->BeginStep(); }
void DataServiceClient::EndStep() { impl_->EndStep(); }
ClientStats DataServiceClient::stats() const { return impl_->Stats(); }
const std::string& DataServiceClient::dataset_id() const { return impl_->dataset_id_; }
int64_t DataServiceClient::job_id() const { return impl_->job_id_; }
int64_t DataServiceClient::job_client_id() const { return impl_->job_client_id_; }
const std::string& DataServiceClient::client_host() const { return impl_->client_host_; }
absl::Status DataServiceClient::status() const { return impl_->LastError(); }

void ElementIterator::Advance() {
  current_.reset();
  if (client_ == nullptr) return;
  absl::StatusOr<std::optional<pipeline::Element>> next = client_->GetNext();
  if (!next.ok() || !next->has_value()) {
    client_ = nullptr;  // the end (status() tells a clean end from an error)
    return;
  }
  current_ = *std::move(*next);
}

}  // namespace sluice::client
