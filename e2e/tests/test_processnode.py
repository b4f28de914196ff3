"""The process node against the test API server: real processes, probes, restarts, deletion, scheduling."""

import json
import os
import signal
import sys

import pytest

from e2e import harness
from e2e.client import ApiException

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PYTHON = sys.executable


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with harness.Cluster(str(tmp_path_factory.mktemp("cluster")), kubeconfig="") as c:
        c.node = c.add_node("proc-1", cpu="4", memory="8Gi",
                            image_map={"e2e/sleeper:1": "/bin/sleep", "e2e/report:1": os.path.join(DATA, "report.py")},
                            labels={"pool": "local"})
        yield c


_names = [0]


@pytest.fixture
def ns(cluster):
    _names[0] += 1
    name = "pn%d" % _names[0]
    cluster.create_namespace(name)
    return name


def make_pod(name, command=None, args=None, image="e2e/sleeper:1", node="proc-1", restart="Always", env=None,
             probe=None, labels=None, volumes=None, mounts=None, grace=None):
    container = {"name": "main", "image": image}
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if env:
        container["env"] = env
    if probe:
        container["readinessProbe"] = probe
    if mounts:
        container["volumeMounts"] = mounts
    spec = {"containers": [container], "restartPolicy": restart}
    if node:
        spec["nodeName"] = node
    if volumes:
        spec["volumes"] = volumes
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
            "spec": spec}


def pod_status(cluster, ns, name):
    return cluster.get("v1", "Pod", name, ns).get("status") or {}


def pid_of(status):
    return int(status["containerStatuses"][0]["containerID"].split("://")[1])


def process_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_runs_a_process_and_confirms_deletion(cluster, ns):
    cluster.apply(make_pod("sleeper", args=["300"], grace=5), ns)
    running = cluster.wait_for_pods(ns, "app=sleeper", 1)[0]
    status = running["status"]
    assert status["podIP"].rsplit(".", 1)[0] == cluster.node.ip_base.rsplit(".", 1)[0]
    assert status["hostIP"] == "127.0.0.1"
    assert status["containerStatuses"][0]["ready"] is True
    pid = pid_of(status)
    with open("/proc/%d/cmdline" % pid) as fh:
        assert fh.read().split("\0")[:2] == ["/bin/sleep", "300"]
    cluster.delete("v1", "Pod", "sleeper", ns)
    cluster.wait_for_deletion("v1", "Pod", "sleeper", ns)
    cluster.wait_for(lambda: not process_alive(pid), 10, "the process to stop")


def test_readiness_probe_env_and_graceful_stop(cluster, ns):
    ready_file = os.path.join(cluster.workdir, ns + "-ready")
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "GREETING", "value": "hello $(POD_NAME)"}]
    probe = {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1}
    body = make_pod("web", command=[PYTHON, os.path.join(DATA, "probe_server.py")],
                    args=["--host=$(POD_IP)", "--port=8080", "--ready-file=" + ready_file, "$$(literal)"],
                    env=env, probe=probe, grace=10)
    cluster.apply(body, ns)

    def running_not_ready():
        status = pod_status(cluster, ns, "web")
        return status.get("phase") == "Running" and "probe_server" in cluster.node.pod_log(ns, "web", "main") \
            and status

    status = cluster.wait_for(running_not_ready, 20, "the web pod to run")
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "False"
    with open(ready_file, "w"):
        pass
    pod = cluster.wait_for_pods(ns, "app=web", 1, timeout=20)[0]
    log = cluster.node.pod_log(ns, "web", "main")
    ip = pod["status"]["podIP"]
    assert 'argv=["--host=%s", "--port=8080", "--ready-file=%s", "$(literal)"]' % (ip, ready_file) in log
    assert json.dumps({"POD_NAME": "web", "POD_IP": ip, "NODE": "proc-1", "GREETING": "hello web",
                       "FROM_CM": None}) in log
    cluster.delete("v1", "Pod", "web", ns)
    cluster.wait_for_deletion("v1", "Pod", "web", ns)
    assert cluster.node.pod_log(ns, "web", "main").rstrip().endswith("terminated"), "SIGTERM came first"


