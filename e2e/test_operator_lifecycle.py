"""A DataService's life with real processes: sluice-operator, and sluice-dispatcher / sluice-worker pods run by a
process node (or by a real cluster's nodes when KUBECONFIG is set).

create -> Ready -> a client reads data -> scale through /scale -> workersToDelete -> a scale-down while a client
reads (the removed worker is drained through the dispatcher before its pod goes) -> rolling worker update ->
delete while a client still reads (the drain holds the DataService until the client's job is done) -> gone.
"""

import collections
import json
import os
import subprocess
import sys
import threading

import pytest

from e2e import harness
from e2e.sluice_support import (CRD, GROUP_VERSION, Operator, condition, dataservice, image_map, live_pods,
                                require_binary, require_python_module, worker_selector)

NS = "life"

CLIENT = r"""
import json, sys
import sluice
address, stop, pause_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = sluice.Dataset(address, pipeline={"source": {"range": {"stop": stop, "split_size": 16}}},
                    heartbeat_interval_s=0.1, create_timeout_s=30.0)
values = []
for element in ds:
    values.append(int(element["value"]))
    if len(values) == pause_after:
        print("paused", flush=True)
        sys.stdin.readline()
print(json.dumps({"values": values, "stats": ds.stats()}), flush=True)
"""

