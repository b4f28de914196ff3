"""The e2e harness: local clusters, real-cluster mode via KUBECONFIG, apply/wait helpers, and the repo's CRD."""

import glob
import os

import pytest
import yaml

from e2e import harness
from e2e.client import ApiException, KubeClient

CONFIGMAPS = """
apiVersion: v1
kind: ConfigMap
metadata: {name: one}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: two}
data: {k: w}
"""


def test_local_cluster_lifecycle(tmp_path):
    cluster = harness.Cluster(str(tmp_path), kubeconfig="").start()
    try:
        assert not cluster.real and cluster.server.alive()
        client = KubeClient.from_kubeconfig(cluster.kubeconfig)
        assert client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
        client.close()
        cluster.create_namespace("h1")
        applied = cluster.apply(CONFIGMAPS, namespace="h1")
        assert [o["metadata"]["name"] for o in applied] == ["one", "two"]
        assert cluster.get("v1", "ConfigMap", "two", "h1")["data"] == {"k": "w"}
        again = cluster.apply(CONFIGMAPS.replace("{k: w}", "{k: x}"), namespace="h1")
        assert again[1]["data"] == {"k": "x"}, "apply updates in place"
        cluster.delete("v1", "ConfigMap", "one", "h1")
        cluster.wait_for_deletion("v1", "ConfigMap", "one", "h1")
        with pytest.raises(TimeoutError):
            cluster.wait_for(lambda: False, 0.2, "something that never happens")
        server = cluster.server
    finally:
        cluster.teardown()
    assert not server.alive()


def test_tls_cluster_and_a_reused_workdir(tmp_path):
    """tls=True serves HTTPS with a certificate for 127.0.0.1 that the kubeconfigs trust; a second cluster in the
    same workdir waits for its own server's port, not the port file the first one left."""
    first = harness.Cluster(str(tmp_path), kubeconfig="", tls=True, users={"alice": []}).start()
    try:
        assert first.url.startswith("https://127.0.0.1:")
        with open(first.kubeconfig) as fh:
            doc = yaml.safe_load(fh)
        assert doc["clusters"][0]["cluster"]["certificate-authority"] == first.ca_file
        client = KubeClient.from_kubeconfig(first.kubeconfig)
        assert client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
        client.close()
        with open(first.kubeconfig_for("alice")) as fh:
            assert yaml.safe_load(fh)["clusters"][0]["cluster"]["certificate-authority"] == first.ca_file
    finally:
        first.teardown()
    second = harness.Cluster(str(tmp_path), kubeconfig="").start()
    try:
        assert second.url.startswith("http://") and second.url != first.url
        assert second.client.get("/api/v1/namespaces/default")["metadata"]["name"] == "default"
    finally:
        second.teardown()


def test_kubeconfig_means_a_real_cluster(tmp_path, monkeypatch):
    with harness.Cluster(str(tmp_path / "local"), kubeconfig="") as local:
        monkeypatch.setenv("KUBECONFIG", local.kubeconfig)
        remote = harness.Cluster(str(tmp_path / "remote")).start()
        try:
            assert remote.real and remote.server is None
            assert remote.add_node("n1") is None, "no process nodes against a real cluster"
            remote.create_namespace("viaremote")
            assert local.get("v1", "Namespace", "viaremote")["status"]["phase"] == "Active"
        finally:
            remote.teardown()


def test_repository_crd_and_examples_are_accepted(tmp_path):
    repo = harness.REPO
    crds = sorted(glob.glob(os.path.join(repo, "crds", "*.yaml")))
    examples = sorted(glob.glob(os.path.join(repo, "examples", "dataservice-*.yaml")))
    assert crds and examples, "the repository ships CRDs and DataService examples"
    with harness.Cluster(str(tmp_path), kubeconfig="") as cluster:
        for path in crds:
            cluster.apply(path)
        for path in examples:
            for obj in cluster.apply(path, namespace="default"):
                assert obj["metadata"]["uid"]
        sample = [d for d in yaml.safe_load_all(open(examples[0])) if d and d.get("kind") == "DataService"][0]
        sample["metadata"]["name"] = "broken"
        workers = sample["spec"].setdefault("workers", {})
        workers.update({"minReplicas": 5, "maxReplicas": 2, "replicas": 3})
        with pytest.raises(ApiException) as exc:
            cluster.apply(sample, namespace="default")
        assert exc.value.status == 422, "the CRD's CEL rules are enforced"
        # The 52-character DNS-1035 name rule the docs promise is the CRD's own (its metadata schema).
        sample["spec"]["workers"] = {"image": "sluice/worker:dev"}
        for name, ok in (("a" * 52, True), ("a" * 53, False), ("9lives", False), ("with.dots", False)):
            sample["metadata"]["name"] = name
            if ok:
                cluster.apply(sample, namespace="default")
                continue
            with pytest.raises(ApiException) as exc:
                cluster.apply(sample, namespace="default")
            fields = [c["field"] for c in exc.value.body["details"]["causes"]]
            assert exc.value.status == 422 and "metadata.name" in fields and \
                set(fields) <= {"metadata.name", "<nil>"}, (name, exc.value.body)
