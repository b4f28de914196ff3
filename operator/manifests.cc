#include "operator/manifests.h"

#include <charconv>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::op {
namespace {

using json = nlohmann::json;

json Labels(const DataService& ds, absl::string_view role) {
  return json{{kLabelName, "sluice"},
              {kLabelInstance, ds.metadata.name},
              {kLabelManagedBy, kManagedByValue},
              {kLabelDataService, ds.metadata.name},
              {kLabelRole, std::string(role)}};
}

json Metadata(const DataService& ds, const std::string& name, json labels) {
  return json{{"name", name},
              {"namespace", ds.metadata.namespace_name},
              {"labels", std::move(labels)},
              {"ownerReferences", json::array({OwnerReference(ds)})}};
}

json ResourcesJson(const ResourceRequirements& r) {
  json out = json::object();
  if (!r.requests.empty()) out["requests"] = r.requests;
  if (!r.limits.empty()) out["limits"] = r.limits;
  return out;
}

json TolerationsJson(const std::vector<Toleration>& tolerations) {
  json out = json::array();
  for (const Toleration& t : tolerations) {
    json jt = json::object();
    if (!t.key.empty()) jt["key"] = t.key;
    if (!t.op.empty()) jt["operator"] = t.op;
    if (!t.value.empty()) jt["value"] = t.value;
    if (!t.effect.empty()) jt["effect"] = t.effect;
    if (t.toleration_seconds.has_value()) jt["tolerationSeconds"] = *t.toleration_seconds;
    out.push_back(std::move(jt));
  }
  return out;
}

json FieldEnv(const std::string& name, const std::string& field_path) {
  return json{{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", field_path}}}}}};
}

json ValueEnv(const std::string& name, const std::string& value) { return json{{"name", name}, {"value", value}}; }

json ReadinessProbe(int64_t metrics_port) {
  return json{{"httpGet", {{"path", "/readyz"}, {"port", metrics_port}}},
              {"periodSeconds", 5},
              {"failureThreshold", 3}};
}

json WorkerPodSpec(const DataService& ds, Pool pool, const std::string& node) {
  const WorkersSpec& w = ds.spec.workers;
  const PlacementSpec& p = ds.spec.placement;
  std::string address = DispatcherAddress(ds);
  json args = json::array({absl::StrCat("--dispatcher_address=", address), absl::StrCat("--port=", w.port),
                           absl::StrCat("--metrics_port=", w.metrics_port), absl::StrCat("--placement=", PoolName(pool)),
                           absl::StrCat("--worker_address=$(POD_IP):", w.port),
                           // The node is the worker's host for locality: clients on the same node
                           // (trainers with SLUICE_CLIENT_HOST from spec.nodeName) read it as local.
                           "--host=$(NODE_NAME)", absl::StrCat("--dataservice=", ds.metadata.name)});
  for (const std::string& a : w.extra_args) args.push_back(a);
  json container = {
      {"name", "worker"},
      {"image", w.image},
      {"command", json::array({"sluice-worker"})},
      {"args", std::move(args)},
      {"env", json::array({FieldEnv("POD_NAME", "metadata.name"), FieldEnv("POD_IP", "status.podIP"),
                           FieldEnv("NODE_NAME", "spec.nodeName"), ValueEnv("SLUICE_DATASERVICE", ds.metadata.name),
                           ValueEnv("SLUICE_DISPATCHER_ADDRESS", address),
                           ValueEnv("SLUICE_PLACEMENT", PoolName(pool))})},
      {"ports", json::array({{{"name", "grpc"}, {"containerPort", w.port}, {"protocol", "TCP"}},
                             {{"name", "metrics"}, {"containerPort", w.metrics_port}, {"protocol", "TCP"}}})},
      {"readinessProbe", ReadinessProbe(w.metrics_port)},
      {"resources", ResourcesJson(w.resources)},
  };
  if (!w.image_pull_policy.empty()) container["imagePullPolicy"] = w.image_pull_policy;
  json spec = {
      {"restartPolicy", "Always"},
      {"terminationGracePeriodSeconds", w.termination_grace_period_seconds},
      {"containers", json::array({std::move(container)})},
  };
  if (pool == Pool::kLocal) {
    // Pinned through the scheduler (required node affinity on the node's name, as DaemonSets do)
    // rather than spec.nodeName, so that resource fit, taints and preemption are still checked.
    spec["affinity"] = {{"nodeAffinity",
                         {{"requiredDuringSchedulingIgnoredDuringExecution",
                           {{"nodeSelectorTerms",
                             json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                                         {"operator", "In"},
                                                                         {"values", json::array({node})}}})}}})}}}}}};
    if (!p.local_tolerations.empty()) spec["tolerations"] = TolerationsJson(p.local_tolerations);
  } else {
    if (!p.remote_node_selector.empty()) spec["nodeSelector"] = p.remote_node_selector;
    if (!p.tolerations.empty()) spec["tolerations"] = TolerationsJson(p.tolerations);
  }
  return spec;
}