# A DYNAMIC (each element once) reader of 64 KiB uncompressed elements that keeps about one response per worker in
# its own buffer: while it is paused the workers hold produced elements nobody received, so a drain cannot end.
SLOW_DYNAMIC_CLIENT = r"""
import json, sys
import sluice
address, stop, pause_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pipeline = {"source": {"range": {"stop": stop, "split_size": 50}},
            "steps": [{"map": {"parallelism": 1, "ops": [{"reshape": {"field": "value", "shape": [1]}},
                                                          {"pad": {"field": "value", "length": 8192}}]}}]}
ds = sluice.Dataset(address, pipeline=pipeline, sharding="dynamic", compression="none",
                    max_outstanding_requests=1, max_buffered_bytes=1, heartbeat_interval_s=0.1,
                    create_timeout_s=30.0)
values = []
for element in ds:
    values.append(int(element["value"][0]))
    if len(values) == pause_after:
        print("paused", flush=True)
        sys.stdin.readline()
print(json.dumps({"values": values, "stats": ds.stats()}), flush=True)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_binary("sluice-dispatcher")
    require_binary("sluice-worker")
    with harness.Cluster(str(tmp_path_factory.mktemp("lifecycle"))) as cluster:
        cluster.apply(CRD)
        cluster.add_node("node-1", cpu="32", memory="64Gi", image_map=image_map(), schedule=True)
        cluster.create_namespace(NS)
        operator = Operator(cluster, args=["--drain-poll-seconds", "0.3", "--drain-timeout-seconds", "120",
                                           "--concurrency", "2"]).start()
        yield cluster, operator


def get_ds(cluster, name):
    return cluster.get(GROUP_VERSION, "DataService", name, NS)


def wait_ready(cluster, name, replicas, timeout=60):
    def ready():
        ds = get_ds(cluster, name)
        status = ds.get("status") or {}
        ok = (condition(ds, "Ready").get("status") == "True" and status.get("readyReplicas") == replicas
              and status.get("replicas") == replicas
              and status.get("observedGeneration") == ds["metadata"]["generation"])
        return ds if ok else None

    return cluster.wait_for(ready, timeout, "DataService %s Ready with %d workers" % (name, replicas))


def dispatcher_endpoint(cluster, name, port=5050):
    pod = cluster.get("v1", "Pod", name + "-dispatcher", NS)
    return "%s:%d" % (pod["status"]["podIP"], port)


def events(cluster, reason=None):
    items = cluster.client.get("/apis/events.k8s.io/v1/namespaces/%s/events" % NS)["items"]
    return [e for e in items if reason is None or e.get("reason") == reason]


def start_client(cluster, name, stop, pause_after, port=5050, script=CLIENT, shared_memory=True):
    path = require_python_module()
    env = dict(os.environ, PYTHONPATH=path)
    if not shared_memory:
        env["SLUICE_SHARED_MEMORY"] = "0"
    return subprocess.Popen([sys.executable, "-c", script, dispatcher_endpoint(cluster, name, port), str(stop),
                             str(pause_after)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)


def finish_client(proc, timeout=60):
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "client failed"
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ready_ds(env):
    cluster, _ = env
    cluster.apply(dataservice("reader", replicas=2), namespace=NS)
    return wait_ready(cluster, "reader", 2)


def test_create_makes_dispatcher_and_workers_ready(env, ready_ds):
    cluster, operator = env
    assert ready_ds["status"]["dispatcherAddress"] == "reader-dispatcher.%s.svc:5050" % NS
    assert condition(ready_ds, "DispatcherReady")["status"] == "True"
    assert condition(ready_ds, "Degraded")["status"] == "False"
    assert ready_ds["metadata"]["finalizers"] == ["sluice.dev/drain"]
    workers = live_pods(cluster, NS, worker_selector("reader"))
    assert sorted(p["metadata"]["name"] for p in workers) == ["reader-worker-remote-0", "reader-worker-remote-1"]
    for pod in workers:
        assert pod["status"]["phase"] == "Running"
        assert pod["metadata"]["ownerReferences"][0]["uid"] == ready_ds["metadata"]["uid"]
    assert operator.metrics()['sluice_operator_reconciles_total{result="success"}'] > 0


def test_client_reads_data_from_the_workers(env, ready_ds):
    require_python_module()
    cluster, _ = env
    proc = start_client(cluster, "reader", stop=300, pause_after=-1)
    result = finish_client(proc)
    # Parallel epochs: each of the 2 workers produces the whole range once.
    assert collections.Counter(result["values"]) == collections.Counter(list(range(300)) * 2)
    assert result["stats"]["job_finished"]


def scale(cluster, name, replicas):
    path = cluster.client.resource_path(GROUP_VERSION, "dataservices", NS, name, "scale")
    return cluster.client.merge_patch(path, {"spec": {"replicas": replicas}})


def test_scale_through_the_scale_subresource(env, ready_ds):
    cluster, _ = env
    got = scale(cluster, "reader", 3)
    assert got["kind"] == "Scale" and got["spec"]["replicas"] == 3
    wait_ready(cluster, "reader", 3)
    scale_status = cluster.client.get(cluster.client.resource_path(GROUP_VERSION, "dataservices", NS, "reader",
                                                                   "scale"))["status"]
    assert scale_status["replicas"] == 3
    assert scale_status["selector"] == worker_selector("reader")
    scale(cluster, "reader", 1)
    wait_ready(cluster, "reader", 1)
    # The two removed (idle) workers are drained through the dispatcher, then deleted.
    names = lambda: [p["metadata"]["name"] for p in live_pods(cluster, NS, worker_selector("reader"))]
    cluster.wait_for(lambda: names() == ["reader-worker-remote-0"], 30, "the newest workers to go first")
    scale(cluster, "reader", 2)
    wait_ready(cluster, "reader", 2)


def test_workers_to_delete_removes_exactly_those_pods(env, ready_ds):
    cluster, _ = env
    cluster.apply(dataservice("picky", replicas=4), namespace=NS)
    wait_ready(cluster, "picky", 4)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live_pods(cluster, NS, worker_selector("picky"))}
    victims = ["picky-worker-remote-1", "picky-worker-remote-2"]
    cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", NS, "picky"),
                               {"spec": {"workers": {"replicas": 2, "workersToDelete": victims}}})
    wait_ready(cluster, "picky", 2)
    # The victims are drained through the dispatcher (idle: at once), then deleted.
    after = lambda: {p["metadata"]["name"]: p["metadata"]["uid"] for p in live_pods(cluster, NS, worker_selector("picky"))}
    cluster.wait_for(lambda: after() == {name: uid for name, uid in before.items() if name not in victims}, 30,
                     "exactly the victims to go")

    # Listed names are not reused while listed: scaling up again picks fresh ordinals.
    cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", NS, "picky"),
                               {"spec": {"workers": {"replicas": 3}}})
    wait_ready(cluster, "picky", 3)
    names = sorted(p["metadata"]["name"] for p in live_pods(cluster, NS, worker_selector("picky")))
    assert names == ["picky-worker-remote-0", "picky-worker-remote-3", "picky-worker-remote-4"]
    cluster.delete(GROUP_VERSION, "DataService", "picky", NS)
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", "picky", NS, timeout=60)


def test_scale_down_drains_the_removed_worker_through_the_dispatcher_before_deleting_it(env):
    """A client reads a DYNAMIC job slowly; the DataService is scaled from 2 workers to 1 naming a pod in
    workersToDelete. The pod stays (and is asked about every round) while it holds elements the client has not
    read; once the client reads on, the dispatcher reports it drained and only then is it deleted. The client gets
    every element exactly once."""
    require_python_module()
    cluster, operator = env
    name, stop = "shrink", 1000
    cluster.apply(dataservice(name, replicas=2), namespace=NS)
    wait_ready(cluster, name, 2)
    pods = {p["metadata"]["name"]: p for p in live_pods(cluster, NS, worker_selector(name))}
    # Over the socket, as between pods: process nodes run the workers on this host, where a client would
    # otherwise take their 64 KiB elements through a same-host shared-memory ring (32 MiB in transit), and
    # the workers' own buffers, which this test needs filled, would stay empty.
    client = start_client(cluster, name, stop=stop, pause_after=20, script=SLOW_DYNAMIC_CLIENT, shared_memory=False)
    round_line = 'msg="scale-down drain round" dataservice=%s/%s' % (NS, name)
    try:
        assert client.stdout.readline().strip() == "paused"
        # The victim is a worker that holds elements the paused client has not received (a worker that got no
        # split produced nothing and drains at once, rightly).
        def buffering():
            return next((n for n, p in sorted(pods.items())
                         if worker_gauge(p, "sluice_worker_buffered_elements") > 0), None)
        victim = cluster.wait_for(buffering, 30, "a worker to buffer elements nobody read")
        survivor = next(n for n in pods if n != victim)
        victim_address = "%s:5051" % pods[victim]["status"]["podIP"]
        cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", NS, name),
                                   {"spec": {"workers": {"replicas": 1, "workersToDelete": [victim]}}})

        def started():
            return [e for e in events(cluster, "DrainingWorker") if e["regarding"]["name"] == name] or None
        assert victim in started_note(cluster.wait_for(started, 30, "DrainingWorker"))
        # Rounds go on while the client holds the victim's elements unread: the pod stays, nothing replaces it.
        rounds = lambda: [line for line in operator.log().splitlines() if round_line in line]
        try:
            cluster.wait_for(lambda: len(rounds()) >= 3, 30, "three scale-down drain rounds")
        except TimeoutError as exc:
            raise AssertionError("%s; rounds: %s" % (exc, rounds())) from exc
        rounds = rounds()
        assert all("drained=0" in line for line in rounds), rounds
        assert victim_address in rounds[-1], rounds[-1]
        assert sorted(p["metadata"]["name"] for p in live_pods(cluster, NS, worker_selector(name))) == sorted(pods)
        ds = cluster.wait_for(lambda: (lambda d: d if (d.get("status") or {}).get("drainingReplicas") == 1 else None)(
            get_ds(cluster, name)), 30, "status.drainingReplicas=1")
        assert ds["status"]["replicas"] == 1
        assert "draining through the dispatcher before deletion" in condition(ds, "WorkersReady")["message"]

        client.stdin.write("go\n")
        client.stdin.flush()
        result = finish_client(client)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    # Nothing lost, nothing read twice.
    assert collections.Counter(result["values"]) == collections.Counter(range(stop))
    cluster.wait_for(lambda: [p["metadata"]["name"] for p in live_pods(cluster, NS, worker_selector(name))]
                     == [survivor], 60, "the drained victim to be deleted")
    drained = [e for e in events(cluster, "DrainedWorker") if e["regarding"]["name"] == name]
    assert drained and victim in drained[0]["note"], drained
    assert not [e for e in events(cluster, "WorkerDrainTimedOut") if e["regarding"]["name"] == name]
    # The operator deleted the pod only after a round in which the dispatcher reported it drained.
    log = operator.log().splitlines()
    deleted_at = next(i for i, line in enumerate(log) if "msg=deleted" in line and "name=%s " % victim in line + " ")
    last_round = [line for line in log[:deleted_at] if round_line in line][-1]
    assert "drained=1" in last_round, last_round
    if not cluster.real:
        dispatcher_log = cluster.nodes[0].pod_log(NS, name + "-dispatcher", "dispatcher")
        assert "worker draining (requested)" in dispatcher_log and victim_address in dispatcher_log
    cluster.delete(GROUP_VERSION, "DataService", name, NS)
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", name, NS, timeout=60)


def worker_gauge(pod, metric, port=8091):
    """The sum of `metric` on the worker pod's /metrics (0 when it cannot be read)."""
    import urllib.request
    try:
        with urllib.request.urlopen("http://%s:%d/metrics" % (pod["status"]["podIP"], port), timeout=5) as resp:
            text = resp.read().decode("utf-8", "replace")
    except OSError:
        return 0.0
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(metric) and not line.startswith("#"))


