#include "kube/reflector.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kube/errors.h"
#include "kube/workqueue.h"
#include "kube/testing/fixture_server.h"

namespace sluice::kube {
namespace {

using nlohmann::json;
using testing::FixtureExchange;
using testing::FixtureServer;
using testing::RecordedRequest;
using testing::Reply;

const ResourceRef kSamples{"fixtures.sluice.dev", "v1alpha1", "samples", true};
const std::string kPath = kSamples.CollectionPath("fixtures");

std::unique_ptr<Client> MakeClient(const FixtureServer& server) {
  Config config;
  config.server = server.url();
  ClientOptions options;
  options.retry.max_attempts = 1;  // reflector-level behaviour only
  auto client = Client::Create(config, options);
  REQUIRE(client.ok());
  return std::move(*client);
}

bool IsWatch(const RecordedRequest& r) { return r.query.count("watch") > 0; }

// Any watch not scripted otherwise: an empty stream held open until the server stops.
void HoldFurtherWatches(FixtureServer& server) {
  server.SetFallback([](const RecordedRequest& r) -> std::optional<Reply> {
    if (IsWatch(r)) return Reply::Watch({}, /*hold_open=*/true);
    return std::nullopt;
  });
}

json Sample(const std::string& name, const std::string& rv) {
  return {{"apiVersion", "fixtures.sluice.dev/v1alpha1"},
          {"kind", "Sample"},
          {"metadata", {{"name", name}, {"namespace", "fixtures"}, {"resourceVersion", rv}, {"uid", "uid-" + name}}}};
}

json List(std::vector<json> items, const std::string& rv, const std::string& next = "") {
  json meta = {{"resourceVersion", rv}};
  if (!next.empty()) meta["continue"] = next;
  return {{"apiVersion", "fixtures.sluice.dev/v1alpha1"}, {"kind", "SampleList"}, {"metadata", meta}, {"items", items}};
}

// Records handler calls as "add:name", "update:name:rv", "delete:name".
class Recorder {
 public:
  ResourceEventHandler Handler() {
    ResourceEventHandler h;
    h.on_add = [this](const ObjectPtr& o) { Push(absl::StrCat("add:", NameOf(*o))); };
    h.on_update = [this](const ObjectPtr&, const ObjectPtr& o) {
      Push(absl::StrCat("update:", NameOf(*o), ":", ResourceVersionOf(*o)));
    };
    h.on_delete = [this](const ObjectPtr& o) { Push(absl::StrCat("delete:", NameOf(*o))); };
    return h;
  }
  bool WaitFor(const std::string& entry, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() { return std::find(log_.begin(), log_.end(), entry) != log_.end(); };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
  }
  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

 private:
  void Push(std::string s) {
    absl::MutexLock lock(&mu_);
    log_.push_back(std::move(s));
  }
  absl::Mutex mu_;
  std::vector<std::string> log_;
};

TEST_CASE("reflector: paginated rv=0 list / then a watch from its resourceVersion feeds store and handlers") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.ExpectExchange(FixtureExchange("crud", 6));  // page 1 (limit=1) with a continue token
  server.ExpectExchange(FixtureExchange("crud", 7));  // page 2
  server.Expect("GET", kPath, Reply::FromExchange(FixtureExchange("watch", 0)),
                {{"watch", "true"}, {"resourceVersion", "395"}});
  HoldFurtherWatches(server);
  auto client = MakeClient(server);
  Store store;
  REQUIRE(store.AddIndex("uid", [](const json& o) { return std::vector<std::string>{UidOf(o)}; }).ok());
  ReflectorOptions options;
  options.resource = kSamples;
  options.ns = "fixtures";
  options.page_size = 1;
  options.min_watch_timeout = absl::Seconds(300);
  options.max_watch_timeout = absl::Seconds(600);
  Reflector reflector(client.get(), &store, options);
  Recorder recorder;
  reflector.AddEventHandler(recorder.Handler());
  std::vector<ReflectorEvent> metric_events;
  absl::Mutex metrics_mu;
  reflector.SetMetricsCallback([&](ReflectorEvent e, const absl::Status&) {
    absl::MutexLock lock(&metrics_mu);
    metric_events.push_back(e);
  });
  reflector.Start();
  REQUIRE(reflector.WaitForSync(absl::Seconds(10)));
  REQUIRE(recorder.WaitFor("delete:w1"));
  REQUIRE(server.WaitForOpenHeldStreams(1));  // re-watching from the last bookmark
  CHECK(reflector.LastResourceVersion() == "408");
  reflector.Stop();

