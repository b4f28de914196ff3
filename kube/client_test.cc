#include "kube/client.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kube/apply.h"
#include "kube/errors.h"
#include "kube/testing/fixture_server.h"
#include "testing/test_util.h"

namespace sluice::kube {
namespace {

using nlohmann::json;
using testing::FixtureExchange;
using testing::FixtureServer;
using testing::Reply;

const ResourceRef kSamples{"fixtures.sluice.dev", "v1alpha1", "samples", true};

ClientOptions FastOptions() {
  ClientOptions options;
  options.retry.initial_backoff = absl::Milliseconds(1);
  options.retry.max_backoff = absl::Milliseconds(4);
  options.retry.max_retry_after = absl::Milliseconds(5);
  return options;
}

std::unique_ptr<Client> MakeClient(const FixtureServer& server, ClientOptions options = FastOptions()) {
  Config config;
  config.server = server.url();
  config.token = "test-token";
  auto client = Client::Create(config, options);
  REQUIRE(client.ok());
  return std::move(*client);
}

json RequestBody(const json& exchange) { return exchange["request"]["body"]; }

TEST_CASE("paths for core and grouped / namespaced and cluster-scoped resources") {
  CHECK(resources::Pods().CollectionPath("ns") == "/api/v1/namespaces/ns/pods");
  CHECK(resources::Pods().CollectionPath("") == "/api/v1/pods");
  CHECK(resources::Nodes().ObjectPath("ignored", "node-1") == "/api/v1/nodes/node-1");
  CHECK(kSamples.ObjectPath("fixtures", "a", "scale") == "/apis/fixtures.sluice.dev/v1alpha1/namespaces/fixtures/samples/a/scale");
  CHECK(resources::Leases().ApiVersion() == "coordination.k8s.io/v1");
  CHECK(BuildQuery({{"labelSelector", "app in (a,b)"}, {"x", "1"}}) == "?labelSelector=app%20in%20%28a%2Cb%29&x=1");
  ListOptions list;
  list.resource_version.emplace("0");
  list.continue_token = "tok";
  list.limit = 5;
  // continue excludes resourceVersion (the server rejects the combination)
  CHECK(list.ToQuery() == QueryParams{{"limit", "5"}, {"continue", "tok"}});
}

TEST_CASE("create / get / 404 and 409 AlreadyExists replayed from the recording") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  for (size_t i = 0; i < 4; ++i) server.ExpectExchange(FixtureExchange("crud", i));
  auto client = MakeClient(server);
  json sample = RequestBody(FixtureExchange("crud", 0));
  auto created = client->Create(kSamples, "fixtures", sample);
  REQUIRE(created.ok());
  CHECK(ResourceVersionOf(*created) == "394");
  CHECK((*created)["spec"]["maxReplicas"] == 10);  // defaulted by the server
  auto got = client->Get(kSamples, "fixtures", "a");
  REQUIRE(got.ok());
  CHECK(UidOf(*got) == "56d66fe1-84c4-41c0-bf20-efeb3f1f8328");
  auto missing = client->Get(kSamples, "fixtures", "missing");
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(KubeReason(missing.status()) == "NotFound");
  auto duplicate = client->Create(kSamples, "fixtures", sample);
  CHECK(absl::IsAlreadyExists(duplicate.status()));

  auto requests = server.Requests();
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].method == "POST");
  CHECK(requests[0].path == "/apis/fixtures.sluice.dev/v1alpha1/namespaces/fixtures/samples");
  CHECK(requests[0].headers["content-type"] == "application/json");
  CHECK(requests[0].headers["authorization"] == "Bearer test-token");
  CHECK(requests[0].headers["accept"] == "application/json");
  CHECK(requests[0].JsonBody() == sample);
  CHECK(server.PendingExpectations() == 0);
}

