"""sluice-autoscaler end to end, with real sluice-autoscaler, sluice-operator, sluice-dispatcher and sluice-worker
processes (run by process nodes on the test API server, or by a real cluster's nodes when KUBECONFIG is set):

- an autoscaled Hybrid DataService with a trainer pod on a GPU node: the autoscaler's server-side apply of
  spec.workers.replicas and spec.workers.local makes the operator fill the local slots first and put the rest
  remote; another tenant on the GPU node shrinks the local capacity and workers shift remote, at the same size;
  it leaves and they shift back local;
- SIGKILL of the autoscaler in the middle of a decision (its spec apply held in flight by the test API server's
  fault API), then a restart: the spec changes exactly once, to the size the model asks for — nothing doubled,
  nothing lost;
- two replicas with leader election: only the Lease holder writes and records Events; SIGKILL it and the other
  takes over and acts on the next change;
- no Prometheus at all: the autoscaler scrapes the real dispatcher's and workers' /metrics at their pod IPs while a
  real client (a stand-in trainer using the `sluice` Python module) stalls on them; it scales up, holds while the
  dispatcher does not answer, and scales down naming the worker to remove once the trainer is gone.

The signal source of the first three: a small fake Prometheus HTTP API written here (`FakePrometheus`), named by
each DataService's spec.autoscaling.metrics.prometheus.url. It answers the autoscaler's default (batched) queries
from a model the test sets — trainers wanting `demand` elements/s, each Ready worker pod producing at most 50
elements/s with one CPU — and counts the Ready worker pods from the API server, so the loop closes through the real
operator and pods (and the model's sizes are exact). The direct-scrape test has no model: its numbers are what the
real processes measure, so it asserts what they imply (a stall above target, elements consumed and produced), not
values. The autoscaler runs as a local process (as the operator does in these suites), so the fake is reachable on
loopback against a real cluster too; the direct scrape and the client then need the pod IPs reachable from where
the test runs, as the operator lifecycle suite's clients do.

The Hybrid test adds a process node and skips on a real cluster; the fault injection (a held apply, a stopped
dispatcher) is left out there.
"""

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from e2e import harness
from e2e.sluice_support import (CRD, GROUP_VERSION, Operator, dataservice, image_map, live_pods, require_binary,
                                require_python_module, worker_selector)

NS = "autoscale-e2e"
PER_WORKER = 50.0  # elements/s one worker produces flat out, with one CPU
FIELD_MANAGER = "sluice-autoscaler"


# ---------------------------------------------------------------------------------------------- the signal source