  CHECK(recorder.Log() == std::vector<std::string>{"add:a", "add:b", "add:w1", "update:w1:407", "delete:w1"});
  CHECK(store.Keys() == std::vector<std::string>{"fixtures/a", "fixtures/b"});
  CHECK(store.ByIndex("uid", "3a4103d8-0ddb-4ce7-9e44-360db054a1a8").size() == 1);
  auto requests = server.Requests();
  REQUIRE(requests.size() >= 4);
  CHECK(requests[0].query["resourceVersion"] == "0");
  CHECK(requests[0].query["limit"] == "1");
  CHECK(requests[1].query.count("resourceVersion") == 0);
  CHECK(requests[1].query.count("continue") == 1);
  CHECK(requests[2].query["allowWatchBookmarks"] == "true");
  int timeout = std::stoi(requests[2].query["timeoutSeconds"]);
  CHECK(timeout >= 300);
  CHECK(timeout <= 600);
  CHECK(requests[3].query["resourceVersion"] == "408");  // resumed from the bookmark, no relist
  CHECK(reflector.lists() == 1);
  CHECK(reflector.watches_started() == 2);
  absl::MutexLock lock(&metrics_mu);
  CHECK(metric_events.front() == ReflectorEvent::kListed);
  CHECK(std::count(metric_events.begin(), metric_events.end(), ReflectorEvent::kWatchEnded) == 1);
}

TEST_CASE("reflector: the transform shapes listed and watched objects before store and handlers") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  json listed = Sample("a", "300");
  listed["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  listed["spec"] = {{"big", std::string(1000, 'x')}, {"keep", 1}};
  server.Expect("GET", kPath, Reply::Json(200, List({listed}, "300")), {{"resourceVersion", "0"}});
  json watched = Sample("b", "301");
  watched["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  watched["spec"] = {{"big", "y"}, {"keep", 2}};
  server.Expect("GET", kPath, Reply::Watch({json{{"type", "ADDED"}, {"object", watched}}}, /*hold_open=*/true),
                {{"watch", "true"}, {"resourceVersion", "300"}});
  auto client = MakeClient(server);
  Store store;
  ReflectorOptions options;
  options.resource = kSamples;
  options.ns = "fixtures";
  options.transform = [](json&& o) {
    json out = DropManagedFields(std::move(o));
    out["spec"].erase("big");
    return out;
  };
  Reflector reflector(client.get(), &store, options);
  std::vector<json> handed;
  absl::Mutex mu;
  ResourceEventHandler handler;
  handler.on_add = [&](const ObjectPtr& o) {
    absl::MutexLock lock(&mu);
    handed.push_back(*o);
  };
  reflector.AddEventHandler(handler);
  reflector.Start();
  {
    absl::MutexLock lock(&mu);
    auto both = [&] { return handed.size() == 2; };
    REQUIRE(mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(10)));
  }
  reflector.Stop();
  REQUIRE(store.size() == 2);
  for (const char* key : {"fixtures/a", "fixtures/b"}) {
    INFO(key);
    ObjectPtr o = store.Get(key);
    REQUIRE(o != nullptr);
    CHECK_FALSE((*o)["metadata"].contains("managedFields"));
    CHECK_FALSE((*o)["spec"].contains("big"));
    CHECK((*o)["spec"].contains("keep"));
  }
  absl::MutexLock lock(&mu);
  REQUIRE(handed.size() == 2);
  CHECK_FALSE(handed[1]["metadata"].contains("managedFields"));
  CHECK(reflector.LastResourceVersion() == "301");
}

void CheckRelistOnGone(const Reply& gone) {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  // First list (rv=0) has an object that the relist will no longer contain.
  server.Expect("GET", kPath, Reply::Json(200, List({Sample("a", "300"), Sample("stale", "301")}, "1")),
                {{"resourceVersion", "0"}});
  server.Expect("GET", kPath, gone, {{"watch", "true"}, {"resourceVersion", "1"}});
  // The consistent relist: the recorded list at resourceVersion 408 (a, b, defaults, ssa).
  server.Expect("GET", kPath, Reply::FromExchange(FixtureExchange("watch-expired", 1)));
  HoldFurtherWatches(server);
  auto client = MakeClient(server);
  Store store;
  ReflectorOptions options;
  options.resource = kSamples;
  options.ns = "fixtures";
  Reflector reflector(client.get(), &store, options);
  Recorder recorder;
  reflector.AddEventHandler(recorder.Handler());
  reflector.Start();
  REQUIRE(recorder.WaitFor("delete:stale"));
  REQUIRE(server.WaitForOpenHeldStreams(1));
  reflector.Stop();
  CHECK(recorder.Log() ==
        std::vector<std::string>{"add:a", "add:stale", "delete:stale", "add:b", "add:defaults", "add:ssa", "update:a:405"});
  CHECK(store.size() == 4);
  CHECK(store.Get("fixtures/stale") == nullptr);
  CHECK(reflector.relists_after_gone() == 1);
  CHECK(reflector.lists() == 2);
  CHECK(reflector.relists() == 1);
  CHECK(reflector.watch_restarts() == 1);
  auto requests = server.Requests();
  REQUIRE(requests.size() == 4);
  CHECK(requests[2].query.count("resourceVersion") == 0);  // consistent relist after 410
  CHECK_FALSE(IsWatch(requests[2]));
  CHECK(requests[3].query["resourceVersion"] == "408");
}

TEST_CASE("reflector relists (and reports deletions) on a 410 ERROR event") {
  CheckRelistOnGone(Reply::FromExchange(FixtureExchange("watch-expired", 0)));
}

TEST_CASE("reflector relists on a 410 HTTP status from the watch request") {
  CheckRelistOnGone(Reply::Status(410, "Expired", "too old resource version: 1 (392)"));
}

TEST_CASE("reflector backs off 0.8 s doubling on watch errors and resets after a healthy stream") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", kPath, Reply::Json(200, List({Sample("a", "10")}, "10")), {{"resourceVersion", "0"}});
  server.Expect("GET", kPath, Reply::Status(500, "InternalError", "etcd hiccup"), {{"watch", "true"}});
  server.Expect("GET", kPath, Reply::Status(503, "ServiceUnavailable", "busy"), {{"watch", "true"}});
  server.Expect("GET", kPath, Reply::Watch({{{"type", "MODIFIED"}, {"object", Sample("a", "11")}}}), {{"watch", "true"}});
  server.Expect("GET", kPath, Reply::Status(500, "InternalError", "again"), {{"watch", "true"}});
  HoldFurtherWatches(server);
  auto client = MakeClient(server);
  Store store;
  FakeClock clock;
  ReflectorOptions options;
  options.resource = kSamples;
  options.ns = "fixtures";
  options.clock = &clock;
  Reflector reflector(client.get(), &store, options);
  reflector.Start();

