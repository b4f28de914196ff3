#include "kube/event_recorder.h"

#include <catch2/catch.hpp>

#include "kube/errors.h"
#include "kube/testing/fixture_server.h"

namespace sluice::kube {
namespace {

using nlohmann::json;
using testing::FixtureExchange;
using testing::FixtureServer;
using testing::RecordedRequest;
using testing::Reply;

const std::string kEvents = resources::Events().CollectionPath("fixtures");

std::unique_ptr<Client> MakeClient(const FixtureServer& server) {
  Config config;
  config.server = server.url();
  ClientOptions options;
  options.retry.max_attempts = 1;
  auto client = Client::Create(config, options);
  REQUIRE(client.ok());
  return std::move(*client);
}

json Regarding() {
  return {{"apiVersion", "fixtures.sluice.dev/v1alpha1"},
          {"kind", "Sample"},
          {"metadata", {{"name", "b"}, {"namespace", "fixtures"}, {"uid", "3a4103d8-0ddb-4ce7-9e44-360db054a1a8"}}}};
}

TEST_CASE("MicroTime formatting matches the API server's") {
  absl::Time t;
  std::string err;
  REQUIRE(absl::ParseTime(absl::RFC3339_full, "2026-11-22T00:00:00Z", &t, &err));
  CHECK(FormatMicroTime(t) == "2026-11-22T00:00:00.000000Z");
  CHECK(FormatMicroTime(t + absl::Microseconds(1500)) == "2026-11-22T00:00:00.001500Z");
}

TEST_CASE("recorder creates an events.k8s.io/v1 Event shaped like the recorded one / then bumps series.count") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("events", 0));
  server.ExpectExchange(FixtureExchange("events", 0));
  server.SetFallback([](const RecordedRequest& r) -> std::optional<Reply> {
    if (r.method == "PATCH") return Reply::Json(200, {{"kind", "Event"}});
    return std::nullopt;
  });
  auto client = MakeClient(server);
  absl::Time start;
  std::string err;
  REQUIRE(absl::ParseTime(absl::RFC3339_full, "2026-11-22T00:00:00Z", &start, &err));
  FakeClock clock(start);
  EventRecorderOptions options;
  options.reporting_controller = "sluice.dev/operator";
  options.reporting_instance = "sluice-operator-0";
  options.clock = &clock;
  EventRecorder recorder(client.get(), options);
  const char* note = "workers 2 -> 4 (stall 0.31 > target 0.05)";
  REQUIRE(recorder.Record(Regarding(), EventType::kNormal, "ScaledUp", "Scale", note).ok());
  clock.Advance(absl::Minutes(1));
  REQUIRE(recorder.Record(Regarding(), EventType::kNormal, "ScaledUp", "Scale", note).ok());
  clock.Advance(absl::Minutes(1));
  REQUIRE(recorder.Record(Regarding(), EventType::kNormal, "ScaledUp", "Scale", note).ok());
  CHECK(recorder.created() == 1);
  CHECK(recorder.patched() == 2);

  auto requests = server.Requests();
  REQUIRE(requests.size() == 3);
  json sent = requests[0].JsonBody();
  json recorded = FixtureExchange("events", 0)["request"]["body"];
  for (const char* field : {"apiVersion", "kind", "eventTime", "reportingController", "reportingInstance", "action",
                            "reason", "note", "type"}) {
    INFO(field);
    CHECK(sent[field] == recorded[field]);
  }
  CHECK(sent["regarding"]["name"] == "b");
  CHECK(sent["regarding"]["kind"] == "Sample");
  CHECK(sent["regarding"]["uid"] == "3a4103d8-0ddb-4ce7-9e44-360db054a1a8");
  CHECK(sent["metadata"]["namespace"] == "fixtures");
  std::string name = sent["metadata"]["name"];
  CHECK(name.rfind("b.", 0) == 0);
  CHECK(requests[1].method == "PATCH");
  CHECK(requests[1].path == resources::Events().ObjectPath("fixtures", name));
  CHECK(requests[1].headers["content-type"] == "application/merge-patch+json");
  CHECK(requests[1].JsonBody()["series"]["count"] == 2);
  CHECK(requests[1].JsonBody()["series"]["lastObservedTime"] == "2026-11-22T00:01:00.000000Z");
  CHECK(requests[2].JsonBody()["series"]["count"] == 3);

  // A different note, or the same one after the window, is a new Event.
  REQUIRE(recorder.Record(Regarding(), EventType::kNormal, "ScaledUp", "Scale", "other note").ok());
  CHECK(recorder.created() == 2);
}

TEST_CASE("recorder starts a new Event after the window or when the old one is gone") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.SetFallback([](const RecordedRequest& r) -> std::optional<Reply> {
    if (r.method == "POST") return Reply::Json(201, r.JsonBody());
    return Reply::Status(404, "NotFound", "events.events.k8s.io not found");
  });
  auto client = MakeClient(server);
  FakeClock clock;
  EventRecorderOptions options{"example.com/controller", "controller-0"};
  options.dedup_window = absl::Minutes(10);
  options.clock = &clock;
  EventRecorder recorder(client.get(), options);
  REQUIRE(recorder.Record(Regarding(), EventType::kWarning, "Failed", "Reconcile", "boom").ok());
  clock.Advance(absl::Minutes(11));
  REQUIRE(recorder.Record(Regarding(), EventType::kWarning, "Failed", "Reconcile", "boom").ok());
  CHECK(recorder.created() == 2);
  CHECK(recorder.patched() == 0);
  clock.Advance(absl::Minutes(1));
  REQUIRE(recorder.Record(Regarding(), EventType::kWarning, "Failed", "Reconcile", "boom").ok());  // PATCH 404 -> POST
  CHECK(recorder.created() == 3);
  auto requests = server.Requests();
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].JsonBody()["type"] == "Warning");
  CHECK(requests[2].method == "PATCH");
  CHECK(requests[3].method == "POST");
}

TEST_CASE("recorder surfaces the server's 422 and rejects nameless objects") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("events", 1));
  auto client = MakeClient(server);
  EventRecorder recorder(client.get(), EventRecorderOptions{"c", "i"});
  absl::Status invalid = recorder.Record(Regarding(), EventType::kNormal, "ScaledUp", "Scale", "n");
  CHECK(IsInvalid(invalid));
  CHECK(std::string(invalid.message()).find("eventTime") != std::string::npos);
  CHECK(recorder.Record(json::object(), EventType::kNormal, "R", "A", "n").code() == absl::StatusCode::kInvalidArgument);
  CHECK(recorder.Record(Regarding(), EventType::kNormal, "", "A", "n").code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::kube
