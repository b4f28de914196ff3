#include "kube/apply.h"

#include <catch2/catch.hpp>

#include "kube/errors.h"
#include "kube/finalizer.h"
#include "kube/testing/fixture_server.h"

namespace sluice::kube {
namespace {

using nlohmann::json;
using testing::FixtureExchange;
using testing::FixtureServer;
using testing::Reply;

const ResourceRef kSamples{"fixtures.sluice.dev", "v1alpha1", "samples", true};
const char* kFinalizer = "sluice.dev/cleanup";

std::unique_ptr<Client> MakeClient(const FixtureServer& server) {
  Config config;
  config.server = server.url();
  ClientOptions options;
  options.retry.max_attempts = 1;
  auto client = Client::Create(config, options);
  REQUIRE(client.ok());
  return std::move(*client);
}

TEST_CASE("controller ownerReference matches what the API server accepted for a worker pod") {
  json owner = FixtureExchange("crud", 0)["response"]["body"];  // Sample "a"
  json recorded = FixtureExchange("pods-ownership", 0)["request"]["body"]["metadata"]["ownerReferences"][0];
  CHECK(ControllerOwnerReference(owner) == recorded);
  json pod = {{"metadata", {{"name", "p"}, {"ownerReferences", json::array({{{"uid", "other"}, {"controller", true}},
                                                                            {{"uid", "keep"}, {"controller", false}}})}}}};
  SetControllerReference(pod, owner);
  REQUIRE(pod["metadata"]["ownerReferences"].size() == 2);  // old controller replaced, others kept
  CHECK(IsControlledBy(pod, "56d66fe1-84c4-41c0-bf20-efeb3f1f8328"));
  CHECK_FALSE(IsControlledBy(pod, "other"));
  CHECK(ControllerOf(json{{"metadata", json::object()}}) == std::nullopt);
}

TEST_CASE("guarded JSON patch tests resourceVersion before applying") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("PATCH", kSamples.ObjectPath("fixtures", "a"), Reply::Json(200, {{"kind", "Sample"}}));
  server.Expect("PATCH", kSamples.ObjectPath("fixtures", "a"),
                Reply::FromExchange(FixtureExchange("update-conflict-patch", 3)));  // the recorded failed test
  auto client = MakeClient(server);
  json ops = json::array({{{"op", "replace"}, {"path", "/spec/replicas"}, {"value", 6}}});
  REQUIRE(GuardedJsonPatch(*client, kSamples, "fixtures", "a", "394", ops).ok());
  auto lost = GuardedJsonPatch(*client, kSamples, "fixtures", "a", "393", ops);
  CHECK(IsConflict(lost.status()));
  CHECK(std::string(lost.status().message()).find("guard failed") != std::string::npos);
  json sent = server.Requests()[0].JsonBody();
  CHECK(sent == json::parse(R"([{"op":"test","path":"/metadata/resourceVersion","value":"394"},
                                {"op":"replace","path":"/spec/replicas","value":6}])"));
  CHECK(JsonPointerEscape("sluice.dev/a~b") == "sluice.dev~1a~0b");
  CHECK(JsonPatchWithGuards(*client, kSamples, "fixtures", "a", json::object(), ops).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("finalizer: missing -> added by a guarded patch / reconcile not called") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("PATCH", kSamples.ObjectPath("fixtures", "fin"), Reply::Json(200, {{"kind", "Sample"}}));
  server.Expect("PATCH", kSamples.ObjectPath("fixtures", "fin"), Reply::Json(200, {{"kind", "Sample"}}));
  auto client = MakeClient(server);
  int calls = 0;
  auto reconcile = [&](FinalizerEvent, const json&) -> absl::StatusOr<ReconcileResult> {
    ++calls;
    return ReconcileResult{};
  };
  json fresh = {{"metadata", {{"name", "fin"}, {"namespace", "fixtures"}}}};
  REQUIRE(Finalize(*client, kSamples, fresh, kFinalizer, reconcile).ok());
  json others = {{"metadata", {{"name", "fin"}, {"namespace", "fixtures"}, {"finalizers", {"other.io/x"}}}}};
  REQUIRE(Finalize(*client, kSamples, others, kFinalizer, reconcile).ok());
  CHECK(calls == 0);
  auto requests = server.Requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].headers["content-type"] == "application/json-patch+json");
  CHECK(requests[0].JsonBody() == json::parse(R"([{"op":"test","path":"/metadata/finalizers","value":null},
      {"op":"add","path":"/metadata/finalizers","value":["sluice.dev/cleanup"]}])"));
  CHECK(requests[1].JsonBody() == json::parse(R"([{"op":"test","path":"/metadata/finalizers","value":["other.io/x"]},
      {"op":"add","path":"/metadata/finalizers/-","value":"sluice.dev/cleanup"}])"));
}

