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
    """/healthz, /readyz and /metrics of an operator at work; on the test API server also a dropped pod watch, which
    is re-opened and counted (dropping a watch needs the test server's admin API: that part is left out on a real
    cluster)."""
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
    assert 'sluice_operator_watch_restarts_total{resource="pods"}' in metrics
    assert "level=info component=operator msg=created" in operator.log(), "structured logs"
    if cluster.real:
        return  # dropping a watch needs the test API server's admin API

    # A dropped pod watch is re-opened and counted.
    assert metrics['sluice_operator_watch_restarts_total{resource="pods"}'] == 0
    cluster.admin("POST", "watches/close", {"pathRegex": "/pods", "abort": True})
    cluster.wait_for(lambda: operator.metrics().get('sluice_operator_watch_restarts_total{resource="pods"}', 0) >= 1,
                     30, "the pod watch restart in /metrics")


def foreign_objects(namespace):
    """A pod, a Service and a claim with the names the operator will want for DataService `r` (its first remote
    worker, its dispatcher Service and journal claim), controlled by nothing: its creates get 409 AlreadyExists."""
    labels = {"app": "not-sluice"}
    meta = lambda name: {"name": name, "namespace": namespace, "labels": labels}  # noqa: E731
    return [
        ("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta("r-worker-remote-0"),
                  "spec": {"containers": [{"name": "c", "image": "e2e/someone-else:1"}]}}),
        ("services", {"apiVersion": "v1", "kind": "Service", "metadata": meta("r-dispatcher"),
                      "spec": {"selector": labels, "ports": [{"port": 80}]}}),
        ("persistentvolumeclaims", {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                    "metadata": meta("r-dispatcher-journal"),
                                    "spec": {"accessModes": ["ReadWriteOnce"],
                                             "resources": {"requests": {"storage": "1Gi"}}}}),
    ]


def test_operator_runs_under_its_rbac_rules(cluster):
    """The operator, authenticated as its ServiceAccount and authorized only by deploy/operator/rbac.yaml, creates,
    reports on and releases a DataService, with leader election in sluice-system. Names it wants are taken at first
    by objects it does not control, so it also takes its 409 path (a GET of the pod, Service and claim it could not
    create): a right missing there is a 403 and fails the test."""
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
    foreign = foreign_objects("team")
    for plural, obj in foreign:
        cluster.client.create("/api/v1/namespaces/team/%s" % plural, obj)
    cluster.admin("PUT", "rbac", policy)
    operator = Operator(cluster, args=["--leader-elect", "--lease-namespace", "sluice-system",
                                       "--drain-timeout-seconds", "30"],
                        kubeconfig=cluster.kubeconfig_for(SERVICE_ACCOUNT)).start()
    cluster.admin("POST", "stats/reset")
    cluster.apply(dataservice("r", replicas=3, dispatcher={"journal": {"size": "1Gi"}}), namespace="team")

    def events():
        return cluster.client.get("/apis/events.k8s.io/v1/namespaces/team/events")["items"]

    # Each taken name is reported, naming the lack of a controller (what the GET after the 409 found).
    def conflicts_reported():
        notes = [e["note"] for e in events() if e["reason"] == "FailedCreate"]
        wanted = ["Pod r-worker-remote-0", "Service r-dispatcher", "PersistentVolumeClaim r-dispatcher-journal"]
        found = [w for w in wanted
                 if any("%s already exists and is not controlled by this DataService (no controller)" % w in n
                        for n in notes)]
        return notes if len(found) == len(wanted) else None

    notes = cluster.wait_for(conflicts_reported, 30, "FailedCreate events for the three taken names")
    assert not any("forbidden" in n for n in notes), notes
    # Meanwhile the names that were free are taken by the operator's own objects.
    cluster.wait_for(lambda: len(live_pods(cluster, "team", worker_selector("r"))) == 2, 30, "the two free workers")
    uid = cluster.get("sluice.dev/v1alpha1", "DataService", "r", "team")["metadata"]["uid"]
    for plural, obj in foreign:
        cluster.client.delete("/api/v1/namespaces/team/%s/%s" % (plural, obj["metadata"]["name"]))

    def controlled_by_r(api_version, kind, name):
        try:
            obj = cluster.get(api_version, kind, name, "team")
        except harness.ApiException:
            return False
        refs = [o for o in obj["metadata"].get("ownerReferences") or [] if o.get("controller")]
        return bool(refs) and refs[0]["uid"] == uid

    def created():
        ds = cluster.get("sluice.dev/v1alpha1", "DataService", "r", "team")
        pods = live_pods(cluster, "team", worker_selector("r"))
        ok = len(pods) == 3 and ds["metadata"].get("finalizers") == ["sluice.dev/drain"] and \
            (ds.get("status") or {}).get("replicas") == 3 and \
            controlled_by_r("v1", "Pod", "r-worker-remote-0") and \
            controlled_by_r("v1", "Service", "r-dispatcher") and \
            controlled_by_r("v1", "PersistentVolumeClaim", "r-dispatcher-journal")
        return ds if ok else None

    ds = cluster.wait_for(created, 60, "workers, Service and claim of its own once the names are free, "
                                       "finalizer and status")
    assert condition(ds, "Ready")["status"] == "False"  # nothing runs the pods
    lease = cluster.get("coordination.k8s.io/v1", "Lease", "sluice-operator", "sluice-system")
    assert lease["spec"]["holderIdentity"] == "operator"
    assert {"CreatedDispatcher", "CreatedService", "CreatedJournalClaim", "ScalingUp"} <= \
        {e["reason"] for e in events()}

    cluster.delete("sluice.dev/v1alpha1", "DataService", "r", "team")
    cluster.wait_for_deletion("sluice.dev/v1alpha1", "DataService", "r", "team", timeout=30)
    stats = cluster.admin("GET", "stats")
    operator_stats = stats["byClient"]["sluice-operator"]
    assert operator_stats["writes"] > 0
    assert operator_stats["byResource"].get("get pods", 0) >= 1, operator_stats["byResource"]
    assert "403" not in stats["codes"], "the operator needed a permission the ClusterRole lacks: %s" % operator.log()