def test_restart_policies(cluster, ns):
    cluster.apply(make_pod("fails", command=["/bin/sh", "-c", "exit 3"], restart="Never"), ns)
    cluster.apply(make_pod("succeeds", command=["/bin/sh", "-c", "exit 0"], restart="OnFailure"), ns)
    cluster.apply(make_pod("crashes", command=["/bin/sh", "-c", "exit 1"], restart="Always"), ns)
    failed = cluster.wait_for(lambda: pod_status(cluster, ns, "fails").get("phase") == "Failed"
                              and pod_status(cluster, ns, "fails"), 20, "fails to fail")
    assert failed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    cluster.wait_for(lambda: pod_status(cluster, ns, "succeeds").get("phase") == "Succeeded", 20, "success")
    crashed = cluster.wait_for(
        lambda: (pod_status(cluster, ns, "crashes").get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1
        and pod_status(cluster, ns, "crashes"), 20, "a restart")
    assert crashed["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1
    for name in ("fails", "succeeds", "crashes"):
        cluster.delete("v1", "Pod", name, ns)
    for name in ("fails", "succeeds", "crashes"):
        cluster.wait_for_deletion("v1", "Pod", name, ns)


def test_unmapped_image_waits(cluster, ns):
    cluster.apply(make_pod("ghost", image="e2e/unknown:1"), ns)
    status = cluster.wait_for(lambda: (pod_status(cluster, ns, "ghost").get("containerStatuses") or [None])[0],
                              20, "a container status")
    assert status["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    cluster.delete("v1", "Pod", "ghost", ns)
    cluster.wait_for_deletion("v1", "Pod", "ghost", ns)


def test_volumes_configmaps_and_service_names(cluster, ns):
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                   "data": {"pipeline.yaml": "ops: []\n", "mode": "fast"}}, ns)
    server = make_pod("dispatcher", labels={"app": "dispatcher"}, args=["300"])
    server["spec"]["containers"][0]["ports"] = [{"containerPort": 5050, "name": "grpc"}]
    cluster.apply(server, ns)
    cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "disp"},
                   "spec": {"selector": {"app": "dispatcher"}, "ports": [{"port": 80, "targetPort": "grpc"}]}}, ns)
    dispatcher_ip = cluster.wait_for_pods(ns, "app=dispatcher", 1)[0]["status"]["podIP"]
    worker = make_pod("worker", image="e2e/report:1",
                      args=["/out/report.json", "/config/pipeline.yaml", "--dispatcher=disp.%s.svc:80" % ns],
                      env=[{"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}],
                      volumes=[{"name": "out", "emptyDir": {}}, {"name": "config", "configMap": {"name": "cfg"}}],
                      mounts=[{"name": "out", "mountPath": "/out"}, {"name": "config", "mountPath": "/config"}])
    cluster.apply(worker, ns)
    uid = cluster.wait_for_pods(ns, "app=worker", 1)[0]["metadata"]["uid"]
    report_path = os.path.join(cluster.node.work_dir, "pods", "%s_worker_%s" % (ns, uid[:8]), "volumes", "out",
                               "report.json")
    cluster.wait_for(lambda: os.path.exists(report_path), 20, "the worker's report")
    with open(report_path) as fh:
        report = json.load(fh)
    config_path = report["argv"][1]
    assert report["files"][config_path] == "ops: []\n"
    assert report["argv"][2] == "--dispatcher=%s:5050" % dispatcher_ip
    assert report["env"]["FROM_CM"] == "fast" and report["env"]["HOSTNAME"] == "worker"
    assert report["env"]["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"


def test_simulated_nodes_schedule_by_selector_and_capacity(cluster, ns):
    cluster.add_node("sim-a", cpu="1", labels={"pool": "a"}, simulated=True, schedule=True)
    cluster.add_node("sim-b", cpu="64", labels={"pool": "b"}, simulated=True, schedule=True)
    for i in range(6):
        body = make_pod("b%d" % i, node=None, labels={"app": "sim", "pool": "b"})
        body["spec"]["nodeSelector"] = {"pool": "b"}
        cluster.apply(body, ns)
    for i in range(2):
        body = make_pod("a%d" % i, node=None, labels={"app": "big"})
        body["spec"]["nodeSelector"] = {"pool": "a"}
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "600m"}}
        cluster.apply(body, ns)
    pods = cluster.wait_for_pods(ns, "app=sim", 6)
    assert {p["spec"]["nodeName"] for p in pods} == {"sim-b"}
    assert all(p["status"]["containerStatuses"][0]["containerID"].startswith("simulated://") for p in pods)

    def one_big_bound():
        items = cluster.client.get("/api/v1/namespaces/%s/pods" % ns, {"labelSelector": "app=big"})["items"]
        bound = [p for p in items if p["spec"].get("nodeName") == "sim-a"
                 and p.get("status", {}).get("phase") == "Running"]
        return len(bound) == 1 and items

    items = cluster.wait_for(one_big_bound, 20, "one big pod to fit")
    assert [p["spec"].get("nodeName") for p in items].count(None) == 1, "the second does not fit 1 CPU"
    for pod in pods:
        cluster.delete("v1", "Pod", pod["metadata"]["name"], ns)
    cluster.wait_for(lambda: not cluster.client.get("/api/v1/namespaces/%s/pods" % ns,
                                                    {"labelSelector": "app=sim"})["items"], 20, "deletions")
    bound = [p for p in items if p["spec"].get("nodeName")][0]["metadata"]["name"]
    cluster.delete("v1", "Pod", bound, ns)
    cluster.wait_for(lambda: cluster.get("v1", "Pod", "a0" if bound == "a1" else "a1", ns)["spec"].get("nodeName")
                     == "sim-a", 20, "the waiting pod to take the freed CPU")


def test_simulated_nodes_honour_required_node_affinity(cluster, ns):
    """Local workers are pinned by required node affinity on metadata.name (as DaemonSets are); the
    scheduler binds them to that node only, even when another node fits as well."""
    cluster.add_node("sim-c", cpu="8", labels={"pool": "gpu"}, simulated=True, schedule=True)
    cluster.add_node("sim-d", cpu="8", labels={"pool": "gpu"}, simulated=True, schedule=True)
    for i in range(4):
        body = make_pod("pinned%d" % i, node=None, labels={"app": "pinned"})
        body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["sim-d"]}]}]}}}
        cluster.apply(body, ns)
    body = make_pod("labelled", node=None, labels={"app": "labelled"})
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}
    cluster.apply(body, ns)
    pods = cluster.wait_for_pods(ns, "app=pinned", 4)
    assert {p["spec"]["nodeName"] for p in pods} == {"sim-d"}
    labelled = cluster.wait_for_pods(ns, "app=labelled", 1)
    assert labelled[0]["spec"]["nodeName"] in ("sim-c", "sim-d")
    for pod in pods + labelled:
        cluster.delete("v1", "Pod", pod["metadata"]["name"], ns)