TEST_CASE("ListAll follows continue tokens across pages - selectors are sent") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("crud", 6));
  server.ExpectExchange(FixtureExchange("crud", 7));
  server.ExpectExchange(FixtureExchange("crud", 8));
  auto client = MakeClient(server);
  ListOptions options;
  options.limit = 1;
  auto all = client->ListAll(kSamples, "fixtures", options);
  REQUIRE(all.ok());
  REQUIRE((*all)["items"].size() == 2);
  CHECK(NameOf((*all)["items"][0]) == "a");
  CHECK(NameOf((*all)["items"][1]) == "b");
  CHECK((*all)["metadata"]["resourceVersion"] == "395");
  CHECK_FALSE((*all)["metadata"].contains("continue"));
  auto requests = server.Requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].query.count("continue") == 0);
  CHECK(requests[1].query["continue"] == "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Mzk1LCJzdGFydCI6ImFcdTAwMDAifQ");
  CHECK(requests[1].query["limit"] == "1");

  ListOptions selector;
  selector.label_selector = "app=none";
  auto none = client->List(kSamples, "fixtures", selector);
  REQUIRE(none.ok());
  CHECK((*none)["items"].empty());
  CHECK(server.Requests()[2].query["labelSelector"] == "app=none");
}

TEST_CASE("an expired continue token restarts the list consistently once") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", "/api/v1/pods", Reply::Json(200, {{"items", {{{"metadata", {{"name", "p0"}}}}}},
                                                       {"metadata", {{"continue", "old"}, {"resourceVersion", "5"}}}}));
  server.Expect("GET", "/api/v1/pods", Reply::Status(410, "Expired", "The provided continue parameter is too old"),
                {{"continue", "old"}});
  server.Expect("GET", "/api/v1/pods", Reply::Json(200, {{"items", {{{"metadata", {{"name", "p1"}}}}}},
                                                       {"metadata", {{"resourceVersion", "9"}}}}));
  auto client = MakeClient(server);
  ListOptions options;
  options.resource_version.emplace("0");
  options.limit = 1;
  auto all = client->ListAll(resources::Pods(), "", options);
  REQUIRE(all.ok());
  REQUIRE((*all)["items"].size() == 1);
  CHECK(NameOf((*all)["items"][0]) == "p1");
  auto requests = server.Requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].query["resourceVersion"] == "0");
  CHECK(requests[2].query.count("resourceVersion") == 0);  // consistent
  CHECK(requests[2].query.count("continue") == 0);
}

TEST_CASE("ListAll reads a page as it arrives: items transformed one by one across chunks") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  json list = {{"apiVersion", "v1"}, {"kind", "PodList"}, {"metadata", {{"resourceVersion", "77"}}}, {"items", json::array()}};
  for (int i = 0; i < 50; ++i) {
    list["items"].push_back({{"metadata", {{"name", absl::StrCat("p", i)}, {"namespace", "ml"}}},
                             {"spec", {{"nodeName", "n1"}, {"containers", {{{"name", "c"}, {"image", "i"}}}}}}});
  }
  // Sent in small chunks (each ends with a newline, so cut after commas, outside strings), so that
  // items straddle them.
  const std::string text = list.dump();
  Reply chunked;
  chunked.chunked = true;
  for (size_t at = 0; at < text.size();) {
    size_t comma = text.find(',', at);
    size_t end = comma == std::string::npos ? text.size() : comma + 1;
    chunked.lines.push_back(text.substr(at, end - at));
    at = end;
  }
  server.Expect("GET", "/api/v1/pods", chunked);
  auto client = MakeClient(server);
  int transformed = 0;
  auto all = client->ListAll(resources::Pods(), "", {}, {}, [&transformed](json&& pod) {
    ++transformed;
    return json{{"metadata", pod["metadata"]}, {"node", pod["spec"]["nodeName"]}};
  });
  REQUIRE(all.status() == absl::OkStatus());
  CHECK(transformed == 50);
  REQUIRE((*all)["items"].size() == 50);
  CHECK((*all)["items"][49] == json{{"metadata", {{"name", "p49"}, {"namespace", "ml"}}}, {"node", "n1"}});
  CHECK((*all)["kind"] == "PodList");
  CHECK((*all)["metadata"]["resourceVersion"] == "77");
}