class FakePrometheus:
    """A Prometheus HTTP API (GET /api/v1/query) on 127.0.0.1 answering the autoscaler's default queries.

    Per DataService the test sets the trainers' demand (elements/s they would consume without waiting); the
    Ready worker pods are counted from the API server once per batch of queries. Then, per query:
      supply = demand signal = min(demand, 50 x workers); stall = 1 - supply / demand;
      compute per element = 1 / demand (one trainer); worker CPU = supply / 50; buffered = 0 while stalled.
    Every series carries the labels namespace and dataservice, as `sum by (namespace, dataservice)` gives them."""

    def __init__(self, cluster, namespace):
        self.cluster = cluster
        self.namespace = namespace
        self.demand = {}
        self.queries = 0
        self._lock = threading.Lock()
        self._pods = {}  # name -> (batch, ready workers, ready local workers)
        self._batch = 0  # counts the autoscaler's batches of queries
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                if url.path != "/api/v1/query":
                    self.send_error(404)
                    return
                query = (parse_qs(url.query).get("query") or [""])[0]
                body = json.dumps(fake.answer(query)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def set_demand(self, name, demand):
        with self._lock:
            self.demand[name] = float(demand)

    def query_count(self):
        with self._lock:
            return self.queries

    def _workers(self, name):
        """Ready workers, counted once per batch of queries: the answers of one batch (supply, workers, ...) all
        describe the same pods, as one Prometheus evaluation would. (Counted afresh for each query, the answers of one
        batch could describe different pods: a run under load remembered a capacity of 37.5 per worker — 150/4, the
        supply of 3 workers over a count of 4, most likely — and sized 7 workers where 5 were right.)"""
        with self._lock:
            cached = self._pods.get(name)
            batch = self._batch
        if cached and cached[0] == batch:
            return cached[1], cached[2]
        ready = [p for p in live_pods(self.cluster, self.namespace, worker_selector(name))
                 if any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (p.get("status") or {}).get("conditions") or [])]
        local = [p for p in ready if p["metadata"].get("labels", {}).get("sluice.dev/placement") == "local"]
        with self._lock:
            self._pods[name] = (batch, len(ready), len(local))
        return len(ready), len(local)

    @staticmethod
    def signal_of(query):
        """Which of the autoscaler's default queries this is (their PromQL: autoscaler/sources/prometheus_source.cc)."""
        if query.startswith("time() -"):
            return "freshness"
        if "sluice_client_wait_seconds_total" in query:
            return "computePerElement" if query.lstrip().startswith("(") else "stallRatio"
        for metric, name in (("sluice_client_elements_total", "demand"),
                             ("sluice_worker_elements_produced_total", "supply"),
                             ("sluice_worker_busy_seconds_total", "workerCpu"),
                             ("sluice_worker_buffered_elements", "buffered"),
                             ("sluice_dispatcher_worker_removals_total", "churn")):
            if metric in query:
                return name
        if "sluice_dispatcher_workers" in query:
            return "localWorkers" if 'placement="local"' in query else "workers"
        return None

    def value(self, signal_name, name):
        demand = self.demand[name]
        workers, local = self._workers(name)
        supply = min(demand, PER_WORKER * workers)
        return {"freshness": 1.0,
                "stallRatio": 1.0 - supply / demand if demand > 0 else 0.0,
                "computePerElement": 1.0 / demand if demand > 0 else float("nan"),
                "demand": supply,
                "supply": supply,
                "workerCpu": supply / PER_WORKER,
                "buffered": 0.0 if supply < demand else 100.0,
                "churn": 0.0,
                "workers": float(workers),
                "localWorkers": float(local)}[signal_name]

    def answer(self, query):
        signal_name = self.signal_of(query)
        with self._lock:
            self.queries += 1
            names = sorted(self.demand)
            if signal_name == "stallRatio":  # the first query of each batch (SignalQueryNames() in the source)
                self._batch += 1
        if signal_name is None:
            return {"status": "error", "errorType": "bad_data", "error": "the fake knows no query %r" % query}
        now = time.time()
        result = []
        for name in names:
            # A query for one DataService (an override) names it; a batched one gets every DataService.
            if 'dataservice="' in query and 'dataservice="%s"' % name not in query:
                continue
            v = self.value(signal_name, name)
            result.append({"metric": {"namespace": self.namespace, "dataservice": name},
                           "value": [now, "NaN" if math.isnan(v) else repr(v)]})
        return {"status": "success", "data": {"resultType": "vector", "result": result}}


# ---------------------------------------------------------------------------------------------- the autoscaler


class Autoscaler:
    """A sluice-autoscaler process of `cluster` (stopped by cluster.teardown(), or by kill())."""

    def __init__(self, cluster, name="autoscaler", args=()):
        self.cluster = cluster
        self.name = name
        defaults = ["--period=1s", "--window=2s", "--max-signal-age=30s", "--settle-time=2s", "--status-interval=5s",
                    "--keda=off"]
        # A flag given in `args` (as --name=value) replaces its default.
        given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
        self.argv = [require_binary("sluice-autoscaler"), "--kubeconfig", cluster.kubeconfig,
                     "--metrics-address", "127.0.0.1:0", "--health-address", "127.0.0.1:0", "--identity", name,
                     "--watch-namespace", NS] + [d for d in defaults if d.split("=", 1)[0] not in given] + list(args)
        self.process = None
        self.metrics_port = None

    def start(self, timeout=30.0):
        self.process = self.cluster.start_process(self.name, self.argv)

        def listening():
            if not self.process.alive():
                raise RuntimeError("%s exited:\n%s" % (self.name, self.process.log_tail()))
            match = re.search(r"msg=listening metrics_port=(\d+)", self.log())
            return int(match.group(1)) if match else None

        self.metrics_port = self.cluster.wait_for(listening, timeout, "%s to listen" % self.name)
        return self

    def log(self):
        try:
            with open(self.process.log_path, "rb") as fh:
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def metric(self, name):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            body = conn.getresponse().read().decode()
        finally:
            conn.close()
        for line in body.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{}"):
                return float(line.rpartition(" ")[2])
        return None

    def metrics(self, prefix):
        """{'name{labels}': value} of the /metrics series whose name starts with `prefix`."""
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            body = conn.getresponse().read().decode()
        finally:
            conn.close()
        out = {}
        for line in body.splitlines():
            if line.startswith(prefix):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def kill(self):
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.proc.wait()


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture
def cluster(tmp_path):
    require_binary("sluice-dispatcher")
    require_binary("sluice-worker")
    require_binary("sluice-autoscaler")
    with harness.Cluster(str(tmp_path)) as c:
        c.apply(CRD)
        c.add_node("node-1", cpu="32", memory="64Gi", image_map=image_map(), schedule=True)
        c.create_namespace(NS)
        yield c