  auto next_sleep = [&]() -> double {
    REQUIRE(clock.AwaitSleepers(1));
    auto deadlines = clock.SleeperDeadlines();
    REQUIRE(deadlines.size() == 1);
    return absl::ToDoubleSeconds(deadlines[0] - clock.Now());
  };
  double first = next_sleep();  // after the 500
  CHECK(first >= 0.8);
  CHECK(first <= 1.0);
  CHECK(server.RequestCount() == 2);
  clock.Advance(absl::Seconds(first));
  REQUIRE(server.WaitForRequests(3));
  double second = next_sleep();  // after the 503: doubled
  CHECK(second >= 1.6);
  CHECK(second <= 2.0);
  clock.Advance(absl::Seconds(second));
  // The healthy stream (one event, clean end) resets the backoff; the following 500 waits 0.8 s again.
  REQUIRE(server.WaitForRequests(5));
  double third = next_sleep();
  CHECK(third >= 0.8);
  CHECK(third <= 1.0);
  CHECK(ResourceVersionOf(*store.Get("fixtures/a")) == "11");
  CHECK(reflector.watch_errors() == 3);
  clock.Advance(absl::Seconds(third));
  REQUIRE(server.WaitForOpenHeldStreams(1));
  reflector.Stop();
  CHECK(reflector.lists() == 1);  // errors other than 410 do not relist
  auto requests = server.Requests();
  CHECK(requests.back().query["resourceVersion"] == "11");
}

