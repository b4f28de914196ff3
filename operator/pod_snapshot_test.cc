// ReadPodSnapshot reads what local capacity needs from the pod cache in one state: a consumer pod
// seen on a node always comes with that node's CPU sum counting it (issue 9 §4: a trainer bound after
// the DataService was counted on its node without its CPU request, and 8 local workers were planned
// where 6 fit).
#include "operator/pod_snapshot.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "kube/packed_object.h"
#include "kube/store.h"
#include "autoscaler/placement/local_capacity.h"
#include "operator/capacity_input.h"
#include "operator/manifests.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

constexpr char kUid[] = "ds-uid";

json Pod(const std::string& ns, const std::string& name, const std::string& node, const std::string& cpu,
         json labels, bool owned = false) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"namespace", ns}, {"name", name}, {"uid", name + "-uid"}, {"resourceVersion", "1"},
                            {"labels", std::move(labels)}}},
              {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "x"},
                                                     {"resources", {{"requests", {{"cpu", cpu}}}}}}})}}},
              {"status", {{"phase", node.empty() ? "Pending" : "Running"}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  if (owned) {
    pod["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "sluice.dev/v1alpha1"}, {"kind", "DataService"},
                                                       {"name", "ds"}, {"uid", kUid}, {"controller", true}}});
  }
  return pod;
}

void Put(kube::Store& store, json pod) { store.Upsert(std::make_shared<const json>(PackPod(std::move(pod)))); }

struct PodCache {
  PodCache() {
    REQUIRE(store.AddIndex(kPodIndexControllerUid, kube::IndexByControllerUid()).ok());
    REQUIRE(store.AddIndex(kPodIndexNamespace, kube::IndexByNamespace()).ok());
    REQUIRE(store.AddIndex(kPodIndexNode, IndexByPodNode()).ok());
  }
  kube::Store store;
};

LabelSelector Trainers() {
  LabelSelector s;
  s.match_labels = {{"app", "trainer"}};
  return s;
}

json TrainerLabels() { return json{{"app", "trainer"}}; }
json LocalWorkerLabels() {
  return json{{kLabelDataService, "ds"}, {kLabelRole, "worker"}, {kLabelPlacement, "local"}};
}

TEST_CASE("PackPod keeps the node beside the packed pod, for the node index") {
  json packed = PackPod(Pod("ml", "t", "gpu-1", "4", TrainerLabels()));
  CHECK(kube::IsPacked(packed));
  CHECK(packed["spec"] == json{{"nodeName", "gpu-1"}});
  CHECK(IndexByPodNode()(packed) == std::vector<std::string>{"gpu-1"});
  absl::StatusOr<ObservedPod> p = ObservedPodFromJson(kube::UnpackObject(packed));
  REQUIRE(p.ok());
  CHECK(p->node_name == "gpu-1");
  CHECK(p->cpu_request_millis == 4000);
  json unbound = PackPod(Pod("ml", "u", "", "1", TrainerLabels()));
  CHECK_FALSE(unbound.contains("spec"));
  CHECK(IndexByPodNode()(unbound).empty());
  CHECK(PackPod(json("not a pod")) == json("not a pod"));
}