TEST_CASE("finalizer: present and live -> apply - nothing written") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  auto client = MakeClient(server);
  json live = FixtureExchange("finalizers", 0)["response"]["body"];
  std::vector<FinalizerEvent> events;
  auto result = Finalize(*client, kSamples, live, kFinalizer, [&](FinalizerEvent e, const json&) {
    events.push_back(e);
    return absl::StatusOr<ReconcileResult>(ReconcileResult{false, absl::Seconds(30)});
  });
  REQUIRE(result.ok());
  CHECK(result->requeue_after == absl::Seconds(30));
  CHECK(events == std::vector<FinalizerEvent>{FinalizerEvent::kApply});
  CHECK(server.RequestCount() == 0);
}

TEST_CASE("finalizer: deleting -> cleanup / then the recorded guarded removal - failed cleanup keeps it") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("finalizers", 4));  // the guarded remove
  server.ExpectExchange(FixtureExchange("finalizers", 5));  // then the object is gone
  auto client = MakeClient(server);
  json deleting = FixtureExchange("finalizers", 2)["response"]["body"];
  REQUIRE(IsBeingDeleted(deleting));
  REQUIRE(HasFinalizer(deleting, kFinalizer));

  auto failing = Finalize(*client, kSamples, deleting, kFinalizer, [](FinalizerEvent e, const json&) {
    CHECK(e == FinalizerEvent::kCleanup);
    return absl::StatusOr<ReconcileResult>(absl::UnavailableError("workers still draining"));
  });
  CHECK(failing.status().code() == absl::StatusCode::kUnavailable);
  CHECK(server.RequestCount() == 0);

  std::vector<FinalizerEvent> events;
  auto result = Finalize(*client, kSamples, deleting, kFinalizer, [&](FinalizerEvent e, const json&) {
    events.push_back(e);
    return absl::StatusOr<ReconcileResult>(ReconcileResult{});
  });
  REQUIRE(result.ok());
  CHECK(events == std::vector<FinalizerEvent>{FinalizerEvent::kCleanup});
  auto requests = server.Requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].JsonBody() == FixtureExchange("finalizers", 4)["request"]["body"]);
  CHECK(absl::IsNotFound(client->Get(kSamples, "fixtures", "fin").status()));

  // Deleting without our finalizer: nothing to do.
  json gone = deleting;
  gone["metadata"].erase("finalizers");
  int calls = 0;
  REQUIRE(Finalize(*client, kSamples, gone, kFinalizer, [&](FinalizerEvent, const json&) {
            ++calls;
            return absl::StatusOr<ReconcileResult>(ReconcileResult{});
          }).ok());
  CHECK(calls == 0);
}

TEST_CASE("finalizer removal whose guard fails is a conflict") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("PATCH", kSamples.ObjectPath("fixtures", "fin"),
                Reply::FromExchange(FixtureExchange("update-conflict-patch", 3)));
  auto client = MakeClient(server);
  json deleting = FixtureExchange("finalizers", 2)["response"]["body"];
  auto removed = RemoveFinalizer(*client, kSamples, deleting, kFinalizer);
  CHECK(IsConflict(removed.status()));
}

}  // namespace
}  // namespace sluice::kube
