#include "operator/reconciler.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "operator/event_notes.h"
#include "operator/manifests.h"
#include "operator/test_event_names.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

const absl::Time kT0 = absl::FromUnixSeconds(1800000000);

// ---- helpers to read results ----

template <typename T>
std::vector<T> All(const ReconcileResult& r) {
  std::vector<T> out;
  for (const Action& a : r.actions) {
    if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
  }
  return out;
}

std::vector<std::string> Created(const ReconcileResult& r, const std::string& kind = "Pod") {
  std::vector<std::string> out;
  for (const CreateObject& c : All<CreateObject>(r)) {
    if (c.kind == kind) out.push_back(c.name);
  }
  return out;
}

std::vector<std::string> Deleted(const ReconcileResult& r) {
  std::vector<std::string> out;
  for (const DeleteObject& d : All<DeleteObject>(r)) out.push_back(d.name);
  return out;
}

const CreateObject* FindCreate(const ReconcileResult& r, const std::string& name) {
  for (const Action& a : r.actions) {
    if (const auto* c = std::get_if<CreateObject>(&a); c != nullptr && c->name == name) return c;
  }
  return nullptr;
}

const EmitEvent* FindEvent(const ReconcileResult& r, const std::string& reason) {
  for (const Action& a : r.actions) {
    if (const auto* e = std::get_if<EmitEvent>(&a); e != nullptr && e->reason == reason) return e;
  }
  return nullptr;
}

// The notes of the `reason` events the controller emits for `r` when every API call succeeds: the
// EmitEvent actions and the events the object actions carry, merged as the controller merges them.
std::vector<std::string> AnnouncedNotes(const ReconcileResult& r, const std::string& reason) {
  std::vector<EmitEvent> events;
  for (const Action& a : r.actions) {
    const EmitEvent* e = nullptr;
    if (const auto* c = std::get_if<CreateObject>(&a)) e = &c->event;
    if (const auto* d = std::get_if<DeleteObject>(&a)) e = &d->event;
    if (const auto* p = std::get_if<PatchObject>(&a)) e = &p->event;
    if (const auto* ev = std::get_if<EmitEvent>(&a)) e = ev;
    if (e != nullptr && e->reason == reason) events.push_back(*e);
  }
  std::vector<std::string> notes;
  for (const EmitEvent& e : RenderEvents(events)) notes.push_back(e.note);
  return notes;
}

std::optional<json> StatusUpdate(const ReconcileResult& r) {
  auto updates = All<UpdateStatus>(r);
  if (updates.empty()) return std::nullopt;
  REQUIRE(updates.size() == 1);
  return updates[0].status;
}

