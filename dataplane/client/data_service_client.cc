#include "dataplane/client/data_service_client.h"

#include <grpcpp/grpcpp.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/runtime_tuning.h"
#include "dataplane/client/buffer_pool.h"
#include "dataplane/client/element_queue.h"
#include "dataplane/client/job_session.h"
#include "dataplane/client/round_reader.h"
#include "dataplane/client/service_rpc.h"
#include "dataplane/client/task_readers.h"
#include "dataplane/rpc/credentials.h"

namespace sluice::client {
namespace {

// SLUICE_SHARED_MEMORY=0 (or false/off) turns same-host shared memory off for every client of the
// process (e.g. from Python, without a code change).
bool SharedMemoryDisabledByEnvironment() {
  const char* env = std::getenv("SLUICE_SHARED_MEMORY");
  if (env == nullptr) return false;
  const std::string v(env);
  return v == "0" || v == "false" || v == "off" || v == "no";
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
  if (o.iteration < 0) return bad("iteration", absl::StrCat("must be >= 0 (0: the name's current one), got ", o.iteration));
  if (o.iteration > 0 && o.job_name.empty()) {
    return bad("iteration", absl::StrCat("set to ", o.iteration, " but job_name is empty; an iteration is a run of a named job"));
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
  if (o.dispatcher_timeout <= absl::ZeroDuration()) {
    return bad("dispatcher_timeout", "must be > 0 (InfiniteDuration: wait for the dispatcher forever)");
  }
  return absl::OkStatus();
}

class DataServiceClient::Impl final : public JobSession::Listener {
 public:
  explicit Impl(DataServiceClientOptions options)
      : opts_(std::move(options)),
        coordinated_(opts_.num_consumers > 0),
        queue_(ElementQueue::Limits{opts_.max_buffered_bytes, opts_.max_outstanding_requests},
               opts_.clock ? opts_.clock : [] { return absl::Now(); }, [this] { StopReading(); }) {}

  ~Impl() override { Shutdown(); }

  absl::Status Start();
  // Stops everything without joining (safe while other threads are inside GetNext).
  void Cancel() {
    queue_.Close();
    if (session_) session_->Cancel();
    StopReading();
  }
  absl::StatusOr<std::optional<pipeline::Element>> GetNext(std::optional<absl::Duration> timeout) {
    return queue_.Pop(timeout);
  }
  void BeginStep() { queue_.BeginStep(); }
  void EndStep() { queue_.EndStep(); }
  ClientStats Stats() const;
  absl::Status LastError() const { return queue_.last_error(); }

  const std::string& dataset_id() const { return dataset_id_; }
  int64_t job_id() const { return job_id_; }
  int64_t job_client_id() const { return job_client_id_; }
  int64_t iteration() const { return iteration_; }
  const std::string& client_host() const { return client_host_; }

  // JobSession::Listener (called on the heartbeat thread).
  void FillHeartbeat(service::ClientHeartbeatRequest* request) override {
    if (rounds_) rounds_->FillHeartbeat(request);
    queue_.FillMetrics(request->mutable_metrics());
    if (readers_) {
      for (const auto& [task_id, n] : readers_->received_by_task()) {
        auto* r = request->add_received();
        r->set_task_id(task_id);
        r->set_elements(n);
      }
    }
  }
  bool OnHeartbeat(const service::ClientHeartbeatResponse& response) override {
    job_finished_.store(response.job_finished());
    elements_lost_estimate_.store(response.elements_lost_estimate());
    if (rounds_) return rounds_->Update(response);
    readers_->Update({response.tasks().begin(), response.tasks().end()}, response.job_finished());
    return false;
  }
  void OnSessionError(absl::Status status) override { queue_.Fail(std::move(status)); }
  void OnDispatcherUnreachable(absl::Duration unreachable_for, const absl::Status& last_error) override;

 private:
  void Shutdown();
  // Stops the readers (after an error, or Cancel); they are joined by Shutdown.
  void StopReading() {
    if (readers_) readers_->StopAll();
    if (rounds_) rounds_->Stop();
  }

  const DataServiceClientOptions opts_;
  const bool coordinated_;
  std::string client_host_;
  std::string dataset_id_;
  int64_t job_id_ = 0;
  int64_t job_client_id_ = 0;
  int64_t iteration_ = 0;
  // Buffers of consumed elements, parsed into again (at most 256 buffers, 64 MiB).
  const std::shared_ptr<BufferPool> buffers_ = BufferPool::Create(256, 64 << 20);
  std::atomic<bool> job_finished_{false};  // as the last heartbeat answer said
  std::atomic<int64_t> elements_lost_estimate_{0};  // likewise
  std::atomic<bool> ended_without_dispatcher_{false};
  ElementQueue queue_;
  // Set in Start before any thread runs; the pieces run their own threads.
  std::unique_ptr<JobSession> session_;
  std::unique_ptr<WorkerRpc> workers_;
  std::unique_ptr<TaskReaderSet> readers_;  // non-coordinated reads
  std::unique_ptr<RoundReader> rounds_;     // coordinated reads
};

absl::Status DataServiceClient::Impl::Start() {
  if (auto s = ValidateOptions(opts_); !s.ok()) return s;
  client_host_ = ResolveClientHost(opts_.client_host);
  auto creds = rpc::MakeChannelCredentials(opts_.tls);
  if (!creds.ok()) return WithContext(creds.status(), "options.tls");
  grpc::ChannelArguments channel_args = rpc::MakeChannelArguments(opts_.max_message_bytes, opts_.tls.server_name_override);
  // gRPC's own reconnect backoff follows the client's, so a restarted peer is found again promptly.
  // (gRPC ignores values under 100 ms and would fall back to its 1 s default.)
  channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                      std::max(100, static_cast<int>(absl::ToInt64Milliseconds(opts_.initial_backoff))));
  // Not below rpc::kMinConnectTimeoutMs: gRPC uses it as the minimum connect timeout too.
  channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                      std::max(rpc::kMinConnectTimeoutMs, static_cast<int>(absl::ToInt64Milliseconds(opts_.initial_backoff))));
  channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(opts_.max_backoff)));

  JobSession::Options so;
  so.dispatcher_address = opts_.dispatcher_address;
  so.heartbeat_interval = opts_.heartbeat_interval;
  so.initial_backoff = opts_.initial_backoff;
  so.max_backoff = opts_.max_backoff;
  so.create_timeout = opts_.create_timeout;
  so.rpc_timeout = opts_.rpc_timeout;
  so.release_timeout = opts_.release_timeout;
  so.dispatcher_timeout = opts_.dispatcher_timeout;
  session_ = std::make_unique<JobSession>(
      so, MakeGrpcDispatcherRpc(grpc::CreateCustomChannel(opts_.dispatcher_address, *creds, channel_args)));

  service::GetOrCreateJobRequest job_req;
  service::JobSpec* spec = job_req.mutable_spec();
  spec->set_job_name(opts_.job_name);
  spec->set_dataset_id(opts_.dataset_id);
  spec->set_sharding(opts_.sharding);
  spec->set_num_consumers(opts_.num_consumers);
  if (opts_.cross_job_sharing.has_value()) spec->set_cross_job_sharing(*opts_.cross_job_sharing);
  spec->set_num_epochs(opts_.num_epochs);
  spec->set_compression(opts_.compression);
  spec->set_target_workers(opts_.target_workers);
  job_req.set_client_host(client_host_);
  if (coordinated_) job_req.set_consumer_index(opts_.consumer_index);
  job_req.set_iteration(opts_.iteration);
  if (auto s = session_->Open(opts_.pipeline, job_req); !s.ok()) return s;
  dataset_id_ = session_->dataset_id();
  job_id_ = session_->job_id();
  job_client_id_ = session_->job_client_id();
  iteration_ = session_->iteration();
  if (session_->iteration_over()) {
    // The readers of this name finished the requested iteration without this one: an empty pass.
    SLUICE_LOG(Info, "the requested iteration of the job is over; nothing to read")
        .With("dispatcher", opts_.dispatcher_address)
        .With("job_name", opts_.job_name)
        .With("iteration", iteration_);
    job_finished_.store(true);
    queue_.SetEnd();
    return absl::OkStatus();
  }
  SLUICE_LOG(Info, "data service client started")
      .With("dispatcher", opts_.dispatcher_address)
      .With("dataset_id", dataset_id_)
      .With("job_id", job_id_)
      .With("job_client_id", job_client_id_)
      .With("client_host", client_host_);

  workers_ = MakeGrpcWorkerRpc(*std::move(creds), std::move(channel_args));
  if (coordinated_) {
    RoundReader::Options ro;
    ro.job_client_id = job_client_id_;
    ro.consumer_index = opts_.consumer_index;
    ro.compression = opts_.compression;
    ro.max_element_bytes = opts_.max_element_bytes;
    ro.rpc_timeout = opts_.rpc_timeout;
    ro.initial_backoff = opts_.initial_backoff;
    ro.max_backoff = opts_.max_backoff;
    rounds_ = std::make_unique<RoundReader>(ro, workers_.get(), &queue_);
  } else {
    TaskReaderSet::Options ro;
    ro.job_client_id = job_client_id_;
    ro.target_workers = opts_.target_workers;
    ro.sharding = opts_.sharding;
    ro.client_host = client_host_;
    ro.compression = opts_.compression;
    ro.max_elements_per_response = opts_.max_elements_per_response;
    ro.max_element_bytes = opts_.max_element_bytes;
    ro.shared_memory = opts_.shared_memory && !SharedMemoryDisabledByEnvironment();
    ro.initial_backoff = opts_.initial_backoff;
    ro.max_backoff = opts_.max_backoff;
    readers_ = std::make_unique<TaskReaderSet>(ro, workers_.get(), &queue_, buffers_);
  }
  session_->Start(this);
  if (rounds_) rounds_->Start();
  return absl::OkStatus();
}