def started_note(items):
    return " ".join(e.get("note", "") for e in items)


class PodWatcher:
    """Follows the worker pods of one DataService through a watch and records how many were unavailable at worst."""

    def __init__(self, cluster, name, desired):
        self.desired = desired
        self.pods = {}
        self.max_unavailable = 0
        self.worst = {}
        self._tracking = False  # off while the initial list is loaded
        self.deleted = set()
        self._stop = threading.Event()
        self._client = type(cluster.client)(cluster.client.config)
        start = cluster.client.get("/api/v1/namespaces/%s/pods" % NS, {"labelSelector": worker_selector(name)})
        for pod in start["items"]:
            self._observe(pod)
        self._tracking = True
        self._rv = start["metadata"]["resourceVersion"]
        self._selector = worker_selector(name)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _observe(self, pod, deleted=False):
        name = pod["metadata"]["name"]
        if deleted or pod["metadata"].get("deletionTimestamp"):
            self.pods.pop(name, None)
            self.deleted.add(pod["metadata"]["uid"])
        else:
            ready = any(c["type"] == "Ready" and c["status"] == "True"
                        for c in (pod.get("status") or {}).get("conditions") or [])
            self.pods[name] = ready
        available = sum(1 for ready in self.pods.values() if ready)
        if self._tracking and self.desired - available > self.max_unavailable:
            self.worst = dict(self.pods)
            self.max_unavailable = self.desired - available

    def _run(self):
        query = {"labelSelector": self._selector, "resourceVersion": self._rv, "timeoutSeconds": "120"}
        for event in self._client.watch("/api/v1/namespaces/%s/pods" % NS, query):
            if self._stop.is_set():
                return
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self._observe(event["object"], event["type"] == "DELETED")

    def stop(self):
        self._stop.set()
        self._client.close()


