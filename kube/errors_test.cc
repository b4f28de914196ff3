#include "kube/errors.h"

#include <catch2/catch.hpp>

#include "kube/testing/fixture_server.h"
#include "nlohmann/json.hpp"

namespace sluice::kube {
namespace {

using nlohmann::json;
using testing::FixtureExchange;

absl::Status FromFixture(const char* file, size_t index) {
  json exchange = FixtureExchange(file, index);
  const json& response = exchange["response"];
  return StatusFromResponse(response["status"].get<int>(), response["body"].dump(), "TEST");
}

TEST_CASE("recorded 404 NotFound maps to absl NotFound with reason and code kept") {
  absl::Status s = FromFixture("crud", 2);
  CHECK(absl::IsNotFound(s));
  CHECK(KubeReason(s) == "NotFound");
  CHECK(KubeHttpCode(s) == 404);
  CHECK(s.message().find("\"missing\" not found") != absl::string_view::npos);
}

TEST_CASE("recorded 409 AlreadyExists and 409 Conflict are told apart") {
  absl::Status exists = FromFixture("crud", 3);
  CHECK(absl::IsAlreadyExists(exists));
  CHECK_FALSE(IsConflict(exists));
  absl::Status conflict = FromFixture("update-conflict-patch", 1);
  CHECK(IsConflict(conflict));
  CHECK(conflict.code() == absl::StatusCode::kAborted);
  CHECK(KubeReason(conflict) == "Conflict");
  absl::Status lease = FromFixture("leases", 2);
  CHECK(IsConflict(lease));
}

TEST_CASE("recorded 422 Invalid lists every cause's field path") {
  absl::Status s = FromFixture("validation", 1);
  CHECK(IsInvalid(s));
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(KubeHttpCode(s) == 422);
  std::string message(s.message());
  CHECK(message.find("spec.replicas: [FieldValueInvalid]") != std::string::npos);
  CHECK(message.find("spec.mode: [FieldValueNotSupported]") != std::string::npos);
  absl::Status event = FromFixture("events", 1);
  CHECK(std::string(event.message()).find("eventTime: [FieldValueRequired] Required value") != std::string::npos);
}

TEST_CASE("recorded SSA conflict keeps the conflicting field in the message") {
  absl::Status s = FromFixture("server-side-apply", 1);
  CHECK(IsConflict(s));
  CHECK(std::string(s.message()).find(".spec.replicas: [FieldManagerConflict]") != std::string::npos);
  absl::Status missing_manager = FromFixture("server-side-apply", 3);
  CHECK(IsInvalid(missing_manager));
  CHECK(std::string(missing_manager.message()).find("fieldManager") != std::string::npos);
}

TEST_CASE("HasStatusCause finds a cause's reason: recorded SSA conflicts, and a NamespaceTerminating 403") {
  absl::Status conflict = FromFixture("server-side-apply", 1);
  CHECK(HasStatusCause(conflict, "FieldManagerConflict"));
  CHECK_FALSE(HasStatusCause(conflict, "FieldManager"));
  CHECK_FALSE(HasStatusCause(FromFixture("crud", 2), "NotFound"));  // a reason, not a cause
  CHECK_FALSE(HasStatusCause(absl::OkStatus(), "FieldManagerConflict"));
  // Not recorded: the NamespaceLifecycle admission plugin's answer (Kubernetes'
  // plugin/pkg/admission/namespace/lifecycle), as the test API server gives it.
  absl::Status terminating = StatusFromResponse(403, R"js({"kind": "Status", "apiVersion": "v1", "metadata": {},
      "status": "Failure", "message": "pods \"p\" is forbidden: unable to create new content in namespace ml because it is being terminated",
      "reason": "Forbidden", "details": {"name": "p", "kind": "pods", "causes": [{"reason": "NamespaceTerminating",
      "message": "namespace ml is being terminated", "field": "metadata.namespace"}]}, "code": 403})js", "POST");
  CHECK(IsForbidden(terminating));
  CHECK(HasStatusCause(terminating, "NamespaceTerminating"));
  CHECK_FALSE(HasStatusCause(FromFixture("auth-errors", 1), "NamespaceTerminating"));  // an RBAC 403
}

TEST_CASE("recorded 400 / 401 and 403 map to InvalidArgument / Unauthenticated / PermissionDenied") {
  CHECK(FromFixture("validation", 3).code() == absl::StatusCode::kInvalidArgument);
  CHECK(KubeReason(FromFixture("validation", 3)) == "BadRequest");
  absl::Status unauthorized = FromFixture("auth-errors", 0);
  CHECK(IsUnauthorized(unauthorized));
  CHECK(unauthorized.code() == absl::StatusCode::kUnauthenticated);
  absl::Status forbidden = FromFixture("auth-errors", 1);
  CHECK(IsForbidden(forbidden));
  CHECK(forbidden.code() == absl::StatusCode::kPermissionDenied);
}

TEST_CASE("a watch ERROR event's 410 Expired Status is Gone") {
  json exchange = FixtureExchange("watch-expired", 0);
  const json& event = exchange["response"]["events"][0];
  REQUIRE(event["type"] == "ERROR");
  absl::Status s = StatusFromStatusObject(event["object"], 500, "WATCH");
  CHECK(IsGone(s));
  CHECK(s.code() == absl::StatusCode::kOutOfRange);
  CHECK(KubeReason(s) == "Expired");
  CHECK(KubeHttpCode(s) == 410);
}

TEST_CASE("HTTP codes without a Status body still map precisely") {
  CHECK(IsGone(StatusFromResponse(410, "", "GET /x")));
  CHECK(IsTooManyRequests(StatusFromResponse(429, "slow down", "GET /x")));
  CHECK(StatusFromResponse(500, "<html>boom</html>", "GET /x").code() == absl::StatusCode::kInternal);
  CHECK(StatusFromResponse(503, "", "GET /x").code() == absl::StatusCode::kUnavailable);
  CHECK(StatusFromResponse(504, "", "GET /x").code() == absl::StatusCode::kUnavailable);
  absl::Status html = StatusFromResponse(502, "<html>bad gateway</html>", "GET /x");
  CHECK(html.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(html.message()).find("bad gateway") != std::string::npos);
  CHECK(KubeHttpCode(html) == 502);
}

TEST_CASE("malformed Status bodies do not throw") {
  CHECK(StatusFromResponse(409, "{\"kind\":\"Status\",\"code\":\"x\",\"details\":{\"causes\":5}}", "").code() ==
        absl::StatusCode::kAborted);
  CHECK(StatusFromResponse(422, "{not json", "").code() == absl::StatusCode::kInvalidArgument);
  CHECK(StatusFromStatusObject(json::array(), 410, "").code() == absl::StatusCode::kOutOfRange);
  CHECK(KubeReason(absl::OkStatus()).empty());
  CHECK(KubeHttpCode(absl::InternalError("x")) == 0);
}

}  // namespace
}  // namespace sluice::kube