TEST_CASE("ListAll: a body that is not a list is DataLoss naming the problem - not retried, unlike 5xx") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  Reply html;
  html.content_type = "text/html";
  html.body = "<html>hello</html>";
  server.Expect("GET", "/api/v1/pods", html);
  server.Expect("GET", "/api/v1/pods", Reply::Json(200, {{"items", {{{"metadata", {{"name", "a"}}}}, {{"spec", json::object()}}}}}));
  server.Expect("GET", "/api/v1/pods", Reply::Json(200, {{"items", {{"name", "a"}}}}));
  server.Expect("GET", "/api/v1/pods", Reply::Json(200, {{"items", {{{"metadata", {{"name", "a"}}}}}}}));
  server.Expect("GET", "/api/v1/pods", Reply::Status(503, "ServiceUnavailable", "try again"));
  server.Expect("GET", "/api/v1/pods", Reply::Json(200, {{"items", {{{"metadata", {{"name", "a"}}}}}},
                                                       {"metadata", {{"resourceVersion", "3"}}}}));
  auto client = MakeClient(server);

  auto not_json = client->ListAll(resources::Pods(), "");
  CHECK(not_json.status().code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(not_json.status().message(), "GET /api/v1/pods: the body is not JSON"));
  CHECK(absl::StrContains(not_json.status().message(), "it begins: <html>hello</html>"));
  CHECK(server.RequestCount() == 1);

  auto nameless = client->ListAll(resources::Pods(), "");
  CHECK(nameless.status().code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(nameless.status().message(), "GET /api/v1/pods: items[1] has no metadata.name"));
  auto items_object = client->ListAll(resources::Pods(), "");
  CHECK(absl::StrContains(items_object.status().message(), "\"items\" is an object, not an array"));
  CHECK(server.RequestCount() == 3);

  auto throwing = client->ListAll(resources::Pods(), "", {}, {}, [](json&& pod) -> json {
    return pod["spec"]["nodeName"].get<std::string>();  // a type_error: the pod has no spec
  });
  CHECK(throwing.status().code() == absl::StatusCode::kInternal);
  CHECK(absl::StrContains(throwing.status().message(), "GET /api/v1/pods: items[0]: the transform failed: "));
  CHECK(server.RequestCount() == 4);  // not retried

  auto retried = client->ListAll(resources::Pods(), "");
  REQUIRE(retried.ok());
  CHECK((*retried)["items"].size() == 1);
  CHECK((*retried)["metadata"]["resourceVersion"] == "3");
  CHECK(server.RequestCount() == 6);
}

TEST_CASE("PUT conflict / merge patch / failing test op and JSON patch replayed") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  for (size_t i = 0; i < 5; ++i) server.ExpectExchange(FixtureExchange("update-conflict-patch", i));
  auto client = MakeClient(server);
  auto ok = client->Replace(kSamples, "fixtures", "a", RequestBody(FixtureExchange("update-conflict-patch", 0)));
  REQUIRE(ok.ok());
  auto stale = client->Replace(kSamples, "fixtures", "a", RequestBody(FixtureExchange("update-conflict-patch", 1)));
  CHECK(IsConflict(stale.status()));
  CHECK(KubeHttpCode(stale.status()) == 409);
  auto merged = client->Patch(kSamples, "fixtures", "a", PatchType::kMerge, {{"spec", {{"replicas", 5}}}});
  REQUIRE(merged.ok());
  CHECK((*merged)["spec"]["replicas"] == 5);
  // A guarded patch whose guard fails is reported as a conflict.
  auto guarded = JsonPatchWithGuards(*client, kSamples, "fixtures", "a",
                                     json::array({JsonPatchTest("/spec/replicas", 99)}),
                                     json::array({{{"op", "replace"}, {"path", "/spec/replicas"}, {"value", 6}}}));
  CHECK(IsConflict(guarded.status()));
  CHECK(KubeHttpCode(guarded.status()) == 422);
  auto patched = client->Patch(kSamples, "fixtures", "a", PatchType::kJsonPatch,
                               json::array({{{"op", "replace"}, {"path", "/spec/replicas"}, {"value", 6}}}));
  REQUIRE(patched.ok());
  CHECK((*patched)["spec"]["replicas"] == 6);
  auto requests = server.Requests();
  REQUIRE(requests.size() == 5);
  CHECK(requests[2].headers["content-type"] == "application/merge-patch+json");
  CHECK(requests[3].headers["content-type"] == "application/json-patch+json");
  CHECK(requests[3].JsonBody() == RequestBody(FixtureExchange("update-conflict-patch", 3)));
}

