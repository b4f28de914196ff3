#include "operator/dispatcher_drainer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataservice.grpc.pb.h"
#include "local/worker_drain.h"

namespace sluice::op {
namespace {

constexpr size_t kMaxNamedItems = 5;  // in the progress message

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout);
}

std::string HostOf(const std::string& address) {
  auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

DrainProgress EvaluateDrain(const service::GetStateResponse& state) {
  std::vector<std::string> waiting;
  const int total = state.workers_size();
  int busy_workers = 0;
  for (const service::WorkerInfo& w : state.workers()) {
    if (!w.draining()) {
      waiting.push_back(absl::StrCat("worker ", w.address(), " (not draining yet)"));
      ++busy_workers;
    } else if (w.task_ids_size() > 0) {
      waiting.push_back(absl::StrCat("worker ", w.address(), " (", w.task_ids_size(),
                                     w.task_ids_size() == 1 ? " task" : " tasks", ")"));
      ++busy_workers;
    }
  }
  // A job's tasks may be done while its clients still read what the workers buffered: the drain
  // also waits for every client to release its job (or for the dispatcher to time it out).
  for (const service::JobInfo& j : state.jobs()) {
    if (j.num_clients() <= 0) continue;
    std::string name = j.spec().job_name().empty() ? absl::StrCat("job ", j.job_id())
                                                   : absl::StrCat("job ", j.job_id(), " '", j.spec().job_name(), "'");
    waiting.push_back(absl::StrCat(name, " (", j.num_clients(), j.num_clients() == 1 ? " client" : " clients",
                                   " reading)"));
  }
  DrainProgress progress;
  if (waiting.empty()) {
    progress.complete = true;
    progress.message = total == 0 ? "the dispatcher has no workers left"
                                  : absl::StrCat("the dispatcher reports ", total, total == 1 ? " worker" : " workers",
                                                 " drained, no tasks and no clients left");
    return progress;
  }
  size_t shown = std::min(waiting.size(), kMaxNamedItems);
  progress.message = absl::StrCat(
      "waiting for ", busy_workers, " of ", total, " workers and ", waiting.size() - busy_workers, " jobs: ",
      absl::StrJoin(waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
      waiting.size() > shown ? absl::StrCat(" and ", waiting.size() - shown, " more") : "");
  return progress;
}

DrainProgress EvaluateWorkersDrain(const service::GetStateResponse& state, const std::vector<std::string>& addresses) {
  DrainProgress progress;
  std::vector<std::string> waiting, drained;
  for (const std::string& address : addresses) {
    local::WorkerDrainStatus verdict = local::EvaluateWorkerDrain(state, address);
    (verdict.drained ? drained : waiting).push_back(absl::StrCat(address, " (", verdict.reason, ")"));
    progress.workers[address] = WorkerDrainVerdict{verdict.drained, std::move(verdict.reason)};
  }
  progress.complete = waiting.empty();
  const size_t total = progress.workers.size();
  if (progress.complete) {
    size_t shown = std::min(drained.size(), kMaxNamedItems);
    progress.message = absl::StrCat(
        "the dispatcher reports ", total, total == 1 ? " worker" : " workers", " drained: ",
        absl::StrJoin(drained.begin(), drained.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        drained.size() > shown ? absl::StrCat(" and ", drained.size() - shown, " more") : "");
  } else {
    size_t shown = std::min(waiting.size(), kMaxNamedItems);
    progress.message = absl::StrCat(
        "waiting for ", waiting.size(), " of ", total, " workers: ",
        absl::StrJoin(waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        waiting.size() > shown ? absl::StrCat(" and ", waiting.size() - shown, " more") : "");
  }
  return progress;
}

absl::StatusOr<DrainProgress> GrpcWorkerDrainer::Drain(const DrainWorkers& drain) {
  const std::string target = drain.dispatcher_endpoint.empty() ? drain.dispatcher_address : drain.dispatcher_endpoint;
  if (target.empty()) return absl::InvalidArgumentError("the DrainWorkers action names no dispatcher address");
  rpc::TlsOptions tls = options_.tls;
  if (tls.enabled() && tls.server_name_override.empty() && !drain.dispatcher_address.empty()) {
    tls.server_name_override = HostOf(drain.dispatcher_address);
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(target, tls);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<service::Dispatcher::Stub> stub = service::Dispatcher::NewStub(*channel);

  const bool scale_down = drain.scope == DrainScope::kScaleDown;
  service::DrainWorkersRequest request;
  if (scale_down) {  // exactly the workers a scale-down removes
    if (drain.worker_addresses.empty()) {
      return absl::InvalidArgumentError("the scale-down DrainWorkers action names no worker address");
    }
    for (const std::string& address : drain.worker_addresses) request.add_worker_addresses(address);
  } else {  // every worker of this dispatcher: the whole DataService goes
    request.set_all_workers(true);
  }
  service::DrainWorkersResponse drained;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.rpc_timeout));
    context.set_wait_for_ready(false);
    grpc::Status s = stub->DrainWorkers(&context, request, &drained);
    if (!s.ok()) {
      absl::Status status = rpc::ToAbsl(s);
      return absl::Status(status.code(), absl::StrCat("DrainWorkers at dispatcher ", target, ": ", status.message()));
    }
  }
  service::GetStateResponse state;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.rpc_timeout));
    grpc::Status s = stub->GetState(&context, service::GetStateRequest(), &state);
    if (!s.ok()) {
      absl::Status status = rpc::ToAbsl(s);
      return absl::Status(status.code(), absl::StrCat("GetState at dispatcher ", target, ": ", status.message()));
    }
  }
  return scale_down ? EvaluateWorkersDrain(state, drain.worker_addresses) : EvaluateDrain(state);
}

}  // namespace sluice::op
