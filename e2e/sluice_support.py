"""Helpers shared by the operator's end-to-end suites (e2e/test_operator_*.py).

- where the built binaries are (`$SLUICE_BINARY_DIR/bin`, else `<repo>/build/bin`) and the image map the process
  nodes use to run them (`sluice/dispatcher:e2e` -> sluice-dispatcher, `sluice/worker:e2e` -> sluice-worker);
- `Operator`: a real `sluice-operator` process (its flags, its /metrics, SIGKILL);
- DataService manifests and small waits on their status.

Against a real cluster (KUBECONFIG set) the images come from $SLUICE_E2E_DISPATCHER_IMAGE and
$SLUICE_E2E_WORKER_IMAGE and the operator still runs as a local process with that kubeconfig.
"""

import os
import re
import signal

import pytest
import yaml

from e2e.harness import REPO

GROUP_VERSION = "sluice.dev/v1alpha1"
CRD = os.path.join(REPO, "crds", "dataservices.sluice.dev.yaml")
DISPATCHER_IMAGE = os.environ.get("SLUICE_E2E_DISPATCHER_IMAGE", "sluice/dispatcher:e2e")
WORKER_IMAGE = os.environ.get("SLUICE_E2E_WORKER_IMAGE", "sluice/worker:e2e")


def binary_dir():
    env = os.environ.get("SLUICE_BINARY_DIR")
    return os.path.join(env, "bin") if env else os.path.join(REPO, "build", "bin")


def binary(name):
    """The path of a built binary, or None when it has not been built."""
    path = os.path.join(binary_dir(), name)
    return path if os.access(path, os.X_OK) else None


def require_binary(name):
    """The path of a built binary; skips the calling test (naming the binary) when it is missing."""
    path = binary(name)
    if path is None:
        message = ("%s is not built (looked for %s); build it with ninja -C <build> %s"
                   % (name, os.path.join(binary_dir(), name), name))
        if os.environ.get("SLUICE_E2E_REQUIRE_BINARIES") == "1":
            pytest.fail(message + " (this build configures it, so the suite must not skip)")
        pytest.skip(message)
    return path


def image_map():
    """Image -> binary for process nodes (only the binaries that exist)."""
    out = {}
    for image, name in ((DISPATCHER_IMAGE, "sluice-dispatcher"), (WORKER_IMAGE, "sluice-worker")):
        path = binary(name)
        if path:
            out[image] = path
    return out


def python_path():
    """PYTHONPATH entry holding the built `sluice` Python module, or None."""
    path = os.path.join(os.path.dirname(binary_dir()), "python")
    return path if os.path.isdir(os.path.join(path, "sluice")) else None


def require_python_module():
    """The PYTHONPATH entry of the built `sluice` Python module. When it is missing the calling test fails if this
    build configures the module ($SLUICE_E2E_REQUIRE_PYTHON=1, set by ctest when the sluice_python target exists;
    without that variable, $SLUICE_E2E_REQUIRE_BINARIES=1 decides), and skips otherwise."""
    path = python_path()
    if path is None:
        message = ("the sluice Python module is not built (looked for %s); build it with ninja -C <build> "
                   "sluice_python" % os.path.join(os.path.dirname(binary_dir()), "python", "sluice"))
        required = os.environ.get("SLUICE_E2E_REQUIRE_PYTHON", os.environ.get("SLUICE_E2E_REQUIRE_BINARIES"))
        if required == "1":
            pytest.fail(message + " (this build configures it, so the test must not skip)")
        pytest.skip(message)
    return path


# ---------------------------------------------------------------------------------------------- the operator


class Operator:
    """A sluice-operator process of `cluster` (stopped by cluster.teardown(), or by stop()/kill())."""

    def __init__(self, cluster, name="operator", args=(), kubeconfig=None):
        self.cluster = cluster
        self.name = name
        self.argv = [require_binary("sluice-operator"), "--kubeconfig", kubeconfig or cluster.kubeconfig,
                     "--metrics-address", "127.0.0.1:0", "--health-address", "127.0.0.1:0",
                     "--identity", name] + list(args)
        self.process = None
        self.metrics_port = None

    def start(self, timeout=30.0):
        self.process = self.cluster.start_process(self.name, self.argv)
        self.metrics_port = None

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

    def alive(self):
        return self.process is not None and self.process.alive()

    def http(self, path):
        """(status, body) of GET http://127.0.0.1:<metrics port><path>."""
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def metrics(self):
        """{'name{labels}': value} of /metrics."""
        status, body = self.http("/metrics")
        assert status == 200, body
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def kill(self):
        """SIGKILL to the whole process group, as a crash; waits for the exit."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.proc.wait()

    def stop(self, grace=10.0):
        return self.process.stop(grace)


# ---------------------------------------------------------------------------------------------- manifests


def dataservice(name, replicas=2, worker_args=(), dispatcher_args=(), **spec):
    """A RemoteOnly DataService whose pods bind their pod IP (several pods share one host on process nodes, and a
    real cluster does not mind) and use short heartbeats so that tests are quick."""
    body = {
        "dispatcher": {"image": DISPATCHER_IMAGE, "terminationGracePeriodSeconds": 5,
                       "extraArgs": ["--listen_host=$(POD_IP)", "--worker_timeout_ms=3000",
                                     "--heartbeat_interval_ms=200"] + list(dispatcher_args)},
        "workers": {"image": WORKER_IMAGE, "replicas": replicas, "terminationGracePeriodSeconds": 5,
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "extraArgs": ["--listen_host=$(POD_IP)", "--heartbeat_interval_ms=200"] + list(worker_args)},
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key].update(value)
        else:
            body[key] = value
    return {"apiVersion": GROUP_VERSION, "kind": "DataService", "metadata": {"name": name}, "spec": body}


def load_yaml(path):
    with open(path) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def condition(obj, kind):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return {}


def live_pods(cluster, namespace, selector):
    pods = cluster.client.get("/api/v1/namespaces/%s/pods" % namespace, {"labelSelector": selector})["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def worker_selector(name):
    return "sluice.dev/dataservice=%s,sluice.dev/role=worker" % name
