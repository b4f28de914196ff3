"""sluice-operator as a process: /healthz, /readyz, /metrics, and running under exactly the RBAC rules of
deploy/operator/rbac.yaml. No data-plane binaries are needed: the pods are created but not run.
"""

import os

import pytest

from e2e import harness
from e2e.sluice_support import CRD, Operator, condition, dataservice, live_pods, load_yaml, worker_selector

SERVICE_ACCOUNT = "system:serviceaccount:sluice-system:sluice-operator"
RBAC = os.path.join(harness.REPO, "deploy", "operator", "rbac.yaml")


@pytest.fixture
def cluster(tmp_path):
    with harness.Cluster(str(tmp_path), users={SERVICE_ACCOUNT: []}) as c:
        c.apply(CRD)
        yield c


def test_readyz_waits_for_the_caches(cluster):
    """Until its caches are synced the operator is alive (/healthz 200) but not ready (/readyz 503)."""
    if cluster.real:
        pytest.skip("injects faults through the test API server's admin API")
    cluster.admin("POST", "faults", {"verb": "list", "pathRegex": "/pods", "status": 500, "count": 0})
    operator = Operator(cluster).start()
    assert operator.http("/healthz") == (200, "ok\n")
    status, body = operator.http("/readyz")
    assert status == 503, body
    cluster.admin("DELETE", "faults")
    cluster.wait_for(lambda: operator.http("/readyz")[0] == 200, 60, "/readyz to answer 200 once pods list")


def test_probes_and_metrics(cluster):
    if cluster.real:
        pytest.skip("drops watches through the test API server's admin API")
    operator = Operator(cluster).start()
    assert operator.http("/healthz") == (200, "ok\n")
    cluster.wait_for(lambda: operator.http("/readyz")[0] == 200, 30, "/readyz to answer 200")
    cluster.create_namespace("obs")
    cluster.apply(dataservice("m", replicas=2), namespace="obs")
    cluster.wait_for(lambda: len(live_pods(cluster, "obs", worker_selector("m"))) == 2, 30, "2 worker pods")

    def reconciled():
        m = operator.metrics()
        return m if m.get('sluice_operator_reconciles_total{result="success"}', 0) >= 1 else None

    metrics = cluster.wait_for(reconciled, 30, "a successful reconcile in /metrics")
    assert metrics["sluice_operator_leader"] == 1
    assert metrics["sluice_operator_reconcile_duration_seconds_count"] >= 1
    assert "sluice_operator_workqueue_depth" in metrics
    assert metrics['sluice_operator_watch_restarts_total{resource="pods"}'] == 0

    # A dropped pod watch is re-opened and counted.
    cluster.admin("POST", "watches/close", {"pathRegex": "/pods", "abort": True})
    cluster.wait_for(lambda: operator.metrics().get('sluice_operator_watch_restarts_total{resource="pods"}', 0) >= 1,
                     30, "the pod watch restart in /metrics")
    assert "level=info component=operator msg=created" in operator.log(), "structured logs"


def test_operator_runs_under_its_rbac_rules(cluster):
    """The operator, authenticated as its ServiceAccount and authorized only by deploy/operator/rbac.yaml, creates,
    reports on and releases a DataService, with leader election in sluice-system."""
    if cluster.real:
        pytest.skip("turns deploy/operator/rbac.yaml into the test API server's policy")
    policy = {"users": {SERVICE_ACCOUNT: []}}
    for doc in load_yaml(RBAC):
        if doc["kind"] == "ClusterRole":
            policy["users"][SERVICE_ACCOUNT] += doc["rules"]
        elif doc["kind"] == "Role":
            policy["users"][SERVICE_ACCOUNT] += [dict(rule, namespaces=[doc["metadata"]["namespace"]])
                                                 for rule in doc["rules"]]
    cluster.create_namespace("sluice-system")
    cluster.create_namespace("team")
    cluster.admin("PUT", "rbac", policy)
    operator = Operator(cluster, args=["--leader-elect", "--lease-namespace", "sluice-system",
                                       "--drain-timeout-seconds", "30"],
                        kubeconfig=cluster.kubeconfig_for(SERVICE_ACCOUNT)).start()
    cluster.admin("POST", "stats/reset")
    cluster.apply(dataservice("r", replicas=3), namespace="team")

    def created():
        ds = cluster.get("sluice.dev/v1alpha1", "DataService", "r", "team")
        pods = live_pods(cluster, "team", worker_selector("r"))
        ok = len(pods) == 3 and ds["metadata"].get("finalizers") == ["sluice.dev/drain"] and \
            (ds.get("status") or {}).get("replicas") == 3
        return ds if ok else None

    ds = cluster.wait_for(created, 30, "workers, finalizer and status")
    assert condition(ds, "Ready")["status"] == "False"  # nothing runs the pods
    assert cluster.get("v1", "Service", "r-dispatcher", "team")
    lease = cluster.get("coordination.k8s.io/v1", "Lease", "sluice-operator", "sluice-system")
    assert lease["spec"]["holderIdentity"] == "operator"
    events = cluster.client.get("/apis/events.k8s.io/v1/namespaces/team/events")["items"]
    assert {"CreatedDispatcher", "CreatedService", "ScalingUp"} <= {e["reason"] for e in events}

    cluster.delete("sluice.dev/v1alpha1", "DataService", "r", "team")
    cluster.wait_for_deletion("sluice.dev/v1alpha1", "DataService", "r", "team", timeout=30)
    stats = cluster.admin("GET", "stats")
    assert stats["byClient"]["sluice-operator"]["writes"] > 0
    assert "403" not in stats["codes"], "the operator needed a permission the ClusterRole lacks: %s" % operator.log()
