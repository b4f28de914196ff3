// AutoscalerController against the project's test API server (e2e/apiserver, started here as a
// child process on a free port) with the DataService CRD installed. The signals come from a
// SignalProvider the test controls (the sources are tested on their own against real processes and
// a real Prometheus); everything else is real: the reflectors, the reconcile, the server-side
// applies of spec.workers as `sluice-autoscaler`, status.autoscaler through the status subresource,
// Events, and what the server answers (managedFields, 409 conflicts). Waits are on observed state
// with deadlines, never fixed sleeps.
#include "autoscaler/controller/autoscaler_controller.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kube/apply.h"
#include "kube/client.h"
#include "kube/resource.h"
#include "operator/test_yaml.h"
#include "testing/test_util.h"

namespace sluice::autoscaler {
namespace {

using json = nlohmann::json;

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(60)) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return condition();
}

// The test API server as a child process; killed and reaped on destruction.
class TestApiServer {
 public:
  TestApiServer() {
    port_file_ = dir_.File("port");
    std::string source = sluice::testing::SourceDir();
    pid_ = fork();
    if (pid_ == 0) {
      if (chdir(source.c_str()) != 0) _exit(126);
      setenv("PYTHONPATH", source.c_str(), 1);
      setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
      execl("/usr/bin/python3", "python3", "-m", "e2e.apiserver", "--port", "0", "--port-file", port_file_.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    REQUIRE(pid_ > 0);
    REQUIRE(WaitFor([&] {
      std::ifstream in(port_file_);
      return static_cast<bool>(in >> port_);
    }, absl::Seconds(30)));
  }
  ~TestApiServer() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    if (!WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, absl::Seconds(10))) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  sluice::testing::TempDir dir_;
  std::string port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// Two saturated workers at 50 elements/s each while the trainers stall half the time: the policy
// wants more workers at once.
Observation Stalled(absl::Time at) {
  Observation o;
  Signals& s = o.signals;
  s.at = at;
  s.window = absl::Minutes(1);
  s.stall_ratio = Measurement::Of(0.5);
  s.demand = Measurement::Of(100);
  s.supply = Measurement::Of(100);
  s.worker_cpu = Measurement::Of(2);
  s.compute_per_element = Measurement::Of(0.1);
  s.buffered = Measurement::Of(0);
  s.churn = Measurement::Of(0);
  s.workers = Measurement::Of(2);
  s.local_workers = Measurement::Of(0);
  return o;
}

// Signals the test controls; counts observations per DataService.
class FakeSignals final : public SignalProvider {
 public:
  Observation Observe(const ObserveRequest& request, absl::Time now) override {
    absl::MutexLock lock(&mu_);
    ++observed_[request.name];
    last_[request.name] = request;
    return Stalled(now);
  }
  int observed(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return observed_[name];
  }
  ObserveRequest last(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return last_[name];
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> observed_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ObserveRequest> last_ ABSL_GUARDED_BY(mu_);
};

struct Cluster {
  Cluster() {
    kube::Config config;
    config.server = server.url();
    auto made = kube::Client::Create(config);
    REQUIRE(made.ok());
    client = *std::move(made);
    json crd = op::testing::LoadYamlDocuments("crds/dataservices.sluice.dev.yaml").at(0);
    REQUIRE(client->Create(kube::resources::CustomResourceDefinitions(), "", crd).ok());
    REQUIRE(client->Create(kube::resources::Namespaces(), "", json{{"apiVersion", "v1"}, {"kind", "Namespace"},
                                                                 {"metadata", {{"name", "ml"}}}}).ok());
    // The CRD is served once Established.
    REQUIRE(WaitFor([&] { return client->List(DataServicesResource(), "ml").ok(); }, absl::Seconds(30)));
  }
  json Get(const std::string& name) {
    auto got = client->Get(DataServicesResource(), "ml", name);
    REQUIRE(got.ok());
    return *got;
  }
  TestApiServer server;
  std::unique_ptr<kube::Client> client;
};

// A DataService applied by `manager` (server-side apply, as `kubectl apply --server-side` does).
json Manifest(const std::string& name, json autoscaling, std::optional<int> replicas = std::nullopt) {
  json workers = {{"image", "sluice-worker:dev"}, {"minReplicas", 1}, {"maxReplicas", 20}};
  if (replicas) workers["replicas"] = *replicas;
  if (!autoscaling.contains("headroom")) autoscaling["headroom"] = 0.1;
  return {{"apiVersion", "sluice.dev/v1alpha1"},
          {"kind", "DataService"},
          {"metadata", {{"name", name}, {"namespace", "ml"}}},
          {"spec", {{"dispatcher", {{"image", "sluice-dispatcher:dev"}}}, {"workers", workers},
                    {"autoscaling", autoscaling}}}};
}

const json* ManagerEntry(const json& ds, const std::string& manager, const std::string& subresource) {
  if (!ds.contains("metadata") || !ds["metadata"].contains("managedFields")) return nullptr;
  for (const json& e : ds["metadata"]["managedFields"]) {
    if (e.value("manager", "") == manager && e.value("subresource", "") == subresource) return &e;
  }
  return nullptr;
}

json AutoscalerCondition(const json& ds, const std::string& type) {
  const json conditions = ds.value("/status/autoscaler/conditions"_json_pointer, json());
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (c.value("type", "") == type) return c;
    }
  }
  return json::object();
}

// The reasons of the Events recorded about DataService `name` in "ml".
std::vector<std::string> EventReasons(kube::Client& client, const std::string& name) {
  std::vector<std::string> out;
  auto list = client.List(kube::resources::Events(), "ml");
  if (!list.ok()) return out;
  for (const json& e : (*list)["items"]) {
    if (e["regarding"].value("name", "") == name) out.push_back(e.value("reason", ""));
  }
  return out;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

struct Running {
  Running(kube::Client* client, SignalProvider* signals, AutoscalerMetrics* metrics) {
    AutoscalerOptions options;
    options.period = absl::Milliseconds(200);
    options.status_interval = absl::Seconds(5);
    options.signals = signals;
    options.metrics = metrics;
    options.log = [](absl::string_view) {};
    controller = std::make_unique<AutoscalerController>(client, options);
    REQUIRE(controller->Start(absl::Seconds(30)).ok());
  }
  ~Running() { controller->Stop(); }
  std::unique_ptr<AutoscalerController> controller;
};

TEST_CASE("an autoscaled DataService gets spec.workers written by sluice-autoscaler and status.autoscaler set",
          "[controller][integration]") {
  Cluster cluster;
  // The user leaves workers.replicas out of the manifest (as docs/autoscaling.md asks).
  REQUIRE(kube::ServerSideApply(*cluster.client, DataServicesResource(), "ml", Manifest("mnist", {{"enabled", true}}),
                                "kubectl")
              .ok());
  FakeSignals signals;
  AutoscalerMetrics metrics;
  Running running(cluster.client.get(), &signals, &metrics);

  json ds;
  REQUIRE(WaitFor([&] {
    ds = cluster.Get("mnist");
    return ds["spec"]["workers"].value("replicas", 0) > 1 && ds["status"]["autoscaler"].is_object();
  }));
  const int replicas = ds["spec"]["workers"]["replicas"];
  CHECK(ds["status"]["autoscaler"]["desiredReplicas"] == replicas);
  // The decision that scaled (later periods, at the size already asked for, decide "none").
  CHECK(ds["status"]["autoscaler"]["lastScaleTime"].is_string());
  const std::string direction = ds["status"]["autoscaler"]["decision"]["direction"];
  CHECK((direction == "up" || direction == "none"));
  CHECK(ds["status"]["autoscaler"]["stallRatio"] == 0.5);
  CHECK(ds["status"]["autoscaler"]["arithmetic"].is_object());
  // Who wrote what: the spec fields by an Apply of sluice-autoscaler, status.autoscaler through /status.
  const json* spec_entry = ManagerEntry(ds, "sluice-autoscaler", "");
  REQUIRE(spec_entry != nullptr);
  CHECK((*spec_entry)["operation"] == "Apply");
  CHECK((*spec_entry)["fieldsV1"]["f:spec"]["f:workers"].contains("f:replicas"));
  const json* status_entry = ManagerEntry(ds, "sluice-autoscaler", "status");
  REQUIRE(status_entry != nullptr);
  CHECK((*status_entry)["fieldsV1"]["f:status"].contains("f:autoscaler"));
  // The user's entry does not hold the replicas.
  const json* user = ManagerEntry(ds, "kubectl", "");
  REQUIRE(user != nullptr);
  CHECK_FALSE((*user)["fieldsV1"]["f:spec"]["f:workers"].contains("f:replicas"));
  CHECK(WaitFor([&] { return Contains(EventReasons(*cluster.client, "mnist"), "ScaledUp"); }, absl::Seconds(30)));
  CHECK(WaitFor([&] { return metrics.decisions("ml", "mnist", "up") >= 1; }, absl::Seconds(30)));
  CHECK(signals.observed("mnist") >= 1);

  // Periodic re-evaluation at the same signals does not scale again (the need is met by the spec).
  const int observed = signals.observed("mnist");
  REQUIRE(WaitFor([&] { return signals.observed("mnist") >= observed + 3; }, absl::Seconds(30)));
  json later = cluster.Get("mnist");
  CHECK(later["spec"]["workers"]["replicas"] == replicas);
  CHECK(later["metadata"]["generation"] == ds["metadata"]["generation"]);
}

// A pod of DataService `ds` with `role` (and placement), Running and Ready at `ip`.
void CreatePod(kube::Client& client, const std::string& name, const std::string& ds, const std::string& role,
               const std::string& ip) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name},
                {"namespace", "ml"},
                {"labels", {{"sluice.dev/dataservice", ds}, {"sluice.dev/role", role}, {"sluice.dev/placement", "remote"}}}}},
              {"spec", {{"nodeName", "node-1"}, {"containers", json::array({{{"name", role}, {"image", "x"}}})}}}};
  auto created = client.Create(kube::resources::Pods(), "ml", pod);
  REQUIRE(created.ok());
  json status = *created;
  status["status"] = {{"phase", "Running"},
                      {"podIP", ip},
                      {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}};
  REQUIRE(client.Send("PUT", absl::StrCat("/api/v1/namespaces/ml/pods/", name, "/status"), status.dump(),
                      "application/json")
              .ok());
}