void DataServiceClient::Impl::OnDispatcherUnreachable(absl::Duration unreachable_for, const absl::Status& last_error) {
  // Every task this client reads has handed out its end: that is all the data there will be,
  // unless the dispatcher, back, added tasks (a worker joining a parallel-epochs job) — which it
  // cannot while it is gone.
  if (readers_ && !ended_without_dispatcher_.load() && readers_->EndIfEveryTaskEnded([&] {
        ended_without_dispatcher_.store(true);  // before the end can be seen
        SLUICE_LOG(Warning, "every task ended and the dispatcher is unreachable: ending without its word")
            .With("dispatcher", opts_.dispatcher_address)
            .With("unreachable_s", absl::ToDoubleSeconds(unreachable_for))
            .With("error", std::string(last_error.message()));
      })) {
    return;
  }
  if (ended_without_dispatcher_.load()) return;
  // Otherwise the client cannot tell an end from an outage: once nothing has arrived for as long
  // either, waiting on is waiting forever.
  const std::optional<absl::Time> idle_since = queue_.IdleSince();
  if (!idle_since || absl::Now() - *idle_since < opts_.dispatcher_timeout) return;
  queue_.Fail(absl::UnavailableError(absl::StrCat(
      "the dispatcher at ", opts_.dispatcher_address, " has not answered for ", absl::FormatDuration(absl::Trunc(unreachable_for, absl::Milliseconds(1))),
      " (last error: ", last_error.message(), ") and no element has arrived for as long, so the end of job ",
      job_id_, " cannot be confirmed; giving up after options.dispatcher_timeout ",
      absl::FormatDuration(opts_.dispatcher_timeout), " (restart the dispatcher with its journal, or raise the timeout)")));
}

