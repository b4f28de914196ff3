"""The operator under failure, with real sluice-operator, sluice-dispatcher and sluice-worker processes:

- SIGKILL in the middle of creating a DataService's pods, restart: no duplicate and no orphan pod;
- injected 409/429/500 answers and dropped watches (the test API server's fault API): it converges;
- two replicas with leader election: one acts; SIGKILL the leader and the other takes over at its first attempt
  after the dead leader's lease expired by its own observation (checked from its debug log and the Lease, never
  against a time limit); SIGTERM releases the Lease and a standby takes it at once.

The fault and watch-dropping parts need the test API server and skip on a real cluster.
"""

import datetime
import re
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


def micro_time(text):
    """Microseconds since the epoch (an int, so comparisons are exact) of a Kubernetes MicroTime
    ("2026-11-22T00:00:02.000000Z")."""
    when = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1000000 + delta.microseconds


SECOND = 1000000  # in micro_time units


_ATTEMPT = re.compile(r'msg="lease attempt" outcome=(\S+) holder=("[^"]*"|\S+) at=(\S+) observed_change=(\S+) '
                      r'expires=(\S+)')


def lease_attempts(operator):
    """The operator's acquire/renew attempts from its debug log, in order: outcome, holder it read, and (its own
    clock) when it made the attempt, when it first saw that Lease record and when that record expires for it."""
    out = []
    for m in _ATTEMPT.finditer(operator.log()):
        out.append({"outcome": m.group(1), "holder": m.group(2).strip('"'), "at": micro_time(m.group(3)),
                    "observed_change": micro_time(m.group(4)), "expires": micro_time(m.group(5))})
    return out


def logged_acquisition(cluster, operator):
    """The operator's attempts once it has logged an acquisition: the Lease changes when its PUT is answered,
    before the operator writes the line saying so, so a test that saw the Lease change waits for the line."""
    def attempts():
        found = lease_attempts(operator)
        return found if any(a["outcome"] == "acquired" for a in found) else None
    return cluster.wait_for(attempts, 30, "the acquisition in the log of %s" % operator.name)


def first_acquisition(attempts):
    """(index, attempt) of the first 'acquired' attempt."""
    for i, a in enumerate(attempts):
        if a["outcome"] == "acquired":
            return i, a
    raise AssertionError("no acquisition among %r" % attempts)


class LeaseVersions:
    """Every version of the sluice-operator Lease in `default` from now on (a watch from a list's resourceVersion)."""

    def __init__(self, cluster):
        self.specs = []
        self._client = type(cluster.client)(cluster.client.config)
        path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
        start = cluster.client.get(path, {"fieldSelector": "metadata.name=sluice-operator"})
        self.specs += [item["spec"] for item in start["items"]]
        query = {"fieldSelector": "metadata.name=sluice-operator", "resourceVersion": start["metadata"]["resourceVersion"],
                 "timeoutSeconds": "120"}
        self._thread = threading.Thread(target=self._run, args=(path, query), daemon=True)
        self._thread.start()

    def _run(self, path, query):
        for event in self._client.watch(path, query):
            if event["type"] in ("ADDED", "MODIFIED"):
                self.specs.append(event["object"]["spec"])

    def last_renewal_by(self, holder):
        renewals = [s for s in self.specs if s.get("holderIdentity") == holder]
        assert renewals, "no Lease version held by %s in %r" % (holder, self.specs)
        return renewals[-1]