json ConditionOf(const json& status, const std::string& type) {
  for (const json& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  FAIL("no condition " << type << " in " << status.dump());
  return json();
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string Arg(const json& pod, const std::string& flag) {
  for (const json& a : pod["spec"]["containers"][0]["args"]) {
    std::string s = a.get<std::string>();
    if (absl::StartsWith(s, flag + "=")) return s.substr(flag.size() + 1);
  }
  return "<missing>";
}

// ---- the DataService under test ----

json BaseDataService() {
  return json::parse(R"js({
    "apiVersion": "sluice.dev/v1alpha1", "kind": "DataService",
    "metadata": {"name": "ds", "namespace": "ml", "uid": "ds-uid", "generation": 1,
                 "creationTimestamp": "2027-01-15T08:00:00Z", "finalizers": ["sluice.dev/drain"]},
    "spec": {
      "dispatcher": {"image": "sluice-dispatcher:dev"},
      "workers": {"image": "sluice-worker:dev", "replicas": 2, "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}
    }
  })js");
}

json HybridDataService(int replicas) {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = replicas;
  o["spec"]["placement"] = json::parse(R"js({
    "policy": "Hybrid", "consumerSelector": {"matchLabels": {"app": "trainer"}},
    "acceleratorNodeSelector": {"nvidia.com/gpu.present": "true"},
    "remoteNodeSelector": {"pool": "cpu"},
    "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    "localTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "localCpuFraction": 0.5
  })js");
  return o;
}

ObservedNode GpuNode(const std::string& name, int64_t cpu_millis) {
  ObservedNode n;
  n.name = name;
  n.labels = {{"nvidia.com/gpu.present", "true"}};
  n.allocatable_cpu_millis = cpu_millis;
  n.taints = {{"nvidia.com/gpu", "present", "NoSchedule"}};
  return n;
}

ObservedPod Trainer(const std::string& name, const std::string& node, int64_t cpu_millis) {
  ObservedPod p;
  p.name = name;
  p.uid = name + "-uid";
  p.labels = {{"app", "trainer"}};
  p.node_name = node;
  p.phase = "Running";
  p.ready = true;
  p.cpu_request_millis = cpu_millis;
  return p;
}

// A tiny cluster: applies the reconciler's actions the way the API server, a scheduler and the
// kubelets would, so that multi-step behaviour (convergence, stale caches, rolling) can be tested.
class FakeCluster {
 public:
  explicit FakeCluster(json ds) : ds_(std::move(ds)) {}

  json& ds() { return ds_; }
  std::vector<ObservedNode>& nodes() { return nodes_; }
  std::vector<ObservedPod>& consumers() { return consumers_; }
  std::map<std::string, json>& pods() { return pods_; }
  std::map<std::string, json>& services() { return services_; }
  std::map<std::string, json>& claims() { return claims_; }
  absl::Time now = kT0;
  Expectations expectations;
  ReconcileOptions options;
  // Scale-down drains as the controller would remember them (see RecordDrainRound).
  std::map<std::string, PodDrain> pod_drains;

  // What the controller does with the kScaleDown DrainWorkers action of `r`: remembers each pod
  // named (started now unless known) with the verdict `drained` (by pod name) after a round.
  void RecordDrainRound(const ReconcileResult& r, const std::set<std::string>& drained = {},
                        const std::string& message = "draining, 1 task: 12 elements produced and not yet received") {
    for (const DrainWorkers& d : All<DrainWorkers>(r)) {
      if (d.scope != DrainScope::kScaleDown) continue;
      for (size_t i = 0; i < d.workers.size(); ++i) {
        auto [it, added] = pod_drains.try_emplace(d.worker_uids.at(i));
        if (added) {
          it->second.pod = d.workers[i];
          it->second.address = d.worker_addresses.at(i);
          it->second.started = now;
        }
        it->second.answered = true;
        it->second.drained = drained.count(d.workers[i]) > 0;
        it->second.message = it->second.drained ? "draining, no task left" : message;
      }
    }
  }

  ReconcileInput Input() const {
    ReconcileInput in;
    in.dataservice = ds_;
    for (const auto& [name, pod] : pods_) {
      absl::StatusOr<ObservedPod> p = ObservedPodFromJson(pod);
      REQUIRE(p.ok());
      in.owned_pods.push_back(*p);
    }
    for (const auto& [name, svc] : services_) {
      absl::StatusOr<ObservedService> s = ObservedServiceFromJson(svc);
      REQUIRE(s.ok());
      in.owned_services.push_back(*s);
    }
    for (const auto& [name, claim] : claims_) {
      absl::StatusOr<ObservedClaim> c = ObservedClaimFromJson(claim);
      REQUIRE(c.ok());
      in.owned_claims.push_back(*c);
    }
    in.nodes = nodes_;
    in.consumer_pods = consumers_;
    std::vector<ObservedPod> all = in.owned_pods;
    all.insert(all.end(), consumers_.begin(), consumers_.end());
    in.cpu_requested_by_node = SumCpuRequestsByNode(all);
    in.expectations = expectations.Pending("ml/ds");
    in.now = now;
    in.options = options;
    in.pod_drains = pod_drains;
    return in;
  }

  // Reconciles once against the current state, records expectations and applies the actions.
  ReconcileResult Step() {
    absl::StatusOr<ReconcileResult> r = Reconcile(Input());
    REQUIRE(r.ok());
    RecordExpectations("ml/ds", *r, now, &expectations);
    Apply(*r);
    return *r;
  }

  void Apply(const ReconcileResult& r) {
    for (const Action& a : r.actions) {
      if (const auto* c = std::get_if<CreateObject>(&a)) {
        json obj = c->manifest;
        obj["metadata"]["uid"] = absl::StrCat(c->name, "-uid-", ++uid_counter_);
        obj["metadata"]["creationTimestamp"] = FormatKubeTime(now);
        if (c->kind == "Pod") {
          Schedule(obj);
          pods_[c->name] = obj;
        } else if (c->kind == "Service") {
          services_[c->name] = obj;
        } else {
          claims_[c->name] = obj;
        }
      } else if (const auto* d = std::get_if<DeleteObject>(&a)) {
        REQUIRE(pods_.count(d->name) == 1);
        CHECK(pods_[d->name]["metadata"]["uid"] == d->uid);
        pods_[d->name]["metadata"]["deletionTimestamp"] = FormatKubeTime(now);
      } else if (const auto* s = std::get_if<UpdateStatus>(&a)) {
        ds_["status"] = s->status;
      } else if (std::holds_alternative<AddFinalizer>(a)) {
        ds_["metadata"]["finalizers"].push_back(kDrainFinalizer);
      } else if (const auto* rf = std::get_if<RemoveFinalizer>(&a)) {
        json kept = json::array();
        for (const json& f : ds_["metadata"]["finalizers"]) {
          if (f != rf->finalizer) kept.push_back(f);
        }
        ds_["metadata"]["finalizers"] = kept;
      } else if (const auto* pa = std::get_if<PatchObject>(&a)) {
        services_.at(pa->name).merge_patch(pa->merge_patch);  // RFC 7386, as the API server applies it
      }
    }
  }

  // Kubelets finish terminating pods: they disappear.
  void FinishTerminations() {
    for (auto it = pods_.begin(); it != pods_.end();) {
      it = it->second["metadata"].contains("deletionTimestamp") ? pods_.erase(it) : std::next(it);
    }
  }

  void SetReady(const std::string& name, bool ready = true) {
    json& pod = pods_.at(name);
    auto ip = ips_.try_emplace(name, absl::StrCat("10.0.0.", ips_.size() + 1)).first->second;
    pod["status"] = {{"phase", "Running"},
                     {"podIP", ip},
                     {"conditions", json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}};
  }
  void SetAllReady() {
    for (auto& [name, pod] : pods_) {
      if (!pod["metadata"].contains("deletionTimestamp")) SetReady(name);
    }
  }

  std::vector<std::string> LivePods(const std::string& prefix = "ds-worker-") const {
    std::vector<std::string> out;
    for (const auto& [name, pod] : pods_) {
      if (absl::StartsWith(name, prefix) && !pod["metadata"].contains("deletionTimestamp")) out.push_back(name);
    }
    return out;
  }

  // Reconciles, lets terminations finish and marks everything ready, until nothing changes.
  void Converge(int max_rounds = 10) {
    for (int i = 0; i < max_rounds; ++i) {
      ReconcileResult r = Step();
      FinishTerminations();
      SetAllReady();
      now += absl::Seconds(10);
      if (All<CreateObject>(r).empty() && All<DeleteObject>(r).empty() && All<UpdateStatus>(r).empty() &&
          r.expectations != ExpectationsState::kPending) {
        return;
      }
    }
    FAIL("did not converge");
  }

 private:
  void Schedule(json& pod) {
    const json& spec = pod["spec"];
    if (spec.contains("affinity")) {
      pod["spec"]["nodeName"] =
          spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
              ["matchFields"][0]["values"][0];
    } else {
      pod["spec"]["nodeName"] = "cpu-node";
    }
    pod["status"] = {{"phase", "Pending"}};
  }

  json ds_;
  std::map<std::string, json> pods_;
  std::map<std::string, std::string> ips_;  // pod name -> the IP its kubelet reported
  std::map<std::string, json> services_;
  std::map<std::string, json> claims_;
  std::vector<ObservedNode> nodes_;
  std::vector<ObservedPod> consumers_;
  int uid_counter_ = 0;
};

DataService Parsed(const json& o) {
  absl::StatusOr<DataService> ds = ParseDataService(o);
  REQUIRE(ds.ok());
  return *ds;
}

// ---- tests ----

TEST_CASE("a new DataService gets its dispatcher, service and remote workers", "[reconciler]") {
  FakeCluster c(BaseDataService());
  ReconcileResult r = c.Step();
  CHECK(Created(r, "Service") == std::vector<std::string>{"ds-dispatcher"});
  CHECK(Created(r, "PersistentVolumeClaim").empty());  // no journal configured
  CHECK(Created(r) == std::vector<std::string>{"ds-dispatcher", "ds-worker-remote-0", "ds-worker-remote-1"});
  CHECK(Deleted(r).empty());
  CHECK(All<AddFinalizer>(r).empty());  // already present
  CHECK(r.plan.desired_remote == 2);
  CHECK(r.plan.desired_local == 0);

  SECTION("every object has a controller ownerReference and the standard labels") {
    for (const CreateObject& obj : All<CreateObject>(r)) {
      INFO(obj.name);
      const json& meta = obj.manifest["metadata"];
      CHECK(meta["namespace"] == "ml");
      REQUIRE(meta["ownerReferences"].size() == 1);
      const json& owner = meta["ownerReferences"][0];
      CHECK(owner["apiVersion"] == "sluice.dev/v1alpha1");
      CHECK(owner["kind"] == "DataService");
      CHECK(owner["name"] == "ds");
      CHECK(owner["uid"] == "ds-uid");
      CHECK(owner["controller"] == true);
      CHECK(owner["blockOwnerDeletion"] == true);
      CHECK(meta["labels"]["app.kubernetes.io/name"] == "sluice");
      CHECK(meta["labels"]["app.kubernetes.io/instance"] == "ds");
      CHECK(meta["labels"]["sluice.dev/dataservice"] == "ds");
    }
  }
  SECTION("the service exposes gRPC and metrics ports of the dispatcher") {
    json svc;
    for (const CreateObject& o : All<CreateObject>(r)) {
      if (o.kind == "Service") svc = o.manifest;
    }
    REQUIRE(svc.is_object());
    CHECK(svc["spec"]["selector"] == json({{"sluice.dev/dataservice", "ds"}, {"sluice.dev/role", "dispatcher"}}));
    CHECK(svc["spec"]["ports"][0]["name"] == "grpc");
    CHECK(svc["spec"]["ports"][0]["port"] == 5050);
    CHECK(svc["spec"]["ports"][1]["name"] == "metrics");
    CHECK(svc["spec"]["ports"][1]["port"] == 8090);
  }
  SECTION("the dispatcher pod runs sluice-dispatcher with its flags, probe and grace period") {
    json pod;
    for (const CreateObject& o : All<CreateObject>(r)) {
      if (o.kind == "Pod" && o.name == "ds-dispatcher") pod = o.manifest;
    }
    REQUIRE(pod.is_object());
    CHECK(pod["metadata"]["labels"]["sluice.dev/role"] == "dispatcher");
    const json& ctr = pod["spec"]["containers"][0];
    CHECK(ctr["command"] == json::array({"sluice-dispatcher"}));
    CHECK(Arg(pod, "--port") == "5050");
    CHECK(Arg(pod, "--metrics_port") == "8090");
    CHECK(Arg(pod, "--journal_dir") == "<missing>");
    CHECK(Arg(pod, "--dataservice") == "ds");  // the metrics' dataservice label
    CHECK(ctr["readinessProbe"]["httpGet"]["path"] == "/readyz");
    CHECK(ctr["readinessProbe"]["httpGet"]["port"] == 8090);
    CHECK(pod["spec"]["terminationGracePeriodSeconds"] == 30);
  }
  SECTION("worker pods get the dispatcher address, their placement and their pod IP") {
    const CreateObject* w = FindCreate(r, "ds-worker-remote-0");
    REQUIRE(w != nullptr);
    const json& pod = w->manifest;
    const json& ctr = pod["spec"]["containers"][0];
    CHECK(ctr["command"] == json::array({"sluice-worker"}));
    CHECK(ctr["image"] == "sluice-worker:dev");
    CHECK(Arg(pod, "--dispatcher_address") == "ds-dispatcher.ml.svc:5050");
    CHECK(Arg(pod, "--placement") == "remote");
    CHECK(Arg(pod, "--port") == "5051");
    CHECK(Arg(pod, "--metrics_port") == "8091");
    CHECK(Arg(pod, "--worker_address") == "$(POD_IP):5051");
    // The worker's host for locality is its node (Kubernetes expands $(NODE_NAME) from the env var
    // below), the same value trainers set in SLUICE_CLIENT_HOST from spec.nodeName.
    CHECK(Arg(pod, "--host") == "$(NODE_NAME)");
    CHECK(Arg(pod, "--dataservice") == "ds");
    bool has_pod_ip = false;
    bool has_node_name = false;
    for (const json& e : ctr["env"]) {
      if (e["name"] == "POD_IP") has_pod_ip = e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP";
      if (e["name"] == "NODE_NAME") has_node_name = e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName";
    }
    CHECK(has_pod_ip);
    CHECK(has_node_name);
    CHECK(ctr["resources"]["requests"]["cpu"] == "2");
    CHECK(ctr["readinessProbe"]["httpGet"]["port"] == 8091);
    CHECK(pod["metadata"]["labels"]["sluice.dev/role"] == "worker");
    CHECK(pod["metadata"]["labels"]["sluice.dev/placement"] == "remote");
    CHECK(pod["metadata"]["labels"]["sluice.dev/template-hash"] ==
          WorkerTemplateHash(Parsed(c.ds()), Pool::kRemote));
    CHECK_FALSE(pod["spec"].contains("affinity"));
  }
  SECTION("an event for the dispatcher, the service and the scale, which names the workers once created") {
    for (const CreateObject& o : All<CreateObject>(r)) {
      INFO(o.name);
      if (o.kind == "Pod" && o.name != "ds-dispatcher") {
        CHECK(o.event.reason == "ScalingUp");  // each create carries the scale-up, naming its own pod
        CHECK(o.event.names == std::vector<std::string>{o.name});
        continue;
      }
      CHECK(o.event.type == "Normal");
      CHECK(o.event.action == "Create");
      CHECK(o.event.note.find(o.name) != std::string::npos);
    }
    CHECK(FindEvent(r, "ScalingUp") == nullptr);  // nothing is announced before the creates
    CHECK(AnnouncedNotes(r, "ScalingUp") ==
          std::vector<std::string>{"workers 0 -> 2 (local 0 -> 0, remote 0 -> 2); created ds-worker-remote-[0,1]"});
    // Only the creates that succeed are named.
    std::vector<EmitEvent> first_only = {FindCreate(r, "ds-worker-remote-0")->event};
    CHECK(RenderEvents(first_only)[0].note == "workers 0 -> 2 (local 0 -> 0, remote 0 -> 2); created ds-worker-remote-0");
  }
  SECTION("status reports address, selector, counts and not-ready conditions") {
    std::optional<json> st = StatusUpdate(r);
    REQUIRE(st.has_value());
    CHECK((*st)["observedGeneration"] == 1);
    CHECK((*st)["dispatcherAddress"] == "ds-dispatcher.ml.svc:5050");
    CHECK((*st)["selector"] == "sluice.dev/dataservice=ds,sluice.dev/role=worker");
    CHECK((*st)["replicas"] == 0);
    CHECK(ConditionOf(*st, "Ready")["status"] == "False");
    CHECK(ConditionOf(*st, "DispatcherReady")["reason"] == "DispatcherPodMissing");
    CHECK(ConditionOf(*st, "WorkersReady")["status"] == "False");
    CHECK(ConditionOf(*st, "Degraded")["status"] == "False");
    CHECK(ConditionOf(*st, "ScalingLimited")["status"] == "False");
    CHECK(ConditionOf(*st, "Ready")["lastTransitionTime"] == FormatKubeTime(kT0));
  }
}

TEST_CASE("the worker selector in status selects exactly the worker pods", "[reconciler]") {
  FakeCluster c(BaseDataService());
  c.Converge();
  DataService ds = Parsed(c.ds());
  LabelSelector sel;
  for (const std::string& part : {std::string("sluice.dev/dataservice=ds"), std::string("sluice.dev/role=worker")}) {
    size_t eq = part.find('=');
    sel.match_labels[part.substr(0, eq)] = part.substr(eq + 1);
  }
  CHECK(c.ds()["status"]["selector"] == WorkerSelector(ds));
  int matched = 0;
  for (const auto& [name, pod] : c.pods()) {
    ObservedPod p = *ObservedPodFromJson(pod);
    bool is_worker = absl::StartsWith(name, "ds-worker-");
    CHECK(SelectorMatches(sel, p.labels) == is_worker);
    matched += is_worker;
  }
  CHECK(matched == 2);
}

TEST_CASE("a missing finalizer is added first", "[reconciler][finalizer]") {
  json o = BaseDataService();
  o["metadata"].erase("finalizers");
  FakeCluster c(o);
  ReconcileResult r = c.Step();
  REQUIRE(All<AddFinalizer>(r).size() == 1);
  CHECK(All<AddFinalizer>(r)[0].finalizer == "sluice.dev/drain");
  CHECK(c.ds()["metadata"]["finalizers"] == json::array({"sluice.dev/drain"}));
  CHECK(All<AddFinalizer>(c.Step()).empty());
}

TEST_CASE("a journal gets a claim mounted into the dispatcher", "[reconciler][dispatcher]") {
  json o = BaseDataService();
  o["spec"]["dispatcher"]["journal"] = {{"storageClassName", "fast-ssd"}, {"size", "5Gi"}};
  FakeCluster c(o);
  ReconcileResult r = c.Step();
  REQUIRE(Created(r, "PersistentVolumeClaim") == std::vector<std::string>{"ds-dispatcher-journal"});
  const json claim = All<CreateObject>(r)[0].manifest;
  CHECK(claim["spec"]["resources"]["requests"]["storage"] == "5Gi");
  CHECK(claim["spec"]["storageClassName"] == "fast-ssd");
  CHECK(claim["spec"]["accessModes"] == json::array({"ReadWriteOnce"}));
  CHECK(claim["metadata"]["ownerReferences"][0]["controller"] == true);
  const json& pod = c.pods().at("ds-dispatcher");
  CHECK(Arg(pod, "--journal_dir") == "/var/lib/sluice/journal");
  CHECK(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "ds-dispatcher-journal");
  CHECK(pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/var/lib/sluice/journal");
  // Once the claim exists it is not created again.
  c.now += absl::Seconds(1);
  CHECK(Created(c.Step(), "PersistentVolumeClaim").empty());
}

TEST_CASE("the pipeline reaches the dispatcher", "[reconciler][dispatcher]") {
  json o = BaseDataService();
  SECTION("from a ConfigMap, mounted as a file") {
    o["spec"]["pipeline"] = {{"configMapRef", {{"name", "imagenet-pipeline"}, {"key", "p.yaml"}}}};
    FakeCluster c(o);
    c.Step();
    const json& pod = c.pods().at("ds-dispatcher");
    CHECK(pod["spec"]["volumes"][0]["configMap"]["name"] == "imagenet-pipeline");
    bool found = false;
    for (const json& e : pod["spec"]["containers"][0]["env"]) {
      if (e["name"] == "SLUICE_PIPELINE_FILE") found = e["value"] == "/etc/sluice/pipeline/p.yaml";
    }
    CHECK(found);
  }
  SECTION("inline, in the environment") {
    o["spec"]["pipeline"] = {{"inline", "source: {tfrecord: {}}"}};
    FakeCluster c(o);
    c.Step();
    bool found = false;
    for (const json& e : c.pods().at("ds-dispatcher")["spec"]["containers"][0]["env"]) {
      if (e["name"] == "SLUICE_PIPELINE") found = e["value"] == "source: {tfrecord: {}}";
    }
    CHECK(found);
  }
}

// Local capacity itself (which nodes, the arithmetic) is tested with the shared model in
// autoscaler/placement/local_capacity_test.cc and with its input in operator/capacity_input_test.cc.

TEST_CASE("Hybrid fills local capacity first, then remote", "[reconciler][placement]") {
  FakeCluster c(HybridDataService(5));
  c.nodes() = {GpuNode("gpu-1", 32000), GpuNode("gpu-2", 16000)};
  c.consumers() = {Trainer("t1", "gpu-1", 24000), Trainer("t2", "gpu-2", 4000)};
  // gpu-1: (32000-24000)*0.5 = 4000 -> 2 slots; gpu-2: (16000-4000)*0.5 = 6000 -> 3 slots.
  ReconcileResult r = c.Step();
  CHECK(r.plan.capacity.total_workers == 5);
  CHECK(r.plan.desired_local == 5);
  CHECK(r.plan.desired_remote == 0);
  std::map<std::string, int> per_node;
  for (const CreateObject& o : All<CreateObject>(r)) {
    if (!absl::StartsWith(o.name, "ds-worker-local-")) continue;
    const json& pod = o.manifest;
    std::string node = pod["metadata"]["annotations"][kAnnotationNode];
    ++per_node[node];
    // Pinned through node affinity on the node's name, with the local tolerations, no remote selector.
    const json& term =
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
    CHECK(term["matchFields"][0] == json({{"key", "metadata.name"}, {"operator", "In"}, {"values", {node}}}));
    CHECK(pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu");
    CHECK_FALSE(pod["spec"].contains("nodeSelector"));
    CHECK_FALSE(pod["spec"].contains("nodeName"));
    CHECK(pod["metadata"]["labels"]["sluice.dev/placement"] == "local");
    CHECK(Arg(pod, "--placement") == "local");
  }
  CHECK(per_node == std::map<std::string, int>{{"gpu-1", 2}, {"gpu-2", 3}});

  SECTION("beyond local capacity the rest runs remote with the remote selector and tolerations") {
    c.ds()["spec"]["workers"]["replicas"] = 8;
    c.ds()["metadata"]["generation"] = 2;
    c.now += absl::Seconds(5);
    ReconcileResult r2 = c.Step();
    CHECK(r2.plan.desired_local == 5);
    CHECK(r2.plan.desired_remote == 3);
    CHECK(Created(r2) == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-1", "ds-worker-remote-2"});
    const json& pod = c.pods().at("ds-worker-remote-0");
    CHECK(pod["spec"]["nodeSelector"] == json({{"pool", "cpu"}}));
    CHECK(pod["spec"]["tolerations"][0]["key"] == "spot");
    CHECK_FALSE(pod["spec"].contains("affinity"));
    CHECK(AnnouncedNotes(r2, "ScalingUp") ==
          std::vector<std::string>{"workers 5 -> 8 (local 5 -> 5, remote 0 -> 3); created ds-worker-remote-[0-2]"});
  }
  SECTION("a converged service stays put: its own workers do not eat its capacity") {
    c.SetAllReady();
    c.now += absl::Seconds(5);
    ReconcileResult r2 = c.Step();
    CHECK(All<CreateObject>(r2).empty());
    CHECK(All<DeleteObject>(r2).empty());
    CHECK(r2.plan.capacity.total_workers == 5);
  }
}

TEST_CASE("an explicit local/remote split from the autoscaler is honoured", "[reconciler][placement]") {
  json o = HybridDataService(4);
  o["spec"]["workers"]["local"] = 1;
  FakeCluster c(o);
  c.nodes() = {GpuNode("gpu-1", 32000)};
  c.consumers() = {Trainer("t1", "gpu-1", 8000)};  // room for 6
  ReconcileResult r = c.Step();
  CHECK(r.plan.desired_local == 1);
  CHECK(r.plan.desired_remote == 3);
  CHECK(c.LivePods("ds-worker-local-").size() == 1);
  CHECK(c.LivePods("ds-worker-remote-").size() == 3);
  CHECK(ConditionOf(c.ds()["status"], "ScalingLimited")["status"] == "False");

  SECTION("a local share above capacity is capped, the rest runs remote, ScalingLimited says so") {
    c.ds()["spec"]["workers"]["local"] = 4;
    c.consumers()[0].cpu_request_millis = 24000;  // room for 2 now
    c.now += absl::Seconds(5);
    ReconcileResult r2 = c.Step();
    CHECK(r2.plan.desired_local == 2);
    CHECK(r2.plan.desired_remote == 2);
    CHECK(r2.plan.limited_reason == "LocalSplitCapped");
    const EmitEvent* ev = FindEvent(r2, "ScalingLimited");
    REQUIRE(ev != nullptr);
    CHECK(ev->type == "Warning");
    json limited = ConditionOf(c.ds()["status"], "ScalingLimited");
    CHECK(limited["status"] == "True");
    CHECK(limited["reason"] == "LocalSplitCapped");
    // One local created, one remote deleted (the newest remote first).
    CHECK(Created(r2) == std::vector<std::string>{"ds-worker-local-1"});
    CHECK(Deleted(r2) == std::vector<std::string>{"ds-worker-remote-2"});
  }
}

TEST_CASE("LocalOnly caps at local capacity and reports ScalingLimited", "[reconciler][placement]") {
  json o = HybridDataService(6);
  o["spec"]["placement"]["policy"] = "LocalOnly";
  FakeCluster c(o);
  c.nodes() = {GpuNode("gpu-1", 32000)};
  c.consumers() = {Trainer("t1", "gpu-1", 24000)};  // room for 2
  ReconcileResult r = c.Step();
  CHECK(r.plan.desired_local == 2);
  CHECK(r.plan.desired_remote == 0);
  CHECK(c.LivePods("ds-worker-remote-").empty());
  CHECK(c.LivePods("ds-worker-local-").size() == 2);
  json limited = ConditionOf(c.ds()["status"], "ScalingLimited");
  CHECK(limited["status"] == "True");
  CHECK(limited["reason"] == "LocalCapacityExhausted");
  CHECK(absl::StrContains(limited["message"].get<std::string>(), "only 2 of 6"));
  REQUIRE(FindEvent(r, "ScalingLimited") != nullptr);
  // The warning is not repeated while the condition stays the same.
  c.now += absl::Seconds(5);
  CHECK(FindEvent(c.Step(), "ScalingLimited") == nullptr);
}

TEST_CASE("RemoteOnly never places a worker locally", "[reconciler][placement]") {
  json o = HybridDataService(3);
  o["spec"]["placement"]["policy"] = "RemoteOnly";
  FakeCluster c(o);
  c.nodes() = {GpuNode("gpu-1", 64000)};
  c.consumers() = {Trainer("t1", "gpu-1", 1000)};
  ReconcileResult r = c.Step();
  CHECK(r.plan.capacity.total_workers == 0);
  CHECK(Created(r) == std::vector<std::string>{"ds-dispatcher", "ds-worker-remote-0", "ds-worker-remote-1",
                                               "ds-worker-remote-2"});
}

TEST_CASE("local workers leave a node whose consumers left", "[reconciler][placement]") {
  FakeCluster c(HybridDataService(3));
  c.nodes() = {GpuNode("gpu-1", 32000)};
  c.consumers() = {Trainer("t1", "gpu-1", 8000)};
  c.Converge();
  REQUIRE(c.LivePods("ds-worker-local-").size() == 3);
  c.consumers().clear();
  ReconcileResult r = c.Step();
  CHECK(Deleted(r).size() == 3);
  for (const DeleteObject& d : All<DeleteObject>(r)) {
    CHECK(absl::StrContains(d.reason, "gpu-1 has room for 0"));
    CHECK(d.event.reason == "DeletedWorker");
  }
  CHECK(Created(r) == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-1", "ds-worker-remote-2"});
}

TEST_CASE("scale-down deletes exactly the pods named in workersToDelete", "[reconciler][scaledown]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 4;
  FakeCluster c(o);
  c.Converge();
  REQUIRE(c.LivePods().size() == 4);
  c.ds()["spec"]["workers"]["replicas"] = 2;
  c.ds()["spec"]["workers"]["workersToDelete"] = {"ds-worker-remote-0", "ds-worker-remote-2", "not-a-pod"};
  ReconcileResult r = c.Step();
  std::vector<std::string> deleted = Deleted(r);
  std::sort(deleted.begin(), deleted.end());
  CHECK(deleted == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-2"});
  CHECK(All<CreateObject>(r).empty());
  for (const DeleteObject& d : All<DeleteObject>(r)) CHECK(d.reason == "listed in spec.workers.workersToDelete");
  CHECK(FindEvent(r, "ScalingDown")->note == "workers 4 -> 2 (local 0 -> 0, remote 4 -> 2)");

  SECTION("names still listed are never reused for new pods") {
    c.FinishTerminations();
    c.SetAllReady();
    c.ds()["spec"]["workers"]["replicas"] = 3;
    c.now += absl::Seconds(10);
    ReconcileResult r2 = c.Step();
    CHECK(Created(r2) == std::vector<std::string>{"ds-worker-remote-4"});
  }
}

TEST_CASE("Hybrid without workers.local: workersToDelete naming a local pod deletes exactly it, no rebalancing",
          "[reconciler][scaledown]") {
  FakeCluster c(HybridDataService(4));
  c.nodes() = {GpuNode("gpu-1", 32000)};
  c.consumers() = {Trainer("t1", "gpu-1", 20000)};  // room for 3 local
  c.Converge();
  REQUIRE(c.LivePods("ds-worker-local-").size() == 3);
  REQUIRE(c.LivePods("ds-worker-remote-").size() == 1);
  c.ds()["spec"]["workers"]["replicas"] = 3;
  c.ds()["spec"]["workers"]["workersToDelete"] = {"ds-worker-local-1"};
  ReconcileResult r = c.Step();
  CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-local-1"});
  CHECK(All<CreateObject>(r).empty());
  CHECK(FindEvent(r, "ScalingDown")->note == "workers 4 -> 3 (local 3 -> 2, remote 1 -> 1)");
  // Later passes with the list still in place keep the split.
  c.FinishTerminations();
  c.SetAllReady();
  c.now += absl::Seconds(10);
  ReconcileResult r2 = c.Step();
  CHECK(Deleted(r2).empty());
  CHECK(All<CreateObject>(r2).empty());
  // Growing again with the list in place fills local capacity first.
  c.ds()["spec"]["workers"]["replicas"] = 4;
  ReconcileResult r3 = c.Step();
  CHECK(Deleted(r3).empty());
  REQUIRE(Created(r3).size() == 1);
  CHECK(absl::StartsWith(Created(r3)[0], "ds-worker-local-"));
}

// The default scale-down order (no workersToDelete): not-ready pods of either pool first, then remote
// before local, then (outdated before up-to-date) newest first. A ready pod is taken only from a pool
// above its target; a not-ready pod goes even from a pool at its target, and the pool is refilled in
// the same pass.
void GrowHybridTo6(FakeCluster& c) {
  c.nodes() = {GpuNode("gpu-1", 32000)};
  c.consumers() = {Trainer("t1", "gpu-1", 20000)};  // room for 3 local
  for (int i = 0; i < 8; ++i) {  // workers created over time: later ordinals are newer
    c.Step();
    c.FinishTerminations();
    c.SetAllReady();
    c.now += absl::Seconds(10);
  }
  REQUIRE(c.LivePods("ds-worker-local-").size() == 3);
  REQUIRE(c.LivePods("ds-worker-remote-").size() == 3);
}

TEST_CASE("default scale-down order: not ready (either pool), then remote, then newest", "[reconciler][scaledown]") {
  FakeCluster c(HybridDataService(6));
  GrowHybridTo6(c);
  c.SetReady("ds-worker-remote-0", false);
  c.SetReady("ds-worker-local-1", false);
  // Make remote-1 the newest of the remotes.
  c.pods()["ds-worker-remote-1"]["metadata"]["creationTimestamp"] = FormatKubeTime(c.now);

  SECTION("shrinking by one removes the not-ready remote pod (remote before local among the not ready)") {
    c.ds()["spec"]["workers"]["replicas"] = 5;
    ReconcileResult r = c.Step();
    CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-0"});
    CHECK(Created(r).empty());
  }
  SECTION("shrinking by two removes both not-ready pods; the local pool is refilled in the same pass") {
    c.ds()["spec"]["workers"]["replicas"] = 4;
    ReconcileResult r = c.Step();
    // Not ready first: remote-0 and local-1. Hybrid keeps local capacity filled (3 local, 1 remote),
    // so the remote pool is trimmed to one (the newest, remote-1, goes) and a local pod replaces local-1.
    CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-local-1", "ds-worker-remote-1"});
    CHECK(Created(r) == std::vector<std::string>{"ds-worker-local-3"});
    const EmitEvent* scale = FindEvent(r, "ScalingDown");
    REQUIRE(scale != nullptr);
    CHECK(RenderNote(*scale) == "workers 6 -> 4 (local 3 -> 3, remote 3 -> 1)");
    std::vector<std::string> notes;
    std::vector<EmitEvent> announcing;
    for (const DeleteObject& d : All<DeleteObject>(r)) announcing.push_back(d.event);
    for (const EmitEvent& e : RenderEvents(announcing)) notes.push_back(e.note);
    CHECK(notes == std::vector<std::string>{
                       "deleted remote worker pod ds-worker-remote-0: scaling down to 4 workers (not ready: first to "
                       "go); deleted local worker pod ds-worker-local-1: scaling down to 4 workers (not ready: first "
                       "to go); deleted remote worker pod ds-worker-remote-1: scaling the remote workers down to 1"});

    // Converged: the next passes change nothing, while the new local pod is still not ready and after.
    c.FinishTerminations();
    for (int i = 0; i < 3; ++i) {
      c.now += absl::Seconds(10);
      ReconcileResult next = c.Step();
      CHECK(Deleted(next).empty());
      CHECK(Created(next).empty());
    }
    c.SetAllReady();
    ReconcileResult ready = c.Step();
    CHECK(Deleted(ready).empty());
    CHECK(Created(ready).empty());
    CHECK(c.LivePods("ds-worker-local-").size() == 3);
    CHECK(c.LivePods("ds-worker-remote-") == std::vector<std::string>{"ds-worker-remote-2"});
  }
  SECTION("shrinking into the local pool: the not-ready pods, then every remote one") {
    c.ds()["spec"]["workers"]["replicas"] = 2;
    ReconcileResult r = c.Step();
    CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-local-1", "ds-worker-remote-1",
                                                 "ds-worker-remote-2"});
    CHECK(Created(r).empty());
    c.FinishTerminations();
    c.SetAllReady();
    c.now += absl::Seconds(10);
    ReconcileResult next = c.Step();
    CHECK(Deleted(next).empty());
    CHECK(Created(next).empty());
  }
}

TEST_CASE("default scale-down order with every pod ready: remote, then newest", "[reconciler][scaledown]") {
  FakeCluster c(HybridDataService(6));
  GrowHybridTo6(c);
  c.pods()["ds-worker-remote-0"]["metadata"]["creationTimestamp"] = FormatKubeTime(c.now);  // the newest

  SECTION("within the remote pool the newest go first") {
    c.ds()["spec"]["workers"]["replicas"] = 4;
    ReconcileResult r = c.Step();
    CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-2"});
    CHECK(Created(r).empty());
  }
  SECTION("past the remote pool, the newest local pods") {
    c.pods()["ds-worker-local-0"]["metadata"]["creationTimestamp"] = FormatKubeTime(c.now);
    c.ds()["spec"]["workers"]["replicas"] = 2;
    ReconcileResult r = c.Step();
    std::vector<std::string> deleted = Deleted(r);
    CHECK(deleted.size() == 4);
    for (const char* name : {"ds-worker-remote-0", "ds-worker-remote-1", "ds-worker-remote-2",
                            "ds-worker-local-0"}) {
      CHECK(Contains(deleted, name));
    }
  }
}

TEST_CASE("RemoteOnly scale-down: not ready first, then newest", "[reconciler][scaledown]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 4;
  FakeCluster c(o);
  c.Converge();
  REQUIRE(c.LivePods().size() == 4);
  c.SetReady("ds-worker-remote-1", false);
  c.pods()["ds-worker-remote-0"]["metadata"]["creationTimestamp"] = FormatKubeTime(c.now);  // the newest
  c.ds()["spec"]["workers"]["replicas"] = 2;
  ReconcileResult r = c.Step();
  CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-1", "ds-worker-remote-0"});
  CHECK(Created(r).empty());
}

TEST_CASE("a ready pod is not taken from a pool at its target (the explicit split holds)", "[reconciler][scaledown]") {
  json o = HybridDataService(4);
  o["spec"]["workers"]["local"] = 3;
  FakeCluster c(o);
  c.nodes() = {GpuNode("gpu-1", 32000)};
  c.consumers() = {Trainer("t1", "gpu-1", 8000)};  // room for 6
  c.Converge();
  REQUIRE(c.LivePods("ds-worker-local-").size() == 3);
  REQUIRE(c.LivePods("ds-worker-remote-") == std::vector<std::string>{"ds-worker-remote-0"});
  // The autoscaler shrinks by one and moves the split to 1 local, 2 remote. Remote comes first in the
  // order, but the remote pool is below its new target: deleting its pod would only recreate it.
  c.ds()["spec"]["workers"]["replicas"] = 3;
  c.ds()["spec"]["workers"]["local"] = 1;
  ReconcileResult r = c.Step();
  std::vector<std::string> deleted = Deleted(r);
  CHECK(deleted.size() == 2);
  for (const std::string& name : deleted) CHECK(absl::StartsWith(name, "ds-worker-local-"));
  CHECK(Created(r) == std::vector<std::string>{"ds-worker-remote-1"});
  c.FinishTerminations();
  c.SetAllReady();
  c.now += absl::Seconds(10);
  ReconcileResult next = c.Step();
  CHECK(Deleted(next).empty());
  CHECK(Created(next).empty());
}

// ---- scale-down drains ----

std::string UidOf(FakeCluster& c, const std::string& pod) { return c.pods().at(pod)["metadata"]["uid"]; }
std::string AddressOf(FakeCluster& c, const std::string& pod) {
  return c.pods().at(pod)["status"]["podIP"].get<std::string>() + ":5051";
}

TEST_CASE("scale-down drains the pods it removes through the dispatcher, then deletes them", "[reconciler][drain]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 2;
  FakeCluster c(o);
  c.options.scale_down_drain_timeout = absl::Minutes(2);
  c.Converge();
  REQUIRE(c.LivePods() == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-1"});
  c.ds()["spec"]["workers"]["replicas"] = 1;
  c.ds()["spec"]["workers"]["workersToDelete"] = {"ds-worker-remote-0"};
  const absl::Time started = c.now;

  // The first pass deletes nothing and creates nothing: it asks the dispatcher to drain exactly the pod.
  ReconcileResult r = c.Step();
  CHECK(Deleted(r).empty());
  CHECK(Created(r).empty());
  std::vector<DrainWorkers> drains = All<DrainWorkers>(r);
  REQUIRE(drains.size() == 1);
  CHECK(drains[0].scope == DrainScope::kScaleDown);
  CHECK(drains[0].workers == std::vector<std::string>{"ds-worker-remote-0"});
  CHECK(drains[0].worker_uids == std::vector<std::string>{UidOf(c, "ds-worker-remote-0")});
  CHECK(drains[0].worker_addresses == std::vector<std::string>{AddressOf(c, "ds-worker-remote-0")});
  CHECK(drains[0].dispatcher_endpoint == c.pods().at("ds-dispatcher")["status"]["podIP"].get<std::string>() + ":5050");
  CHECK(drains[0].dispatcher_address == "ds-dispatcher.ml.svc:5050");
  CHECK(FindEvent(r, "ScalingDown")->note == "workers 2 -> 1 (local 0 -> 0, remote 2 -> 1)");
  const EmitEvent* draining = FindEvent(r, "DrainingWorker");
  REQUIRE(draining != nullptr);
  CHECK(draining->type == "Normal");
  CHECK(draining->note ==
        "draining worker pod ds-worker-remote-0 through the dispatcher, deleted once drained (at most 2m): listed in "
        "spec.workers.workersToDelete");
  REQUIRE(r.requeue_after.has_value());
  CHECK(*r.requeue_after == absl::Seconds(5));  // the drain poll interval
  // Status: the draining pod is not counted as a worker; it is shown apart.
  std::optional<json> status = StatusUpdate(r);
  REQUIRE(status.has_value());
  CHECK((*status)["replicas"] == 1);
  CHECK((*status)["readyReplicas"] == 1);
  CHECK((*status)["drainingReplicas"] == 1);
  CHECK(ConditionOf(*status, "WorkersReady")["status"] == "True");
  CHECK(ConditionOf(*status, "WorkersReady")["message"] ==
        "1/1 workers ready; 1 draining through the dispatcher before deletion");
  CHECK(ConditionOf(*status, "Ready")["status"] == "True");
  c.RecordDrainRound(r);

  SECTION("while it drains: kept, asked again, no replacement, no repeated events") {
    for (int i = 0; i < 3; ++i) {
      c.now += absl::Seconds(5);
      ReconcileResult next = c.Step();
      c.RecordDrainRound(next);
      CHECK(Deleted(next).empty());
      CHECK(Created(next).empty());
      REQUIRE(All<DrainWorkers>(next).size() == 1);
      CHECK(All<DrainWorkers>(next)[0].workers == std::vector<std::string>{"ds-worker-remote-0"});
      CHECK(FindEvent(next, "DrainingWorker") == nullptr);
      CHECK(FindEvent(next, "ScalingDown") == nullptr);
    }
    CHECK(c.pod_drains.at(UidOf(c, "ds-worker-remote-0")).started == started);  // the first request's time
    CHECK(c.LivePods() == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-1"});
  }
  SECTION("deleted once the dispatcher reports it drained") {
    c.now += absl::Seconds(5);
    c.RecordDrainRound(r, {"ds-worker-remote-0"});
    ReconcileResult done = c.Step();
    CHECK(Deleted(done) == std::vector<std::string>{"ds-worker-remote-0"});
    CHECK(Created(done).empty());
    CHECK(All<DrainWorkers>(done).empty());  // nothing left to drain
    CHECK(All<DeleteObject>(done)[0].reason == "drained through the dispatcher: draining, no task left");
    CHECK(All<DeleteObject>(done)[0].drain_outcome == "drained");
    CHECK(AnnouncedNotes(done, "DrainedWorker") ==
          std::vector<std::string>{"deleted drained remote worker pod ds-worker-remote-0: the dispatcher reports "
                                   "nothing left to deliver or hand back"});
    CHECK(FindEvent(done, "ScalingDown") == nullptr);
    // Gone: the next passes change nothing.
    c.FinishTerminations();
    c.now += absl::Seconds(10);
    ReconcileResult after = c.Step();
    CHECK(Deleted(after).empty());
    CHECK(Created(after).empty());
    CHECK(All<DrainWorkers>(after).empty());
    CHECK(c.ds()["status"]["drainingReplicas"] == 0);
    CHECK(c.LivePods() == std::vector<std::string>{"ds-worker-remote-1"});
  }
  SECTION("not drained by the deadline: deleted anyway, with a Warning naming the SIGTERM fallback") {
    c.now = started + absl::Minutes(2) - absl::Seconds(2);
    ReconcileResult almost = c.Step();
    CHECK(Deleted(almost).empty());
    CHECK(*almost.requeue_after == absl::Seconds(2));  // the requeue never overshoots the deadline
    c.now = started + absl::Minutes(2);
    ReconcileResult late = c.Step();
    CHECK(Deleted(late) == std::vector<std::string>{"ds-worker-remote-0"});
    std::vector<std::string> notes = AnnouncedNotes(late, "WorkerDrainTimedOut");
    REQUIRE(notes.size() == 1);
    CHECK(notes[0] ==
          "deleted remote worker pod ds-worker-remote-0 not drained after 2m (draining, 1 task: 12 elements produced "
          "and not yet received); each falls back to the SIGTERM hand-back: splits go back at the readers' positions "
          "and what clients have not read within the pod's shutdown budget is lost");
    CHECK(All<DeleteObject>(late)[0].event.type == "Warning");
    CHECK(All<DeleteObject>(late)[0].drain_outcome == "timed_out");
  }
  SECTION("more workers wanted again mid-drain: the drain goes on (it cannot be undone), a new pod is created") {
    c.ds()["spec"]["workers"]["replicas"] = 2;
    c.now += absl::Seconds(5);
    ReconcileResult up = c.Step();
    CHECK(Created(up) == std::vector<std::string>{"ds-worker-remote-2"});  // listed names are not reused
    CHECK(Deleted(up).empty());
    REQUIRE(All<DrainWorkers>(up).size() == 1);
    CHECK(All<DrainWorkers>(up)[0].workers == std::vector<std::string>{"ds-worker-remote-0"});
  }
  SECTION("the DataService deleted mid-drain: the finalizer's whole drain takes over, unchanged") {
    c.ds()["metadata"]["deletionTimestamp"] = FormatKubeTime(c.now);
    ReconcileResult deleting = c.Step();
    REQUIRE(All<DrainWorkers>(deleting).size() == 1);
    const DrainWorkers& all = All<DrainWorkers>(deleting)[0];
    CHECK(all.scope == DrainScope::kDataService);
    CHECK(all.workers == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-1"});
    CHECK(Deleted(deleting).empty());
    CHECK(FindEvent(deleting, "DrainStarted") != nullptr);
  }
}

TEST_CASE("a replicas-only scale-down drains the surplus it picks, named in one event", "[reconciler][drain]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 3;
  FakeCluster c(o);
  c.options.scale_down_drain_timeout = absl::Minutes(2);
  c.Converge();
  c.pods()["ds-worker-remote-0"]["metadata"]["creationTimestamp"] = FormatKubeTime(c.now);  // the newest
  c.ds()["spec"]["workers"]["replicas"] = 1;
  ReconcileResult r = c.Step();
  CHECK(Deleted(r).empty());
  CHECK(Created(r).empty());
  REQUIRE(All<DrainWorkers>(r).size() == 1);
  CHECK(All<DrainWorkers>(r)[0].workers == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-2"});
  CHECK(FindEvent(r, "DrainingWorker")->note ==
        "draining worker pods ds-worker-remote-[0,2] through the dispatcher, deleted once drained (at most 2m): "
        "scaling down to 1 workers");
  CHECK((*StatusUpdate(r))["drainingReplicas"] == 2);
  c.RecordDrainRound(r, {"ds-worker-remote-2"});
  // One drained, one still draining: only the drained one goes; the other is still asked about.
  c.now += absl::Seconds(5);
  ReconcileResult next = c.Step();
  CHECK(Deleted(next) == std::vector<std::string>{"ds-worker-remote-2"});
  CHECK(Created(next).empty());
  REQUIRE(All<DrainWorkers>(next).size() == 1);
  CHECK(All<DrainWorkers>(next)[0].workers == std::vector<std::string>{"ds-worker-remote-0"});
  CHECK(FindEvent(next, "ScalingDown") == nullptr);
}

TEST_CASE("pods that cannot be drained through the dispatcher are deleted at once", "[reconciler][drain]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 2;
  FakeCluster c(o);
  c.options.scale_down_drain_timeout = absl::Minutes(2);
  c.Converge();
  c.ds()["spec"]["workers"]["replicas"] = 1;
  c.ds()["spec"]["workers"]["workersToDelete"] = {"ds-worker-remote-1"};
  SECTION("a pod that is not ready") { c.SetReady("ds-worker-remote-1", false); }
  SECTION("a pod without an IP") { c.pods()["ds-worker-remote-1"]["status"].erase("podIP"); }
  SECTION("a pod that is not running") { c.pods()["ds-worker-remote-1"]["status"]["phase"] = "Pending"; }
  SECTION("no ready dispatcher to drain through") { c.SetReady("ds-dispatcher", false); }
  SECTION("draining turned off (timeout 0)") { c.options.scale_down_drain_timeout = absl::ZeroDuration(); }
  ReconcileResult r = c.Step();
  CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-1"});
  CHECK(All<DrainWorkers>(r).empty());
  CHECK(FindEvent(r, "DrainingWorker") == nullptr);
  CHECK(Created(r).empty());
}

// ---- events naming pods ----

TEST_CASE("pod names are compacted into ordinal ranges", "[events]") {
  CHECK(CompactNames({}) == "");
  CHECK(CompactNames({"ds-worker-remote-3"}) == "ds-worker-remote-3");
  CHECK(CompactNames({"ds-worker-remote-4", "ds-worker-remote-3", "ds-worker-remote-5", "ds-worker-remote-9",
                      "ds-worker-remote-10", "ds-worker-remote-3"}) == "ds-worker-remote-[3-5,9,10]");
  CHECK(CompactNames({"ds-worker-remote-0", "ds-worker-local-2", "ds-worker-remote-1", "ds-dispatcher",
                      "ds-worker-local-007"}) ==
        "ds-worker-remote-[0,1], ds-worker-local-2, ds-dispatcher, ds-worker-local-007");
  EmitEvent one{"Normal", "DeletedWorker", "Delete", "deleted remote worker pod{s} {}: gone", {"ds-worker-remote-1"}};
  CHECK(RenderNote(one) == "deleted remote worker pod ds-worker-remote-1: gone");
  one.names.push_back("ds-worker-remote-2");
  CHECK(RenderNote(one) == "deleted remote worker pods ds-worker-remote-[1,2]: gone");
}

TEST_CASE("a big scale-up names every pod it creates in one short event", "[events][reconciler]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 40;
  o["spec"]["workers"]["maxReplicas"] = 100;
  FakeCluster c(o);
  ReconcileResult r = c.Step();
  REQUIRE(Created(r).size() == 41);
  CHECK(AnnouncedNotes(r, "ScalingUp") ==
        std::vector<std::string>{"workers 0 -> 40 (local 0 -> 0, remote 0 -> 40); created ds-worker-remote-[0-39]"});
}

TEST_CASE("events that would overflow a note are split so that every pod stays named", "[events]") {
  // 600 deletions with every other ordinal (no ranges to compact), for two different reasons, plus a
  // replacement create: far more than one 1024-byte note holds.
  std::vector<EmitEvent> events;
  std::set<std::string> deleted;
  for (int i = 0; i < 1200; i += 2) {
    std::string name = absl::StrCat("ds-worker-remote-", i);
    deleted.insert(name);
    std::string why = i < 600 ? "scaling down to 10 workers" : "listed in spec.workers.workersToDelete";
    events.push_back(EmitEvent{"Normal", "DeletedWorker", "Delete", "deleted remote worker pod{s} {}: " + why, {name}});
  }
  events.push_back(EmitEvent{"Normal", "CreatedWorker", "Create", "created remote worker pod{s} {}", {"ds-worker-remote-1"}});
  std::vector<EmitEvent> rendered = RenderEvents(events);
  std::set<std::string> named;
  int deleted_events = 0;
  for (const EmitEvent& e : rendered) {
    INFO(e.note);
    CHECK(e.note.size() <= kMaxEventNoteBytes);
    CHECK(e.names.empty());
    CHECK(e.note.find("{}") == std::string::npos);
    if (e.reason == "DeletedWorker") {
      ++deleted_events;
      for (const std::string& n : testing::NamesIn(e.note, "ds-worker-remote-")) {
        CHECK(named.insert(n).second);  // each pod named once
      }
    } else {
      CHECK(e.note == "created remote worker pod ds-worker-remote-1");
    }
  }
  CHECK(named == deleted);
  // Packed, not one event per pod: 600 names of 3-4 digits take a handful of notes.
  CHECK(deleted_events >= 3);
  CHECK(deleted_events <= 6);
  CHECK(rendered.back().reason == "CreatedWorker");  // the order of first appearance is kept
}

TEST_CASE("expectations stop a stale cache from doubling pods", "[reconciler][expectations]") {
  FakeCluster c(BaseDataService());
  ReconcileInput first = c.Input();
  ReconcileResult r = c.Step();
  REQUIRE(Created(r).size() == 3);
  REQUIRE(c.expectations.Pending("ml/ds").creates.size() == 4);  // service + 3 pods

  SECTION("the cache has not seen the new pods yet: nothing is created again") {
    ReconcileInput stale = first;  // as if the informer lagged behind
    stale.expectations = c.expectations.Pending("ml/ds");
    stale.now = kT0 + absl::Seconds(30);
    absl::StatusOr<ReconcileResult> again = Reconcile(stale);
    REQUIRE(again.ok());
    CHECK(again->expectations == ExpectationsState::kPending);
    CHECK(All<CreateObject>(*again).empty());
    CHECK(All<DeleteObject>(*again).empty());
    REQUIRE(again->requeue_after.has_value());
    CHECK(*again->requeue_after == absl::Minutes(5) - absl::Seconds(30));
    // Without expectations the same stale view would have created the pods a second time.
    stale.expectations = PendingOperations{};
    CHECK(Created(*Reconcile(stale)).size() == 3);
  }
  SECTION("once everything is observed the expectations are satisfied and forgotten") {
    c.now += absl::Seconds(1);
    ReconcileResult r2 = c.Step();
    CHECK(r2.expectations == ExpectationsState::kSatisfied);
    CHECK(c.expectations.Pending("ml/ds").empty());
  }
  SECTION("expectations expire after the timeout and planning resumes") {
    ReconcileInput stale = first;
    stale.expectations = c.expectations.Pending("ml/ds");
    stale.now = kT0 + absl::Minutes(5);
    absl::StatusOr<ReconcileResult> expired = Reconcile(stale);
    REQUIRE(expired.ok());
    CHECK(expired->expectations == ExpectationsState::kExpired);
    CHECK(Created(*expired).size() == 3);
    const EmitEvent* ev = FindEvent(*expired, "ExpectationsExpired");
    REQUIRE(ev != nullptr);
    CHECK(absl::StrContains(ev->note, "create Pod/ds-worker-remote-0"));
  }
}

TEST_CASE("delete expectations hold until the pod is gone or terminating", "[reconciler][expectations]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 3;
  FakeCluster c(o);
  c.Converge();
  c.ds()["spec"]["workers"]["replicas"] = 1;
  ReconcileInput before = c.Input();
  ReconcileResult r = c.Step();
  REQUIRE(Deleted(r).size() == 2);
  ReconcileInput stale = before;
  stale.expectations = c.expectations.Pending("ml/ds");
  CHECK(stale.expectations.deletes.size() == 2);
  absl::StatusOr<ReconcileResult> again = Reconcile(stale);
  REQUIRE(again.ok());
  CHECK(again->expectations == ExpectationsState::kPending);
  CHECK(Deleted(*again).empty());  // not one pod too many
  // Terminating pods satisfy the delete expectations.
  ReconcileResult after = c.Step();
  CHECK(after.expectations == ExpectationsState::kSatisfied);
  CHECK(Deleted(after).empty());
}

TEST_CASE("the Expectations structure tracks creates and deletes per DataService", "[expectations]") {
  Expectations e;
  e.ExpectCreate("ns/a", ObjectKey("Pod", "a-worker-remote-0"), kT0);
  e.ExpectDelete("ns/a", ObjectKey("Pod", "a-worker-remote-1"), kT0 + absl::Seconds(1));
  e.ExpectCreate("ns/b", ObjectKey("Service", "b-dispatcher"), kT0);
  PendingOperations a = e.Pending("ns/a");
  CHECK(a.creates == std::set<std::string>{"Pod/a-worker-remote-0"});
  CHECK(a.deletes == std::set<std::string>{"Pod/a-worker-remote-1"});
  CHECK(a.recorded_at == kT0 + absl::Seconds(1));
  e.CreationObserved("ns/a", "Pod/a-worker-remote-0");
  e.DeleteFailed("ns/a", "Pod/a-worker-remote-1");
  CHECK(e.Pending("ns/a").empty());
  CHECK(e.size() == 1);
  e.Forget("ns/b");
  CHECK(e.size() == 0);
  CHECK(e.Pending("ns/unknown").empty());
}

TEST_CASE("a changed worker spec rolls pods one at a time", "[reconciler][rolling]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 3;
  FakeCluster c(o);
  c.Converge();
  std::set<std::string> original;  // uids: names are reused, pods are not
  for (const std::string& n : c.LivePods()) original.insert(c.pods().at(n)["metadata"]["uid"].get<std::string>());
  REQUIRE(original.size() == 3);
  DataService old_spec = Parsed(c.ds());

  c.ds()["spec"]["workers"]["image"] = "sluice-worker:v2";
  c.ds()["metadata"]["generation"] = 2;
  std::string new_hash = WorkerTemplateHash(Parsed(c.ds()), Pool::kRemote);
  CHECK(new_hash != WorkerTemplateHash(old_spec, Pool::kRemote));

  int rounds = 0;
  bool saw_rolling_condition = false;
  for (; rounds < 20; ++rounds) {
    ReconcileResult r = c.Step();
    std::vector<std::string> deleted = Deleted(r);
    CHECK(deleted.size() <= 1);  // maxUnavailable 1
    if (!deleted.empty()) {
      // Deleted only while every other worker is ready, and replaced in the same pass.
      CHECK(Created(r).size() == 1);
      CHECK(All<DeleteObject>(r)[0].reason == "the worker spec changed (rolling replacement)");
    }
    if (c.ds()["status"].contains("conditions")) {
      saw_rolling_condition |= ConditionOf(c.ds()["status"], "WorkersReady")["reason"] == "RollingUpdate";
    }
    // Never more than one worker unavailable: count ready live workers.
    int ready = 0;
    for (const std::string& n : c.LivePods()) {
      const json& st = c.pods().at(n)["status"];
      ready += st.contains("conditions") && st["conditions"][0]["status"] == "True";
    }
    CHECK(ready >= 2);
    c.FinishTerminations();
    // The replacement becomes ready only on the next round.
    c.now += absl::Seconds(10);
    ReconcileResult waiting = c.Step();
    CHECK(Deleted(waiting).empty());  // the new pod is not ready yet: no further deletion
    c.SetAllReady();
    c.now += absl::Seconds(10);
    bool all_new = true;
    for (const std::string& n : c.LivePods()) {
      all_new &= c.pods().at(n)["metadata"]["labels"][kLabelTemplateHash] == new_hash;
    }
    if (all_new) break;
  }
  CHECK(rounds == 2);  // three pods, one per round
  CHECK(saw_rolling_condition);
  for (const std::string& n : c.LivePods()) {
    CHECK(original.count(c.pods().at(n)["metadata"]["uid"].get<std::string>()) == 0);
    CHECK(c.pods().at(n)["spec"]["containers"][0]["image"] == "sluice-worker:v2");
  }
  c.Converge();
  CHECK(ConditionOf(c.ds()["status"], "WorkersReady")["status"] == "True");
}

TEST_CASE("outdated pods that are not ready are replaced without waiting", "[reconciler][rolling]") {
  json o = BaseDataService();
  o["spec"]["workers"]["replicas"] = 3;
  FakeCluster c(o);
  c.Converge();
  c.SetReady("ds-worker-remote-1", false);
  c.ds()["spec"]["workers"]["extraArgs"] = {"--threads=8"};
  SECTION("maxUnavailable 1: only the not-ready pod goes") {
    ReconcileResult r = c.Step();
    CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-1"});
    CHECK(Created(r).size() == 1);
  }
  SECTION("maxUnavailable 2: the not-ready pod and one ready pod (the oldest) go") {
    c.ds()["spec"]["workers"]["maxUnavailable"] = 2;
    ReconcileResult r = c.Step();
    CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-1", "ds-worker-remote-0"});
    CHECK(Created(r).size() == 2);
  }
}

TEST_CASE("template hashes ignore per-pod details and differ per pool", "[manifests]") {
  DataService ds = Parsed(HybridDataService(2));
  json a = BuildWorkerPod(ds, Pool::kLocal, 0, "gpu-1");
  json b = BuildWorkerPod(ds, Pool::kLocal, 7, "gpu-2");
  CHECK(a["metadata"]["labels"][kLabelTemplateHash] == b["metadata"]["labels"][kLabelTemplateHash]);
  CHECK(WorkerTemplateHash(ds, Pool::kLocal) != WorkerTemplateHash(ds, Pool::kRemote));
  std::string remote = WorkerTemplateHash(ds, Pool::kRemote);
  ds.spec.placement.local_tolerations.clear();  // a local-only setting: remote pods keep their hash
  CHECK(WorkerTemplateHash(ds, Pool::kRemote) == remote);
  ds.spec.placement.remote_node_selector["zone"] = "b";
  CHECK(WorkerTemplateHash(ds, Pool::kRemote) != remote);
  CHECK(StableHash("") == "cbf29ce484222325");  // FNV-1a offset basis: stable across builds
  CHECK(ParseWorkerPodName(ds, "ds-worker-local-12") == std::make_pair(Pool::kLocal, int64_t{12}));
  CHECK_FALSE(ParseWorkerPodName(ds, "ds-worker-local-012").has_value());
  CHECK_FALSE(ParseWorkerPodName(ds, "other-worker-remote-1").has_value());
  CHECK_FALSE(ParseWorkerPodName(ds, "ds-worker-remote-x").has_value());
}

TEST_CASE("an unschedulable dispatcher or worker is reported with the scheduler's reason, not only as not ready",
          "[reconciler][status]") {
  json o = BaseDataService();
  o["spec"]["dispatcher"]["journal"] = {{"size", "1Gi"}};
  FakeCluster c(o);
  c.Step();
  c.now += absl::Seconds(10);
  // The scheduler cannot place the dispatcher: its journal claim is not bound.
  json& dispatcher = c.pods().at("ds-dispatcher");
  dispatcher["spec"].erase("nodeName");
  dispatcher["status"] = json::parse(R"js({"phase": "Pending", "conditions": [{"type": "PodScheduled",
      "status": "False", "reason": "Unschedulable",
      "message": "0/3 nodes are available: 3 pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}]})js");
  c.claims().at("ds-dispatcher-journal")["status"] = {{"phase", "Pending"}};
  json& worker = c.pods().at("ds-worker-remote-1");
  worker["spec"].erase("nodeName");
  worker["status"] = json::parse(R"js({"phase": "Pending", "conditions": [{"type": "PodScheduled",
      "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]})js");
  c.SetReady("ds-worker-remote-0");
  ReconcileResult r = c.Step();
  std::optional<json> st = StatusUpdate(r);
  REQUIRE(st.has_value());
  json d = ConditionOf(*st, "DispatcherReady");
  CHECK(d["status"] == "False");
  CHECK(d["reason"] == "DispatcherUnschedulable");
  CHECK(d["message"] ==
        "dispatcher pod ds-dispatcher cannot be scheduled: Unschedulable: 0/3 nodes are available: 3 pod has unbound "
        "immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling. (journal claim ds-dispatcher-journal is Pending)");
  CHECK(ConditionOf(*st, "Ready")["reason"] == "DispatcherNotReady");
  CHECK(ConditionOf(*st, "Ready")["message"] == d["message"]);
  CHECK(ConditionOf(*st, "WorkersReady")["message"] ==
        "1/2 workers ready; 1 cannot be scheduled (ds-worker-remote-1: Unschedulable: 0/3 nodes are available: 3 "
        "Insufficient cpu.)");
  // Scheduled after all: the dispatcher is only not ready.
  c.pods().at("ds-dispatcher")["status"] = {{"phase", "Running"}};
  c.now += absl::Seconds(10);
  std::optional<json> later = StatusUpdate(c.Step());
  REQUIRE(later.has_value());
  CHECK(ConditionOf(*later, "DispatcherReady")["reason"] == "DispatcherPodNotReady");
}

TEST_CASE("in a namespace being deleted nothing is created and no Event is emitted, deletes and status go on",
          "[reconciler][deletion]") {
  FakeCluster c(BaseDataService());
  c.Converge();
  // The namespace controller deleted the pods; the DataService is not deleted yet.
  c.pods().clear();
  ReconcileInput in = c.Input();
  in.namespace_terminating = true;
  absl::StatusOr<ReconcileResult> r = Reconcile(in);
  REQUIRE(r.ok());
  CHECK(All<CreateObject>(*r).empty());
  CHECK(All<EmitEvent>(*r).empty());
  CHECK(StatusUpdate(*r).has_value());  // status patches are updates, still allowed
  // Without the mark the same pass would recreate the dispatcher and the workers.
  ReconcileInput normal = c.Input();
  absl::StatusOr<ReconcileResult> would = Reconcile(normal);
  REQUIRE(would.ok());
  CHECK(All<CreateObject>(*would).size() == 3);
  // Deletes keep going, without their events.
  c.Converge();
  c.ds()["spec"]["workers"]["replicas"] = 1;
  ReconcileInput shrink = c.Input();
  shrink.namespace_terminating = true;
  absl::StatusOr<ReconcileResult> down = Reconcile(shrink);
  REQUIRE(down.ok());
  REQUIRE(All<DeleteObject>(*down).size() == 1);
  CHECK(All<DeleteObject>(*down)[0].event.reason.empty());
  CHECK(All<EmitEvent>(*down).empty());
  // And the deletion path (the namespace controller reached the DataService after its pods) releases
  // the finalizer without its Drained Event.
  c.pods().clear();
  c.ds()["metadata"]["deletionTimestamp"] = FormatKubeTime(c.now);
  ReconcileInput deleting = c.Input();
  deleting.namespace_terminating = true;
  absl::StatusOr<ReconcileResult> release = Reconcile(deleting);
  REQUIRE(release.ok());
  CHECK(All<RemoveFinalizer>(*release).size() == 1);
  CHECK(All<EmitEvent>(*release).empty());
}

TEST_CASE("conditions change lastTransitionTime only when their status flips", "[reconciler][status]") {
  FakeCluster c(BaseDataService());
  c.Step();  // at kT0: nothing exists yet
  json st0 = c.ds()["status"];
  CHECK(ConditionOf(st0, "Ready")["status"] == "False");
  CHECK(ConditionOf(st0, "Ready")["lastTransitionTime"] == FormatKubeTime(kT0));
  c.now = kT0 + absl::Seconds(10);
  std::optional<json> observed = StatusUpdate(c.Step());  // pods exist, not ready: counts and reasons change
  REQUIRE(observed.has_value());
  CHECK((*observed)["replicas"] == 2);
  CHECK(ConditionOf(*observed, "DispatcherReady")["reason"] == "DispatcherPodNotReady");
  CHECK(ConditionOf(*observed, "Ready")["lastTransitionTime"] == FormatKubeTime(kT0));  // still False

  // Same state later: no status write at all.
  c.now = kT0 + absl::Seconds(30);
  ReconcileResult same = c.Step();
  CHECK_FALSE(StatusUpdate(same).has_value());

  // Pods become ready: Ready flips, with the new time; ScalingLimited stays False with the old time.
  c.SetAllReady();
  c.now = kT0 + absl::Seconds(60);
  ReconcileResult flipped = c.Step();
  std::optional<json> st1 = StatusUpdate(flipped);
  REQUIRE(st1.has_value());
  CHECK(ConditionOf(*st1, "Ready")["status"] == "True");
  CHECK(ConditionOf(*st1, "Ready")["lastTransitionTime"] == FormatKubeTime(kT0 + absl::Seconds(60)));
  CHECK(ConditionOf(*st1, "DispatcherReady")["reason"] == "DispatcherPodReady");
  CHECK(ConditionOf(*st1, "WorkersReady")["message"] == "2/2 workers ready");
  CHECK(ConditionOf(*st1, "ScalingLimited")["lastTransitionTime"] == FormatKubeTime(kT0));
  CHECK(ConditionOf(*st1, "Degraded")["lastTransitionTime"] == FormatKubeTime(kT0));
  CHECK((*st1)["readyReplicas"] == 2);
  CHECK((*st1)["replicas"] == 2);
  CHECK((*st1)["remoteReplicas"] == 2);
  CHECK((*st1)["localReplicas"] == 0);

  // A spec change bumps observedGeneration (in the status and in every condition).
  c.ds()["metadata"]["generation"] = 5;
  c.now += absl::Seconds(1);
  std::optional<json> st2 = StatusUpdate(c.Step());
  REQUIRE(st2.has_value());
  CHECK((*st2)["observedGeneration"] == 5);
  CHECK(ConditionOf(*st2, "Ready")["observedGeneration"] == 5);
  CHECK(ConditionOf(*st2, "Ready")["lastTransitionTime"] == FormatKubeTime(kT0 + absl::Seconds(60)));
}

TEST_CASE("SetCondition keeps the transition time of an unchanged status", "[status]") {
  std::vector<Condition> conds;
  SetCondition(&conds, Condition{"Ready", "False", "A", "", "", 1}, kT0);
  SetCondition(&conds, Condition{"Ready", "False", "B", "other", "", 2}, kT0 + absl::Hours(1));
  REQUIRE(conds.size() == 1);
  CHECK(conds[0].reason == "B");
  CHECK(conds[0].last_transition_time == FormatKubeTime(kT0));
  SetCondition(&conds, Condition{"Ready", "True", "C", "", "", 2}, kT0 + absl::Hours(2));
  CHECK(conds[0].last_transition_time == FormatKubeTime(kT0 + absl::Hours(2)));
}

TEST_CASE("failed pods are replaced and reported as Degraded", "[reconciler][status]") {
  FakeCluster c(BaseDataService());
  c.Converge();
  c.pods()["ds-worker-remote-0"]["status"] = {{"phase", "Failed"}, {"reason", "OutOfcpu"}};
  ReconcileResult r = c.Step();
  CHECK(Deleted(r) == std::vector<std::string>{"ds-worker-remote-0"});
  CHECK(All<DeleteObject>(r)[0].reason == "the pod ended (phase Failed)");
  CHECK(Created(r) == std::vector<std::string>{"ds-worker-remote-2"});  // remote-0 still exists (terminating)
  // A replacement is not a scale-up: it has its own event.
  CHECK(FindEvent(r, "ScalingUp") == nullptr);
  CHECK(FindCreate(r, "ds-worker-remote-2")->event.reason == "CreatedWorker");
  json degraded = ConditionOf(c.ds()["status"], "Degraded");
  CHECK(degraded["status"] == "True");
  CHECK(degraded["reason"] == "PodFailed");
  CHECK(ConditionOf(c.ds()["status"], "Ready")["reason"] == "WorkersNotReady");
  c.Converge();
  CHECK(ConditionOf(c.ds()["status"], "Degraded")["status"] == "False");
  CHECK(ConditionOf(c.ds()["status"], "Ready")["status"] == "True");
}

TEST_CASE("a changed dispatcher spec recreates the dispatcher pod", "[reconciler][dispatcher]") {
  FakeCluster c(BaseDataService());
  c.Converge();
  c.ds()["spec"]["dispatcher"]["image"] = "sluice-dispatcher:v2";
  ReconcileResult r = c.Step();
  CHECK(Deleted(r) == std::vector<std::string>{"ds-dispatcher"});
  CHECK(All<DeleteObject>(r)[0].event.reason == "DeletedDispatcher");
  CHECK(Created(r).empty());  // the name is taken until the old pod is gone
  // Still terminating: wait.
  c.now += absl::Seconds(5);
  ReconcileResult waiting = c.Step();
  CHECK(All<CreateObject>(waiting).empty());
  CHECK(ConditionOf(c.ds()["status"], "DispatcherReady")["reason"] == "DispatcherRestarting");
  c.FinishTerminations();
  c.now += absl::Seconds(5);
  ReconcileResult recreated = c.Step();
  CHECK(Created(recreated) == std::vector<std::string>{"ds-dispatcher"});
  CHECK(c.pods().at("ds-dispatcher")["spec"]["containers"][0]["image"] == "sluice-dispatcher:v2");
}

TEST_CASE("service port drift is corrected by a merge patch that replaces the port list",
          "[reconciler][dispatcher]") {
  FakeCluster c(BaseDataService());
  c.Converge();
  c.ds()["spec"]["dispatcher"]["port"] = 6000;
  c.ds()["spec"]["dispatcher"]["metricsPort"] = 6001;
  ReconcileResult r = c.Step();
  auto patches = All<PatchObject>(r);
  REQUIRE(patches.size() == 1);
  CHECK(patches[0].kind == "Service");
  CHECK(patches[0].name == "ds-dispatcher");
  // Only the ports, as a whole list (a merge patch replaces lists): no other field of the Service
  // is touched, and no old port survives beside the new one.
  CHECK(patches[0].merge_patch == json::parse(R"js({"spec": {"ports": [
      {"name": "grpc", "port": 6000, "targetPort": 6000, "protocol": "TCP"},
      {"name": "metrics", "port": 6001, "targetPort": 6001, "protocol": "TCP"}]}})js"));
  CHECK(patches[0].event.reason == "UpdatedService");
  CHECK(c.services().at("ds-dispatcher")["spec"]["ports"].size() == 2);
  CHECK(c.ds()["status"]["dispatcherAddress"] == "ds-dispatcher.ml.svc:6000");
  // The dispatcher is recreated with the new port, and the workers, which carry the address, roll.
  CHECK(Deleted(r) == std::vector<std::string>{"ds-dispatcher", "ds-worker-remote-0"});
  // Once patched, the Service matches: nothing more to patch.
  CHECK(All<PatchObject>(c.Step()).empty());
}

TEST_CASE("objects owned by something else are ignored", "[reconciler]") {
  FakeCluster c(BaseDataService());
  ReconcileInput in = c.Input();
  ObservedPod foreign;
  foreign.name = "ds-worker-remote-0";
  foreign.uid = std::string("foreign-uid");
  foreign.controller_uid = "someone-else";
  foreign.labels = {{kLabelRole, "worker"}, {kLabelDataService, "ds"}};
  foreign.phase = "Running";
  in.owned_pods.push_back(foreign);
  absl::StatusOr<ReconcileResult> r = Reconcile(in);
  REQUIRE(r.ok());
  CHECK(Deleted(*r).empty());
  CHECK(Created(*r).size() == 3);
}

TEST_CASE("an invalid spec degrades the DataService and creates nothing", "[reconciler][invalid]") {
  json o = BaseDataService();
  o["spec"]["placement"] = {{"policy", "LocalOnly"}};  // no consumerSelector
  FakeCluster c(o);
  ReconcileResult r = c.Step();
  CHECK(All<CreateObject>(r).empty());
  CHECK(All<DeleteObject>(r).empty());
  json degraded = ConditionOf(c.ds()["status"], "Degraded");
  CHECK(degraded["status"] == "True");
  CHECK(degraded["reason"] == "InvalidSpec");
  CHECK(absl::StrContains(degraded["message"].get<std::string>(), "spec.placement.consumerSelector"));
  CHECK(ConditionOf(c.ds()["status"], "Ready")["status"] == "False");
  const EmitEvent* ev = FindEvent(r, "InvalidSpec");
  REQUIRE(ev != nullptr);
  CHECK(ev->type == "Warning");
  // Reconciling the same object again neither repeats the event nor rewrites the status.
  c.now += absl::Seconds(30);
  ReconcileResult again = c.Step();
  CHECK(again.actions.empty());

  SECTION("fixing the spec clears Degraded and proceeds") {
    c.ds()["spec"]["placement"]["consumerSelector"] = {{"matchLabels", {{"app", "trainer"}}}};
    c.ds()["metadata"]["generation"] = 2;
    ReconcileResult fixed = c.Step();
    CHECK(Created(fixed, "Service").size() == 1);
    CHECK(ConditionOf(c.ds()["status"], "Degraded")["status"] == "False");
  }
}

TEST_CASE("malformed DataService objects", "[reconciler][malformed]") {
  SECTION("not an object or without identity: an error, no actions") {
    ReconcileInput in;
    in.dataservice = json::array();
    CHECK(Reconcile(in).status().code() == absl::StatusCode::kInvalidArgument);
    in.dataservice = BaseDataService();
    in.dataservice["metadata"].erase("uid");
    absl::StatusOr<ReconcileResult> r = Reconcile(in);
    REQUIRE_FALSE(r.ok());
    CHECK(absl::StrContains(r.status().message(), "metadata.uid"));
    in.dataservice = BaseDataService();
    in.dataservice["metadata"]["name"] = 42;
    CHECK(absl::StrContains(Reconcile(in).status().message(), "metadata.name"));
  }
  SECTION("a mistyped field becomes Degraded naming it; existing pods are left alone") {
    FakeCluster c(BaseDataService());
    c.Converge();
    c.ds()["spec"]["workers"]["replicas"] = "three";
    c.ds()["spec"]["workers"]["resources"]["requests"]["cpu"] = "lots";
    ReconcileResult r = c.Step();
    CHECK(All<CreateObject>(r).empty());
    CHECK(All<DeleteObject>(r).empty());
    std::string message = ConditionOf(c.ds()["status"], "Degraded")["message"];
    CHECK(absl::StrContains(message, "spec.workers.replicas: must be an integer, got string"));
    CHECK(absl::StrContains(message, "spec.workers.resources.requests.cpu: invalid quantity \"lots\""));
    CHECK(c.ds()["status"]["replicas"] == 2);  // still counted
  }
  SECTION("semantic errors name the field") {
    json o = BaseDataService();
    o["metadata"]["name"] = std::string(60, 'x');
    o["spec"]["workers"]["extraArgs"] = {"--placement=local"};
    FakeCluster c(o);
    ReconcileResult r = c.Step();
    CHECK(All<CreateObject>(r).empty());
    std::string message = ConditionOf(c.ds()["status"], "Degraded")["message"];
    CHECK(absl::StrContains(message, "metadata.name"));
    CHECK(absl::StrContains(message, "spec.workers.extraArgs[0]"));
  }
  SECTION("a malformed status is replaced") {
    json o = BaseDataService();
    o["status"] = {{"conditions", "broken"}};
    FakeCluster c(o);
    c.Step();
    CHECK(c.ds()["status"]["conditions"].is_array());
  }
}

TEST_CASE("deletion drains workers through the dispatcher, then releases the finalizer", "[reconciler][finalizer]") {
  FakeCluster c(BaseDataService());
  c.Converge();
  c.ds()["metadata"]["deletionTimestamp"] = FormatKubeTime(c.now);
  absl::Time deleted_at = c.now;

  ReconcileResult r = c.Step();
  auto drains = All<DrainWorkers>(r);
  REQUIRE(drains.size() == 1);
  CHECK(drains[0].dispatcher_address == "ds-dispatcher.ml.svc:5050");
  CHECK(drains[0].workers == std::vector<std::string>{"ds-worker-remote-0", "ds-worker-remote-1"});
  // The operator dials the dispatcher pod itself (not the Service name, which it may not resolve).
  const std::string dispatcher_ip = c.pods().at("ds-dispatcher")["status"]["podIP"];
  CHECK(drains[0].dispatcher_endpoint == dispatcher_ip + ":5050");
  std::vector<std::string> addresses;
  for (const char* w : {"ds-worker-remote-0", "ds-worker-remote-1"}) {
    addresses.push_back(c.pods().at(w)["status"]["podIP"].get<std::string>() + ":5051");
  }
  CHECK(drains[0].worker_addresses == addresses);
  CHECK(addresses[0] != addresses[1]);
  CHECK(FindEvent(r, "DrainStarted") != nullptr);
  CHECK(All<RemoveFinalizer>(r).empty());
  CHECK(All<CreateObject>(r).empty());
  CHECK(All<UpdateStatus>(r).empty());
  REQUIRE(r.requeue_after.has_value());
  CHECK(*r.requeue_after == absl::Seconds(5));

  ReconcileInput in = c.Input();
  SECTION("while the drain runs: poll, no repeated start event") {
    in.drain = DrainProgress{false, "1 of 2 drained"};
    absl::StatusOr<ReconcileResult> again = Reconcile(in);
    REQUIRE(again.ok());
    CHECK(All<DrainWorkers>(*again).size() == 1);
    CHECK(FindEvent(*again, "DrainStarted") == nullptr);
  }
  SECTION("drained: the finalizer goes") {
    in.drain = DrainProgress{true, "all splits handed back"};
    absl::StatusOr<ReconcileResult> done = Reconcile(in);
    REQUIRE(done.ok());
    REQUIRE(All<RemoveFinalizer>(*done).size() == 1);
    CHECK(All<RemoveFinalizer>(*done)[0].finalizer == "sluice.dev/drain");
    CHECK(FindEvent(*done, "Drained") != nullptr);
  }
  SECTION("drain timeout: released with a warning") {
    in.drain = DrainProgress{false, ""};
    in.now = deleted_at + absl::Minutes(10);
    absl::StatusOr<ReconcileResult> late = Reconcile(in);
    REQUIRE(late.ok());
    CHECK(All<RemoveFinalizer>(*late).size() == 1);
    CHECK(FindEvent(*late, "DrainTimedOut")->type == "Warning");
  }
  SECTION("the requeue never overshoots the drain deadline") {
    in.drain = DrainProgress{false, ""};
    in.now = deleted_at + absl::Minutes(10) - absl::Seconds(2);
    CHECK(*Reconcile(in)->requeue_after == absl::Seconds(2));
  }
  SECTION("no dispatcher to drain through: released with a warning") {
    c.SetReady("ds-dispatcher", false);
    absl::StatusOr<ReconcileResult> skipped = Reconcile(c.Input());
    REQUIRE(skipped.ok());
    CHECK(All<RemoveFinalizer>(*skipped).size() == 1);
    CHECK(FindEvent(*skipped, "DrainSkipped") != nullptr);
  }
  SECTION("no workers: released at once") {
    in.owned_pods.erase(std::remove_if(in.owned_pods.begin(), in.owned_pods.end(),
                                       [](const ObservedPod& p) { return p.name != "ds-dispatcher"; }),
                        in.owned_pods.end());
    absl::StatusOr<ReconcileResult> empty = Reconcile(in);
    REQUIRE(empty.ok());
    CHECK(All<RemoveFinalizer>(*empty).size() == 1);
    CHECK(All<DrainWorkers>(*empty).empty());
  }
  SECTION("foreground deletion: garbage collection takes the pods now, so the drain is skipped and said why") {
    // The API server adds foregroundDeletion; the collector deletes the pods in parallel. Even while
    // the dispatcher still looks ready, a drain through it cannot hold them.
    in.dataservice["metadata"]["finalizers"] = json::array({"sluice.dev/drain", "foregroundDeletion"});
    absl::StatusOr<ReconcileResult> fg = Reconcile(in);
    REQUIRE(fg.ok());
    CHECK(All<DrainWorkers>(*fg).empty());
    CHECK(All<RemoveFinalizer>(*fg).size() == 1);
    const EmitEvent* skipped = FindEvent(*fg, "DrainSkipped");
    REQUIRE(skipped != nullptr);
    CHECK(skipped->type == "Warning");
    CHECK(absl::StrContains(skipped->note, "propagationPolicy Foreground"));
    CHECK(absl::StrContains(skipped->note, "the dispatcher and the 2 workers"));
    CHECK(absl::StrContains(skipped->note, "Delete with propagationPolicy Background"));
    CHECK(skipped->note.size() <= kMaxEventNoteBytes);
    // Already being deleted by the collector when the operator looks: still counted.
    for (ObservedPod& p : in.owned_pods) p.terminating = true;
    absl::StatusOr<ReconcileResult> later = Reconcile(in);
    REQUIRE(later.ok());
    CHECK(absl::StrContains(FindEvent(*later, "DrainSkipped")->note, "the dispatcher and the 2 workers"));
  }
  SECTION("orphan deletion: the pods keep running unowned and are not drained") {
    in.dataservice["metadata"]["finalizers"] = json::array({"sluice.dev/drain", "orphan"});
    in.owned_pods.clear();  // the collector removed their ownerReferences
    absl::StatusOr<ReconcileResult> orphaned = Reconcile(in);
    REQUIRE(orphaned.ok());
    CHECK(All<RemoveFinalizer>(*orphaned).size() == 1);
    CHECK(absl::StrContains(FindEvent(*orphaned, "Drained")->note, "propagationPolicy Orphan"));
  }
  SECTION("without our finalizer there is nothing to do") {
    in.dataservice["metadata"]["finalizers"] = json::array({"other.example/keep"});
    absl::StatusOr<ReconcileResult> none = Reconcile(in);
    REQUIRE(none.ok());
    CHECK(none->actions.empty());
  }
}

TEST_CASE("status.autoOrder shows what the current dispatcher pod's AutoOrder did", "[reconciler][autoorder]") {
  json ds = BaseDataService();
  ds["spec"]["autoOrder"] = {{"enabled", true}, {"mode", "relaxed"}};
  FakeCluster c(ds);
  c.Converge();
  // Ready dispatcher, nothing read yet: ask it (through its pod's address).
  ReconcileResult first = c.Step();
  auto reads = All<ReadAutoOrder>(first);
  REQUIRE(reads.size() == 1);
  const std::string uid = c.pods().at("ds-dispatcher")["metadata"]["uid"];
  CHECK(reads[0].dispatcher_uid == uid);
  CHECK(absl::StartsWith(reads[0].dispatcher_endpoint, "10.0.0."));
  CHECK(reads[0].dispatcher_address == "ds-dispatcher.ml.svc:5050");
  CHECK(!c.ds()["status"].contains("autoOrder"));

  // The controller's answer: written to status, and not asked again.
  AutoOrderStatus answer{"relaxed", "applied", "decode_jpeg(image) -> cast(image->float32) -> random_flip(image)",
                         "decode_jpeg(image) -> random_flip(image) -> cast(image->float32)", 2.5, 2.25, ""};
  ReconcileInput in = c.Input();
  in.auto_order = ObservedAutoOrder{uid, answer};
  absl::StatusOr<ReconcileResult> second = Reconcile(in);
  REQUIRE(second.ok());
  CHECK(All<ReadAutoOrder>(*second).empty());
  std::optional<json> status = StatusUpdate(*second);
  REQUIRE(status.has_value());
  CHECK((*status)["autoOrder"] == json::parse(R"js({"mode": "relaxed", "outcome": "applied",
      "originalOrder": "decode_jpeg(image) -> cast(image->float32) -> random_flip(image)",
      "chosenOrder": "decode_jpeg(image) -> random_flip(image) -> cast(image->float32)",
      "predictedSpeedup": 2.5, "measuredSpeedup": 2.25, "message": ""})js"));
  CHECK(!All<UpdateStatus>(*second)[0].significant);
  CHECK(ParseDataServiceStatus({{"status", *status}}).auto_order == answer);

  // An answer from a dispatcher pod that is gone is not shown; the new pod is asked.
  c.ds()["status"] = *status;
  in = c.Input();
  in.auto_order = ObservedAutoOrder{"an-older-dispatcher-uid", answer};
  absl::StatusOr<ReconcileResult> replaced = Reconcile(in);
  REQUIRE(replaced.ok());
  CHECK(All<ReadAutoOrder>(*replaced).size() == 1);

  // Turned off: the status says so; nothing is asked.
  c.ds()["spec"]["autoOrder"]["enabled"] = false;
  in = c.Input();
  absl::StatusOr<ReconcileResult> off = Reconcile(in);
  REQUIRE(off.ok());
  CHECK(All<ReadAutoOrder>(*off).empty());
  REQUIRE(StatusUpdate(*off).has_value());
  CHECK((*StatusUpdate(*off))["autoOrder"]["mode"] == "off");
  CHECK((*StatusUpdate(*off))["autoOrder"]["chosenOrder"] == "");  // every key written: merge patches keep left-out ones
}

TEST_CASE("without spec.autoOrder nothing is read and status has no autoOrder", "[reconciler][autoorder]") {
  FakeCluster c(BaseDataService());
  c.Converge();
  ReconcileResult r = c.Step();
  CHECK(All<ReadAutoOrder>(r).empty());
  CHECK(!c.ds()["status"].contains("autoOrder"));
}

TEST_CASE("observed objects parse from API server JSON", "[observed]") {
  json pod = json::parse(R"js({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "ds-worker-local-0", "uid": "p1", "creationTimestamp": "2026-11-22T06:46:20Z",
                 "deletionTimestamp": "2026-11-22T06:46:50Z",
                 "labels": {"sluice.dev/role": "worker"}, "annotations": {"sluice.dev/node": "gpu-1"},
                 "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "not-controller"},
                                     {"apiVersion": "sluice.dev/v1alpha1", "kind": "DataService", "name": "ds",
                                      "uid": "ds-uid", "controller": true, "blockOwnerDeletion": true}]},
    "spec": {"nodeName": "gpu-1",
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
               {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}}},
             "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "3"}}}],
             "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}},
                            {"name": "b", "resources": {"limits": {"cpu": 1}}}],
             "overhead": {"cpu": "100m"}},
    "status": {"phase": "Running", "podIP": "10.1.2.3",
               "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
  })js");
  absl::StatusOr<ObservedPod> p = ObservedPodFromJson(pod);
  REQUIRE(p.ok());
  CHECK(p->controller_uid == "ds-uid");
  CHECK(p->node_name == "gpu-1");
  CHECK(p->affinity_node == "gpu-1");
  CHECK(p->ready);
  CHECK(p->terminating);
  CHECK(p->pod_ip == "10.1.2.3");
  CHECK(p->cpu_request_millis == 3100);  // max(0.5 + 1, 3) + 0.1
  CHECK(SumCpuRequestsByNode({*p}) == std::map<std::string, int64_t>{{"gpu-1", 3100}});

  json node = json::parse(R"js({"apiVersion": "v1", "kind": "Node",
    "metadata": {"labels": {"nvidia.com/gpu.present": "true"}, "name": "gpu-node-1"},
    "spec": {"taints": [{"effect": "NoSchedule", "key": "node.kubernetes.io/not-ready"}]},
    "status": {"allocatable": {"cpu": "31500m", "memory": "250Gi"}}})js");
  absl::StatusOr<ObservedNode> n = ObservedNodeFromJson(node);
  REQUIRE(n.ok());
  CHECK(n->allocatable_cpu_millis == 31500);
  REQUIRE(n->taints.size() == 1);
  CHECK(n->taints[0].key == "node.kubernetes.io/not-ready");

  json svc = json::parse(R"js({"metadata": {"name": "ds-dispatcher"},
    "spec": {"ports": [{"name": "grpc", "port": 5050, "targetPort": 5050}, {"port": 80, "targetPort": "http"}]}})js");
  absl::StatusOr<ObservedService> s = ObservedServiceFromJson(svc);
  REQUIRE(s.ok());
  CHECK(s->ports == std::vector<ServicePort>{{"grpc", 5050, 5050}, {"", 80, 0}});

  SECTION("malformed objects give errors naming the field") {
    json bad = pod;
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "two";
    CHECK(absl::StrContains(ObservedPodFromJson(bad).status().message(),
                            "spec.containers[0].resources.requests.cpu: invalid quantity \"two\""));
    bad = pod;
    bad["metadata"].erase("name");
    CHECK(absl::StrContains(ObservedPodFromJson(bad).status().message(), "metadata.name: required value"));
    bad = node;
    bad["status"]["allocatable"]["cpu"] = true;
    CHECK(absl::StrContains(ObservedNodeFromJson(bad).status().message(), "status.allocatable.cpu"));
    bad = node;
    bad["spec"]["taints"][0].erase("effect");
    CHECK(absl::StrContains(ObservedNodeFromJson(bad).status().message(), "spec.taints[0].effect: required value"));
    CHECK_FALSE(ObservedServiceFromJson(json::parse(R"js({"metadata": {"name": "s"}, "spec": {"ports": [{}]}})js")).ok());
    CHECK_FALSE(ObservedClaimFromJson(json("claim")).ok());
    CHECK_FALSE(ObservedPodFromJson(json(nullptr)).ok());
  }
}