TEST_CASE("a trainer bound after the DataService is counted on its node with its CPU request") {
  // The shape of issue 9 §4: a 32-CPU GPU node, localCpuFraction 0.5, 2-CPU workers: 8 fit on the
  // empty node, 6 once the 8-CPU trainer runs there.
  PodCache cache;
  Put(cache.store, Pod("ml", "trainer-0", "", "8", TrainerLabels()));   // created, not yet scheduled
  Put(cache.store, Pod("other", "daemon", "gpu-1", "500m", json{{"app", "daemon"}}));
  std::set<std::string> guess;
  PodSnapshot before = ReadPodSnapshot(cache.store, "ml", kUid, Trainers(), &guess);
  CHECK(before.cpu_requested_by_node.empty());
  CHECK(guess.empty());
  CHECK(before.namespace_pods.size() == 1);

  // The scheduler binds it (pods/binding): the cache holds the bound pod. The first read with the
  // stale guess finds a consumer on a node it did not read and reads again with that node.
  Put(cache.store, Pod("ml", "trainer-0", "gpu-1", "8", TrainerLabels()));
  PodSnapshot after = ReadPodSnapshot(cache.store, "ml", kUid, Trainers(), &guess);
  CHECK(guess == std::set<std::string>{"gpu-1"});
  CHECK(after.cpu_requested_by_node == std::map<std::string, int64_t>{{"gpu-1", 8500}});

  DataService ds;
  ds.metadata.name = "ds";
  ds.metadata.namespace_name = "ml";
  ds.metadata.uid = kUid;
  ds.spec.placement.policy = PlacementPolicy::kHybrid;
  ds.spec.placement.consumer_selector = Trainers();
  ds.spec.placement.local_cpu_fraction = 0.5;
  ds.spec.workers.resources.requests = {{"cpu", "2"}};
  ObservedNode node;
  node.name = "gpu-1";
  node.allocatable_cpu_millis = 32000;
  autoscaler::LocalCapacity capacity = autoscaler::ComputeLocalCapacity(
      CapacityInputFor(ds, {node}, after.namespace_pods, after.cpu_requested_by_node, after.owned));
  CHECK(capacity.total_workers == 5);  // floor((32 - 8.5) * 0.5 / 2)

  // Our own local workers on the node are in the same read: they are in the sum and added back.
  Put(cache.store, Pod("ml", "ds-worker-local-0", "gpu-1", "2", LocalWorkerLabels(), /*owned=*/true));
  PodSnapshot with_worker = ReadPodSnapshot(cache.store, "ml", kUid, Trainers(), &guess);
  CHECK(with_worker.owned.size() == 1);
  CHECK(with_worker.cpu_requested_by_node == std::map<std::string, int64_t>{{"gpu-1", 10500}});
  CHECK(autoscaler::ComputeLocalCapacity(CapacityInputFor(ds, {node}, with_worker.namespace_pods,
                                                         with_worker.cpu_requested_by_node, with_worker.owned))
            .total_workers == 5);

  // The trainer goes: no consumer node, no sums; the guess shrinks with it.
  cache.store.Remove("ml/trainer-0");
  PodSnapshot gone = ReadPodSnapshot(cache.store, "ml", kUid, Trainers(), &guess);
  CHECK(gone.cpu_requested_by_node.empty());
  CHECK(guess.empty());
  // Without a consumer selector (RemoteOnly) only the owned pods are read.
  std::set<std::string> none = {"gpu-1"};
  PodSnapshot remote = ReadPodSnapshot(cache.store, "ml", kUid, std::nullopt, &none);
  CHECK(remote.owned.size() == 1);
  CHECK(remote.namespace_pods.empty());
  CHECK(none.empty());
}

TEST_CASE("every snapshot is consistent while the trainer is bound and unbound concurrently") {
  // A writer moves the trainer between unscheduled and bound, as cache updates arrive; each read
  // sees the trainer on gpu-1 exactly when gpu-1's sum counts its 8 CPUs (reading the pods and the
  // sums separately could see the pod bound and the sum without it: the §4 over-count).
  PodCache cache;
  Put(cache.store, Pod("ml", "trainer-0", "", "8", TrainerLabels()));
  Put(cache.store, Pod("other", "daemon", "gpu-1", "500m", json{{"app", "daemon"}}));
  // Both versions packed beforehand, so that the writer changes the cache as fast as it can.
  const kube::ObjectPtr versions[2] = {
      std::make_shared<const json>(PackPod(Pod("ml", "trainer-0", "", "8", TrainerLabels()))),
      std::make_shared<const json>(PackPod(Pod("ml", "trainer-0", "gpu-1", "8", TrainerLabels())))};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) cache.store.Upsert(versions[i % 2]);
  });
  // The guess names 2000 other nodes that sort before gpu-1, so the read of gpu-1's pods comes long
  // after the read of the namespace's pods (a read that was not one state would often disagree).
  std::set<std::string> many_nodes = {"gpu-1"};
  for (int i = 0; i < 2000; ++i) many_nodes.insert(absl::StrFormat("a-%04d", i));
  int inconsistent = 0, bound = 0, unbound = 0;
  while (bound < 200 || unbound < 200) {  // until both states were read often (a count, not a time)
    std::set<std::string> guess = many_nodes;
    PodSnapshot s = ReadPodSnapshot(cache.store, "ml", kUid, Trainers(), &guess);
    bool on_node = !s.namespace_pods.empty() && s.namespace_pods[0].node_name == "gpu-1";
    auto sum = s.cpu_requested_by_node.find("gpu-1");
    if (on_node) {
      ++bound;
      if (sum == s.cpu_requested_by_node.end() || sum->second != 8500) ++inconsistent;
    } else {
      ++unbound;
      if (sum != s.cpu_requested_by_node.end()) ++inconsistent;
    }
  }
  stop = true;
  writer.join();
  INFO("bound " << bound << ", unbound " << unbound);
  CHECK(inconsistent == 0);
}

TEST_CASE("malformed cached pods are reported, not read") {
  PodCache cache;
  json bad = Pod("ml", "bad", "gpu-1", "8", TrainerLabels());
  bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "two";
  Put(cache.store, bad);
  Put(cache.store, Pod("ml", "good", "gpu-1", "1", TrainerLabels()));
  std::set<std::string> guess;
  PodSnapshot s = ReadPodSnapshot(cache.store, "ml", kUid, Trainers(), &guess);
  REQUIRE(s.malformed.size() == 1);
  CHECK(s.malformed[0].find("invalid quantity \"two\"") != std::string::npos);
  CHECK(s.namespace_pods.size() == 1);
  CHECK(s.cpu_requested_by_node == std::map<std::string, int64_t>{{"gpu-1", 1000}});
}

}  // namespace
}  // namespace sluice::op
