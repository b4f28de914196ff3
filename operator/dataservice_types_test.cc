#include "operator/dataservice_types.h"

#include <catch2/catch.hpp>

#include <string>

namespace sluice::op {
namespace {

using json = nlohmann::json;

json Minimal() {
  return json::parse(R"js({
    "apiVersion": "sluice.dev/v1alpha1", "kind": "DataService",
    "metadata": {"name": "imagenet", "namespace": "ml", "uid": "u-1", "generation": 3,
                 "creationTimestamp": "2026-11-22T06:45:15Z"},
    "spec": {"dispatcher": {"image": "sluice-dispatcher:dev"}, "workers": {"image": "sluice-worker:dev"}}
  })js");
}

bool HasError(const std::vector<FieldError>& errors, const std::string& field) {
  for (const FieldError& e : errors) {
    if (e.field == field) return true;
  }
  return false;
}

std::string Fields(const std::vector<FieldError>& errors) { return FormatFieldErrors(errors); }

TEST_CASE("a minimal DataService gets the CRD defaults", "[types]") {
  absl::StatusOr<DataService> ds = ParseDataService(Minimal());
  REQUIRE(ds.ok());
  CHECK(ds->metadata.name == "imagenet");
  CHECK(ds->metadata.namespace_name == "ml");
  CHECK(ds->metadata.uid == "u-1");
  CHECK(ds->metadata.generation == 3);
  REQUIRE(ds->metadata.creation_timestamp.has_value());
  CHECK(FormatKubeTime(*ds->metadata.creation_timestamp) == "2026-11-22T06:45:15Z");
  CHECK_FALSE(ds->metadata.deletion_timestamp.has_value());
  const DataServiceSpec& s = ds->spec;
  CHECK_FALSE(s.pipeline.config_map_ref.has_value());
  CHECK_FALSE(s.pipeline.inline_text.has_value());
  CHECK(s.dispatcher.port == 5050);
  CHECK(s.dispatcher.metrics_port == 8090);
  CHECK_FALSE(s.dispatcher.journal.has_value());
  CHECK(s.dispatcher.termination_grace_period_seconds == 30);
  CHECK(s.workers.replicas == 1);
  CHECK(s.workers.min_replicas == 0);
  CHECK(s.workers.max_replicas == 32);
  CHECK_FALSE(s.workers.local.has_value());
  CHECK(s.workers.port == 5051);
  CHECK(s.workers.metrics_port == 8091);
  CHECK(s.workers.max_unavailable == 1);
  CHECK(s.workers.resources.requests == StringMap{{"cpu", "1"}, {"memory", "1Gi"}});
  CHECK(WorkerCpuMillis(s.workers) == 1000);
  CHECK(s.placement.policy == PlacementPolicy::kRemoteOnly);
  CHECK(s.placement.local_cpu_fraction == Approx(0.5));
  CHECK_FALSE(s.autoscaling.enabled);
  CHECK(s.autoscaling.target_stall_ratio == Approx(0.05));
  CHECK(s.auto_order.mode == "relaxed");
  CHECK_FALSE(s.sharing.enabled);
  CHECK(ValidateDataService(*ds).empty());
}

TEST_CASE("every field of a full DataService is read", "[types]") {
  json o = Minimal();
  o["metadata"]["deletionTimestamp"] = "2026-11-22T07:00:00Z";
  o["metadata"]["finalizers"] = {"sluice.dev/drain"};
  o["spec"] = json::parse(R"js({
    "pipeline": {"configMapRef": {"name": "pipe"}},
    "dispatcher": {"image": "d:1", "imagePullPolicy": "IfNotPresent", "port": 6000, "metricsPort": 6001,
                   "resources": {"requests": {"cpu": 2, "memory": "4Gi"}, "limits": {"cpu": "4"}},
                   "journal": {"storageClassName": "fast", "size": "5Gi"},
                   "nodeSelector": {"pool": "system"},
                   "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "sluice", "effect": "NoSchedule"}],
                   "terminationGracePeriodSeconds": 60, "extraArgs": ["--log_level=debug"]},
    "workers": {"image": "w:1", "replicas": 6, "minReplicas": 2, "maxReplicas": 10, "local": 4,
                "workersToDelete": ["x-worker-remote-0"], "port": 7000, "metricsPort": 7001, "maxUnavailable": 2,
                "resources": {"requests": {"cpu": "1500m"}}, "terminationGracePeriodSeconds": 5, "extraArgs": ["--threads=4"]},
    "placement": {"policy": "Hybrid", "consumerSelector": {"matchLabels": {"app": "trainer"},
                  "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
                  "acceleratorNodeSelector": {"nvidia.com/gpu.present": "true"},
                  "remoteNodeSelector": {"pool": "cpu"},
                  "tolerations": [{"key": "spot", "operator": "Exists"}],
                  "localTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                  "localCpuFraction": 0.75},
    "autoscaling": {"enabled": true, "targetStallRatio": 0.1,
                    "metrics": {"prometheus": {"url": "http://prom:9090", "queries": {"demand": "sum(x)"}}},
                    "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 4},
                                 "scaleDown": {"stabilizationWindowSeconds": 300}},
                    "cost": {"acceleratorHourly": 32.5, "remoteCpuHourly": 0.04}},
    "autoOrder": {"enabled": true, "mode": "strict"},
    "sharing": {"enabled": true}
  })js");
  absl::StatusOr<DataService> ds = ParseDataService(o);
  REQUIRE(ds.ok());
  CHECK(ds->metadata.deletion_timestamp.has_value());
  CHECK(ds->metadata.HasFinalizer(kDrainFinalizer));
  const DataServiceSpec& s = ds->spec;
  REQUIRE(s.pipeline.config_map_ref.has_value());
  CHECK(s.pipeline.config_map_ref->name == "pipe");
  CHECK(s.pipeline.config_map_ref->key == "pipeline.yaml");
  CHECK(s.dispatcher.image_pull_policy == "IfNotPresent");
  CHECK(s.dispatcher.resources.requests.at("cpu") == "2");
  CHECK(s.dispatcher.resources.limits.at("cpu") == "4");
  REQUIRE(s.dispatcher.journal.has_value());
  CHECK(s.dispatcher.journal->storage_class_name == std::optional<std::string>("fast"));
  CHECK(s.dispatcher.journal->size == "5Gi");
  CHECK(s.dispatcher.node_selector.at("pool") == "system");
  REQUIRE(s.dispatcher.tolerations.size() == 1);
  CHECK(s.dispatcher.tolerations[0].effect == "NoSchedule");
  CHECK(s.dispatcher.extra_args == std::vector<std::string>{"--log_level=debug"});
  CHECK(s.workers.local == std::optional<int64_t>(4));
  CHECK(s.workers.workers_to_delete == std::vector<std::string>{"x-worker-remote-0"});
  CHECK(s.workers.max_unavailable == 2);
  CHECK(WorkerCpuMillis(s.workers) == 1500);
  CHECK(s.placement.policy == PlacementPolicy::kHybrid);
  REQUIRE(s.placement.consumer_selector.has_value());
  CHECK(s.placement.consumer_selector->match_expressions[0].values == std::vector<std::string>{"a", "b"});
  CHECK(s.placement.local_tolerations[0].key == "nvidia.com/gpu");
  CHECK(s.placement.local_cpu_fraction == Approx(0.75));
  CHECK(s.autoscaling.prometheus_url == std::optional<std::string>("http://prom:9090"));
  CHECK(s.autoscaling.prometheus_queries.at("demand") == "sum(x)");
  CHECK(s.autoscaling.scale_up.max_step == std::optional<int64_t>(4));
  CHECK(s.autoscaling.scale_down.stabilization_window_seconds == std::optional<int64_t>(300));
  CHECK(s.autoscaling.accelerator_hourly == std::optional<double>(32.5));
  CHECK(s.auto_order.mode == "strict");
  CHECK(s.sharing.enabled);
  INFO(Fields(ValidateDataService(*ds)));
  CHECK(ValidateDataService(*ds).empty());
}

TEST_CASE("null fields are treated as absent and defaulted", "[types]") {
  json o = Minimal();
  o["spec"]["workers"]["replicas"] = nullptr;
  o["spec"]["placement"] = nullptr;
  absl::StatusOr<DataService> ds = ParseDataService(o);
  REQUIRE(ds.ok());
  CHECK(ds->spec.workers.replicas == 1);
  CHECK(ds->spec.placement.policy == PlacementPolicy::kRemoteOnly);
}

TEST_CASE("malformed DataService objects give errors naming every field", "[types][malformed]") {
  SECTION("not an object") {
    for (const json& bad : {json(nullptr), json(3), json("spec"), json::array()}) {
      absl::StatusOr<DataService> ds = ParseDataService(bad);
      REQUIRE_FALSE(ds.ok());
      CHECK(ds.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(ds.status().message().find("must be a JSON object") != std::string::npos);
    }
  }
  SECTION("metadata missing or mistyped") {
    json o = Minimal();
    o.erase("metadata");
    CHECK(ParseDataService(o).status().message().find("metadata: required value") != std::string::npos);
    o = Minimal();
    o["metadata"]["name"] = 7;
    CHECK(ParseDataService(o).status().message().find("metadata.name: must be a string, got integer") !=
          std::string::npos);
    o = Minimal();
    o["metadata"]["deletionTimestamp"] = "yesterday";
    CHECK(ParseDataService(o).status().message().find("metadata.deletionTimestamp: invalid timestamp") !=
          std::string::npos);
  }
  SECTION("several errors are reported together") {
    json o = Minimal();
    o["spec"]["workers"]["replicas"] = "three";
    o["spec"]["workers"]["minReplicas"] = 1.5;
    o["spec"]["placement"] = {{"policy", "Sideways"}, {"localCpuFraction", "half"}};
    o["spec"]["dispatcher"]["resources"] = {{"requests", {{"cpu", "two"}}}};
    o["spec"]["workers"]["workersToDelete"] = {"a", 3};
    o["spec"]["autoOrder"] = {{"mode", "chaotic"}};
    absl::StatusOr<DataService> ds = ParseDataService(o);
    REQUIRE_FALSE(ds.ok());
    std::string msg(ds.status().message());
    INFO(msg);
    CHECK(msg.find("DataService \"imagenet\" is invalid") != std::string::npos);
    CHECK(msg.find("spec.workers.replicas: must be an integer, got string") != std::string::npos);
    CHECK(msg.find("spec.workers.minReplicas: must be an integer, got number") != std::string::npos);
    CHECK(msg.find("spec.placement.policy: unsupported value \"Sideways\"; supported values: Hybrid, RemoteOnly, LocalOnly") !=
          std::string::npos);
    CHECK(msg.find("spec.placement.localCpuFraction: must be a number, got string") != std::string::npos);
    CHECK(msg.find("spec.dispatcher.resources.requests.cpu: invalid quantity \"two\"") != std::string::npos);
    CHECK(msg.find("spec.workers.workersToDelete[1]: must be a string, got integer") != std::string::npos);
    CHECK(msg.find("spec.autoOrder.mode: unsupported value \"chaotic\"") != std::string::npos);
  }
  SECTION("required fields") {
    json o = Minimal();
    o["spec"].erase("workers");
    o["spec"]["dispatcher"].erase("image");
    std::string msg(ParseDataService(o).status().message());
    CHECK(msg.find("spec.workers: required value") != std::string::npos);
    CHECK(msg.find("spec.dispatcher.image: required value") != std::string::npos);
    o = Minimal();
    o.erase("spec");
    CHECK(ParseDataService(o).status().message().find("spec: required value") != std::string::npos);
    o = Minimal();
    o["spec"] = json::array();
    CHECK(ParseDataService(o).status().message().find("spec: must be an object, got array") != std::string::npos);
  }
  SECTION("pipeline needs exactly one source") {
    json o = Minimal();
    o["spec"]["pipeline"] = json::object();
    CHECK(ParseDataService(o).status().message().find("spec.pipeline: exactly one of") != std::string::npos);
    o["spec"]["pipeline"] = {{"inline", "x"}, {"configMapRef", {{"name", "p"}}}};
    CHECK(ParseDataService(o).status().message().find("spec.pipeline: exactly one of") != std::string::npos);
    o["spec"]["pipeline"] = {{"configMapRef", {{"key", "p"}}}};
    CHECK(ParseDataService(o).status().message().find("spec.pipeline.configMapRef.name: required value") !=
          std::string::npos);
  }
  SECTION("wrong apiVersion or kind") {
    json o = Minimal();
    o["kind"] = "Deployment";
    o["apiVersion"] = "apps/v1";
    std::string msg(ParseDataService(o).status().message());
    CHECK(msg.find("apiVersion: must be sluice.dev/v1alpha1") != std::string::npos);
    CHECK(msg.find("kind: must be DataService") != std::string::npos);
  }
  SECTION("selector and toleration items") {
    json o = Minimal();
    o["spec"]["placement"] = json::parse(R"js({"policy": "Hybrid", "consumerSelector": {"matchLabels": {"a": 1},
        "matchExpressions": [{"operator": "In"}, "x"]}, "tolerations": [{"effect": "Sometimes"}]})js");
    std::string msg(ParseDataService(o).status().message());
    INFO(msg);
    CHECK(msg.find("spec.placement.consumerSelector.matchLabels.a: must be a string") != std::string::npos);
    CHECK(msg.find("spec.placement.consumerSelector.matchExpressions[0].key: required value") != std::string::npos);
    CHECK(msg.find("spec.placement.consumerSelector.matchExpressions[1]: must be an object") != std::string::npos);
    CHECK(msg.find("spec.placement.tolerations[0].effect: unsupported value") != std::string::npos);
  }
  SECTION("huge integers") {
    json o = Minimal();
    o["spec"]["workers"]["replicas"] = 18446744073709551615ULL;
    CHECK(ParseDataService(o).status().message().find("spec.workers.replicas: integer out of range") !=
          std::string::npos);
  }
}