def test_worker_spec_change_rolls_pods_one_at_a_time(env, ready_ds):
    cluster, _ = env
    cluster.apply(dataservice("roll", replicas=3), namespace=NS)
    wait_ready(cluster, "roll", 3)
    old_uids = {p["metadata"]["uid"] for p in live_pods(cluster, NS, worker_selector("roll"))}
    watcher = PodWatcher(cluster, "roll", desired=3)
    try:
        cluster.apply(dataservice("roll", replicas=3, worker_args=["--buffer_elements=64"]), namespace=NS)
        wait_ready(cluster, "roll", 3, timeout=90)
        cluster.wait_for(lambda: old_uids <= watcher.deleted, 30, "every old worker replaced")
    finally:
        watcher.stop()
    pods = live_pods(cluster, NS, worker_selector("roll"))
    assert not ({p["metadata"]["uid"] for p in pods} & old_uids)
    assert all("--buffer_elements=64" in p["spec"]["containers"][0]["args"] for p in pods)
    assert len({p["metadata"]["labels"]["sluice.dev/template-hash"] for p in pods}) == 1
    # maxUnavailable is 1: never more than one worker short of ready during the roll.
    assert watcher.max_unavailable == 1, watcher.worst
    ds = get_ds(cluster, "roll")
    assert condition(ds, "WorkersReady")["reason"] == "AllWorkersReady"