TEST_CASE("422 Invalid and 400 BadRequest from validation carry the field paths") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  for (size_t i = 0; i < 6; ++i) server.ExpectExchange(FixtureExchange("validation", i));
  auto client = MakeClient(server);
  auto cel = client->Create(kSamples, "fixtures", RequestBody(FixtureExchange("validation", 0)));
  CHECK(IsInvalid(cel.status()));
  CHECK(std::string(cel.status().message()).find("spec: [FieldValueInvalid]") != std::string::npos);
  auto enums = client->Create(kSamples, "fixtures", RequestBody(FixtureExchange("validation", 1)));
  CHECK(std::string(enums.status().message()).find("spec.mode") != std::string::npos);
  auto required = client->Create(kSamples, "fixtures", RequestBody(FixtureExchange("validation", 2)));
  CHECK(std::string(required.status().message()).find("spec.image: [FieldValueRequired]") != std::string::npos);
  // The recorded malformed body was a raw string; the client only sends JSON, so send anything.
  auto malformed = client->Create(kSamples, "fixtures", json::object());
  CHECK(malformed.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(KubeReason(malformed.status()) == "BadRequest");
  auto bad_name = client->Create(kSamples, "fixtures", RequestBody(FixtureExchange("validation", 4)));
  CHECK(std::string(bad_name.status().message()).find("metadata.name") != std::string::npos);
  auto defaults = client->Create(kSamples, "fixtures", RequestBody(FixtureExchange("validation", 5)));
  REQUIRE(defaults.ok());
}

TEST_CASE("server-side apply: create / manager conflict / force / missing fieldManager") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  for (size_t i = 0; i < 5; ++i) server.ExpectExchange(FixtureExchange("server-side-apply", i));
  auto client = MakeClient(server);
  json intent = json::parse(RequestBody(FixtureExchange("server-side-apply", 0)).get<std::string>());
  auto applied = ServerSideApply(*client, kSamples, "fixtures", intent, "sluice-operator");
  REQUIRE(applied.ok());
  json other = json::parse(RequestBody(FixtureExchange("server-side-apply", 1)).get<std::string>());
  auto conflict = ServerSideApply(*client, kSamples, "fixtures", other, "sluice-autoscaler");
  CHECK(IsConflict(conflict.status()));
  CHECK(std::string(conflict.status().message()).find(".spec.replicas") != std::string::npos);
  auto forced = ServerSideApply(*client, kSamples, "fixtures", other, "sluice-autoscaler", /*force=*/true);
  REQUIRE(forced.ok());
  CHECK((*forced)["spec"]["replicas"] == 7);
  // The helper refuses to send an apply without a manager; the raw client shows the server's answer.
  CHECK(ServerSideApply(*client, kSamples, "fixtures", intent, "").status().code() == absl::StatusCode::kInvalidArgument);
  auto no_manager = client->Patch(kSamples, "fixtures", "ssa", PatchType::kApply, intent);
  CHECK(IsInvalid(no_manager.status()));
  CHECK(std::string(no_manager.status().message()).find("fieldManager: [FieldValueRequired]") != std::string::npos);
  auto requests = server.Requests();
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].headers["content-type"] == "application/apply-patch+yaml");
  CHECK(requests[0].query["fieldManager"] == "sluice-operator");
  CHECK(requests[0].query.count("force") == 0);
  CHECK(requests[2].query["force"] == "true");
  CHECK(json::parse(requests[0].body) == intent);
}