TEST_CASE("selectors and tolerations follow Kubernetes semantics", "[observed]") {
  LabelSelector sel;
  sel.match_labels = {{"app", "trainer"}};
  sel.match_expressions = {{"tier", "In", {"a", "b"}}, {"canary", "DoesNotExist", {}}, {"zone", "NotIn", {"x"}},
                           {"gpu", "Exists", {}}};
  CHECK(SelectorMatches(sel, {{"app", "trainer"}, {"tier", "a"}, {"gpu", ""}}));
  CHECK_FALSE(SelectorMatches(sel, {{"app", "trainer"}, {"tier", "c"}, {"gpu", ""}}));
  CHECK_FALSE(SelectorMatches(sel, {{"app", "trainer"}, {"tier", "a"}, {"gpu", ""}, {"canary", "1"}}));
  CHECK_FALSE(SelectorMatches(sel, {{"app", "trainer"}, {"tier", "a"}, {"gpu", ""}, {"zone", "x"}}));
  CHECK_FALSE(SelectorMatches(sel, {{"app", "trainer"}, {"tier", "a"}}));
  CHECK(SelectorMatches(LabelSelector{}, {}));

  Taint gpu{"nvidia.com/gpu", "present", "NoSchedule"};
  CHECK(Tolerates({"nvidia.com/gpu", "Exists", "", "", std::nullopt}, gpu));
  CHECK(Tolerates({"nvidia.com/gpu", "Equal", "present", "NoSchedule", std::nullopt}, gpu));
  CHECK(Tolerates({"nvidia.com/gpu", "", "present", "", std::nullopt}, gpu));
  CHECK_FALSE(Tolerates({"nvidia.com/gpu", "Equal", "absent", "", std::nullopt}, gpu));
  CHECK_FALSE(Tolerates({"nvidia.com/gpu", "Exists", "", "NoExecute", std::nullopt}, gpu));
  CHECK(Tolerates({"", "Exists", "", "", std::nullopt}, gpu));
  CHECK(FirstUntoleratedTaint({}, {{"a", "", "PreferNoSchedule"}}) == std::nullopt);
  CHECK(FirstUntoleratedTaint({}, {gpu}).has_value());
}

}  // namespace
}  // namespace sluice::op

