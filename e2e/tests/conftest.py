"""Shared fixtures: an in-process test API server per module and a client for it."""

import pytest

from e2e.apiserver import ApiServer, Config
from e2e.client import KubeClient, KubeConfig

WIDGETS = "/apis/test.sluice.dev/v1/namespaces/%s/widgets"

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.sluice.dev"},
    "spec": {
        "group": "test.sluice.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                     "statusReplicasPath": ".status.replicas",
                                                     "labelSelectorPath": ".status.selector"}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "required": ["image"],
                        "x-kubernetes-validations": [
                            {"rule": "self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
                             "message": "replicas must be within [minReplicas, maxReplicas]"},
                            {"rule": "self.policy == 'LocalOnly' ? !has(self.remoteSelector) : true",
                             "message": "LocalOnly widgets take no remoteSelector"},
                            {"rule": "size(self.workersToDelete) <= 3"},
                        ],
                        "properties": {
                            "image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"},
                            "replicas": {"type": "integer", "default": 1, "minimum": 0},
                            "minReplicas": {"type": "integer", "default": 0, "minimum": 0},
                            "maxReplicas": {"type": "integer", "default": 10, "maximum": 100},
                            "policy": {"type": "string", "enum": ["Hybrid", "RemoteOnly", "LocalOnly"],
                                       "default": "Hybrid"},
                            "remoteSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                            "workersToDelete": {"type": "array", "items": {"type": "string"}, "maxItems": 5,
                                                "default": []},
                            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
                        },
                    },
                    "status": {
                        "type": "object",
                        "properties": {
                            "replicas": {"type": "integer"},
                            "selector": {"type": "string"},
                            "observedGeneration": {"type": "integer"},
                            "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                                           "x-kubernetes-list-map-keys": ["type"],
                                           "items": {"type": "object", "required": ["type", "status"],
                                                     "properties": {"type": {"type": "string"},
                                                                    "status": {"type": "string"},
                                                                    "reason": {"type": "string"}}}},
                        },
                    },
                },
            }},
        }],
    },
}


def widget(name, ns="default", **spec):
    body = {"image": "sluice/worker:dev"}
    body.update(spec)
    return {"apiVersion": "test.sluice.dev/v1", "kind": "Widget", "metadata": {"name": name, "namespace": ns},
            "spec": body}


@pytest.fixture(scope="module")
def server():
    srv = ApiServer(Config(port=0, history_size=200)).start()
    yield srv
    srv.shutdown()


@pytest.fixture(scope="module")
def kube(server):
    client = KubeClient(KubeConfig(server.url), user_agent="e2e-tests/1.0")
    client.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
    yield client
    client.close()


_counter = [0]


@pytest.fixture
def ns(kube):
    """A fresh namespace per test."""
    _counter[0] += 1
    name = "t%d" % _counter[0]
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name