TEST_CASE("the DataService's pods are found in the cache: the direct scrape gets the dispatcher's and workers' addresses",
          "[controller][integration]") {
  // The pod cache keeps pods packed (kube/packed_object.h); its index by DataService once read a
  // label the packed entry did not keep, so no pod was ever found: no scrape address, no ready
  // workers for a shift's make-before-break, no names for workersToDelete.
  Cluster cluster;
  CreatePod(*cluster.client, "mnist-dispatcher-0", "mnist", "dispatcher", "10.0.0.5");
  CreatePod(*cluster.client, "mnist-worker-remote-0", "mnist", "worker", "10.0.0.6");
  REQUIRE(kube::ServerSideApply(*cluster.client, DataServicesResource(), "ml", Manifest("mnist", {{"enabled", true}}),
                                "kubectl")
              .ok());
  FakeSignals signals;
  AutoscalerMetrics metrics;
  Running running(cluster.client.get(), &signals, &metrics);
  REQUIRE(WaitFor([&] {
    ObserveRequest r = signals.last("mnist");
    return signals.observed("mnist") >= 1 && !r.dispatcher_metrics_url.empty() && !r.worker_metrics_urls.empty();
  }, absl::Seconds(30)));
  ObserveRequest r = signals.last("mnist");
  CHECK(absl::StrContains(r.dispatcher_metrics_url, "10.0.0.5"));
  REQUIRE(r.worker_metrics_urls.count("mnist-worker-remote-0") == 1);
  CHECK(absl::StrContains(r.worker_metrics_urls["mnist-worker-remote-0"], "10.0.0.6"));
}