@pytest.fixture
def prom(cluster):
    p = FakePrometheus(cluster, NS)
    yield p
    p.close()


def autoscaled(name, prom_url, max_replicas=12, **spec):
    """A DataService with autoscaling on, its metrics from the fake Prometheus (prom_url None: from the direct scrape
    of its pods), and no workers.replicas (the autoscaler owns it; docs/autoscaling.md)."""
    body = dataservice(name, workers={"resources": {"requests": {"cpu": "1", "memory": "64Mi"}},
                                      "minReplicas": 1, "maxReplicas": max_replicas}, **spec)
    del body["spec"]["workers"]["replicas"]
    body["spec"]["autoscaling"] = {"enabled": True, "targetStallRatio": 0.05, "headroom": 0.05}
    if prom_url is not None:
        body["spec"]["autoscaling"]["metrics"] = {"prometheus": {"url": prom_url}}
    return body


def expected_workers(demand):
    """What the policy's model asks for (autoscaler/policy/policy.h): true demand x (1 - target stall 0.05) x
    (1 + headroom 0.05) / per-worker capacity."""
    return math.ceil(demand * 0.95 * 1.05 / PER_WORKER - 1e-9)


def get_ds(cluster, name):
    return cluster.get(GROUP_VERSION, "DataService", name, NS)