TEST_CASE("reflector falls back to a consistent list when resourceVersion=0 fails") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", kPath, Reply::Status(500, "InternalError", "cache not ready"), {{"resourceVersion", "0"}});
  server.Expect("GET", kPath, Reply::Json(200, List({Sample("a", "7")}, "7")));
  HoldFurtherWatches(server);
  auto client = MakeClient(server);
  Store store;
  ReflectorOptions options;
  options.resource = kSamples;
  options.ns = "fixtures";
  Reflector reflector(client.get(), &store, options);
  reflector.Start();
  REQUIRE(reflector.WaitForSync(absl::Seconds(10)));
  REQUIRE(server.WaitForOpenHeldStreams(1));
  reflector.Stop();
  auto requests = server.Requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[1].query.count("resourceVersion") == 0);
  CHECK(store.size() == 1);
}

// Stop() on another thread; true if it returned before `deadline` (a Stop that does not interrupt
// what the reflector is blocked in never returns: the fake clock is never advanced and the held
// stream never ends, so this cannot pass by waiting longer).
bool StopsBefore(Reflector& reflector, absl::Duration deadline) {
  absl::Notification stopped;
  std::thread stopper([&] {
    reflector.Stop();
    stopped.Notify();
  });
  if (!stopped.WaitForNotificationWithTimeout(deadline)) {
    // The reflector's thread is stuck and Stop() is blocked joining it: nothing can be cleaned up.
    std::cerr << "FAILED: Reflector::Stop() did not return within " << absl::FormatDuration(deadline) << "\n";
    std::_Exit(1);
  }
  stopper.join();
  return true;
}

TEST_CASE("the default watch timeout is random in [5, 10] minutes, drawn anew for every watch") {
  ReflectorOptions defaults;
  CHECK(defaults.min_watch_timeout == absl::Minutes(5));
  CHECK(defaults.max_watch_timeout == absl::Minutes(10));
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.Expect("GET", kPath, Reply::Json(200, List({Sample("a", "5")}, "5")), {{"resourceVersion", "0"}});
  constexpr int kWatches = 12;
  for (int i = 0; i < kWatches; ++i) {
    server.Expect("GET", kPath, Reply::Watch({}), {{"watch", "true"}});  // each ends at once, normally
  }
  HoldFurtherWatches(server);
  auto client = MakeClient(server);
  Store store;
  ReflectorOptions options;  // default timeouts, random seed
  options.resource = kSamples;
  options.ns = "fixtures";
  Reflector reflector(client.get(), &store, options);
  reflector.Start();
  REQUIRE(server.WaitForOpenHeldStreams(1));  // the 13th watch, after 12 that ended
  reflector.Stop();
  std::set<int> drawn;
  int watches = 0;
  for (const RecordedRequest& r : server.Requests()) {
    if (!IsWatch(r)) continue;
    ++watches;
    int seconds = std::stoi(r.query.at("timeoutSeconds"));
    CHECK(seconds >= 300);
    CHECK(seconds <= 600);
    drawn.insert(seconds);
  }
  CHECK(watches == kWatches + 1);
  // 13 draws from 301 values: all equal with probability 301^-12, so several distinct values show
  // the timeout is drawn per watch (not fixed, not drawn once).
  CHECK(drawn.size() >= 5);
  CHECK(reflector.last_watch_timeout_seconds() >= 300);
  CHECK(reflector.last_watch_timeout_seconds() <= 600);
}

