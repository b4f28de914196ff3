"""The operator as the Helm chart installs it, driven with kubectl the way a platform team would.

On the test API server (no KUBECONFIG): `helm template` of helm/sluice, the objects the test server serves applied
with `kubectl apply --server-side` (its CRD, Namespace, Deployment, Service), the chart's RBAC turned into the test
server's policy for the operator's ServiceAccount (the test server has no rbac.authorization.k8s.io nor
ServiceAccounts: its policy is how it authorizes, and a right the chart lacks is a 403), and sluice-operator
started with exactly the command and args of the rendered Deployment as applied (only its listen addresses moved
to kernel-picked loopback ports) — the built binary, or with SLUICE_E2E_OPERATOR_FROM_IMAGE=1 the image
scripts/images.sh built, run under podman as the chart's securityContext says. A process node runs the pods.

On a real cluster (KUBECONFIG set): `helm install` of the chart (image from $SLUICE_E2E_IMAGE, default
localhost/sluice:<chart appVersion>) into $SLUICE_E2E_RELEASE_NAMESPACE (default sluice-system), and the
cluster's nodes run the pods ($SLUICE_E2E_DISPATCHER_IMAGE / $SLUICE_E2E_WORKER_IMAGE).

Then, both ways: examples/dataservice-minimal.yaml (images and listen flags set for this environment) is applied
with kubectl, becomes Ready, serves the Python client, scales with `kubectl scale`, survives the operator being
killed and started again (same pods, still Ready), and `kubectl delete` removes it, its pods and its finalizer.
The autoscaler's part runs only when build/bin/sluice-autoscaler exists.
"""

import collections
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

import pytest
import yaml

from e2e import harness
from e2e.sluice_support import (GROUP_VERSION, DISPATCHER_IMAGE, WORKER_IMAGE, Operator, binary, condition,
                                image_map, live_pods, require_binary, require_python_module, worker_selector)

REPO = harness.REPO
TOOLS = os.environ.get("SLUICE_TOOLS_DIR") or os.path.join(REPO, ".tools")
HELM = os.path.join(TOOLS, "bin", "helm")
KUBECTL = os.path.join(TOOLS, "bin", "kubectl")
CHART = os.path.join(REPO, "helm", "sluice")
EXAMPLE = os.path.join(REPO, "examples", "dataservice-minimal.yaml")
RELEASE = "sluice"
RELEASE_NS = os.environ.get("SLUICE_E2E_RELEASE_NAMESPACE", "sluice-system")
NS = "helm-e2e"
OPERATOR_SA = "system:serviceaccount:%s:sluice-operator" % RELEASE_NS
AUTOSCALER_SA = "system:serviceaccount:%s:sluice-autoscaler" % RELEASE_NS
OPERATOR_SELECTOR = "app.kubernetes.io/component=operator,app.kubernetes.io/instance=" + RELEASE
# Kinds of the chart the test API server does not serve: its admin RBAC policy stands in for them.
RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
NOT_SERVED = RBAC_KINDS | {"ServiceAccount"}
DEADLINE_S = 90
CLIENT = r"""
import json, sys
import sluice
ds = sluice.Dataset(sys.argv[1], pipeline={"source": {"range": {"stop": int(sys.argv[2]), "split_size": 16}}},
                    heartbeat_interval_s=0.1, create_timeout_s=30.0)
print(json.dumps({"values": [int(e["value"]) for e in ds], "stats": ds.stats()}), flush=True)
"""


def tool(path, name):
    """The path of helm or kubectl; missing, it fails the suite under ctest ($SLUICE_E2E_REQUIRE_BINARIES=1) and
    skips it otherwise."""
    if not os.access(path, os.X_OK):
        message = "%s is missing: scripts/setup.sh installs %s into .tools/bin (or set SLUICE_TOOLS_DIR)" % (path, name)
        if os.environ.get("SLUICE_E2E_REQUIRE_BINARIES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def run(argv, env=None, check=True, stdin=None, timeout=120):
    r = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (" ".join(argv), r.returncode, r.stdout, r.stderr))
    return r


def chart_app_version():
    with open(os.path.join(CHART, "Chart.yaml")) as fh:
        return str(yaml.safe_load(fh)["appVersion"])


