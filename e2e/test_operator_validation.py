"""Invalid DataServices: what the CRD schema rejects at the API server, and what only the operator can judge
(reported as Degraded=True with reason InvalidSpec naming the field; nothing is created until it is fixed).
The pods are not run, so no data-plane binary is needed.
"""

import pytest

from e2e import harness
from e2e.client import ApiException
from e2e.sluice_support import CRD, GROUP_VERSION, Operator, condition, dataservice, live_pods


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with harness.Cluster(str(tmp_path_factory.mktemp("validation"))) as cluster:
        cluster.apply(CRD)
        cluster.create_namespace("bad")
        operator = Operator(cluster).start()
        yield cluster, operator


@pytest.mark.parametrize("change, field", [
    ({"workers": {"replicas": -1}}, "spec.workers.replicas"),
    ({"workers": {"replicas": 5, "maxReplicas": 4}}, "spec.workers"),
    ({"placement": {"policy": "Everywhere"}}, "spec.placement.policy"),
    ({"placement": {"policy": "LocalOnly"}}, "spec.placement"),
    ({"dispatcher": {"port": 70000}}, "spec.dispatcher.port"),
])
def test_the_schema_rejects(env, change, field):
    cluster, _ = env
    body = dataservice("rejected", **change)
    with pytest.raises(ApiException) as exc:
        cluster.client.create(cluster.client.resource_path(GROUP_VERSION, "dataservices", "bad"), body)
    assert exc.value.status == 422
    assert field in exc.value.body["message"], exc.value.body["message"]


def test_what_only_the_operator_can_judge_is_a_degraded_condition_naming_the_field(env):
    cluster, _ = env
    cluster.apply(dataservice("d", replicas=2, worker_args=["--port=1"]), namespace="bad")

    def degraded():
        ds = cluster.get(GROUP_VERSION, "DataService", "d", "bad")
        c = condition(ds, "Degraded")
        return ds if c.get("status") == "True" else None

    ds = cluster.wait_for(degraded, 30, "Degraded=True")
    c = condition(ds, "Degraded")
    assert c["reason"] == "InvalidSpec"
    assert "spec.workers.extraArgs[2]: --port is set by the operator" in c["message"]  # after the two defaults
    assert condition(ds, "Ready")["reason"] == "InvalidSpec"
    assert live_pods(cluster, "bad", "sluice.dev/dataservice=d") == []
    warnings = [e for e in cluster.client.get("/apis/events.k8s.io/v1/namespaces/bad/events")["items"]
                if e["reason"] == "InvalidSpec"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"

    # Fixed: the condition clears and the pods are created.
    cluster.apply(dataservice("d", replicas=2), namespace="bad")
    cluster.wait_for(lambda: condition(cluster.get(GROUP_VERSION, "DataService", "d", "bad"), "Degraded")
                     .get("status") == "False", 30, "Degraded=False")
    cluster.wait_for(lambda: len(live_pods(cluster, "bad", "sluice.dev/dataservice=d,sluice.dev/role=worker")) == 2,
                     30, "2 worker pods")