def test_hybrid_places_local_workers_on_the_trainers_node_and_the_rest_remote(env):
    """Local placement end to end: a GPU node running a trainer pod; Hybrid fills the CPU the trainer
    leaves on that node with local workers (pinned by node affinity, run by that node's process node)
    and puts the rest on the CPU node; a client reads from all of them."""
    cluster, _ = env
    if cluster.real:
        pytest.skip("adds a process node")
    cluster.add_node("gpu-1", cpu="8", memory="32Gi", image_map=image_map(), schedule=True,
                     labels={"sluice.e2e/gpu": "true"}, taints=["nvidia.com/gpu=present:NoSchedule"])
    # The trainer: bound to gpu-1, requesting 2 of its 8 CPUs (its image is not run here).
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0", "labels": {"app": "trainer"}},
                   "spec": {"nodeName": "gpu-1", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                            "containers": [{"name": "t", "image": "e2e/trainer:1",
                                            "resources": {"requests": {"cpu": "2"}}}]}}, NS)
    # (8 - 2) CPUs x localCpuFraction 0.5 / 1 CPU per worker = 3 local workers; 4 asked: 1 remote.
    cluster.apply(dataservice("hybrid", replicas=4, workers={"resources": {"requests": {"cpu": "1", "memory": "64Mi"}}},
                              placement={"policy": "Hybrid", "localCpuFraction": 0.5,
                                         "consumerSelector": {"matchLabels": {"app": "trainer"}},
                                         "acceleratorNodeSelector": {"sluice.e2e/gpu": "true"},
                                         "localTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}),
                  namespace=NS)
    ds = wait_ready(cluster, "hybrid", 4, timeout=90)
    assert ds["status"].get("localReplicas") == 3, ds["status"]
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in live_pods(cluster, NS, worker_selector("hybrid"))}
    assert nodes == {"hybrid-worker-local-0": "gpu-1", "hybrid-worker-local-1": "gpu-1",
                     "hybrid-worker-local-2": "gpu-1", "hybrid-worker-remote-0": "node-1"}, nodes
    proc = start_client(cluster, "hybrid", stop=200, pause_after=-1)
    result = finish_client(proc)
    assert collections.Counter(result["values"]) == collections.Counter(list(range(200)) * 4)
    cluster.delete(GROUP_VERSION, "DataService", "hybrid", NS)
    cluster.wait_for(lambda: not live_pods(cluster, NS, worker_selector("hybrid")), 60, "the hybrid workers to go")


def test_delete_drains_workers_before_the_dataservice_goes(env):
    require_python_module()
    cluster, operator = env
    cluster.apply(dataservice("drainme", replicas=2), namespace=NS)
    wait_ready(cluster, "drainme", 2)
    client = start_client(cluster, "drainme", stop=400, pause_after=50)
    try:
        assert client.stdout.readline().strip() == "paused"
        cluster.delete(GROUP_VERSION, "DataService", "drainme", NS)

        # The job still runs: the workers are draining and the finalizer keeps the DataService.
        def draining():
            started = [e for e in events(cluster, "DrainStarted") if e["regarding"]["name"] == "drainme"]
            return get_ds(cluster, "drainme") if started else None
        ds = cluster.wait_for(draining, 30, "DrainStarted")
        assert ds["metadata"].get("deletionTimestamp")
        cluster.wait_for(lambda: 'msg="drain round" dataservice=life/drainme' in operator.log(), 30, "a drain round")
        assert "complete=false" in operator.log()
        assert len(live_pods(cluster, NS, worker_selector("drainme"))) == 2

        client.stdin.write("go\n")
        client.stdin.flush()
        result = finish_client(client)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    # Draining lost nothing: the paused client got both workers' whole range.
    assert collections.Counter(result["values"]) == collections.Counter(list(range(400)) * 2)
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", "drainme", NS, timeout=60)
    drained = [e for e in events(cluster, "Drained") if e["regarding"]["name"] == "drainme"]
    assert drained and "the dispatcher reports 2 workers drained" in drained[0]["note"], drained
    cluster.wait_for(lambda: not live_pods(cluster, NS, "sluice.dev/dataservice=drainme"), 60,
                     "the pods to be garbage collected")
    if not cluster.real:
        log = cluster.nodes[0].pod_log(NS, "drainme-dispatcher", "dispatcher")
        assert "worker draining (requested)" in log


def test_dispatcher_port_change_reaches_the_service_the_status_and_the_workers(env):
    """Issue 9 §3: both dispatcher ports of a Ready DataService change. The Service's ports are replaced (a real
    API server refused the operator's old server-side apply with 422 `spec.ports[1].name: Duplicate value:
    "grpc"`, and so does the test server now), and the Service, status.dispatcherAddress, the dispatcher pod and
    every worker's --dispatcher_address agree; the workers register at the new port and a client reads."""
    cluster, operator = env
    cluster.apply(dataservice("ports", replicas=2), namespace=NS)
    wait_ready(cluster, "ports", 2)
    cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", NS, "ports"),
                               {"spec": {"dispatcher": {"port": 6000, "metricsPort": 6001}}})

    def agreed():
        ds = get_ds(cluster, "ports")
        service = cluster.get("v1", "Service", "ports-dispatcher", NS)
        ports = [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
        dispatcher = cluster.get("v1", "Pod", "ports-dispatcher", NS)
        addresses = {a for p in live_pods(cluster, NS, worker_selector("ports"))
                     for a in p["spec"]["containers"][0]["args"] if a.startswith("--dispatcher_address=")}
        return (ports == [("grpc", 6000, 6000), ("metrics", 6001, 6001)]
                and (ds.get("status") or {}).get("dispatcherAddress") == "ports-dispatcher.%s.svc:6000" % NS
                and "--port=6000" in dispatcher["spec"]["containers"][0]["args"]
                and addresses == {"--dispatcher_address=ports-dispatcher.%s.svc:6000" % NS})

    cluster.wait_for(agreed, 90, "Service, status, dispatcher and workers on port 6000")
    ds = wait_ready(cluster, "ports", 2, timeout=90)
    assert condition(ds, "DispatcherReady")["message"] == "serving at ports-dispatcher.%s.svc:6000" % NS
    updated = [e for e in events(cluster, "UpdatedService") if e["regarding"]["name"] == "ports"]
    assert len(updated) == 1, updated
    assert not [e for e in events(cluster) if e["regarding"]["name"] == "ports" and e["type"] == "Warning"]
    assert operator.metrics().get('sluice_operator_api_errors_total{operation="patch"}', 0) == 0
    if require_python_module():
        result = finish_client(start_client(cluster, "ports", stop=100, pause_after=-1, port=6000))
        assert collections.Counter(result["values"]) == collections.Counter(list(range(100)) * 2)
    cluster.delete(GROUP_VERSION, "DataService", "ports", NS)
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", "ports", NS, timeout=60)


def test_foreground_delete_skips_the_drain_and_says_why(env):
    """Issue 9 §5 (a): with propagationPolicy Foreground (kubectl --cascade=foreground, Argo CD's default) garbage
    collection deletes the pods together with the DataService; the operator cannot drain them and says so, releases
    its finalizer, and everything goes (a pod a pass with a stale cache may still create is collected too)."""
    cluster, _ = env
    cluster.apply(dataservice("fg", replicas=2), namespace=NS)
    wait_ready(cluster, "fg", 2)
    cluster.delete(GROUP_VERSION, "DataService", "fg", NS, propagationPolicy="Foreground")
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", "fg", NS, timeout=60)
    cluster.wait_for(lambda: not cluster.client.get("/api/v1/namespaces/%s/pods" % NS,
                                                    {"labelSelector": "sluice.dev/dataservice=fg"})["items"],
                     60, "the pods of fg to be gone")
    skipped = [e for e in events(cluster, "DrainSkipped") if e["regarding"]["name"] == "fg"]
    assert len(skipped) == 1 and skipped[0]["type"] == "Warning", skipped
    assert "propagationPolicy Foreground" in skipped[0]["note"]
    assert "the dispatcher and the 2 workers" in skipped[0]["note"]
    assert not [e for e in events(cluster, "DrainStarted") if e["regarding"]["name"] == "fg"]
    assert not cluster.client.get("/api/v1/namespaces/%s/services" % NS,
                                  {"labelSelector": "sluice.dev/dataservice=fg"})["items"]


def test_deleting_the_namespace_costs_one_refused_create_not_a_stream_of_them(env):
    """Issue 9 §5 (b): the namespace controller deletes the pods of a namespace before its DataService (the test
    server holds the DataService back, as a real namespace controller may reach it long after the pods). The
    operator is refused one create with 403 NamespaceTerminating, then creates nothing more there, Events
    included (it used to keep re-creating pods and Events: 129 refused writes in one run)."""
    cluster, operator = env
    if cluster.real:
        pytest.skip("holds the namespace deletion through the test server's admin API")
    cluster.create_namespace("doomed")
    cluster.apply(dataservice("doomed", replicas=2), namespace="doomed")
    cluster.wait_for_pods("doomed", "sluice.dev/dataservice=doomed", 3, timeout=60)

    def operator_refusals():
        # 403 answers: only a create in a terminating namespace gets one here (no RBAC policy in this suite),
        # and nothing but the operator creates in "doomed" once it is deleted.
        return cluster.admin("GET", "stats")["codes"].get("403", 0)

    before = operator_refusals()
    cluster.admin("POST", "config", {"namespaceDeletionHold": ["dataservices.sluice.dev"]})
    try:
        cluster.client.delete("/api/v1/namespaces/doomed")
        cluster.wait_for(lambda: operator_refusals() > before, 30, "the operator's first refused create")
        # More reconciles: a spec change (its status write is an update, still allowed).
        cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", "doomed", "doomed"),
                                   {"spec": {"workers": {"replicas": 3}}})
        cluster.wait_for(lambda: (cluster.get(GROUP_VERSION, "DataService", "doomed", "doomed").get("status") or {})
                         .get("observedGeneration") == 2, 30, "the spec change observed")
    finally:
        cluster.admin("POST", "config", {"namespaceDeletionHold": []})
    cluster.wait_for(lambda: "doomed" not in [n["metadata"]["name"]
                                              for n in cluster.client.get("/api/v1/namespaces")["items"]],
                     60, "namespace doomed to go")
    assert operator_refusals() - before == 1
    assert operator.log().count("namespace doomed is being deleted") == 1