json DispatcherPodSpec(const DataService& ds) {
  const DispatcherSpec& d = ds.spec.dispatcher;
  json args = json::array({absl::StrCat("--port=", d.port), absl::StrCat("--metrics_port=", d.metrics_port),
                           absl::StrCat("--dataservice=", ds.metadata.name)});
  if (d.journal.has_value()) args.push_back(absl::StrCat("--journal_dir=", kJournalMountPath));
  for (const std::string& a : d.extra_args) args.push_back(a);
  json env = json::array({FieldEnv("POD_NAME", "metadata.name"), FieldEnv("POD_IP", "status.podIP"),
                          ValueEnv("SLUICE_DATASERVICE", ds.metadata.name),
                          ValueEnv("SLUICE_AUTO_ORDER", ds.spec.auto_order.enabled ? ds.spec.auto_order.mode : "off"),
                          ValueEnv("SLUICE_SHARING", ds.spec.sharing.enabled ? "true" : "false")});
  json mounts = json::array();
  json volumes = json::array();
  if (ds.spec.pipeline.config_map_ref.has_value()) {
    const ConfigMapKeyRef& ref = *ds.spec.pipeline.config_map_ref;
    env.push_back(ValueEnv("SLUICE_PIPELINE_FILE", absl::StrCat(kPipelineMountDir, "/", ref.key)));
    mounts.push_back({{"name", "pipeline"}, {"mountPath", kPipelineMountDir}, {"readOnly", true}});
    volumes.push_back({{"name", "pipeline"},
                       {"configMap", {{"name", ref.name}, {"items", json::array({{{"key", ref.key}, {"path", ref.key}}})}}}});
  } else if (ds.spec.pipeline.inline_text.has_value()) {
    env.push_back(ValueEnv("SLUICE_PIPELINE", *ds.spec.pipeline.inline_text));
  }
  if (d.journal.has_value()) {
    mounts.push_back({{"name", "journal"}, {"mountPath", kJournalMountPath}});
    volumes.push_back({{"name", "journal"}, {"persistentVolumeClaim", {{"claimName", JournalClaimName(ds)}}}});
  }
  json container = {
      {"name", "dispatcher"},
      {"image", d.image},
      {"command", json::array({"sluice-dispatcher"})},
      {"args", std::move(args)},
      {"env", std::move(env)},
      {"ports", json::array({{{"name", "grpc"}, {"containerPort", d.port}, {"protocol", "TCP"}},
                             {{"name", "metrics"}, {"containerPort", d.metrics_port}, {"protocol", "TCP"}}})},
      {"readinessProbe", ReadinessProbe(d.metrics_port)},
      {"resources", ResourcesJson(d.resources)},
  };
  if (!d.image_pull_policy.empty()) container["imagePullPolicy"] = d.image_pull_policy;
  if (!mounts.empty()) container["volumeMounts"] = std::move(mounts);
  json spec = {
      {"restartPolicy", "Always"},
      {"terminationGracePeriodSeconds", d.termination_grace_period_seconds},
      {"containers", json::array({std::move(container)})},
  };
  if (!volumes.empty()) spec["volumes"] = std::move(volumes);
  if (!d.node_selector.empty()) spec["nodeSelector"] = d.node_selector;
  if (!d.tolerations.empty()) spec["tolerations"] = TolerationsJson(d.tolerations);
  return spec;
}

}  // namespace

std::string PoolName(Pool pool) { return pool == Pool::kLocal ? "local" : "remote"; }

std::string DispatcherPodName(const DataService& ds) { return absl::StrCat(ds.metadata.name, "-dispatcher"); }
std::string DispatcherServiceName(const DataService& ds) { return absl::StrCat(ds.metadata.name, "-dispatcher"); }
std::string JournalClaimName(const DataService& ds) { return absl::StrCat(ds.metadata.name, "-dispatcher-journal"); }