def rendered_image():
    """The image the rendered Deployments should name: SLUICE_E2E_IMAGE, else the one scripts/images.sh built."""
    if os.environ.get("SLUICE_E2E_IMAGE"):
        return os.environ["SLUICE_E2E_IMAGE"]
    build = os.environ.get("SLUICE_BINARY_DIR") or os.path.join(REPO, "build")
    path = os.path.join(build, "images", "image.env")
    if os.path.exists(path):
        with open(path) as fh:
            found = dict(line.strip().split("=", 1) for line in fh if "=" in line).get("SLUICE_IMAGE")
        if found:
            return found
    return "localhost/sluice:" + chart_app_version()


def values_for_this_environment(autoscaler):
    repo, _, tag = rendered_image().rpartition(":")
    sets = ["image.repository=" + repo, "image.tag=" + tag, "image.pullPolicy=IfNotPresent",
            # Short drain polls so that deletion is quick; the flags go through operator.extraArgs unchanged.
            "operator.extraArgs[0]=--drain-poll-seconds=0.3", "operator.extraArgs[1]=--drain-timeout-seconds=60"]
    if autoscaler:
        sets += ["autoscaler.enabled=true", "prometheus.url=http://127.0.0.1:9"]
    return sets


class Kubectl:
    """kubectl with the cluster's kubeconfig. On the test API server, which serves no /openapi/v3, client-side
    schema validation is off (--validate=false); on a real cluster kubectl validates (fieldValidation=Strict)."""

    def __init__(self, cluster):
        self.env = dict(os.environ, KUBECONFIG=cluster.kubeconfig)
        self.validate = [] if cluster.real else ["--validate=false"]
        tool(KUBECTL, "kubectl")

    def __call__(self, *args, check=True, stdin=None, timeout=120):
        return run([KUBECTL] + list(args), env=self.env, check=check, stdin=stdin, timeout=timeout)

    def apply(self, path, *args):
        return self("apply", "--server-side", "--field-manager=sluice-e2e", *self.validate, "-f", path, *args)

    def json(self, *args):
        return json.loads(self(*args, "-o", "json").stdout)


def policy_for(objects):
    """The test API server's policy granting each ServiceAccount what the rendered bindings grant it."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    users = {}
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = b["roleRef"]
        role = roles[(ref["kind"], b["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"])]
        for s in b["subjects"]:
            user = users.setdefault("system:serviceaccount:%s:%s" % (s["namespace"], s["name"]), [])
            for rule in role["rules"]:
                user.append(dict(rule, namespaces=[b["metadata"]["namespace"]])
                            if b["kind"] == "RoleBinding" else rule)
    return {"users": users}


def deployment_container(kubectl, name):
    """(command, args, env, pod securityContext, container securityContext) of a Deployment as the server has it."""
    deployment = kubectl.json("-n", RELEASE_NS, "get", "deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c.get("env") or []}
    return c["command"], c.get("args") or [], env, pod.get("securityContext") or {}, c.get("securityContext") or {}


def local_args(args):
    """The Deployment's args with its listen addresses moved to loopback ports the kernel picks."""
    kept = [a for a in args if not a.startswith(("--metrics-address=", "--health-address="))]
    return kept + ["--metrics-address=127.0.0.1:0", "--health-address=127.0.0.1:0"]


class ChartOperator(Operator):
    """The operator of the rendered Deployment: the built binary, or the image under podman
    (SLUICE_E2E_OPERATOR_FROM_IMAGE=1), authenticated as the chart's ServiceAccount."""

    def __init__(self, cluster, kubectl, kubeconfig, identity):
        command, args, _, psc, sc = deployment_container(kubectl, "sluice-operator")
        assert command == ["sluice-operator"], command
        self.chart_args = args
        super().__init__(cluster, name=identity)
        if os.environ.get("SLUICE_E2E_OPERATOR_FROM_IMAGE") == "1":
            # runc and explicit ulimits on this host (worker-image/containers.conf); podman inherits it.
            os.environ.setdefault("CONTAINERS_CONF", os.path.join(REPO, "worker-image", "containers.conf"))
            assert sc.get("readOnlyRootFilesystem") and sc["capabilities"]["drop"] == ["ALL"]
            self.argv = ["podman", "run", "--rm", "--name", "%s-%d" % (identity, os.getpid()),
                         "--network", "host", "--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                         "--user", "%d:%d" % (psc["runAsUser"], psc["runAsGroup"]),
                         "--volume", "%s:/var/run/sluice/kubeconfig:ro" % kubeconfig,
                         "--volume", "%s:%s:ro" % (cluster.ca_file, cluster.ca_file),
                         "--env", "POD_NAME=" + identity, rendered_image()] + command + local_args(args) + \
                        ["--kubeconfig=/var/run/sluice/kubeconfig", "--identity=" + identity]
        else:
            self.argv = [require_binary("sluice-operator")] + local_args(args) + \
                        ["--kubeconfig=" + kubeconfig, "--identity=" + identity]

    def kill(self):
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.proc.wait()
        if self.argv[0] == "podman":
            run(["podman", "rm", "--force", self.argv[4]], check=False)