TEST_CASE("semantic validation names the field", "[types][validate]") {
  absl::StatusOr<DataService> parsed = ParseDataService(Minimal());
  REQUIRE(parsed.ok());
  SECTION("name too long or not a DNS-1035 label") {
    DataService ds = *parsed;
    ds.metadata.name = std::string(53, 'a');
    CHECK(HasError(ValidateDataService(ds), "metadata.name"));
    ds.metadata.name = "1abc";
    CHECK(HasError(ValidateDataService(ds), "metadata.name"));
    ds.metadata.name = "a.b";
    CHECK(HasError(ValidateDataService(ds), "metadata.name"));
    ds.metadata.name = std::string(52, 'a');
    CHECK(ValidateDataService(ds).empty());
  }
  SECTION("replica bounds (mirrors the CEL rules)js") {
    DataService ds = *parsed;
    ds.spec.workers.min_replicas = 5;
    ds.spec.workers.max_replicas = 2;
    ds.spec.workers.replicas = 2;
    auto errors = ValidateDataService(ds);
    CHECK(HasError(errors, "spec.workers.minReplicas"));
    CHECK(HasError(errors, "spec.workers.replicas"));
    ds = *parsed;
    ds.spec.workers.replicas = 40;
    CHECK(HasError(ValidateDataService(ds), "spec.workers.replicas"));
  }
  SECTION("local split only with Hybrid") {
    DataService ds = *parsed;
    ds.spec.workers.local = 1;
    CHECK(HasError(ValidateDataService(ds), "spec.workers.local"));
  }
  SECTION("placement consistency") {
    DataService ds = *parsed;
    ds.spec.placement.policy = PlacementPolicy::kLocalOnly;
    CHECK(HasError(ValidateDataService(ds), "spec.placement.consumerSelector"));
    ds.spec.placement.consumer_selector = LabelSelector{};
    CHECK(HasError(ValidateDataService(ds), "spec.placement.consumerSelector"));
    ds.spec.placement.consumer_selector->match_labels["app"] = "trainer";
    CHECK(ValidateDataService(ds).empty());
    ds.spec.workers.resources.requests["cpu"] = "0";
    CHECK(HasError(ValidateDataService(ds), "spec.workers.resources.requests.cpu"));
    ds.spec.workers.resources.requests["cpu"] = "1";
    ds.spec.placement.local_cpu_fraction = 0.0;
    CHECK(HasError(ValidateDataService(ds), "spec.placement.localCpuFraction"));
    ds.spec.placement.local_cpu_fraction = 1.0;
    CHECK(ValidateDataService(ds).empty());
    ds.spec.placement.local_cpu_fraction = 1.01;
    CHECK(HasError(ValidateDataService(ds), "spec.placement.localCpuFraction"));
  }
  SECTION("selector operators and label syntax") {
    DataService ds = *parsed;
    ds.spec.placement.policy = PlacementPolicy::kHybrid;
    ds.spec.placement.consumer_selector = LabelSelector{};
    ds.spec.placement.consumer_selector->match_expressions = {{"tier", "In", {}}, {"gpu", "Exists", {"x"}},
                                                              {"bad key!", "Exists", {}}};
    ds.spec.placement.remote_node_selector["pool"] = "not valid";
    auto errors = ValidateDataService(ds);
    INFO(Fields(errors));
    CHECK(HasError(errors, "spec.placement.consumerSelector.matchExpressions[0].values"));
    CHECK(HasError(errors, "spec.placement.consumerSelector.matchExpressions[1].values"));
    CHECK(HasError(errors, "spec.placement.consumerSelector.matchExpressions[2].key"));
    CHECK(HasError(errors, "spec.placement.remoteNodeSelector.pool"));
  }
  SECTION("workersToDelete is a set; stall ratio range; ports") {
    DataService ds = *parsed;
    ds.spec.workers.workers_to_delete = {"a", "b", "a"};
    ds.spec.autoscaling.target_stall_ratio = 1.0;
    ds.spec.workers.metrics_port = ds.spec.workers.port;
    ds.spec.dispatcher.port = 70000;
    auto errors = ValidateDataService(ds);
    CHECK(HasError(errors, "spec.workers.workersToDelete[2]"));
    CHECK(HasError(errors, "spec.autoscaling.targetStallRatio"));
    CHECK(HasError(errors, "spec.workers.metricsPort"));
    CHECK(HasError(errors, "spec.dispatcher.port"));
  }
  SECTION("flags the operator manages cannot be overridden") {
    DataService ds = *parsed;
    ds.spec.workers.extra_args = {"--threads=2", "--port=1", "-dispatcher_address=x", "verbose", "--host=elsewhere",
                                  "--listen_host=0.0.0.0"};
    ds.spec.dispatcher.extra_args = {"--journal_dir=/tmp", "--dataservice=other"};
    auto errors = ValidateDataService(ds);
    INFO(Fields(errors));
    CHECK_FALSE(HasError(errors, "spec.workers.extraArgs[0]"));
    CHECK(HasError(errors, "spec.workers.extraArgs[1]"));
    CHECK(HasError(errors, "spec.workers.extraArgs[2]"));
    CHECK(HasError(errors, "spec.workers.extraArgs[3]"));
    CHECK(HasError(errors, "spec.workers.extraArgs[4]"));  // --host is the pod's node (locality)
    CHECK_FALSE(HasError(errors, "spec.workers.extraArgs[5]"));
    CHECK(HasError(errors, "spec.dispatcher.extraArgs[0]"));
    CHECK(HasError(errors, "spec.dispatcher.extraArgs[1]"));
  }
  SECTION("requests above limits, which the API server would refuse in every pod") {
    DataService ds = *parsed;
    ds.spec.workers.resources.requests = {{"cpu", "2"}, {"memory", "1Gi"}};
    ds.spec.workers.resources.limits = {{"cpu", "1500m"}, {"memory", "1Gi"}};
    ds.spec.dispatcher.resources.requests = {{"memory", "2Gi"}};
    ds.spec.dispatcher.resources.limits = {{"memory", "1Gi"}, {"cpu", "1"}};
    auto errors = ValidateDataService(ds);
    INFO(Fields(errors));
    REQUIRE(errors.size() == 2);
    CHECK(errors[0].field == "spec.dispatcher.resources.requests.memory");
    CHECK(errors[1].field == "spec.workers.resources.requests.cpu");
    CHECK(errors[1].message ==
          "2 is above the limit 1500m (spec.workers.resources.limits.cpu); the API server refuses pods whose request "
          "exceeds their limit: lower the request or raise the limit");
    ds.spec.workers.resources.limits["cpu"] = "2";
    ds.spec.dispatcher.resources.limits["memory"] = "2048Mi";
    CHECK(ValidateDataService(ds).empty());
  }
  SECTION("an empty consumer selector says what to select") {
    DataService ds = *parsed;
    ds.spec.placement.policy = PlacementPolicy::kHybrid;
    ds.spec.placement.consumer_selector = LabelSelector{};
    auto errors = ValidateDataService(ds);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].field == "spec.placement.consumerSelector");
    CHECK(errors[0].message.find("select the trainer pods with matchLabels or matchExpressions, or use policy "
                                 "RemoteOnly") != std::string::npos);
  }
  SECTION("toleration consistency") {
    DataService ds = *parsed;
    ds.spec.placement.tolerations = {{"spot", "Exists", "yes", "", std::nullopt},
                                     {"", "Equal", "", "", std::nullopt},
                                     {"k", "", "", "NoSchedule", 30}};
    auto errors = ValidateDataService(ds);
    CHECK(HasError(errors, "spec.placement.tolerations[0].value"));
    CHECK(HasError(errors, "spec.placement.tolerations[1].operator"));
    CHECK(HasError(errors, "spec.placement.tolerations[2].tolerationSeconds"));
  }
}

