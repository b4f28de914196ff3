#include "operator/dispatcher_auto_order.h"

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataservice.grpc.pb.h"

namespace sluice::op {

AutoOrderStatus AutoOrderFromState(const service::GetStateResponse& state) {
  AutoOrderStatus status;
  if (state.default_dataset_id().empty()) {
    status.message = "the dispatcher serves no default pipeline";
    return status;
  }
  auto it = state.auto_order().find(state.default_dataset_id());
  if (it == state.auto_order().end()) {
    status.message = "the dispatcher reports no AutoOrder for its pipeline (was it started with --auto_order off?)";
    return status;
  }
  const pipeline::AutoOrderReport& r = it->second;
  status.mode = r.mode();
  status.outcome = r.outcome();
  status.original_order = absl::StrJoin(r.original_order(), " -> ");
  status.chosen_order = absl::StrJoin(r.chosen_order(), " -> ");
  status.predicted_speedup = r.predicted_speedup();
  status.measured_speedup = r.measured_speedup();
  status.message = r.reason();
  return status;
}

absl::StatusOr<AutoOrderStatus> GrpcAutoOrderReader::Read(const ReadAutoOrder& read) {
  const std::string target = read.dispatcher_endpoint.empty() ? read.dispatcher_address : read.dispatcher_endpoint;
  if (target.empty()) return absl::InvalidArgumentError("the ReadAutoOrder action names no dispatcher address");
  rpc::TlsOptions tls = options_.tls;
  if (tls.enabled() && tls.server_name_override.empty() && !read.dispatcher_address.empty()) {
    const auto colon = read.dispatcher_address.rfind(':');
    tls.server_name_override = colon == std::string::npos ? read.dispatcher_address : read.dispatcher_address.substr(0, colon);
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(target, tls);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<service::Dispatcher::Stub> stub = service::Dispatcher::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(options_.rpc_timeout));
  service::GetStateResponse state;
  grpc::Status s = stub->GetState(&context, service::GetStateRequest(), &state);
  if (!s.ok()) {
    absl::Status status = rpc::ToAbsl(s);
    return absl::Status(status.code(), absl::StrCat("GetState at dispatcher ", target, ": ", status.message()));
  }
  return AutoOrderFromState(state);
}

}  // namespace sluice::op