void DataServiceClient::Impl::Shutdown() {
  Cancel();
  if (!session_) return;  // Start failed before the session existed
  // The heartbeat thread starts readers; once it is joined no new reader can appear.
  session_->Join();
  if (rounds_) rounds_->Join();
  if (readers_) readers_->JoinAll();
  service::ClientHeartbeatRequest last;
  FillHeartbeat(&last);
  session_->Release(std::move(last));
}

ClientStats DataServiceClient::Impl::Stats() const {
  const ElementQueue::Stats q = queue_.stats();
  ClientStats s;
  s.wait_seconds_total = q.stall.wait_seconds;
  s.step_seconds_total = q.stall.step_seconds;
  s.steps_total = q.stall.steps;
  s.elements_total = q.elements_total;
  s.bytes_total = q.bytes_total;
  s.buffered_elements = q.buffered_elements;
  s.buffered_bytes = q.buffered_bytes;
  s.peak_buffered_bytes = q.peak_buffered_bytes;
  s.outstanding_requests = q.outstanding_requests;
  s.peak_outstanding_requests = q.peak_outstanding_requests;
  s.backpressure_waits = q.backpressure_waits;
  s.waiting_consumers = q.waiting_consumers;
  if (readers_) {
    s.active_readers = readers_->active_readers();
    s.reconnects = readers_->reconnects();
    s.elements_received_by_task = readers_->received_by_task();
  }
  if (rounds_) {
    s.active_readers += rounds_->running() ? 1 : 0;
    s.reconnects += rounds_->reconnects();
    s.current_round = rounds_->current_round();
    s.rounds_skipped = rounds_->rounds_skipped();
  }
  if (session_) {
    s.heartbeats_ok = session_->heartbeats_ok();
    s.heartbeat_failures = session_->heartbeat_failures();
  }
  s.job_finished = job_finished_.load();
  s.elements_lost_estimate = elements_lost_estimate_.load();
  s.ended_without_dispatcher = ended_without_dispatcher_.load();
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
const std::string& DataServiceClient::dataset_id() const { return impl_->dataset_id(); }
int64_t DataServiceClient::job_id() const { return impl_->job_id(); }
int64_t DataServiceClient::job_client_id() const { return impl_->job_client_id(); }
int64_t DataServiceClient::iteration() const { return impl_->iteration(); }
const std::string& DataServiceClient::client_host() const { return impl_->client_host(); }
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