TEST_CASE("status and scale subresources") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  for (size_t i = 0; i < 7; ++i) server.ExpectExchange(FixtureExchange("status-scale", i));
  auto client = MakeClient(server);
  auto status = ReplaceStatus(*client, kSamples, "fixtures", RequestBody(FixtureExchange("status-scale", 0)));
  REQUIRE(status.ok());
  CHECK((*status)["status"]["replicas"] == 2);
  auto patched = PatchStatus(*client, kSamples, "fixtures", "a", {{"replicas", 3}});
  REQUIRE(patched.ok());
  CHECK((*patched)["status"]["replicas"] == 3);
  auto ignored = client->Patch(kSamples, "fixtures", "a", PatchType::kMerge, {{"status", {{"replicas", 99}}}});
  REQUIRE(ignored.ok());
  CHECK((*ignored)["status"]["replicas"] == 3);  // status is ignored on the main resource
  auto scale = client->Get(kSamples, "fixtures", "a", "scale");
  REQUIRE(scale.ok());
  CHECK((*scale)["kind"] == "Scale");
  CHECK((*scale)["spec"]["replicas"] == 8);
  CHECK((*scale)["status"]["selector"] == "app=a");
  auto put_scale = client->Replace(kSamples, "fixtures", "a", *scale, {}, "scale");
  REQUIRE(put_scale.ok());
  auto patch_scale = client->Patch(kSamples, "fixtures", "a", PatchType::kMerge, {{"spec", {{"replicas", 9}}}}, {}, "scale");
  REQUIRE(patch_scale.ok());
  CHECK((*patch_scale)["spec"]["replicas"] == 9);
  auto requests = server.Requests();
  CHECK(requests[0].path == "/apis/fixtures.sluice.dev/v1alpha1/namespaces/fixtures/samples/a/status");
  CHECK(requests[0].method == "PUT");
  CHECK(requests[1].JsonBody() == json{{"status", {{"replicas", 3}}}});
  CHECK(requests[4].path == "/apis/fixtures.sluice.dev/v1alpha1/namespaces/fixtures/samples/a/scale");
}

TEST_CASE("binding subresource and delete with propagationPolicy / preconditions / grace period") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("pods-ownership", 5));
  server.ExpectExchange(FixtureExchange("pods-ownership", 8));
  server.Expect("DELETE", "/api/v1/namespaces/fixtures/pods/a-worker-0", Reply::Json(200, {{"kind", "Pod"}}));
  auto client = MakeClient(server);
  auto bound = client->Create(resources::Pods(), "fixtures", RequestBody(FixtureExchange("pods-ownership", 5)), {},
                              "a-worker-0", "binding");
  REQUIRE(bound.ok());
  CHECK((*bound)["status"] == "Success");
  DeleteOptions background;
  background.propagation_policy = "Background";
  auto deleted = client->Delete(kSamples, "fixtures", "a", background);
  REQUIRE(deleted.ok());
  DeleteOptions guarded;
  guarded.grace_period_seconds = 0;
  guarded.precondition_uid = "u-1";
  guarded.precondition_resource_version = "42";
  REQUIRE(client->Delete(resources::Pods(), "fixtures", "a-worker-0", guarded).ok());
  auto requests = server.Requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].path == "/api/v1/namespaces/fixtures/pods/a-worker-0/binding");
  CHECK(requests[1].JsonBody() == RequestBody(FixtureExchange("pods-ownership", 8)));
  json body = requests[2].JsonBody();
  CHECK(body["gracePeriodSeconds"] == 0);
  CHECK(body["preconditions"]["uid"] == "u-1");
  CHECK(body["preconditions"]["resourceVersion"] == "42");
}

TEST_CASE("401 refreshes a rotating token once - 403 is PermissionDenied") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("auth-errors", 0));
  server.ExpectExchange(FixtureExchange("auth-errors", 0));
  server.ExpectExchange(FixtureExchange("auth-errors", 1));
  sluice::testing::TempDir dir;
  sluice::testing::WriteFile(dir.File("token"), "tok-1");
  Config config;
  config.server = server.url();
  config.token_file = dir.File("token");
  auto client = Client::Create(config, FastOptions());
  REQUIRE(client.ok());
  auto unauthorized = (*client)->List(kSamples, "fixtures");
  CHECK(IsUnauthorized(unauthorized.status()));
  CHECK(server.RequestCount() == 2);  // one refresh, then the error
  CHECK(server.Requests()[0].headers["authorization"] == "Bearer tok-1");
  auto forbidden = (*client)->List(kSamples, "fixtures");
  CHECK(IsForbidden(forbidden.status()));
  CHECK(std::string(forbidden.status().message()).find("cannot list resource") != std::string::npos);
  CHECK(server.RequestCount() == 3);
}