TEST_CASE("an HPA naming the DataService makes the autoscaler stand down with a condition",
          "[controller][integration]") {
  Cluster cluster;
  REQUIRE(kube::ServerSideApply(*cluster.client, DataServicesResource(), "ml",
                                Manifest("hpa-target", {{"enabled", true}}), "kubectl")
              .ok());
  json hpa = {{"apiVersion", "autoscaling/v2"},
              {"kind", "HorizontalPodAutoscaler"},
              {"metadata", {{"name", "hpa-target-hpa"}, {"namespace", "ml"}}},
              {"spec",
               {{"scaleTargetRef", {{"apiVersion", "sluice.dev/v1alpha1"}, {"kind", "DataService"}, {"name", "hpa-target"}}},
                {"minReplicas", 1},
                {"maxReplicas", 10}}}};
  REQUIRE(cluster.client->Create(HorizontalPodAutoscalers(), "ml", hpa).ok());
  FakeSignals signals;
  Running running(cluster.client.get(), &signals, nullptr);

  json ds;
  REQUIRE(WaitFor([&] {
    ds = cluster.Get("hpa-target");
    return AutoscalerCondition(ds, "AbleToScale").value("reason", "") == "DrivenByOther";
  }));
  const json able = AutoscalerCondition(ds, "AbleToScale");
  CHECK(able["status"] == "False");
  CHECK_THAT(able["message"].get<std::string>(), Catch::Contains("HorizontalPodAutoscaler ml/hpa-target-hpa"));
  CHECK(ds["spec"]["workers"]["replicas"] == 1);  // the default, untouched
  CHECK(ManagerEntry(ds, "sluice-autoscaler", "") == nullptr);  // no spec write at all
  CHECK(ds["status"]["autoscaler"]["desiredReplicas"].get<int>() > 1);  // still recommends
  CHECK(WaitFor([&] { return Contains(EventReasons(*cluster.client, "hpa-target"), "DrivenByOther"); },
                absl::Seconds(30)));

  // The HPA goes: the autoscaler acts again.
  REQUIRE(cluster.client->Delete(HorizontalPodAutoscalers(), "ml", "hpa-target-hpa").ok());
  REQUIRE(WaitFor([&] { return cluster.Get("hpa-target")["spec"]["workers"].value("replicas", 0) > 1; }));
}