class Env:
    def __init__(self, cluster, kubectl, objects):
        self.cluster, self.kubectl, self.objects = cluster, kubectl, objects
        self.operator = None
        self.operator_kubeconfig = None
        self.restarts = 0

    def start_operator(self):
        if self.cluster.real:
            return
        self.restarts += 1
        self.operator = ChartOperator(self.cluster, self.kubectl, self.operator_kubeconfig,
                                      "sluice-operator-e2e-%d" % self.restarts).start(DEADLINE_S)

    def ds(self, name="mnist"):
        return self.cluster.get(GROUP_VERSION, "DataService", name, NS)


def render(autoscaler=False):
    r = run([tool(HELM, "helm"), "template", RELEASE, CHART, "--namespace", RELEASE_NS, "--include-crds"]
            + sum((["--set", s] for s in values_for_this_environment(autoscaler)), []))
    return r.stdout, [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("helm"))
    with harness.Cluster(workdir, users={OPERATOR_SA: [], AUTOSCALER_SA: []}, tls=True) as cluster:
        kubectl = Kubectl(cluster)
        text, objects = render(autoscaler=binary("sluice-autoscaler") is not None)
        e = Env(cluster, kubectl, objects)
        if cluster.real:
            run([HELM, "upgrade", "--install", RELEASE, CHART, "--namespace", RELEASE_NS, "--create-namespace",
                 "--wait", "--timeout", "180s"] + sum((["--set", s] for s in values_for_this_environment(False)), []),
                env=kubectl.env, timeout=240)
            cluster.create_namespace(NS)
            yield e
            # The test namespace goes first, while the installed operator still releases finalizers.
            kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s", "--ignore-not-found", timeout=150)
            cluster.namespaces = [n for n in cluster.namespaces if n != NS]
            run([HELM, "uninstall", RELEASE, "--namespace", RELEASE_NS, "--wait"], env=kubectl.env, check=False)
            return
        require_binary("sluice-dispatcher")
        require_binary("sluice-worker")
        served = [o for o in objects if o["kind"] not in NOT_SERVED]
        namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in (RELEASE_NS, NS)]
        path = os.path.join(workdir, "rendered-served.yaml")
        with open(path, "w") as fh:
            yaml.safe_dump_all(namespaces + served, fh, sort_keys=False)
        kubectl.apply(path)
        kubectl("wait", "--for=condition=Established", "crd/dataservices.sluice.dev", "--timeout=60s")
        cluster.admin("PUT", "rbac", policy_for(objects))
        e.operator_kubeconfig = cluster.kubeconfig_for(OPERATOR_SA)
        os.chmod(e.operator_kubeconfig, 0o644)  # readable by the image's UID when run under podman
        cluster.add_node("node-1", cpu="32", memory="64Gi", image_map=dict(image_map(), **{
            "sluice-dispatcher:dev": binary("sluice-dispatcher"), "sluice-worker:dev": binary("sluice-worker")}),
            schedule=True)
        e.start_operator()
        yield e


