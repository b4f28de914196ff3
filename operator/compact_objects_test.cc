// The informer transforms keep everything the operator reads: parsing a compacted object gives what
// parsing the original gives (real pods and nodes recorded from an API server, the reconciler's own
// pod manifests, and malformed objects).
#include "operator/compact_objects.h"
#include "kube/testing/fixture_server.h"
#include "operator/observed_state.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "testing/test_util.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

// Every Pod and Node in the recorded responses of a fixture file (objects and list items).
std::vector<json> RecordedObjects(const std::string& fixture, const std::string& kind) {
  std::ifstream in(sluice::testing::SourceDir() + "/testing/kube-fixtures/" + fixture + ".json");
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE(doc.is_object());
  std::vector<json> out;
  for (const json& e : doc["exchanges"]) {
    const json& body = e["response"]["body"];
    if (!body.is_object()) continue;
    if (body.value("kind", "") == kind) out.push_back(body);
    if (body.value("kind", "") == kind + "List") {
      for (const json& item : body["items"]) out.push_back(item);
    }
  }
  return out;
}

std::string Describe(const absl::StatusOr<ObservedPod>& p) {
  if (!p.ok()) return std::string(p.status().message());
  std::string labels, annotations;
  for (const auto& [k, v] : p->labels) absl::StrAppend(&labels, k, "=", v, ",");
  for (const auto& [k, v] : p->annotations) {
    if (absl::StartsWith(k, "sluice.dev/")) absl::StrAppend(&annotations, k, "=", v, ",");  // all that is read
  }
  return absl::StrCat(p->name, "|", p->uid, "|", labels, "|", annotations, "|", p->controller_uid, "|", p->node_name,
                      "|", p->affinity_node, "|", p->phase, "|", p->ready, "|", p->pod_ip, "|",
                      p->creation_timestamp ? absl::FormatTime(*p->creation_timestamp) : "-", "|", p->terminating, "|",
                      p->cpu_request_millis, "|", p->unschedulable_reason, "|", p->unschedulable_message);
}

std::string Describe(const absl::StatusOr<ObservedNode>& n) {
  if (!n.ok()) return std::string(n.status().message());
  std::string labels, taints;
  for (const auto& [k, v] : n->labels) absl::StrAppend(&labels, k, "=", v, ",");
  for (const Taint& t : n->taints) absl::StrAppend(&taints, t.key, "=", t.value, ":", t.effect, ",");
  return absl::StrCat(n->name, "|", labels, "|", n->allocatable_cpu_millis, "|", taints, "|", n->unschedulable);
}

json SluicePod() {
  return json::parse(R"js({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "ds-worker-local-0", "namespace": "ml", "uid": "u1", "resourceVersion": "7",
                 "creationTimestamp": "2027-01-15T08:00:00Z", "deletionTimestamp": "2027-01-15T09:00:00Z",
                 "labels": {"sluice.dev/role": "worker", "app": "x"},
                 "annotations": {"sluice.dev/node": "gpu-1", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                 "ownerReferences": [{"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "not-controller"},
                                     {"apiVersion": "sluice.dev/v1alpha1", "kind": "DataService", "name": "ds",
                                      "uid": "ds-uid", "controller": true, "blockOwnerDeletion": true}],
                 "managedFields": [{"manager": "sluice-operator"}]},
    "spec": {"nodeName": "gpu-1",
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                 {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}}},
             "containers": [{"name": "w", "image": "i", "args": ["--a"], "env": [{"name": "A", "value": "b"}],
                             "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"cpu": "2"}}},
                            {"name": "side", "image": "j", "resources": {"limits": {"cpu": "250m"}}}],
             "initContainers": [{"name": "init", "image": "k", "resources": {"requests": {"cpu": "3"}}}],
             "overhead": {"cpu": "100m", "memory": "10Mi"},
             "volumes": [{"name": "v", "emptyDir": {}}]},
    "status": {"phase": "Running", "podIP": "10.0.0.9", "hostIP": "10.1.1.1",
               "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
               "containerStatuses": [{"name": "w", "ready": true}]}})js");
}