namespace sluice::op {
namespace {

TEST_CASE("status changes: conditions, generation and identity are significant, counts are not", "[reconciler][status]") {
  DataServiceStatus before;
  before.observed_generation = 2;
  before.selector = "s";
  before.dispatcher_address = "a";
  before.replicas = 3;
  before.conditions = {Condition{"Ready", "False", "WorkersNotReady", "1/3 workers ready", "t", 2}};
  DataServiceStatus after = before;
  after.ready_replicas = 2;
  after.conditions[0].message = "2/3 workers ready";
  CHECK_FALSE(IsSignificantStatusChange(before, after));
  after.conditions[0].reason = "Ready";
  CHECK(IsSignificantStatusChange(before, after));
  after = before;
  after.conditions[0].status = "True";
  CHECK(IsSignificantStatusChange(before, after));
  after = before;
  after.observed_generation = 3;
  CHECK(IsSignificantStatusChange(before, after));
  after = before;
  after.conditions.push_back(Condition{"Degraded", "False", "AsExpected", "", "t", 2});
  CHECK(IsSignificantStatusChange(before, after));
  after = before;
  after.selector = "other";
  CHECK(IsSignificantStatusChange(before, after));

  // What the reconciler emits: a converged service whose ready count drops is an insignificant change
  // only while the conditions keep their reasons.
  FakeCluster c(BaseDataService());
  c.Converge();
  c.SetReady("ds-worker-remote-0", false);
  ReconcileResult r = c.Step();
  REQUIRE(All<UpdateStatus>(r).size() == 1);
  CHECK(All<UpdateStatus>(r)[0].significant);  // Ready True -> False
}

}  // namespace
}  // namespace sluice::op