TEST_CASE("status serialises and parses back", "[types][status]") {
  DataServiceStatus st;
  st.observed_generation = 4;
  st.conditions.push_back({"Ready", "True", "AllReady", "2/2 ready", "2026-11-22T00:00:00Z", 4});
  st.dispatcher_address = "a-dispatcher.ml.svc:5050";
  st.replicas = 2;
  st.ready_replicas = 2;
  st.local_replicas = 1;
  st.remote_replicas = 1;
  st.local_capacity = 3;
  st.selector = "sluice.dev/dataservice=a,sluice.dev/role=worker";
  st.auto_order = AutoOrderStatus{"relaxed", "applied", "cast(x->float32) -> resize(x)", "resize(x) -> cast(x->float32)",
                                  1.75, 1.5, ""};
  json o = Minimal();
  o["status"] = StatusToJson(st);
  CHECK(o["status"]["autoOrder"]["measuredSpeedup"] == 1.5);
  o["status"]["autoscaler"] = {{"stallRatio", 0.2}};
  CHECK(o["status"]["conditions"][0]["lastTransitionTime"] == "2026-11-22T00:00:00Z");
  CHECK_FALSE(StatusToJson(st).contains("autoscaler"));
  absl::StatusOr<DataService> ds = ParseDataService(o);
  REQUIRE(ds.ok());
  CHECK(ds->status == st);
  REQUIRE(ds->status.FindCondition("Ready") != nullptr);
  CHECK(ds->status.FindCondition("Degraded") == nullptr);

  // A malformed status does not make the object unusable; it is dropped.
  o["status"]["conditions"] = {{{"status", "True"}}};
  ds = ParseDataService(o);
  REQUIRE(ds.ok());
  CHECK(ds->status == DataServiceStatus{});
}

TEST_CASE("kube timestamps round-trip", "[types]") {
  absl::StatusOr<absl::Time> t = ParseKubeTime("2026-11-22T06:45:16Z");
  REQUIRE(t.ok());
  CHECK(FormatKubeTime(*t) == "2026-11-22T06:45:16Z");
  CHECK(FormatKubeTime(*t + absl::Milliseconds(900)) == "2026-11-22T06:45:16Z");
  CHECK_FALSE(ParseKubeTime("22/11/2026").ok());
}

}  // namespace
}  // namespace sluice::op