def example_for_this_environment(cluster, path):
    """examples/dataservice-minimal.yaml with this environment's images, pods binding their pod IP (several share a
    host on a process node) and short heartbeats."""
    with open(EXAMPLE) as fh:
        (doc,) = [d for d in yaml.safe_load_all(fh) if d]
    spec = doc["spec"]
    if cluster.real:
        spec["dispatcher"]["image"], spec["workers"]["image"] = DISPATCHER_IMAGE, WORKER_IMAGE
    spec["dispatcher"].update(terminationGracePeriodSeconds=5, extraArgs=[
        "--listen_host=$(POD_IP)", "--worker_timeout_ms=3000", "--heartbeat_interval_ms=200"])
    spec["workers"].update(terminationGracePeriodSeconds=5, resources={"requests": {"cpu": "100m", "memory": "64Mi"}},
                           extraArgs=["--listen_host=$(POD_IP)", "--heartbeat_interval_ms=200"])
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    return path, doc["metadata"]["name"]


def wait_ready(e, replicas, timeout=DEADLINE_S):
    def ready():
        ds = e.ds()
        status = ds.get("status") or {}
        ok = (condition(ds, "Ready").get("status") == "True" and status.get("readyReplicas") == replicas
              and status.get("replicas") == replicas
              and status.get("observedGeneration") == ds["metadata"]["generation"])
        return ds if ok else None

    return e.cluster.wait_for(ready, timeout, "DataService mnist Ready with %d workers" % replicas)


def pod_uids(e):
    pods = e.cluster.client.get("/api/v1/namespaces/%s/pods" % NS, {"labelSelector": "sluice.dev/dataservice=mnist"})
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]}


@pytest.fixture(scope="module")
def example(env, tmp_path_factory):
    path, name = example_for_this_environment(env.cluster, str(tmp_path_factory.mktemp("example") / "mnist.yaml"))
    assert name == "mnist"
    env.kubectl.apply(path, "-n", NS)
    return path


def test_chart_objects_are_applied(env):
    """Every object the chart renders that the server serves is there, as kubectl applied it (server-side)."""
    if env.cluster.real:
        pytest.skip("helm install applied the chart")
    deployment = env.kubectl.json("-n", RELEASE_NS, "get", "deployment", "sluice-operator", "--show-managed-fields")
    managers = {m["manager"] for m in deployment["metadata"]["managedFields"]}
    assert "sluice-e2e" in managers, managers
    kinds = {o["kind"] for o in env.objects}
    assert {"Deployment", "CustomResourceDefinition", "ServiceAccount", "ClusterRole"} <= kinds, kinds
    # The operator runs with the rendered Deployment's args (leader election in the release namespace).
    assert "--leader-elect" in env.operator.chart_args
    assert "--lease-namespace=" + RELEASE_NS in env.operator.chart_args
    lease = env.cluster.wait_for(lambda: env.cluster.get("coordination.k8s.io/v1", "Lease", "sluice-operator",
                                                         RELEASE_NS), DEADLINE_S, "the operator's Lease")
    assert lease["spec"]["holderIdentity"] == env.operator.name
    if os.environ.get("SLUICE_E2E_OPERATOR_FROM_IMAGE") == "1":
        assert env.operator.argv[:2] == ["podman", "run"] and rendered_image() in env.operator.argv


def test_example_becomes_ready(env, example):
    ds = wait_ready(env, 2)
    assert ds["metadata"]["finalizers"] == ["sluice.dev/drain"]
    assert ds["status"]["dispatcherAddress"] == "mnist-dispatcher.%s.svc:5050" % NS
    out = env.kubectl("-n", NS, "get", "dataservices.sluice.dev", "mnist").stdout
    assert "mnist" in out, out