def test_an_unschedulable_dispatcher_is_reported_with_the_schedulers_reason(env):
    """Issue 9 §5 (c): a dispatcher the scheduler cannot place was reported only as "not ready"; the condition now
    carries the scheduler's PodScheduled=False reason and message."""
    cluster, _ = env
    cluster.apply(dataservice("stuck", replicas=1, dispatcher={"nodeSelector": {"sluice.e2e/pool": "nowhere"}}),
                  namespace=NS)

    def reported():
        c = condition(get_ds(cluster, "stuck"), "DispatcherReady")
        return c if c.get("reason") == "DispatcherUnschedulable" else None

    c = cluster.wait_for(reported, 60, "DispatcherReady=False, DispatcherUnschedulable")
    assert c["status"] == "False"
    assert c["message"].startswith("dispatcher pod stuck-dispatcher cannot be scheduled: Unschedulable: 0/"), c
    ready = condition(get_ds(cluster, "stuck"), "Ready")
    assert ready["reason"] == "DispatcherNotReady" and ready["message"] == c["message"]
    cluster.delete(GROUP_VERSION, "DataService", "stuck", NS)
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", "stuck", NS, timeout=60)


AUTO_ORDER_PIPELINE = """\
source: {synthetic: {count: 256, shape: [96, 96, 3], dtype: uint8, split_size: 32}}
steps:
  - cast: {field: data, dtype: float32}
  - random_crop: {field: data, size: [8, 8]}
  - batch: 8
"""


