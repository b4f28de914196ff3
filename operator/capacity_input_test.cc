// The operator's side of local capacity: which observed pods make a node a consumer node, what CPU
// counts as requested by others, and why a node is excluded. The arithmetic and the split are the
// placement library's (autoscaler/placement/local_capacity_test.cc).
#include "operator/capacity_input.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "operator/manifests.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

DataService HybridService() {
  json o = json::parse(R"js({
    "apiVersion": "sluice.dev/v1alpha1", "kind": "DataService",
    "metadata": {"name": "ds", "namespace": "ml", "uid": "ds-uid", "generation": 1},
    "spec": {
      "dispatcher": {"image": "sluice-dispatcher:dev"},
      "workers": {"image": "sluice-worker:dev", "replicas": 5, "resources": {"requests": {"cpu": "2"}}},
      "placement": {
        "policy": "Hybrid", "consumerSelector": {"matchLabels": {"app": "trainer"}},
        "acceleratorNodeSelector": {"nvidia.com/gpu.present": "true"},
        "localTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "localCpuFraction": 0.5
      }
    }
  })js");
  absl::StatusOr<DataService> ds = ParseDataService(o);
  REQUIRE(ds.ok());
  return *ds;
}

ObservedNode GpuNode(const std::string& name, int64_t cpu_millis) {
  ObservedNode n;
  n.name = name;
  n.labels = {{"nvidia.com/gpu.present", "true"}};
  n.allocatable_cpu_millis = cpu_millis;
  n.taints = {{"nvidia.com/gpu", "present", "NoSchedule"}};
  return n;
}

ObservedPod Trainer(const std::string& name, const std::string& node) {
  ObservedPod p;
  p.name = name;
  p.labels = {{"app", "trainer"}};
  p.node_name = node;
  p.phase = "Running";
  return p;
}

ObservedPod OwnWorker(const std::string& name, const std::string& node, const std::string& placement,
                      int64_t cpu_millis) {
  ObservedPod p;
  p.name = name;
  p.controller_uid = "ds-uid";
  p.labels = {{kLabelRole, "worker"}, {kLabelPlacement, placement}};
  p.node_name = node;
  p.phase = "Running";
  p.cpu_request_millis = cpu_millis;
  return p;
}

std::map<std::string, const autoscaler::CapacityNode*> ByName(const autoscaler::CapacityInput& in) {
  std::map<std::string, const autoscaler::CapacityNode*> out;
  for (const autoscaler::CapacityNode& n : in.nodes) out[n.name] = &n;
  return out;
}

TEST_CASE("the capacity input: consumer nodes, CPU requested by others, the spec's figures", "[capacity]") {
  DataService ds = HybridService();
  std::vector<ObservedNode> nodes = {GpuNode("gpu-1", 32000), GpuNode("gpu-2", 16000), GpuNode("gpu-3", 64000)};
  std::vector<ObservedPod> consumers = {Trainer("t1", "gpu-1"), Trainer("t2", "gpu-2"), Trainer("t2b", "gpu-2")};
  std::map<std::string, int64_t> requested = {{"gpu-1", 20500}, {"gpu-2", 4000}, {"gpu-3", 1000}};
  autoscaler::CapacityInput in = CapacityInputFor(ds, nodes, consumers, requested, {});
  CHECK(in.policy == autoscaler::Placement::kHybrid);
  CHECK(in.worker_cpu_millis == 2000);
  CHECK(in.local_cpu_fraction == 0.5);
  REQUIRE(in.nodes.size() == 2);  // gpu-3 runs no consumer; gpu-2 is listed once
  CHECK(in.nodes[0].name == "gpu-1");
  CHECK(in.nodes[0].consumer);
  CHECK(in.nodes[0].allocatable_cpu_millis == 32000);
  CHECK(in.nodes[0].cpu_requested_by_others_millis == 20500);
  CHECK(in.nodes[0].excluded_reason.empty());
  CHECK(in.nodes[1].name == "gpu-2");
  // Through the shared model: gpu-1 (32000 - 20500) * 0.5 -> 2 workers, gpu-2 (16000 - 4000) * 0.5 -> 3.
  autoscaler::LocalCapacity cap = autoscaler::ComputeLocalCapacity(in);
  CHECK(cap.total_workers == 5);
  CHECK(cap.WorkersOn("gpu-1") == 2);
  CHECK(cap.WorkersOn("gpu-3") == 0);

  SECTION("the DataService's own local workers are taken off the node's sum; remote or ended ones are not") {
    requested["gpu-1"] += 2000 + 1000 + 2000;
    std::vector<ObservedPod> owned = {OwnWorker("ds-worker-local-0", "gpu-1", "local", 2000),
                                      OwnWorker("ds-worker-remote-0", "gpu-1", "remote", 1000),
                                      OwnWorker("ds-worker-local-1", "gpu-1", "local", 2000)};
    owned[2].phase = "Failed";  // holds no CPU (and is not in the sum a real cache gives; here it is)
    autoscaler::CapacityInput again = CapacityInputFor(ds, nodes, consumers, requested, owned);
    CHECK(ByName(again).at("gpu-1")->cpu_requested_by_others_millis == 20500 + 1000 + 2000);
    // Our own worker pods are never consumers, even when they match the consumer selector.
    owned[0].labels["app"] = "trainer";
    owned[0].node_name = "gpu-3";
    std::vector<ObservedPod> with_own = consumers;
    with_own.push_back(owned[0]);
    CHECK(ByName(CapacityInputFor(ds, nodes, with_own, requested, {})).count("gpu-3") == 0);
  }
  SECTION("the sum never goes below zero when the own workers' CPU exceeds it") {
    autoscaler::CapacityInput over =
        CapacityInputFor(ds, nodes, consumers, {{"gpu-1", 1000}}, {OwnWorker("w", "gpu-1", "local", 4000)});
    CHECK(ByName(over).at("gpu-1")->cpu_requested_by_others_millis == 0);
  }
  SECTION("pods that do not match the selector, ended, terminate or are not scheduled are not consumers") {
    consumers[0].labels = {{"app", "other"}};
    consumers[1].phase = "Succeeded";
    consumers[2].terminating = true;
    consumers.push_back(Trainer("t5", ""));
    CHECK(CapacityInputFor(ds, nodes, consumers, requested, {}).nodes.empty());
  }
  SECTION("RemoteOnly and a missing consumer selector list no nodes; LocalOnly lists them") {
    ds.spec.placement.policy = PlacementPolicy::kRemoteOnly;
    CHECK(CapacityInputFor(ds, nodes, consumers, requested, {}).nodes.empty());
    CHECK(autoscaler::ComputeLocalCapacity(CapacityInputFor(ds, nodes, consumers, requested, {})).total_workers == 0);
    ds.spec.placement.policy = PlacementPolicy::kLocalOnly;
    CHECK(CapacityInputFor(ds, nodes, consumers, requested, {}).nodes.size() == 2);
    ds.spec.placement.consumer_selector.reset();
    CHECK(CapacityInputFor(ds, nodes, consumers, requested, {}).nodes.empty());
  }
}