def test_example_serves_a_training_client(env, example):
    path = require_python_module()
    wait_ready(env, 2)
    pod = env.cluster.get("v1", "Pod", "mnist-dispatcher", NS)
    proc = subprocess.run([sys.executable, "-c", CLIENT, "%s:5050" % pod["status"]["podIP"], "200"],
                          env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # Parallel epochs: each of the 2 workers produces the whole range once.
    assert collections.Counter(result["values"]) == collections.Counter(list(range(200)) * 2)
    assert result["stats"]["job_finished"]


def test_kubectl_scale(env, example):
    wait_ready(env, 2)
    env.kubectl("-n", NS, "scale", "dataservice/mnist", "--replicas=3")
    wait_ready(env, 3)
    assert len(live_pods(env.cluster, NS, worker_selector("mnist"))) == 3
    env.kubectl("-n", NS, "patch", "dataservice", "mnist", "--type=merge", "-p",
                json.dumps({"spec": {"workers": {"replicas": 2}}}))
    wait_ready(env, 2)
    env.cluster.wait_for(lambda: len(live_pods(env.cluster, NS, worker_selector("mnist"))) == 2, DEADLINE_S,
                         "the third worker to be drained and deleted")


def test_survives_an_operator_restart(env, example):
    before_ds = wait_ready(env, 2)
    env.cluster.wait_for(lambda: len(pod_uids(env)) == 3, DEADLINE_S, "a dispatcher and two workers, no leftovers")
    before = pod_uids(env)
    if env.cluster.real:
        env.kubectl("-n", RELEASE_NS, "delete", "pod", "-l", OPERATOR_SELECTOR, "--wait=true", "--timeout=120s")
        env.kubectl("-n", RELEASE_NS, "rollout", "status", "deployment/sluice-operator", "--timeout=180s")
    else:
        old = env.operator
        old.kill()
        env.start_operator()
        # The new process takes the Lease and reconciles the DataService (its own counter, not the old one's).
        env.cluster.wait_for(lambda: env.cluster.get("coordination.k8s.io/v1", "Lease", "sluice-operator", RELEASE_NS)
                             ["spec"]["holderIdentity"] == env.operator.name, DEADLINE_S,
                             "the restarted operator to hold the Lease")
        env.cluster.wait_for(lambda: env.operator.metrics().get('sluice_operator_reconciles_total{result="success"}',
                                                                0) >= 1, DEADLINE_S,
                             "the restarted operator to reconcile mnist")
    # A generation change makes the new operator act on it, not just observe it.
    env.kubectl("-n", NS, "annotate", "dataservice", "mnist", "e2e.sluice.dev/poke=1", "--overwrite")
    ds = wait_ready(env, 2)
    assert ds["metadata"]["uid"] == before_ds["metadata"]["uid"]
    assert pod_uids(env) == before, "the restarted operator replaced or duplicated pods"


def test_kubectl_delete_releases_everything(env, example):
    wait_ready(env, 2)
    env.kubectl("-n", NS, "delete", "-f", example, "--wait=true", "--timeout=%ds" % DEADLINE_S,
                timeout=DEADLINE_S + 30)
    env.cluster.wait_for_deletion(GROUP_VERSION, "DataService", "mnist", NS, timeout=DEADLINE_S)
    env.cluster.wait_for(lambda: not pod_uids(env), DEADLINE_S, "mnist's pods to be gone")
    services = env.kubectl.json("-n", NS, "get", "services")["items"]
    assert not [s for s in services if s["metadata"]["name"].startswith("mnist-")], services
    if not env.cluster.real:
        log = env.operator.log()
        assert "forbidden" not in log.lower(), "the operator needed a right the chart does not grant:\n" + log


def test_autoscaler_from_the_chart(env):
    """sluice-autoscaler with its rendered Deployment's args, as its ServiceAccount: alive and ready."""
    if binary("sluice-autoscaler") is None:
        pytest.skip("sluice-autoscaler is not built (build/bin/sluice-autoscaler): the chart's autoscaler "
                    "(autoscaler.enabled=true) is not exercised")
    if env.cluster.real:
        pytest.skip("helm install ran with autoscaler.enabled=false")
    command, args, _, _, _ = deployment_container(env.kubectl, "sluice-autoscaler")
    assert command == ["sluice-autoscaler"], command
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        health = s.getsockname()[1]
    kubeconfig = env.cluster.kubeconfig_for(AUTOSCALER_SA)
    argv = [binary("sluice-autoscaler")] + [a for a in args if not a.startswith(("--metrics-address=",
                                                                                  "--health-address="))] + \
        ["--metrics-address=127.0.0.1:0", "--health-address=127.0.0.1:%d" % health, "--kubeconfig=" + kubeconfig]
    proc = env.cluster.start_process("autoscaler", argv, env=dict(os.environ, POD_NAME="sluice-autoscaler-e2e"))

    def healthy():
        if not proc.alive():
            raise AssertionError("sluice-autoscaler exited:\n" + proc.log_tail())
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % health, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    env.cluster.wait_for(healthy, DEADLINE_S, "sluice-autoscaler's /healthz")
    assert not re.search(r"forbidden", proc.log_tail(200), re.I), proc.log_tail(200)