TEST_CASE("Recommend mode writes status.autoscaler only", "[controller][integration]") {
  Cluster cluster;
  REQUIRE(kube::ServerSideApply(*cluster.client, DataServicesResource(), "ml",
                                Manifest("watch-only", {{"enabled", true}, {"mode", "Recommend"}}), "kubectl")
              .ok());
  FakeSignals signals;
  Running running(cluster.client.get(), &signals, nullptr);
  json ds;
  REQUIRE(WaitFor([&] {
    ds = cluster.Get("watch-only");
    return ds["status"]["autoscaler"].is_object() && ds["status"]["autoscaler"].contains("desiredReplicas");
  }));
  CHECK(ds["status"]["autoscaler"]["mode"] == "Recommend");
  CHECK(ds["status"]["autoscaler"]["desiredReplicas"].get<int>() > 1);
  CHECK(ds["status"]["autoscaler"]["decision"]["acted"] == false);
  CHECK(WaitFor([&] { return Contains(EventReasons(*cluster.client, "watch-only"), "Recommended"); }, absl::Seconds(30)));
  // Several periods later the spec is still the user's.
  const int observed = signals.observed("watch-only");
  REQUIRE(WaitFor([&] { return signals.observed("watch-only") >= observed + 3; }, absl::Seconds(30)));
  ds = cluster.Get("watch-only");
  CHECK(ds["spec"]["workers"]["replicas"] == 1);
  CHECK(ds["metadata"]["generation"] == 1);
  CHECK(ManagerEntry(ds, "sluice-autoscaler", "") == nullptr);
  CHECK(ManagerEntry(ds, "sluice-autoscaler", "status") != nullptr);
}

TEST_CASE("a conflict with another manager of spec.workers.replicas is reported, not forced",
          "[controller][integration]") {
  Cluster cluster;
  // The user keeps workers.replicas in a server-side applied manifest.
  REQUIRE(kube::ServerSideApply(*cluster.client, DataServicesResource(), "ml",
                                Manifest("owned", {{"enabled", true}}, 2), "kubectl")
              .ok());
  FakeSignals signals;
  AutoscalerMetrics metrics;
  Running running(cluster.client.get(), &signals, &metrics);
  json ds;
  REQUIRE(WaitFor([&] {
    ds = cluster.Get("owned");
    return AutoscalerCondition(ds, "AbleToScale").value("reason", "") == "ApplyConflict";
  }));
  const json able = AutoscalerCondition(ds, "AbleToScale");
  CHECK(able["status"] == "False");
  CHECK_THAT(able["message"].get<std::string>(), Catch::Contains("kubectl"));
  CHECK_THAT(able["message"].get<std::string>(), Catch::Contains("drop workers.replicas"));
  CHECK(ds["status"]["autoscaler"]["decision"]["acted"] == false);
  CHECK(WaitFor([&] { return Contains(EventReasons(*cluster.client, "owned"), "ApplyConflict"); }, absl::Seconds(30)));
  // Never forced: the user's value and ownership stand.
  CHECK(ds["spec"]["workers"]["replicas"] == 2);
  const json* user = ManagerEntry(ds, "kubectl", "");
  REQUIRE(user != nullptr);
  CHECK((*user)["fieldsV1"]["f:spec"]["f:workers"].contains("f:replicas"));
  CHECK(ManagerEntry(ds, "sluice-autoscaler", "") == nullptr);

  // The user drops the field from the manifest: the next period's apply succeeds.
  REQUIRE(kube::ServerSideApply(*cluster.client, DataServicesResource(), "ml", Manifest("owned", {{"enabled", true}}),
                                "kubectl")
              .ok());
  REQUIRE(WaitFor([&] {
    ds = cluster.Get("owned");
    return ManagerEntry(ds, "sluice-autoscaler", "") != nullptr && ds["spec"]["workers"].value("replicas", 0) > 2;
  }));
}

}  // namespace
}  // namespace sluice::autoscaler