def test_a_pod_no_node_can_take_is_marked_unschedulable(cluster, ns):
    """As kube-scheduler does: PodScheduled=False, reason Unschedulable, "0/N nodes are available: ..."; a pod
    that only waits for room is not marked."""
    cluster.add_node("sim-e", cpu="1", labels={"pool": "e"}, simulated=True, schedule=True)
    nowhere = make_pod("nowhere", node=None, labels={"app": "nowhere"})
    nowhere["spec"]["nodeSelector"] = {"pool": "does-not-exist"}
    cluster.apply(nowhere, ns)
    crowded = make_pod("crowded", node=None, labels={"app": "crowded"})
    crowded["spec"]["nodeSelector"] = {"pool": "e"}
    crowded["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}}  # more than sim-e has
    cluster.apply(crowded, ns)

    def marked():
        for c in pod_status(cluster, ns, "nowhere").get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return c
        return None

    condition = cluster.wait_for(marked, 30, "PodScheduled=False on the pod no node takes")
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("0/") and "didn't match Pod's node affinity/selector" in \
        condition["message"]
    assert cluster.get("v1", "Pod", "nowhere", ns)["spec"].get("nodeName") is None
    assert not [c for c in pod_status(cluster, ns, "crowded").get("conditions") or [] if c["type"] == "PodScheduled"]
    for name in ("nowhere", "crowded"):
        cluster.delete("v1", "Pod", name, ns)


def test_node_stop_leaves_no_processes(tmp_path):
    with harness.Cluster(str(tmp_path / "c"), kubeconfig="") as c:
        node = c.add_node("doomed", image_map={"e2e/sleeper:1": "/bin/sleep"})
        c.apply(make_pod("family", command=["/bin/sh", "-c", "sleep 300 & sleep 300 & wait"], node="doomed"),
                "default")
        c.apply(make_pod("single", args=["300"], node="doomed"), "default")
        pods = c.wait_for_pods("default", "app in (family,single)", 2)
        groups = [pid_of(p["status"]) for p in pods]
        c.wait_for(lambda: len(_group_members(groups[0]) + _group_members(groups[1])) >= 4, 10,
                   "the shell's children to start")
        assert node.stop() == 0
        assert _group_members(groups[0]) == [] and _group_members(groups[1]) == []
        pod = c.get("v1", "Pod", "single", "default")
        assert pod["metadata"].get("deletionTimestamp") is None, "a stopped node does not delete its pods"


def test_killed_node_takes_its_processes_along(tmp_path):
    with harness.Cluster(str(tmp_path / "c"), kubeconfig="") as c:
        node = c.add_node("crashy", image_map={"e2e/sleeper:1": "/bin/sleep"})
        c.apply(make_pod("victim", args=["300"], node="crashy"), "default")
        pid = pid_of(c.wait_for_pods("default", "app=victim", 1)[0]["status"])
        os.kill(node.process.pid, signal.SIGKILL)
        c.wait_for(lambda: not process_alive(pid), 10, "the parent-death signal to kill the pod process")


def _group_members(pgid):
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as fh:
                fields = fh.read().split(")")[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def test_bad_flags(tmp_path):
    import subprocess
    result = subprocess.run([sys.executable, "-m", "e2e.processnode", "--server", "http://127.0.0.1:1",
                             "--node-name", "x", "--image-map", str(tmp_path / "missing.json")],
                            cwd=harness.REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "missing.json" in result.stderr
    result = subprocess.run([sys.executable, "-m", "e2e.processnode", "--server", "http://127.0.0.1:1",
                             "--node-name", "x", "--taint", "nonsense"],
                            cwd=harness.REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0 and "--taint expects" in result.stderr
    result = subprocess.run([sys.executable, "-m", "e2e.processnode", "--server", "http://127.0.0.1:1",
                             "--node-name", "x"], cwd=harness.REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "cannot register node x" in result.stderr


def test_api_errors_are_reported(cluster, ns):
    with pytest.raises(ApiException) as exc:
        cluster.get("v1", "Pod", "never-created", ns)
    assert exc.value.status == 404