TEST_CASE("429 is retried honouring Retry-After - 5xx only for idempotent verbs - bounded") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  Reply throttled = Reply::Status(429, "TooManyRequests", "slow down");
  throttled.headers.emplace_back("Retry-After", "1");
  server.Expect("POST", "/api/v1/namespaces/x/pods", throttled);
  server.Expect("POST", "/api/v1/namespaces/x/pods", Reply::Json(201, {{"kind", "Pod"}}));
  server.Expect("GET", "/api/v1/namespaces/x/pods/p", Reply::Status(503, "ServiceUnavailable", "busy"));
  server.Expect("GET", "/api/v1/namespaces/x/pods/p", Reply::Status(500, "InternalError", "oops"));
  server.Expect("GET", "/api/v1/namespaces/x/pods/p", Reply::Json(200, {{"kind", "Pod"}}));
  server.Expect("POST", "/api/v1/namespaces/x/pods", Reply::Status(503, "ServiceUnavailable", "busy"));
  server.SetFallback([](const testing::RecordedRequest&) { return Reply::Status(503, "ServiceUnavailable", "down"); });
  ClientOptions options = FastOptions();
  options.retry.max_attempts = 3;
  auto client = MakeClient(server, options);
  REQUIRE(client->Create(resources::Pods(), "x", {{"kind", "Pod"}}).ok());
  CHECK(server.RequestCount() == 2);
  REQUIRE(client->Get(resources::Pods(), "x", "p").ok());
  CHECK(server.RequestCount() == 5);
  auto post = client->Create(resources::Pods(), "x", {{"kind", "Pod"}});
  CHECK(post.status().code() == absl::StatusCode::kUnavailable);
  CHECK(server.RequestCount() == 6);  // POST is not retried on 5xx
  auto exhausted = client->Get(resources::Pods(), "x", "q");
  CHECK(exhausted.status().code() == absl::StatusCode::kUnavailable);
  CHECK(server.RequestCount() == 9);  // max_attempts
  CHECK(client->requests_sent() == 9);
}

TEST_CASE("client-side rate limit holds requests beyond the burst until the clock allows") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.SetFallback([](const testing::RecordedRequest&) { return Reply::Json(200, {{"kind", "Pod"}}); });
  FakeClock clock;
  ClientOptions options = FastOptions();
  options.qps = 1;
  options.burst = 2;
  options.clock = &clock;
  auto client = MakeClient(server, options);
  REQUIRE(client->Get(resources::Pods(), "x", "a").ok());
  REQUIRE(client->Get(resources::Pods(), "x", "b").ok());
  std::atomic<bool> done{false};
  std::thread third([&] {
    CHECK(client->Get(resources::Pods(), "x", "c").ok());
    done = true;
  });
  REQUIRE(clock.AwaitSleepers(1));
  CHECK(clock.SleeperDeadlines()[0] == clock.Now() + absl::Seconds(1));
  CHECK(server.RequestCount() == 2);
  clock.Advance(absl::Seconds(1));
  third.join();
  CHECK(done);
  CHECK(server.RequestCount() == 3);
}

TEST_CASE("transport failures and non-JSON answers become statuses / never exceptions") {
  int dead_port;
  {
    FixtureServer dead;
    REQUIRE(dead.Start().ok());
    dead_port = dead.port();
  }
  Config config;
  config.server = "http://127.0.0.1:" + std::to_string(dead_port);
  ClientOptions options = FastOptions();
  options.retry.max_attempts = 2;
  auto client = Client::Create(config, options);
  REQUIRE(client.ok());
  auto result = (*client)->Get(resources::Pods(), "x", "p");
  CHECK(result.status().code() == absl::StatusCode::kUnavailable);

  FixtureServer server;
  REQUIRE(server.Start().ok());
  Reply html;
  html.content_type = "text/html";
  html.body = "<html>hello</html>";
  server.Expect("GET", "/api/v1/namespaces/x/pods/p", html);
  auto live = MakeClient(server);
  CHECK(live->Get(resources::Pods(), "x", "p").status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("Create validates TLS material and the server URL") {
  Config config;
  config.server = "ftp://x";
  CHECK(Client::Create(config).status().code() == absl::StatusCode::kInvalidArgument);
  config.server = "https://127.0.0.1:1";
  config.origin = "/home/me/.kube/config";
  config.ca_pem = "not a pem";
  auto bad_ca = Client::Create(config);
  CHECK(std::string(bad_ca.status().message()).find("/home/me/.kube/config: certificate-authority: not a PEM certificate") !=
        std::string::npos);
  config.ca_pem.clear();
  config.client_cert_pem = "nope";
  config.client_key_pem = "nope";
  CHECK(std::string(Client::Create(config).status().message()).find("client-certificate") != std::string::npos);
}

TEST_CASE("watch replays ADDED / MODIFIED / DELETED and BOOKMARK events / then ends cleanly") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("watch", 0));
  auto client = MakeClient(server);
  WatchOptions options;
  options.resource_version = "405";
  options.timeout_seconds = 65;
  std::vector<std::string> seen;
  absl::Status status = client->Watch(kSamples, "fixtures", options, [&](WatchEvent&& event) {
    seen.push_back(absl::StrCat(WatchEventTypeName(event.type), ":", ResourceVersionOf(event.object)));
    return absl::OkStatus();
  });
  CHECK(status.ok());
  CHECK(seen == std::vector<std::string>{"ADDED:406", "MODIFIED:407", "DELETED:408", "BOOKMARK:408", "BOOKMARK:408",
                                         "BOOKMARK:408"});
  auto request = server.Requests().at(0);
  CHECK(request.query["watch"] == "true");
  CHECK(request.query["allowWatchBookmarks"] == "true");
  CHECK(request.query["resourceVersion"] == "405");
  CHECK(request.query["timeoutSeconds"] == "65");
}