TEST_CASE("reflector stops promptly while parked in a backoff sleep or an open watch") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  auto client = MakeClient(server);
  Store store;
  FakeClock clock;  // never advanced: the reflector sleeps "forever"
  ReflectorOptions options;
  options.resource = kSamples;
  options.clock = &clock;

  SECTION("in a backoff sleep") {
    server.SetFallback([](const RecordedRequest&) { return Reply::Status(503, "ServiceUnavailable", "down"); });
    Reflector reflector(client.get(), &store, options);
    reflector.Start();
    REQUIRE(clock.AwaitSleepers(1));
    const size_t requests = server.RequestCount();
    REQUIRE(StopsBefore(reflector, absl::Seconds(30)));
    CHECK(clock.SleeperDeadlines().empty());  // it left the sleep
    CHECK(server.RequestCount() == requests);  // and made no request after Stop
    CHECK_FALSE(reflector.HasSynced());
  }
  SECTION("in an open watch") {
    server.Expect("GET", kSamples.CollectionPath(""), Reply::Json(200, List({Sample("a", "5")}, "5")),
                  {{"resourceVersion", "0"}});
    HoldFurtherWatches(server);
    Reflector reflector(client.get(), &store, options);
    reflector.Start();
    REQUIRE(reflector.WaitForSync(absl::Seconds(10)));
    REQUIRE(server.WaitForOpenHeldStreams(1));
    const size_t requests = server.RequestCount();
    REQUIRE(StopsBefore(reflector, absl::Seconds(30)));
    CHECK(reflector.watches_started() == 1);   // the watch was cancelled, not ended and re-opened
    CHECK(server.RequestCount() == requests);  // nothing after Stop
    CHECK(clock.SleeperDeadlines().empty());
  }
}

TEST_CASE("reflector stops promptly while a list answer is still streaming") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  Reply endless = Reply::Watch({}, /*hold_open=*/true);  // a chunked body that never ends
  server.SetFallback([endless](const RecordedRequest&) { return endless; });
  auto client = MakeClient(server);
  Store store;
  ReflectorOptions options;
  options.resource = kSamples;
  Reflector reflector(client.get(), &store, options);
  reflector.Start();
  REQUIRE(server.WaitForOpenHeldStreams(1));
  REQUIRE(StopsBefore(reflector, absl::Seconds(30)));  // cancels the in-flight list
  CHECK_FALSE(reflector.HasSynced());
  CHECK(reflector.lists() == 0);
}

TEST_CASE("reflector survives a list answer that is not a list object") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  server.SetFallback([](const RecordedRequest&) { return Reply::Json(200, json::array({1, 2, 3})); });
  auto client = MakeClient(server);
  Store store;
  FakeClock clock;
  ReflectorOptions options;
  options.resource = kSamples;
  options.clock = &clock;
  Reflector reflector(client.get(), &store, options);
  absl::Mutex mu;
  absl::Status last;
  reflector.SetMetricsCallback([&](ReflectorEvent e, const absl::Status& s) {
    absl::MutexLock lock(&mu);
    if (e == ReflectorEvent::kWatchError) last = s;
  });
  reflector.Start();
  REQUIRE(clock.AwaitSleepers(1));  // backing off, not crashed
  reflector.Stop();
  absl::MutexLock lock(&mu);
  CHECK(last.code() == absl::StatusCode::kDataLoss);
  CHECK(store.size() == 0);
}

TEST_CASE("enqueue handlers ignore malformed ownerReferences") {
  WorkQueue queue;
  ResourceEventHandler owner = EnqueueControllerOwnerHandler(&queue, "Sample");
  json pod = json::parse(R"({"metadata":{"name":"p","namespace":"n","ownerReferences":[
      {"kind":5,"name":"a","controller":"yes"}, "not-an-object", {"kind":"Sample","controller":true,"name":7}]}})");
  owner.on_add(std::make_shared<const json>(pod));
  json weird = json::parse(R"({"metadata":{"ownerReferences":{"kind":"Sample"}}})");
  owner.on_add(std::make_shared<const json>(weird));
  CHECK(queue.Len() == 0);
  pod["metadata"]["ownerReferences"].push_back({{"kind", "Sample"}, {"controller", true}, {"name", "good"}});
  owner.on_add(std::make_shared<const json>(pod));
  CHECK(*queue.Get() == "n/good");
}