def test_auto_order_reaches_the_dispatcher_and_status_shows_its_choice(env):
    """spec.autoOrder -> SLUICE_AUTO_ORDER -> the dispatcher reorders its pipeline at start-up -> the operator reads
    the report (GetState) into status.autoOrder."""
    cluster, operator = env
    cluster.apply(dataservice("ordered", replicas=1, pipeline={"inline": AUTO_ORDER_PIPELINE},
                              autoOrder={"enabled": True, "mode": "strict"}), namespace=NS)
    wait_ready(cluster, "ordered", 1)

    def reported():
        auto_order = (get_ds(cluster, "ordered").get("status") or {}).get("autoOrder") or {}
        return auto_order if auto_order.get("outcome") else None
    auto_order = cluster.wait_for(reported, 60, "status.autoOrder")
    assert auto_order["mode"] == "strict"
    assert auto_order["originalOrder"] == "cast(data->float32) -> random_crop(data)"
    # Applied unless the sample measured no gain; the outcome and its numbers are reported either way.
    assert auto_order["outcome"] in ("applied", "unchanged"), auto_order
    assert auto_order["predictedSpeedup"] > 1
    if auto_order["outcome"] == "applied":
        assert auto_order["chosenOrder"] == "random_crop(data) -> cast(data->float32)"
    assert 'msg="autoorder read" dataservice=life/ordered' in operator.log()
    cluster.delete(GROUP_VERSION, "DataService", "ordered", NS)
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", "ordered", NS, timeout=60)