TEST_CASE("watch: 410 as an ERROR event and as an HTTP status are both Gone") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("watch-expired", 0));
  server.Expect("GET", kSamples.CollectionPath("fixtures"), Reply::Status(410, "Expired", "too old resource version"));
  auto client = MakeClient(server);
  WatchOptions options;
  options.resource_version = "1";
  int events = 0;
  auto count = [&](WatchEvent&&) {
    ++events;
    return absl::OkStatus();
  };
  absl::Status as_event = client->Watch(kSamples, "fixtures", options, count);
  CHECK(IsGone(as_event));
  CHECK(std::string(as_event.message()).find("too old resource version: 1 (392)") != std::string::npos);
  absl::Status as_http = client->Watch(kSamples, "fixtures", options, count);
  CHECK(IsGone(as_http));
  CHECK(events == 0);
}

TEST_CASE("watch: malformed lines end the watch with DataLoss") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  Reply garbage = Reply::Watch({});
  garbage.lines = {R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})", "{not json", R"({"type":"ADDED"})"};
  server.Expect("GET", "/api/v1/pods", garbage);
  Reply unknown = Reply::Watch({{{"type", "EXPLODED"}, {"object", json::object()}}});
  server.Expect("GET", "/api/v1/pods", unknown);
  auto client = MakeClient(server);
  int events = 0;
  auto count = [&](WatchEvent&&) {
    ++events;
    return absl::OkStatus();
  };
  CHECK(client->Watch(resources::Pods(), "", {}, count).code() == absl::StatusCode::kDataLoss);
  CHECK(events == 1);
  absl::Status status = client->Watch(resources::Pods(), "", {}, count);
  CHECK(status.code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(status.message()).find("EXPLODED") != std::string::npos);
}

TEST_CASE("watch delivers events while the stream is still open / and a stop request cancels it") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  json events = FixtureExchange("watch", 0)["response"]["events"];
  server.Expect("GET", kSamples.CollectionPath("fixtures"), Reply::Watch({events[0], events[1]}, /*hold_open=*/true));
  auto client = MakeClient(server);
  absl::Mutex mu;
  int received = 0;
  absl::Status result;
  std::stop_source stop;
  std::thread watcher([&] {
    absl::Status s = client->Watch(
        kSamples, "fixtures", {},
        [&](WatchEvent&&) {
          absl::MutexLock lock(&mu);
          ++received;
          return absl::OkStatus();
        },
        stop.get_token());
    absl::MutexLock lock(&mu);
    result = s;
  });
  {
    absl::MutexLock lock(&mu);
    auto two = [&]() { return received == 2; };
    REQUIRE(mu.AwaitWithTimeout(absl::Condition(&two), absl::Seconds(10)));
  }
  CHECK(server.OpenHeldStreams() == 1);  // both events arrived before the server ended the stream
  stop.request_stop();
  watcher.join();  // must not hang although the server keeps the stream open
  CHECK(absl::IsCancelled(result));
}

}  // namespace
}  // namespace sluice::kube

