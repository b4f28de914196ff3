"""The operator under failure, with real sluice-operator, sluice-dispatcher and sluice-worker processes:

- SIGKILL in the middle of creating a DataService's pods, restart: no duplicate and no orphan pod;
- injected 409/429/500 answers and dropped watches (the test API server's fault API): it converges;
- two replicas with leader election: one acts; SIGKILL the leader and the other takes over.

The fault and watch-dropping parts need the test API server and skip on a real cluster.
"""

import threading
import time

import pytest

from e2e import harness
from e2e.sluice_support import (CRD, GROUP_VERSION, Operator, condition, dataservice, image_map, live_pods,
                                require_binary, worker_selector)


@pytest.fixture
def cluster(tmp_path):
    require_binary("sluice-dispatcher")
    require_binary("sluice-worker")
    with harness.Cluster(str(tmp_path)) as c:
        c.apply(CRD)
        c.add_node("node-1", cpu="32", memory="64Gi", image_map=image_map(), schedule=True)
        yield c


def wait_ready(cluster, ns, name, replicas, timeout=60):
    def ready():
        ds = cluster.get(GROUP_VERSION, "DataService", name, ns)
        status = ds.get("status") or {}
        ok = (condition(ds, "Ready").get("status") == "True" and status.get("readyReplicas") == replicas
              and status.get("replicas") == replicas
              and status.get("observedGeneration") == ds["metadata"]["generation"]
              and len(live_pods(cluster, ns, worker_selector(name))) == replicas)
        return ds if ok else None

    return cluster.wait_for(ready, timeout, "DataService %s Ready with %d workers" % (name, replicas))


