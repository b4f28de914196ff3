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


# What a real API server accepts although it makes no sense (recorded in dataservice-validation.json: exchange 50,
# quantities are not checked; exchange 23, a Hybrid consumerSelector {}). The operator must say so, naming the
# field and what to do, and must not act on it.
@pytest.mark.parametrize("name, change, expected", [
    ("quantities", {"dispatcher": {"journal": {"size": "big"}},
                    "workers": {"resources": {"requests": {"cpu": "two", "memory": "lots"}}}},
     ['spec.dispatcher.journal.size: invalid quantity "big"',
      'spec.workers.resources.requests.cpu: invalid quantity "two"',
      'spec.workers.resources.requests.memory: invalid quantity "lots"',
      "expected a number with an optional suffix such as 500m, 2, 1.5, 1Gi or 4e3"]),
    ("emptysel", {"placement": {"policy": "Hybrid", "consumerSelector": {}}},
     ["spec.placement.consumerSelector: must not be empty",
      "select the trainer pods with matchLabels or matchExpressions, or use policy RemoteOnly"]),
    ("overlimit", {"workers": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}},
     ["spec.workers.resources.requests.cpu: 2 is above the limit 1 (spec.workers.resources.limits.cpu)",
      "lower the request or raise the limit"]),
])
def test_what_the_server_accepts_but_makes_no_sense_is_reported_and_not_acted_on(env, name, change, expected):
    cluster, _ = env
    created = cluster.client.create(cluster.client.resource_path(GROUP_VERSION, "dataservices", "bad"),
                                    dataservice(name, replicas=2, **change))
    assert created["metadata"]["name"] == name  # the API server takes it

    def degraded():
        ds = cluster.get(GROUP_VERSION, "DataService", name, "bad")
        return ds if condition(ds, "Degraded").get("status") == "True" else None

    ds = cluster.wait_for(degraded, 30, "Degraded=True for %s" % name)
    c = condition(ds, "Degraded")
    assert c["reason"] == "InvalidSpec"
    for text in expected:
        assert text in c["message"], c["message"]
    assert condition(ds, "Ready")["reason"] == "InvalidSpec"
    warnings = [e for e in cluster.client.get("/apis/events.k8s.io/v1/namespaces/bad/events")["items"]
                if e["reason"] == "InvalidSpec" and e["regarding"]["name"] == name]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    for text in expected:
        assert text in warnings[0]["note"]
    assert live_pods(cluster, "bad", "sluice.dev/dataservice=%s" % name) == []
    assert cluster.client.get("/api/v1/namespaces/bad/services",
                              {"labelSelector": "sluice.dev/dataservice=%s" % name})["items"] == []
    cluster.delete(GROUP_VERSION, "DataService", name, "bad")
    cluster.wait_for_deletion(GROUP_VERSION, "DataService", name, "bad")