std::string WorkerPodName(const DataService& ds, Pool pool, int64_t ordinal) {
  return absl::StrCat(ds.metadata.name, "-worker-", PoolName(pool), "-", ordinal);
}

std::optional<std::pair<Pool, int64_t>> ParseWorkerPodName(const DataService& ds, const std::string& name) {
  for (Pool pool : {Pool::kLocal, Pool::kRemote}) {
    std::string prefix = absl::StrCat(ds.metadata.name, "-worker-", PoolName(pool), "-");
    if (!absl::StartsWith(name, prefix)) continue;
    std::string digits = name.substr(prefix.size());
    if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
    int64_t ordinal = 0;
    if (!absl::SimpleAtoi(digits, &ordinal) || ordinal < 0) return std::nullopt;
    if (absl::StrCat(ordinal) != digits) return std::nullopt;
    return std::make_pair(pool, ordinal);
  }
  return std::nullopt;
}

std::string DispatcherAddress(const DataService& ds) {
  return absl::StrCat(DispatcherServiceName(ds), ".", ds.metadata.namespace_name, ".svc:", ds.spec.dispatcher.port);
}

std::string WorkerSelector(const DataService& ds) {
  return absl::StrCat(kLabelDataService, "=", ds.metadata.name, ",", kLabelRole, "=worker");
}

json OwnerReference(const DataService& ds) {
  return json{{"apiVersion", kApiVersion}, {"kind", kKind},           {"name", ds.metadata.name},
              {"uid", ds.metadata.uid},    {"controller", true},      {"blockOwnerDeletion", true}};
}

std::string StableHash(const std::string& data) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return absl::StrFormat("%016x", h);
}

std::string WorkerTemplateHash(const DataService& ds, Pool pool) {
  return StableHash(WorkerPodSpec(ds, pool, "").dump()).substr(0, 10);
}

std::string DispatcherTemplateHash(const DataService& ds) {
  return StableHash(DispatcherPodSpec(ds).dump()).substr(0, 10);
}

json BuildWorkerPod(const DataService& ds, Pool pool, int64_t ordinal, const std::string& node) {
  json labels = Labels(ds, "worker");
  labels[kLabelPlacement] = PoolName(pool);
  labels[kLabelTemplateHash] = WorkerTemplateHash(ds, pool);
  json metadata = Metadata(ds, WorkerPodName(ds, pool, ordinal), std::move(labels));
  if (pool == Pool::kLocal) metadata["annotations"] = {{kAnnotationNode, node}};
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", std::move(metadata)},
              {"spec", WorkerPodSpec(ds, pool, pool == Pool::kLocal ? node : "")}};
}

json BuildDispatcherPod(const DataService& ds) {
  json labels = Labels(ds, "dispatcher");
  labels[kLabelTemplateHash] = DispatcherTemplateHash(ds);
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", Metadata(ds, DispatcherPodName(ds), std::move(labels))},
              {"spec", DispatcherPodSpec(ds)}};
}

json BuildDispatcherService(const DataService& ds) {
  const DispatcherSpec& d = ds.spec.dispatcher;
  return json{
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", Metadata(ds, DispatcherServiceName(ds), Labels(ds, "dispatcher"))},
      {"spec",
       {{"type", "ClusterIP"},
        {"selector", {{kLabelDataService, ds.metadata.name}, {kLabelRole, "dispatcher"}}},
        {"ports", json::array({{{"name", "grpc"}, {"port", d.port}, {"targetPort", d.port}, {"protocol", "TCP"}},
                               {{"name", "metrics"},
                                {"port", d.metrics_port},
                                {"targetPort", d.metrics_port},
                                {"protocol", "TCP"}}})}}},
  };
}

json BuildJournalClaim(const DataService& ds) {
  const JournalSpec& j = ds.spec.dispatcher.journal.value_or(JournalSpec{});
  json spec = {{"accessModes", json::array({"ReadWriteOnce"})}, {"resources", {{"requests", {{"storage", j.size}}}}}};
  if (j.storage_class_name.has_value()) spec["storageClassName"] = *j.storage_class_name;
  return json{{"apiVersion", "v1"},
              {"kind", "PersistentVolumeClaim"},
              {"metadata", Metadata(ds, JournalClaimName(ds), Labels(ds, "dispatcher"))},
              {"spec", std::move(spec)}};
}

}  // namespace sluice::op