def assert_owned_pods(cluster, ns, ds, replicas, ordinals=None):
    """The dispatcher and `replicas` workers (with these ordinals, when given), all controlled by `ds`; nothing else
    in the namespace."""
    pods = cluster.client.get("/api/v1/namespaces/%s/pods" % ns)["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    for pod in live:
        owners = [o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")]
        assert owners and owners[0]["uid"] == ds["metadata"]["uid"], "orphan pod %s" % pod["metadata"]["name"]
    name = ds["metadata"]["name"]
    workers = sorted(p["metadata"]["name"] for p in live if p["metadata"]["name"] != name + "-dispatcher")
    assert len(live) == replicas + 1 and len(workers) == replicas, [p["metadata"]["name"] for p in live]
    assert all(w.startswith(name + "-worker-remote-") for w in workers), workers
    if ordinals is not None:
        assert workers == sorted("%s-worker-remote-%d" % (name, i) for i in ordinals)


class PodUids:
    """Every pod uid that ever existed in a namespace, from a watch started before anything is created."""

    def __init__(self, cluster, ns):
        self.uids = set()
        self._client = type(cluster.client)(cluster.client.config)
        start = cluster.client.get("/api/v1/namespaces/%s/pods" % ns)
        self.uids.update(p["metadata"]["uid"] for p in start["items"])
        query = {"resourceVersion": start["metadata"]["resourceVersion"], "timeoutSeconds": "120"}
        self._thread = threading.Thread(target=self._run, args=("/api/v1/namespaces/%s/pods" % ns, query), daemon=True)
        self._thread.start()

    def _run(self, path, query):
        for event in self._client.watch(path, query):
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self.uids.add(event["object"]["metadata"]["uid"])


def test_sigkill_mid_reconcile_then_restart_makes_no_duplicates_or_orphans(cluster):
    if cluster.real:
        pytest.skip("slows pod creation through the test API server's fault API to kill the operator mid-way")
    cluster.create_namespace("crash")
    operator = Operator(cluster, name="operator-1").start()
    # Each pod create takes 0.3 s, so the operator is still creating workers when it is killed.
    cluster.admin("POST", "faults", {"verb": "create", "pathRegex": "/namespaces/crash/pods$", "delaySeconds": 0.3,
                                      "count": 0})
    cluster.admin("POST", "stats/reset")
    seen = PodUids(cluster, "crash")
    cluster.apply(dataservice("c", replicas=6), namespace="crash")
    cluster.wait_for(lambda: len(live_pods(cluster, "crash", worker_selector("c"))) >= 2, 30, "the first workers")
    operator.kill()
    cluster.admin("DELETE", "faults")
    created_before = cluster.admin("GET", "stats")["byResource"].get("create pods", 0)
    assert created_before < 7, "the operator was killed before it created every pod"

    Operator(cluster, name="operator-2").start()
    ds = wait_ready(cluster, "crash", "c", 6)
    assert_owned_pods(cluster, "crash", ds, 6, ordinals=range(6))
    # Every pod was created exactly once across both operators: 7 pods ever existed, none was deleted. (A create
    # the killed operator had in flight may still land and make the new one's create of that name a 409.)
    cluster.wait_for(lambda: len(seen.uids) >= 7, 10, "the watch to report every pod")
    assert len(seen.uids) == 7
    stats = cluster.admin("GET", "stats")
    assert stats["byResource"].get("delete pods", 0) == 0, stats["byResource"]


def test_injected_api_errors_and_dropped_watches_converge(cluster):
    if cluster.real:
        pytest.skip("injects faults through the test API server's admin API")
    cluster.create_namespace("faulty")
    operator = Operator(cluster).start()
    cluster.admin("POST", "faults", [
        {"verb": "create", "pathRegex": "/namespaces/faulty/pods$", "status": 409, "count": 2},
        {"verb": "create", "pathRegex": "/namespaces/faulty/pods$", "status": 500, "count": 1},
        {"verb": "patch", "pathRegex": "/dataservices/f/status$", "status": 429, "retryAfter": 1, "count": 2},
        {"verb": "patch", "pathRegex": "/dataservices/f$", "status": 500, "count": 1},
    ])
    # Created with POST, so that the PATCH faults hit only the operator.
    cluster.client.create(cluster.client.resource_path(GROUP_VERSION, "dataservices", "faulty"),
                          dataservice("f", replicas=3))
    ds = wait_ready(cluster, "faulty", "f", 3)
    assert_owned_pods(cluster, "faulty", ds, 3)
    assert ds["metadata"]["finalizers"] == ["sluice.dev/drain"]

    # Watches torn down mid-stream and a scale-down whose first deletes fail.
    cluster.admin("POST", "watches/close", {"abort": True})
    cluster.admin("POST", "faults", {"verb": "delete", "pathRegex": "/namespaces/faulty/pods/f-worker", "status": 500,
                                      "count": 2})
    cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", "faulty", "f", "scale"),
                               {"spec": {"replicas": 1}})
    ds = wait_ready(cluster, "faulty", "f", 1)
    assert_owned_pods(cluster, "faulty", ds, 1)

    fired = cluster.admin("GET", "faults")["faults"]
    assert all(rule["remaining"] == 0 for rule in fired), fired
    metrics = operator.metrics()
    assert metrics.get('sluice_operator_api_errors_total{operation="create"}', 0) >= 3
    assert metrics['sluice_operator_reconcile_errors_total'] >= 1
    restarts = sum(v for k, v in metrics.items() if k.startswith("sluice_operator_watch_restarts_total"))
    assert restarts >= 5, "every reflector re-opened its watch"


def lease_holder(cluster):
    try:
        return cluster.get("coordination.k8s.io/v1", "Lease", "sluice-operator", "default")["spec"]
    except harness.ApiException:
        return None


def test_two_replicas_one_leader_and_failover(cluster):
    cluster.create_namespace("ha")
    timing = ["--leader-elect", "--lease-namespace", "default", "--lease-duration-seconds", "3",
              "--renew-deadline-seconds", "2", "--retry-period-seconds", "0.5"]
    replicas = {name: Operator(cluster, name=name, args=timing).start() for name in ("op-a", "op-b")}
    spec = cluster.wait_for(lambda: (lease_holder(cluster) or {}).get("holderIdentity") in replicas and
                            lease_holder(cluster), 30, "a leader")
    leader, standby = spec["holderIdentity"], ({"op-a", "op-b"} - {spec["holderIdentity"]}).pop()
    cluster.wait_for(lambda: replicas[leader].metrics().get("sluice_operator_leader") == 1, 30, "the leader acting")
    assert replicas[standby].metrics()["sluice_operator_leader"] == 0
    assert replicas[standby].http("/readyz")[0] == 200, "a standby is ready to take over"

    cluster.apply(dataservice("h", replicas=2), namespace="ha")
    wait_ready(cluster, "ha", "h", 2)
    events = cluster.client.get("/apis/events.k8s.io/v1/namespaces/ha/events")["items"]
    assert {e["reportingInstance"] for e in events} == {leader}, "only the leader acts"

    transitions = spec.get("leaseTransitions", 0)
    killed_at = time.monotonic()
    replicas[leader].kill()
    taken = cluster.wait_for(lambda: (lease_holder(cluster) or {}).get("holderIdentity") == standby and
                             lease_holder(cluster), 30, "the standby to take the Lease")
    failover = time.monotonic() - killed_at
    print("failover after SIGKILL of the leader: %.2f s (lease duration 3 s)" % failover)
    # Within the lease duration plus the standby's retry period and a margin for a loaded machine
    # (SIGKILL leaves the Lease held until it expires).
    assert failover < 3 + 0.5 + 5, "failover took %.2f s" % failover
    assert taken["leaseTransitions"] == transitions + 1
    cluster.wait_for(lambda: replicas[standby].metrics().get("sluice_operator_leader") == 1, 30, "the new leader")

    cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", "ha", "h", "scale"),
                               {"spec": {"replicas": 3}})
    ds = wait_ready(cluster, "ha", "h", 3)
    assert_owned_pods(cluster, "ha", ds, 3)

    # A rolling upgrade: a third replica waits as standby; SIGTERM of the leader stops its controller
    # first, then releases the Lease (holder cleared) so the standby need not wait for expiry, and
    # exits 0; the standby takes over and acts.
    replicas["op-c"] = Operator(cluster, name="op-c", args=timing).start()
    cluster.wait_for(lambda: replicas["op-c"].http("/readyz")[0] == 200, 30, "op-c ready as a standby")
    before = lease_holder(cluster)
    stopped_at = time.monotonic()
    code = replicas[standby].stop(grace=15)
    assert code == 0, replicas[standby].log()[-2000:]
    log = replicas[standby].log()
    assert "controller stopped; releasing the leader Lease" in log, log[-2000:]
    handed = cluster.wait_for(lambda: (lease_holder(cluster) or {}).get("holderIdentity") == "op-c" and
                              lease_holder(cluster), 30, "op-c to take the released Lease")
    print("failover after SIGTERM of the leader: %.2f s (released, no expiry wait)" % (time.monotonic() - stopped_at))
    assert handed["leaseTransitions"] == before["leaseTransitions"] + 1
    cluster.wait_for(lambda: replicas["op-c"].metrics().get("sluice_operator_leader") == 1, 30, "op-c leading")
    cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", "ha", "h", "scale"),
                               {"spec": {"replicas": 2}})
    ds = wait_ready(cluster, "ha", "h", 2)
    assert_owned_pods(cluster, "ha", ds, 2)