namespace sluice::kube {
namespace {

struct TlsFixture {
  testing::TestCertificate server_cert = *testing::MakeSelfSignedCertificate("kube-apiserver");
  testing::TestCertificate client_cert = *testing::MakeSelfSignedCertificate("sluice-test-client");
};

TEST_CASE("HTTPS: the configured CA is trusted - an unknown server certificate is refused") {
  TlsFixture certs;
  FixtureServer server;
  REQUIRE(server.StartTls({certs.server_cert, ""}).ok());
  server.SetFallback([](const testing::RecordedRequest&) { return Reply::Json(200, {{"kind", "Pod"}}); });
  REQUIRE(server.url().rfind("https://127.0.0.1:", 0) == 0);
  Config config;
  config.server = server.url();
  config.token = "secret";
  ClientOptions options = FastOptions();
  options.retry.max_attempts = 1;

  config.ca_pem = certs.server_cert.cert_pem;
  auto trusted = Client::Create(config, options);
  REQUIRE(trusted.ok());
  auto pod = (*trusted)->Get(resources::Pods(), "x", "p");
  REQUIRE(pod.ok());
  CHECK(server.Requests().back().headers["authorization"] == "Bearer secret");

  config.ca_pem = certs.client_cert.cert_pem;  // some other CA
  auto untrusted = Client::Create(config, options);
  REQUIRE(untrusted.ok());
  CHECK((*untrusted)->Get(resources::Pods(), "x", "p").status().code() == absl::StatusCode::kUnavailable);

  config.ca_pem.clear();
  config.insecure_skip_tls_verify = true;
  auto insecure = Client::Create(config, options);
  REQUIRE(insecure.ok());
  CHECK((*insecure)->Get(resources::Pods(), "x", "p").ok());
}

TEST_CASE("HTTPS: client certificate authentication") {
  TlsFixture certs;
  FixtureServer server;
  REQUIRE(server.StartTls({certs.server_cert, certs.client_cert.cert_pem}).ok());
  server.SetFallback([](const testing::RecordedRequest&) { return Reply::Json(200, {{"kind", "Pod"}}); });
  Config config;
  config.server = server.url();
  config.ca_pem = certs.server_cert.cert_pem;
  ClientOptions options = FastOptions();
  options.retry.max_attempts = 1;
  auto anonymous = Client::Create(config, options);
  REQUIRE(anonymous.ok());
  CHECK((*anonymous)->Get(resources::Pods(), "x", "p").status().code() == absl::StatusCode::kUnavailable);
  CHECK(server.RequestCount() == 0);

  config.client_cert_pem = certs.client_cert.cert_pem;
  config.client_key_pem = certs.client_cert.key_pem;
  auto with_cert = Client::Create(config, options);
  REQUIRE(with_cert.ok());
  REQUIRE((*with_cert)->Get(resources::Pods(), "x", "p").ok());
  CHECK(server.Requests().back().headers["x-client-cn"] == "sluice-test-client");
}

TEST_CASE("HTTPS watch streams events live and stops promptly") {
  TlsFixture certs;
  FixtureServer server;
  REQUIRE(server.StartTls({certs.server_cert, ""}).ok());
  json events = FixtureExchange("watch", 0)["response"]["events"];
  server.Expect("GET", kSamples.CollectionPath("fixtures"), Reply::Watch({events[0]}, /*hold_open=*/true));
  Config config;
  config.server = server.url();
  config.ca_pem = certs.server_cert.cert_pem;
  auto client = Client::Create(config, FastOptions());
  REQUIRE(client.ok());
  absl::Mutex mu;
  int received = 0;
  std::stop_source stop;
  absl::Status result;
  std::thread watcher([&] {
    result = (*client)->Watch(kSamples, "fixtures", {},
                              [&](WatchEvent&&) {
                                absl::MutexLock lock(&mu);
                                ++received;
                                return absl::OkStatus();
                              },
                              stop.get_token());
  });
  {
    absl::MutexLock lock(&mu);
    auto one = [&]() { return received == 1; };
    REQUIRE(mu.AwaitWithTimeout(absl::Condition(&one), absl::Seconds(10)));
  }
  stop.request_stop();
  watcher.join();
  CHECK(absl::IsCancelled(result));
}

}  // namespace
}  // namespace sluice::kube