def test_two_replicas_one_leader_and_failover(cluster):
    cluster.create_namespace("ha")
    lease_seconds, retry_seconds = 3, 0.5
    lease, retry = lease_seconds * SECOND, int(retry_seconds * SECOND)
    timing = ["--leader-elect", "--lease-namespace", "default", "--lease-duration-seconds", str(lease_seconds),
              "--renew-deadline-seconds", "2", "--retry-period-seconds", str(retry_seconds),
              "--log-level", "debug"]  # debug: every lease attempt is logged
    replicas = {name: Operator(cluster, name=name, args=timing).start() for name in ("op-a", "op-b")}
    spec = cluster.wait_for(lambda: (lease_holder(cluster) or {}).get("holderIdentity") in replicas and
                            lease_holder(cluster), 30, "a leader")
    leader, standby = spec["holderIdentity"], ({"op-a", "op-b"} - {spec["holderIdentity"]}).pop()
    cluster.wait_for(lambda: replicas[leader].metrics().get("sluice_operator_leader") == 1, 30, "the leader acting")
    assert replicas[standby].metrics()["sluice_operator_leader"] == 0
    # The standby's admin server listens before it has loaded its configuration (it answers 503
    # "starting" until then); once it waits for the Lease it is ready to take over.
    cluster.wait_for(lambda: replicas[standby].http("/readyz")[0] == 200, 30, "the standby ready to take over")

    cluster.apply(dataservice("h", replicas=2), namespace="ha")
    wait_ready(cluster, "ha", "h", 2)
    # Only the leader acts: every Event our operators reported carries its identity. (Filtered by
    # reportingController: on a real cluster the scheduler and kubelets report Events of their own.)
    events = [e for e in cluster.client.get("/apis/events.k8s.io/v1/namespaces/ha/events")["items"]
              if e.get("reportingController") == "sluice.dev/operator"]
    assert events, "the leader reported no Events"
    assert {e["reportingInstance"] for e in events} == {leader}, "only the leader acts"

    versions = LeaseVersions(cluster)
    transitions = lease_holder(cluster).get("leaseTransitions", 0)
    killed_at = time.monotonic()
    replicas[leader].kill()
    taken = cluster.wait_for(lambda: (lease_holder(cluster) or {}).get("holderIdentity") == standby and
                             lease_holder(cluster), 30, "the standby to take the Lease")
    print("failover after SIGKILL of the leader: %.2f s (lease duration %d s, retry period %.1f s)"
          % (time.monotonic() - killed_at, lease_seconds, retry_seconds))
    assert taken["leaseTransitions"] == transitions + 1

    # The lease semantics, from the standby's own log of its attempts and from the Lease (no timing threshold):
    attempts = logged_acquisition(cluster, replicas[standby])
    index, acquired = first_acquisition(attempts)
    assert index > 0, "the standby acquired at its first attempt: %r" % attempts
    # - it took the Lease over from the killed leader (a SIGKILL releases nothing) ...
    assert acquired["holder"] == leader, attempts
    # - ... not before that leader's last record had expired by its own observation ...
    assert acquired["at"] >= acquired["expires"] == acquired["observed_change"] + lease, acquired
    # - ... and at its first attempt after the expiry: the attempt before saw the same record, not yet expired.
    previous = attempts[index - 1]
    assert previous["outcome"] == "held" and previous["holder"] == leader, attempts[:index + 1]
    assert previous["observed_change"] == acquired["observed_change"] and previous["at"] < previous["expires"]
    # - attempts at least a retry period apart: at most lease/retry + 1 of them saw that last record.
    saw_last_record = [a for a in attempts[:index + 1] if a["observed_change"] == acquired["observed_change"]]
    assert len(saw_last_record) <= lease // retry + 1, saw_last_record
    # - the Lease agrees: the standby's acquireTime is at least a lease duration after the leader's last
    #   renewTime, which the standby cannot have seen before it was written.
    last = versions.last_renewal_by(leader)
    assert micro_time(taken["acquireTime"]) - micro_time(last["renewTime"]) >= lease, (last, taken)
    assert acquired["observed_change"] >= micro_time(last["renewTime"]), (acquired, last)
    print("  the standby waited %d attempts on the leader's last record; acquired %.2f s after its last renewal"
          % (len(saw_last_record) - 1, (micro_time(taken["acquireTime"]) - micro_time(last["renewTime"])) / SECOND))
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
    cluster.wait_for(lambda: any(a["outcome"] == "held" for a in lease_attempts(replicas["op-c"])), 30,
                     "op-c to see the Lease held")
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
    # op-c took the released record (no holder) at its first attempt after the release: no expiry wait.
    attempts = logged_acquisition(cluster, replicas["op-c"])
    index, acquired = first_acquisition(attempts)
    assert index > 0 and acquired["holder"] == "", attempts[:index + 1]
    assert attempts[index - 1]["outcome"] == "held" and attempts[index - 1]["holder"] == standby, attempts[:index + 1]
    cluster.wait_for(lambda: replicas["op-c"].metrics().get("sluice_operator_leader") == 1, 30, "op-c leading")
    cluster.client.merge_patch(cluster.client.resource_path(GROUP_VERSION, "dataservices", "ha", "h", "scale"),
                               {"spec": {"replicas": 2}})
    ds = wait_ready(cluster, "ha", "h", 2)
    assert_owned_pods(cluster, "ha", ds, 2)