TEST_CASE("CompactPod keeps what ObservedPodFromJson reads") {
  std::vector<json> pods = RecordedObjects("pods-ownership", "Pod");
  REQUIRE(pods.size() >= 3);
  pods.push_back(SluicePod());
  // Malformed shapes are kept, so that the parser reports the same problems.
  json bad_resources = SluicePod();
  bad_resources["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots";
  pods.push_back(bad_resources);
  json bad_owners = SluicePod();
  bad_owners["metadata"]["ownerReferences"] = "me";
  pods.push_back(bad_owners);
  json bad_status = SluicePod();
  bad_status["status"] = json::array();
  pods.push_back(bad_status);
  json bad_containers = SluicePod();
  bad_containers["spec"]["containers"] = json::array({"not an object"});
  pods.push_back(bad_containers);
  // Pending because the scheduler cannot place it: the reason and message are kept.
  json unschedulable = SluicePod();
  unschedulable["spec"].erase("nodeName");
  unschedulable["status"] = json::parse(R"js({"phase": "Pending", "conditions": [{"type": "PodScheduled",
      "status": "False", "reason": "Unschedulable", "lastProbeTime": null, "lastTransitionTime": "2027-01-15T08:00:01Z",
      "message": "0/3 nodes are available: 3 pod has unbound immediate PersistentVolumeClaims."}]})js");
  pods.push_back(unschedulable);
  {
    absl::StatusOr<ObservedPod> p = ObservedPodFromJson(CompactPod(json(unschedulable)));
    REQUIRE(p.ok());
    CHECK(p->unschedulable_reason == "Unschedulable");
    CHECK(p->unschedulable_message == "0/3 nodes are available: 3 pod has unbound immediate PersistentVolumeClaims.");
  }
  pods.push_back(json("not a pod"));
  for (const json& pod : pods) {
    INFO(pod.dump().substr(0, 300));
    std::string original = Describe(ObservedPodFromJson(pod));
    json compact = CompactPod(json(pod));
    CHECK(Describe(ObservedPodFromJson(compact)) == original);
    CHECK(compact.dump().size() <= pod.dump().size());
  }
  json compact = CompactPod(SluicePod());
  CHECK_FALSE(compact["metadata"].contains("managedFields"));
  CHECK(compact["metadata"]["annotations"] == json({{"sluice.dev/node", "gpu-1"}}));
  CHECK(compact["metadata"]["ownerReferences"].size() == 1);
  CHECK_FALSE(compact["spec"]["containers"][0].contains("env"));
  CHECK(compact["metadata"]["resourceVersion"] == "7");
  CHECK(Describe(ObservedPodFromJson(SluicePod())).find("|3100") != std::string::npos);  // max(1.5+0.25, 3) + 0.1
}

TEST_CASE("CompactNode keeps what ObservedNodeFromJson reads") {
  std::vector<json> nodes = RecordedObjects("pods-ownership", "Node");
  REQUIRE(!nodes.empty());
  json node = nodes[0];
  node["spec"]["taints"] = json::array({{{"key", "gpu"}, {"value", "yes"}, {"effect", "NoSchedule"}}});
  node["spec"]["unschedulable"] = true;
  node["status"]["images"] = json::array({{{"names", {"a", "b"}}, {"sizeBytes", 1}}});
  nodes.push_back(node);
  json bad = node;
  bad["status"]["allocatable"]["cpu"] = "many";
  nodes.push_back(bad);
  for (const json& n : nodes) {
    INFO(n.dump().substr(0, 300));
    json compact = CompactNode(json(n));
    CHECK(Describe(ObservedNodeFromJson(compact)) == Describe(ObservedNodeFromJson(n)));
    CHECK_FALSE(compact["status"].contains("images"));
  }
}

TEST_CASE("recorded pods and nodes parse to the values the API server reported") {
  // pods-ownership: 0 a pod as created (Pending, unscheduled), 6 its status after binding (Running,
  // Ready, pod IP), 9 the same pod while terminating; 4 a node with a not-ready taint. (The test
  // above checks that compaction keeps these values; this one checks the values themselves.)
  const json created = kube::testing::FixtureExchange("pods-ownership", 0)["response"]["body"];
  const json running = kube::testing::FixtureExchange("pods-ownership", 6)["response"]["body"];
  const json terminating = kube::testing::FixtureExchange("pods-ownership", 9)["response"]["body"];
  for (const json* recorded : {&created, &running, &terminating}) {
    absl::StatusOr<ObservedPod> pod = ObservedPodFromJson(*recorded);
    REQUIRE(pod.ok());
    CHECK(pod->name == "a-worker-0");
    CHECK(pod->uid == (*recorded)["metadata"]["uid"]);
    CHECK(pod->controller_uid == "56d66fe1-84c4-41c0-bf20-efeb3f1f8328");
    CHECK(pod->labels.at("sluice.dev/role") == "worker");
    CHECK(pod->cpu_request_millis == 2000);
    CHECK(pod->creation_timestamp.has_value());
  }
  const ObservedPod pending = *ObservedPodFromJson(created);
  CHECK(pending.phase == "Pending");
  CHECK(pending.node_name.empty());
  CHECK(!pending.ready);
  const ObservedPod up = *ObservedPodFromJson(running);
  CHECK(up.phase == "Running");
  CHECK(up.ready);
  CHECK(up.pod_ip == "127.0.0.2");
  CHECK(up.node_name == "gpu-node-1");
  CHECK(!up.terminating);
  CHECK(ObservedPodFromJson(terminating)->terminating);

  const json node = kube::testing::FixtureExchange("pods-ownership", 4)["response"]["body"];
  {
    absl::StatusOr<ObservedNode> parsed = ObservedNodeFromJson(node);
    REQUIRE(parsed.ok());
    CHECK(parsed->name == "gpu-node-1");
    CHECK(parsed->allocatable_cpu_millis == 31500);
    CHECK(parsed->labels.at("nvidia.com/gpu.present") == "true");
    REQUIRE(parsed->taints.size() == 1);
    CHECK(parsed->taints[0].key == "node.kubernetes.io/not-ready");
    CHECK(parsed->taints[0].effect == "NoSchedule");
  }
}

}  // namespace
}  // namespace sluice::op
