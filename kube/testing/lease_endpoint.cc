#include "kube/testing/lease_endpoint.h"

namespace sluice::kube::testing {

using nlohmann::json;

LeaseEndpoint::LeaseEndpoint(FixtureServer* server) {
  server->SetFallback([this](const RecordedRequest& r) -> std::optional<Reply> { return Handle(r); });
}

void LeaseEndpoint::Set(json lease) {
  absl::MutexLock lock(&mu_);
  lease_ = std::move(lease);
  lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
}

json LeaseEndpoint::Get() {
  absl::MutexLock lock(&mu_);
  return lease_;
}

void LeaseEndpoint::FailNextPut() {
  absl::MutexLock lock(&mu_);
  fail_next_put_ = true;
}

Reply LeaseEndpoint::Handle(const RecordedRequest& r) {
  absl::MutexLock lock(&mu_);
  if (r.method == "GET") return lease_.is_null() ? Reply::Status(404, "NotFound", "not found") : Reply::Json(200, lease_);
  if (r.method == "PUT") {
    json body = r.JsonBody();
    if (fail_next_put_ || body["metadata"]["resourceVersion"] != lease_["metadata"]["resourceVersion"]) {
      fail_next_put_ = false;
      return Reply::FromExchange(FixtureExchange("leases", 2));
    }
    lease_ = body;
    lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
    return Reply::Json(200, lease_);
  }
  return Reply::Status(405, "MethodNotAllowed", r.method);
}

json LeaseHeldBy(const std::string& holder, const std::string& renew_time) {
  json lease = FixtureExchange("leases", 0)["response"]["body"];
  lease["spec"]["holderIdentity"] = holder;
  lease["spec"]["renewTime"] = renew_time;
  return lease;
}

}  // namespace sluice::kube::testing