TEST_CASE("the capacity input says why a consumer node takes no local workers", "[capacity]") {
  DataService ds = HybridService();
  std::vector<ObservedNode> nodes = {GpuNode("gpu-1", 32000), GpuNode("gpu-2", 16000), GpuNode("gpu-3", 64000),
                                     GpuNode("gpu-4", 16000)};
  nodes[0].labels.clear();
  nodes[1].taints.push_back({"dedicated", "infra", "NoExecute"});
  nodes[2].unschedulable = true;
  nodes[3].taints.push_back({"soft", "x", "PreferNoSchedule"});  // ignored: only NoSchedule/NoExecute exclude
  std::vector<ObservedPod> consumers = {Trainer("t1", "gpu-1"), Trainer("t2", "gpu-2"), Trainer("t3", "gpu-3"),
                                        Trainer("t4", "gpu-4"), Trainer("t5", "gone")};
  autoscaler::CapacityInput in = CapacityInputFor(ds, nodes, consumers, {}, {});
  auto by_name = ByName(in);
  REQUIRE(by_name.size() == 5);
  CHECK(absl::StrContains(by_name["gpu-1"]->excluded_reason, "acceleratorNodeSelector"));
  CHECK(absl::StrContains(by_name["gpu-2"]->excluded_reason, "dedicated=infra:NoExecute"));
  CHECK(absl::StrContains(by_name["gpu-2"]->excluded_reason, "spec.placement.localTolerations"));
  CHECK(absl::StrContains(by_name["gpu-3"]->excluded_reason, "cordoned"));
  CHECK(by_name["gpu-4"]->excluded_reason.empty());
  CHECK(by_name["gone"]->excluded_reason == "node not observed");
  CHECK(by_name["gone"]->allocatable_cpu_millis == 0);
  // The model reports every consumer node, with its slots; only gpu-4 (16000 * 0.5 / 2000) adds any.
  autoscaler::LocalCapacity cap = autoscaler::ComputeLocalCapacity(in);
  CHECK(cap.nodes.size() == 5);
  CHECK(cap.total_workers == 4);
  CHECK(cap.WorkersOn("gpu-1") == 0);
}

TEST_CASE("the CRD's placement policies map onto the placement library's", "[capacity]") {
  CHECK(PlacementOf(PlacementPolicy::kHybrid) == autoscaler::Placement::kHybrid);
  CHECK(PlacementOf(PlacementPolicy::kLocalOnly) == autoscaler::Placement::kLocalOnly);
  CHECK(PlacementOf(PlacementPolicy::kRemoteOnly) == autoscaler::Placement::kRemoteOnly);
}

}  // namespace
}  // namespace sluice::op
