#include "dataplane/client/job_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dataplane/client/retry_policy.h"

namespace sluice::client {

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

JobSession::JobSession(Options options, std::unique_ptr<DispatcherRpc> rpc)
    : opts_(std::move(options)), rpc_(std::move(rpc)) {}

JobSession::~JobSession() {
  Cancel();
  Join();
}

template <typename Response, typename Call>
absl::StatusOr<Response> JobSession::CallAtCreate(absl::string_view method, absl::Time deadline, Call call) {
  RetryPolicy policy(RetryPolicy::Peer::kDispatcherAtCreate, opts_.initial_backoff, opts_.max_backoff);
  while (true) {
    CallOptions o;
    o.deadline = std::min(absl::Now() + opts_.rpc_timeout, deadline);
    o.wait_for_ready = policy.wait_for_ready();
    absl::StatusOr<Response> r = call(o);
    if (r.ok()) return r;
    const absl::Status status =
        WithContext(r.status(), absl::StrCat(method, " at dispatcher ", opts_.dispatcher_address));
    const RetryPolicy::Decision d = policy.OnFailure(r.status().code());
    if (!d.retry) return status;
    if (absl::Now() + d.delay >= deadline) {
      // Whether the last attempt was refused or timed out, the dispatcher was not reachable.
      return absl::UnavailableError(absl::StrCat(status.message(), " (", absl::StatusCodeToString(status.code()),
                                                 "; gave up after create_timeout ",
                                                 absl::FormatDuration(opts_.create_timeout), ")"));
    }
    SLUICE_LOG(Warning, "dispatcher not reachable; retrying")
        .With("method", method)
        .With("dispatcher", opts_.dispatcher_address)
        .With("error", std::string(r.status().message()));
    absl::SleepFor(d.delay);
  }
}

absl::Status JobSession::Open(const std::optional<pipeline::PipelineDef>& pipeline,
                              service::GetOrCreateJobRequest request) {
  const absl::Time deadline = absl::Now() + opts_.create_timeout;
  const std::string given_dataset_id = request.spec().dataset_id();
  if (pipeline) {
    service::RegisterDatasetRequest req;
    *req.mutable_pipeline() = *pipeline;
    auto resp = CallAtCreate<service::RegisterDatasetResponse>(
        "RegisterDataset", deadline, [&](const CallOptions& o) { return rpc_->RegisterDataset(req, o); });
    if (!resp.ok()) return resp.status();
    if (!given_dataset_id.empty() && resp->dataset_id() != given_dataset_id) {
      return absl::FailedPreconditionError(absl::StrCat("options.dataset_id '", given_dataset_id,
                                                        "' differs from the registered pipeline's id '",
                                                        resp->dataset_id(), "'; pass one or the other"));
    }
    request.mutable_spec()->set_dataset_id(resp->dataset_id());
  }
  dataset_id_ = request.spec().dataset_id();
  auto job = CallAtCreate<service::GetOrCreateJobResponse>(
      "GetOrCreateJob", deadline, [&](const CallOptions& o) { return rpc_->GetOrCreateJob(request, o); });
  if (!job.ok()) return job.status();
  job_id_ = job->job_id();
  job_client_id_ = job->job_client_id();
  iteration_ = job->iteration();
  iteration_over_ = job->job_finished();
  last_answer_ = absl::Now();
  // The dispatcher names the dataset it resolved (its default pipeline's when none was given).
  if (!job->dataset_id().empty()) dataset_id_ = job->dataset_id();
  return absl::OkStatus();
}

void JobSession::Start(Listener* listener) {
  thread_ = std::thread([this, listener] { HeartbeatLoop(listener); });
}

void JobSession::Join() {
  if (thread_.joinable()) thread_.join();
}

void JobSession::HeartbeatLoop(Listener* listener) {
  RetryPolicy policy(RetryPolicy::Peer::kDispatcherSession, opts_.initial_backoff, opts_.max_backoff);
  while (!stop_.cancelled()) {
    service::ClientHeartbeatRequest req;
    req.set_job_client_id(job_client_id_);
    listener->FillHeartbeat(&req);
    CallOptions o;
    const absl::Time now = absl::Now();
    o.deadline = now + opts_.rpc_timeout;
    // A retry waits for the channel (wait_for_ready) until its deadline; it does not wait past the
    // moment the dispatcher's absence reaches dispatcher_timeout, so the absence is noticed then.
    const absl::Time decide_at = last_answer_ + opts_.dispatcher_timeout;
    if (decide_at > now) o.deadline = std::min(o.deadline, decide_at);
    o.wait_for_ready = policy.wait_for_ready();
    o.cancel = &stop_;
    absl::StatusOr<service::ClientHeartbeatResponse> resp = rpc_->ClientHeartbeat(req, o);
    if (stop_.cancelled()) break;
    absl::Duration delay = opts_.heartbeat_interval;
    if (resp.ok()) {
      ++heartbeats_ok_;
      last_answer_ = absl::Now();
      policy.OnSuccess();
      // While a worker joins, the consumers' answers are what the dispatcher waits for.
      if (listener->OnHeartbeat(*resp)) {
        delay = std::min(delay, std::max(absl::Milliseconds(5), opts_.heartbeat_interval / 10));
      }
    } else {
      ++heartbeat_failures_;
      const RetryPolicy::Decision d = policy.OnFailure(resp.status().code());
      if (!d.retry) {
        // The dispatcher forgot this client (restarted without its journal) or rejects it.
        listener->OnSessionError(WithContext(resp.status(), absl::StrCat("ClientHeartbeat for job_client_id ",
                                                                         job_client_id_, " at dispatcher ",
                                                                         opts_.dispatcher_address)));
        break;
      }
      delay = d.delay;
      SLUICE_LOG(Warning, "client heartbeat failed; retrying")
          .With("dispatcher", opts_.dispatcher_address)
          .With("error", std::string(resp.status().message()))
          .With("retry_ms", absl::ToInt64Milliseconds(delay));
      const absl::Duration unreachable_for = absl::Now() - last_answer_;
      if (unreachable_for >= opts_.dispatcher_timeout) listener->OnDispatcherUnreachable(unreachable_for, resp.status());
    }
    if (stop_.WaitFor(delay)) break;
  }
}

void JobSession::Release(service::ClientHeartbeatRequest last) {
  if (job_client_id_ == 0) return;
  CallOptions o;
  o.deadline = absl::Now() + opts_.release_timeout;  // for both calls together
  // A last heartbeat carries the final metrics: what was read since the previous heartbeat would
  // otherwise never reach the dispatcher's sluice_client_* counters.
  last.set_job_client_id(job_client_id_);
  (void)rpc_->ClientHeartbeat(last, o);
  service::ReleaseJobClientRequest req;
  req.set_job_client_id(job_client_id_);
  if (absl::Status s = rpc_->ReleaseJobClient(req, o); !s.ok()) {
    SLUICE_LOG(Warning, "could not release the job client")
        .With("job_client_id", job_client_id_)
        .With("error", std::string(s.message()));
  }
}

}  // namespace sluice::client