TEST_CASE("enqueue handlers map objects and their controller owners to keys") {
  WorkQueue queue;
  ResourceEventHandler own = EnqueueObjectHandler(&queue);
  ResourceEventHandler owner = EnqueueControllerOwnerHandler(&queue, "Sample");
  json pod = json::parse(R"({"metadata":{"name":"a-worker-0","namespace":"fixtures","ownerReferences":[
      {"apiVersion":"fixtures.sluice.dev/v1alpha1","kind":"Sample","name":"a","uid":"u","controller":true},
      {"apiVersion":"v1","kind":"Other","name":"zzz","uid":"v","controller":false}]}})");
  own.on_add(std::make_shared<const json>(pod));
  owner.on_delete(std::make_shared<const json>(pod));
  CHECK(*queue.Get() == "fixtures/a-worker-0");
  CHECK(*queue.Get() == "fixtures/a");
  CHECK(queue.Len() == 0);
}

}  // namespace
}  // namespace sluice::kube

#include "kube/controller.h"
#include "kube/finalizer.h"

namespace sluice::kube {
namespace {

// The pieces wired as an operator would (see docs/kube-runtime.md "Minimal use").
TEST_CASE("informer + workqueue + controller + finalizer wired together") {
  FixtureServer server;
  REQUIRE(server.Start().ok());
  json live = FixtureExchange("crud", 0)["response"]["body"];           // "a": no finalizer yet
  json deleting = FixtureExchange("finalizers", 2)["response"]["body"];  // "fin": deleting, finalizer set
  server.Expect("GET", kPath, Reply::Json(200, List({live, deleting}, "423")), {{"resourceVersion", "0"}});
  server.Expect("PATCH", kSamples.ObjectPath("fixtures", "a"), Reply::Json(200, live));
  server.ExpectExchange(FixtureExchange("finalizers", 4));
  HoldFurtherWatches(server);
  auto client = MakeClient(server);

  Store store;
  WorkQueue queue;
  Reflector reflector(client.get(), &store, {.resource = kSamples, .ns = "fixtures"});
  reflector.AddEventHandler(EnqueueObjectHandler(&queue));
  absl::Mutex mu;
  std::vector<std::string> log;
  Controller controller(
      &queue,
      [&](const std::string& key) -> absl::StatusOr<ReconcileResult> {
        ObjectPtr object = store.Get(key);
        if (object == nullptr) return ReconcileResult{};
        return Finalize(*client, kSamples, *object, "sluice.dev/cleanup", [&](FinalizerEvent e, const json& o) {
          absl::MutexLock lock(&mu);
          log.push_back(absl::StrCat(e == FinalizerEvent::kCleanup ? "cleanup:" : "apply:", NameOf(o)));
          return absl::StatusOr<ReconcileResult>(ReconcileResult{});
        });
      },
      {.workers = 2});
  reflector.Start();
  REQUIRE(reflector.WaitForSync(absl::Seconds(10)));
  controller.Start();
  REQUIRE(server.WaitForRequests(4));  // list, watch, two PATCHes
  controller.Stop();
  reflector.Stop();
  absl::MutexLock lock(&mu);
  CHECK(log == std::vector<std::string>{"cleanup:fin"});
  std::map<std::string, json> patches;
  for (const auto& r : server.Requests()) {
    if (r.method == "PATCH") patches[r.path] = r.JsonBody();
  }
  REQUIRE(patches.size() == 2);
  CHECK(patches[kSamples.ObjectPath("fixtures", "a")][1]["path"] == "/metadata/finalizers");
  CHECK(patches[kSamples.ObjectPath("fixtures", "fin")] == FixtureExchange("finalizers", 4)["request"]["body"]);
  CHECK(controller.failures() == 0);
}

}  // namespace
}  // namespace sluice::kube