def ready_workers(cluster, name):
    return [p for p in live_pods(cluster, NS, worker_selector(name))
            if (p.get("status") or {}).get("phase") == "Running"
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions") or [])]


def wait_workers(cluster, name, count, timeout=90):
    def done():
        live = live_pods(cluster, NS, worker_selector(name))
        ready = ready_workers(cluster, name)
        return ready if len(live) == count and len(ready) == count else None

    return cluster.wait_for(done, timeout, "%d Ready workers of %s" % (count, name))


def spec_owner(ds):
    """The managers owning spec.workers.replicas."""
    out = []
    for entry in ds["metadata"].get("managedFields") or []:
        if entry.get("subresource"):
            continue
        workers = ((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:workers") or {}
        if "f:replicas" in workers:
            out.append((entry["manager"], entry["operation"]))
    return out


def autoscaler_events(cluster, name, reason=None):
    items = cluster.client.get("/apis/events.k8s.io/v1/namespaces/%s/events" % NS)["items"]
    return [e for e in items if e["regarding"].get("name") == name and e.get("reportingController") == "sluice.dev/autoscaler"
            and (reason is None or e.get("reason") == reason)]


class ReplicaHistory:
    """Every value spec.workers.replicas takes, from a watch of the DataService started before the autoscaler."""

    def __init__(self, cluster, name):
        self.values = []
        self._client = type(cluster.client)(cluster.client.config)
        path = "/apis/%s/namespaces/%s/dataservices" % (GROUP_VERSION, NS)
        self.name = name
        start = cluster.client.get(path)
        for item in start["items"]:
            self._add(item)
        query = {"resourceVersion": start["metadata"]["resourceVersion"], "timeoutSeconds": "240"}
        self._thread = threading.Thread(target=self._run, args=(path, query), daemon=True)
        self._thread.start()

    def _add(self, obj):
        if obj["metadata"]["name"] != self.name:
            return
        value = obj["spec"]["workers"].get("replicas")
        if not self.values or self.values[-1] != value:
            self.values.append(value)

    def _run(self, path, query):
        try:
            for event in self._client.watch(path, query):
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._add(event["object"])
        except Exception:  # the cluster went away at teardown
            pass


# ---------------------------------------------------------------------------------------------- tests


def test_hybrid_autoscaled_dataservice_fills_local_slots_first_then_remote(cluster, prom):
    if cluster.real:
        pytest.skip("adds a GPU process node")
    cluster.add_node("gpu-1", cpu="8", memory="32Gi", image_map=image_map(), schedule=True,
                     labels={"sluice.e2e/gpu": "true"}, taints=["nvidia.com/gpu=present:NoSchedule"])
    # The trainer: bound to gpu-1, requesting 2 of its 8 CPUs (its image is not run here).
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0", "labels": {"app": "trainer"}},
                   "spec": {"nodeName": "gpu-1", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                            "containers": [{"name": "t", "image": "e2e/trainer:1",
                                            "resources": {"requests": {"cpu": "2"}}}]}}, NS)
    Operator(cluster, args=["--concurrency", "2"]).start()
    # (8 - 2) CPUs x localCpuFraction 0.5 / 1 CPU per worker = 3 local slots.
    cluster.apply(autoscaled("hyb", prom.url,
                             placement={"policy": "Hybrid", "localCpuFraction": 0.5,
                                        "consumerSelector": {"matchLabels": {"app": "trainer"}},
                                        "acceleratorNodeSelector": {"sluice.e2e/gpu": "true"},
                                        "localTolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}),
                  namespace=NS)
    wait_workers(cluster, "hyb", 1)
    cluster.wait_for(lambda: (get_ds(cluster, "hyb").get("status") or {}).get("localCapacity") == 3, 30,
                     "the operator to report 3 local slots")

    demand = 250.0  # 250 x 0.95 x 1.05 / 50 = 4.99: 5 workers, 3 local and 2 remote
    want = expected_workers(demand)
    prom.set_demand("hyb", demand)
    autoscaler = Autoscaler(cluster).start()

    def scaled():
        ds = get_ds(cluster, "hyb")
        w = ds["spec"]["workers"]
        written = ((ds.get("status") or {}).get("autoscaler") or {}).get("lastScaleTime")
        return ds if w.get("replicas") == want and w.get("local") == 3 and written else None

    ds = cluster.wait_for(scaled, 60, "spec.workers.replicas=%d, local=3 from the autoscaler" % want)
    assert spec_owner(ds) == [(FIELD_MANAGER, "Apply")], ds["metadata"]["managedFields"]
    status = ds["status"]["autoscaler"]
    assert status["desiredReplicas"] == want, status
    # The decision that scaled is dated; later periods, at the size already asked for, decide "none".
    assert status.get("lastScaleTime") and status["desiredLocal"] == 3, status

    # The operator carries it out: the local slots on the trainer's node first, the rest remote.
    pods = wait_workers(cluster, "hyb", want)
    nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
    local = sorted(n for n in nodes if "-worker-local-" in n)
    remote = sorted(n for n in nodes if "-worker-remote-" in n)
    assert local == ["hyb-worker-local-%d" % i for i in range(3)], nodes
    assert remote == ["hyb-worker-remote-%d" % i for i in range(want - 3)], nodes
    assert all(nodes[n] == "gpu-1" for n in local) and all(nodes[n] == "node-1" for n in remote), nodes
    cluster.wait_for(lambda: autoscaler_events(cluster, "hyb", "ScaledUp"), 30, "a ScaledUp Event")

    # With the workers running the stall is gone and the decision stands (no flapping, no further writes).
    generation = get_ds(cluster, "hyb")["metadata"]["generation"]
    start = prom.query_count()
    cluster.wait_for(lambda: prom.query_count() >= start + 40, 60, "four more decision periods")
    ds = get_ds(cluster, "hyb")
    assert ds["metadata"]["generation"] == generation
    assert ds["spec"]["workers"]["replicas"] == want and ds["spec"]["workers"]["local"] == 3
    assert autoscaler.process.alive()

    # Local capacity shrinks: another tenant arrives on gpu-1 asking for 3 CPUs. (8 - 2 - 3) x 0.5 = 1.5: one
    # local slot. The autoscaler keeps the size and moves two workers remote; the operator carries it out.
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tenant-0", "labels": {"app": "other"}},
                   "spec": {"nodeName": "gpu-1", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                            "containers": [{"name": "t", "image": "e2e/trainer:1",
                                            "resources": {"requests": {"cpu": "3"}}}]}}, NS)
    split_of = wait_split(cluster, "hyb", want, local=1)
    assert split_of == {"local": 1, "remote": want - 1}, split_of
    assert all(node == "gpu-1" for node in split_of.local_nodes) and all(
        node == "node-1" for node in split_of.remote_nodes), split_of.nodes
    # status.autoscaler follows the spec write (on a loaded machine a status write may fail and come a period later).
    def shifted_status():
        s = get_ds(cluster, "hyb")["status"]["autoscaler"]
        return s if s["desiredReplicas"] == want and s["desiredLocal"] == 1 else None

    try:
        cluster.wait_for(shifted_status, 30, "status.autoscaler desiredReplicas=%d, desiredLocal=1" % want)
    except TimeoutError as exc:
        raise AssertionError("%s: %s" % (exc, get_ds(cluster, "hyb")["status"]["autoscaler"])) from None

    # The tenant leaves: three slots again, and the autoscaler moves two workers back from remote to local.
    cluster.delete("v1", "Pod", "tenant-0", NS)
    split_of = wait_split(cluster, "hyb", want, local=3)
    assert split_of == {"local": 3, "remote": want - 3}, split_of
    assert get_ds(cluster, "hyb")["spec"]["workers"]["replicas"] == want
    assert autoscaler.process.alive()


class Split(dict):
    """Ready worker pods by placement, with the nodes they run on."""

    def __init__(self, pods):
        self.nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
        self.local_nodes = [n for name, n in self.nodes.items() if "-worker-local-" in name]
        self.remote_nodes = [n for name, n in self.nodes.items() if "-worker-remote-" in name]
        super().__init__(local=len(self.local_nodes), remote=len(self.remote_nodes))


def wait_split(cluster, name, total, local, timeout=120):
    """Waits until status.localCapacity, spec.workers.local and the Ready pods all show `local` local workers of
    `total`, and no pod is left over (terminating ones are gone)."""

    seen = {}

    def done():
        ds = get_ds(cluster, name)
        live = live_pods(cluster, NS, worker_selector(name))
        split_of = Split(ready_workers(cluster, name))
        seen.update(spec=ds["spec"]["workers"], localCapacity=(ds.get("status") or {}).get("localCapacity"),
                    autoscaler={k: v for k, v in ((ds.get("status") or {}).get("autoscaler") or {}).items()
                                if k in ("decision", "history", "desiredReplicas", "desiredLocal")},
                    live=[p["metadata"]["name"] for p in live], ready=split_of.nodes)
        if ds["spec"]["workers"].get("local") != local or (ds.get("status") or {}).get("localCapacity") != local:
            return None
        return split_of if len(live) == total and split_of == {"local": local, "remote": total - local} else None

    try:
        return cluster.wait_for(done, timeout, "%d Ready workers of %s, %d of them local" % (total, name, local))
    except TimeoutError as exc:
        raise TimeoutError("%s; last seen: %s" % (exc, json.dumps(seen))) from None


def test_sigkill_mid_decision_and_restart_neither_doubles_nor_loses_the_scaling(cluster, prom):
    Operator(cluster, args=["--concurrency", "2"]).start()
    cluster.apply(autoscaled("crash", prom.url), namespace=NS)
    wait_workers(cluster, "crash", 1)
    history = ReplicaHistory(cluster, "crash")
    generation = get_ds(cluster, "crash")["metadata"]["generation"]

    if not cluster.real:
        # Hold the autoscaler's spec apply in flight, so that the kill lands between its decision and the write.
        assert cluster.admin("GET", "stats")["faultsInjected"] == 0
        cluster.admin("POST", "faults", {"verb": "patch", "pathRegex": "/namespaces/%s/dataservices/crash$" % NS,
                                         "delaySeconds": 3, "count": 1})
    demand = 300.0
    want = expected_workers(demand)
    prom.set_demand("crash", demand)
    first = Autoscaler(cluster, name="autoscaler-1").start()
    # Its first decision has read the signals (one batched snapshot: ten queries); the apply follows at once.
    cluster.wait_for(lambda: prom.query_count() >= 10, 30, "the first autoscaler to read its signals")
    if not cluster.real:
        # The fault fires when the apply arrives (and holds it for 3 s): the kill lands while it is in flight.
        cluster.wait_for(lambda: cluster.admin("GET", "stats")["faultsInjected"] == 1, 30, "the spec apply to arrive")
    first.kill()
    if not cluster.real:
        cluster.admin("DELETE", "faults")
        assert "applied" not in first.log(), "the first autoscaler finished its write before the kill"

    Autoscaler(cluster, name="autoscaler-2").start()
    cluster.wait_for(lambda: get_ds(cluster, "crash")["spec"]["workers"].get("replicas") == want, 60,
                     "spec.workers.replicas=%d" % want)
    wait_workers(cluster, "crash", want)
    start = prom.query_count()
    cluster.wait_for(lambda: prom.query_count() >= start + 40, 60, "four more decision periods")

    ds = get_ds(cluster, "crash")
    # Exactly one change of the spec, straight to the model's size: nothing doubled, nothing lost.
    assert history.values == [1, want], history.values
    assert ds["metadata"]["generation"] == generation + 1
    assert ds["spec"]["workers"]["replicas"] == want
    assert spec_owner(ds) == [(FIELD_MANAGER, "Apply")]
    assert len(live_pods(cluster, NS, worker_selector("crash"))) == want


def lease(cluster, name):
    try:
        return cluster.client.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s" % (NS, name))
    except harness.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_two_replicas_only_the_leader_acts_and_the_standby_takes_over(cluster, prom):
    Operator(cluster, args=["--concurrency", "2"]).start()
    cluster.apply(autoscaled("lead", prom.url), namespace=NS)
    wait_workers(cluster, "lead", 1)
    election = ["--leader-elect", "--lease-namespace", NS, "--lease-name", "sluice-autoscaler-e2e",
                "--lease-duration-seconds", "4", "--renew-deadline-seconds", "3", "--retry-period-seconds", "0.5"]
    replicas = {n: Autoscaler(cluster, name=n, args=election).start() for n in ("autoscaler-a", "autoscaler-b")}
    holder = cluster.wait_for(lambda: ((lease(cluster, "sluice-autoscaler-e2e") or {}).get("spec") or {})
                              .get("holderIdentity"), 30, "a leader")
    assert holder in replicas
    leader = replicas[holder]
    standby = replicas[next(n for n in replicas if n != holder)]

    prom.set_demand("lead", 200.0)
    want = expected_workers(200.0)
    cluster.wait_for(lambda: get_ds(cluster, "lead")["spec"]["workers"].get("replicas") == want, 60,
                     "the leader to scale to %d" % want)
    cluster.wait_for(lambda: autoscaler_events(cluster, "lead", "ScaledUp"), 30, "a ScaledUp Event")
    # Only the leader acted: every Event is its, the standby applied nothing and never ran its controller.
    assert {e["reportingInstance"] for e in autoscaler_events(cluster, "lead")} == {holder}
    assert "applied" not in standby.log() and "msg=running" not in standby.log(), standby.log()
    assert leader.metric("sluice_autoscaler_leader") == 1 and standby.metric("sluice_autoscaler_leader") == 0

    # The leader dies; the standby takes the Lease once it expires and acts on the next change.
    leader.kill()
    wait_workers(cluster, "lead", want)
    prom.set_demand("lead", 300.0)
    want2 = expected_workers(300.0)
    cluster.wait_for(lambda: ((lease(cluster, "sluice-autoscaler-e2e") or {}).get("spec") or {})
                     .get("holderIdentity") == standby.name, 60, "the standby to take the Lease")
    cluster.wait_for(lambda: get_ds(cluster, "lead")["spec"]["workers"].get("replicas") == want2, 60,
                     "the new leader to scale to %d" % want2)
    # The Event follows the spec and status writes.
    cluster.wait_for(lambda: {e["reportingInstance"] for e in autoscaler_events(cluster, "lead", "ScaledUp")}
                     == {holder, standby.name}, 30, "the new leader's ScaledUp Event")
    assert standby.metric("sluice_autoscaler_leader") == 1


# ---------------------------------------------------------------------------------------------- direct scrape

# A trainer reading through the real client (its wait and step seconds reach the dispatcher's /metrics by heartbeat)
# with no compute of its own, from workers that each make a few dozen elements per second (every element is a
# 1536x1536 RGB image area-resized to 32x32 on one thread): it waits for nearly every element, on any number of
# workers. (With a 2 ms sleep per element as its "compute", one run in about twenty on a loaded machine scaled down
# in the middle of the test, before this test printed the autoscaler's log on failure; the likely cause: the sleeps'
# wake-up latency made the trainer slower than the workers, a true stall of zero.)
STALLING_TRAINER = r"""
import sys
import sluice
pipeline = {"source": {"synthetic": {"count": 1000000, "shape": [1536, 1536, 3], "dtype": "uint8", "split_size": 8}},
            "steps": [{"map": {"parallelism": 1,
                               "ops": [{"resize": {"field": "data", "size": [32, 32], "method": "area"}}]}}]}
ds = sluice.Dataset(sys.argv[1], pipeline=pipeline, sharding="dynamic", heartbeat_interval_s=0.1,
                    create_timeout_s=30.0, dispatcher_timeout_s=None)
for n, element in enumerate(ds):
    if n == 0:
        print("reading", flush=True)
"""


def scrape_status(cluster, name):
    return (get_ds(cluster, name).get("status") or {}).get("autoscaler") or {}


def autoscaler_condition(status, kind):
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def test_direct_scrape_of_real_pods_scales_a_stalling_trainer_up_holds_without_data_and_down_when_idle(cluster):
    """No Prometheus: the autoscaler scrapes the dispatcher's and the workers' /metrics at their pod IPs. A real
    client stalls on one worker: the signals come from the pods (status.autoscaler says so, with the values), the
    autoscaler scales up to maxReplicas and records the decision. The dispatcher stops answering (SIGSTOP, process
    nodes only): every signal is missing and the autoscaler holds at 2 — no scale-down on data it does not have
    (a missing series read as zero would be an idle trainer). The trainer goes: a known demand of zero, and the
    autoscaler scales down, naming the worker to remove in spec.workers.workersToDelete."""
    python_path = require_python_module()
    name = "scrape"
    Operator(cluster, args=["--concurrency", "2"]).start()
    body = autoscaled(name, None, max_replicas=2)
    body["spec"]["autoscaling"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    # The dispatcher keeps workers that missed heartbeats while it was stopped (no churn to hold on afterwards).
    body["spec"]["dispatcher"]["extraArgs"] = [a for a in body["spec"]["dispatcher"]["extraArgs"]
                                               if not a.startswith("--worker_timeout_ms")] + ["--worker_timeout_ms=30000"]
    cluster.apply(body, namespace=NS)
    wait_workers(cluster, name, 1)
    history = ReplicaHistory(cluster, name)
    dispatcher = cluster.get("v1", "Pod", name + "-dispatcher", NS)
    trainer = subprocess.Popen([sys.executable, "-c", STALLING_TRAINER, "%s:5050" % dispatcher["status"]["podIP"]],
                               stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=python_path), text=True)
    autoscaler = None
    try:
        assert trainer.stdout.readline().strip() == "reading"
        autoscaler = Autoscaler(cluster, args=["--status-interval=1s"]).start()

        # The stalling trainer: a decision up, acted on (maxReplicas 2 bounds it).
        ds = cluster.wait_for(lambda: (lambda d: d if d["spec"]["workers"].get("replicas") == 2 else None)(
            get_ds(cluster, name)), 60, "spec.workers.replicas=2 from the autoscaler")
        assert spec_owner(ds) == [(FIELD_MANAGER, "Apply")], ds["metadata"]["managedFields"]
        scaled_up = cluster.wait_for(lambda: autoscaler_events(cluster, name, "ScaledUp"), 30, "a ScaledUp Event")
        assert "1 -> 2" in scaled_up[0]["note"], scaled_up[0]
        assert re.search(r'msg="%s/%s: applied .*ScaledUp: 1 -> 2 workers"' % (NS, name), autoscaler.log()), \
            autoscaler.log()

        # With both workers scraped, the signals read from the pods are in status.autoscaler: the source, the stall
        # and the throughput, every one known; the trainer still stalls and maxReplicas holds the size.
        def both_workers_scraped():
            s = scrape_status(cluster, name)
            inputs = s.get("inputs") or {}
            return s if inputs.get("workers") == 2 and "stallRatio" in inputs else None

        status = cluster.wait_for(both_workers_scraped, 30, "status.autoscaler.inputs from both workers")
        pods = {p["metadata"]["name"] for p in wait_workers(cluster, name, 2)}
        inputs = status["inputs"]
        assert status["source"] == "direct scrape", status
        assert "missing" not in inputs, inputs
        assert inputs["stallRatio"] > 0.05 and inputs["demand"] > 0, inputs
        assert inputs["supply"] > 0 and inputs["workerCpu"] > 0 and inputs["churn"] == 0, inputs
        assert autoscaler_condition(status, "MetricsAvailable")["status"] == "True", status["conditions"]
        assert autoscaler_condition(status, "ScalingActive")["status"] == "True", status["conditions"]
        assert status["stallRatio"] == inputs["stallRatio"] and status["lastScaleTime"], status
        series = autoscaler.metrics("sluice_autoscaler_")
        labels = '{dataservice="%s",namespace="%s"}' % (name, NS)
        assert series["sluice_autoscaler_stall_ratio" + labels] > 0.05, series
        assert series['sluice_autoscaler_actions_total{dataservice="%s",direction="up",namespace="%s"}' % (name, NS)] \
            == 1, series
        errors_key = 'sluice_autoscaler_metric_errors_total{dataservice="%s",namespace="%s",source="scrape"}' % (name, NS)
        errors_before = series.get(errors_key, 0)

        if not cluster.real:
            # The dispatcher stops answering: every signal is missing, and the autoscaler holds the size.
            pid = int(dispatcher["status"]["containerStatuses"][0]["containerID"].split("://")[1])
            os.killpg(pid, signal.SIGSTOP)
            try:
                def holding():
                    s = scrape_status(cluster, name)
                    held = autoscaler_condition(s, "ScalingActive")
                    return s if held.get("status") == "False" and held.get("reason") == "HeldOnMissingData" else None

                status = cluster.wait_for(holding, 30, "ScalingActive=False, HeldOnMissingData")
                ds = get_ds(cluster, name)
                # (The metrics are recorded after the status write and the Events.)
                holding_key = 'sluice_autoscaler_holding{dataservice="%s",namespace="%s",reason="missing_metrics"}' % (
                    name, NS)
                series = cluster.wait_for(lambda: (lambda m: m if m.get(holding_key) == 1 else None)(
                    autoscaler.metrics("sluice_autoscaler_")), 30, "sluice_autoscaler_holding{reason=missing_metrics}")
            finally:
                os.killpg(pid, signal.SIGCONT)
            assert ds["spec"]["workers"]["replicas"] == 2 and not ds["spec"]["workers"].get("workersToDelete"), ds
            assert status["desiredReplicas"] == 2 and status["decision"]["direction"] == "none", status
            assert "the dispatcher's /metrics did not answer" in " ".join(status["inputs"]["missing"]), status
            metrics_available = autoscaler_condition(status, "MetricsAvailable")
            assert metrics_available["status"] == "False" and metrics_available["reason"] == "MetricsError", status
            assert series[errors_key] > errors_before, series
            cluster.wait_for(lambda: autoscaler_events(cluster, name, "Holding"), 30, "a Holding Event")

        # The trainer goes: the demand is a known zero, and the autoscaler removes a worker it names.
        trainer.kill()
        trainer.wait()
        ds = cluster.wait_for(lambda: (lambda d: d if d["spec"]["workers"].get("replicas") == 1 else None)(
            get_ds(cluster, name)), 60, "spec.workers.replicas=1 from the autoscaler")
        named = ds["spec"]["workers"].get("workersToDelete") or []
        assert len(named) == 1 and named[0] in pods, (named, pods)
        cluster.wait_for(lambda: re.search(r'msg="%s/%s: applied .*Idle: .*ScaledDown: 2 -> 1 workers"' % (NS, name),
                                           autoscaler.log()), 30, "the scale-down's log line, for an idle trainer")
        # Every value spec.workers.replicas took (the watch may trail the read above): up once, down once.
        cluster.wait_for(lambda: history.values[-1:] == [1], 30, "the watch to see replicas=1")
        assert history.values == [1, 2, 1], history.values
        assert autoscaler.process.alive()
    except (AssertionError, TimeoutError) as exc:
        # What it decided and why (each action's reasons are in its "applied" line).
        raise AssertionError("%s\nstatus.autoscaler: %s\nautoscaler log:\n%s" % (
            exc, json.dumps(scrape_status(cluster, name)), autoscaler.log() if autoscaler else "")) from exc
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
