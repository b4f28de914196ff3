"""sluice-operator from the image, with the arguments, security settings and RBAC the chart renders, against
the test API server (e2e/): cluster-wide and with watchNamespace. The container runs as the chart runs it —
UID 65532, read-only root file system, all capabilities dropped, no privilege escalation — with only its
listen addresses moved to kernel-picked loopback ports (host network) and a kubeconfig for its ServiceAccount
mounted. The test server enforces exactly the rendered rules (a missing right is a 403): the operator takes
its Lease, creates a DataService's pods, and, namespaced, leaves DataServices of other namespaces alone.

Run through ctest (helm_operator_image, after the image_build fixture); needs root, podman, Helm."""

import os
import re
import subprocess
import threading
import time

import pytest
import yaml

from e2e import harness
from e2e.sluice_support import dataservice, live_pods, worker_selector

SOURCE = os.environ.get("SLUICE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SLUICE_BINARY_DIR") or os.path.join(SOURCE, "build")
HELM = os.path.join(os.environ.get("SLUICE_TOOLS_DIR") or os.path.join(SOURCE, ".tools"), "bin", "helm")
CHART = os.path.join(SOURCE, "helm", "sluice")
ENV = dict(os.environ, CONTAINERS_CONF=os.path.join(SOURCE, "worker-image", "containers.conf"))
RELEASE_NS = "sluice-system"
SERVICE_ACCOUNT = "system:serviceaccount:%s:sluice-operator" % RELEASE_NS
DEADLINE_S = 90


def image():
    path = os.path.join(BUILD, "images", "image.env")
    if not os.path.exists(path):
        pytest.fail("%s is missing: scripts/images.sh builds the image (ctest's image_build does)" % path)
    with open(path) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line)["SLUICE_IMAGE"]


def render(sets):
    args = [HELM, "template", "sluice", CHART, "--namespace", RELEASE_NS]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def policy_for(objects, account_ns, account):
    """The test API server's policy granting `account` what the rendered bindings grant it."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    rules = []
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["name"] == account and s["namespace"] == account_ns for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        role = roles[(ref["kind"], b["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            rules.append(dict(rule, namespaces=[b["metadata"]["namespace"]]) if b["kind"] == "RoleBinding" else rule)
    return {"users": {"system:serviceaccount:%s:%s" % (account_ns, account): rules}}


class Container:
    """`podman run` of one container in the foreground, its output read line by line."""

    def __init__(self, name, argv):
        self.name, self.lines, self.cv, self.ended = name, [], threading.Condition(), False
        self.proc = subprocess.Popen(["podman", "run", "--rm", "--name", name] + argv, env=ENV,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.ended = True
            self.cv.notify_all()

    def wait_for(self, pattern):
        deadline = time.monotonic() + DEADLINE_S
        with self.cv:
            while True:
                for line in self.lines:
                    m = re.search(pattern, line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if self.ended or left <= 0:
                    raise AssertionError("%s printed no line matching %r:\n%s" % (self.name, pattern, self.log()))
                self.cv.wait(left)

    def log(self):
        with self.cv:
            return "\n".join(self.lines)

    def stop(self):
        subprocess.run(["podman", "rm", "--force", "--time", "10", self.name], env=ENV, capture_output=True,
                       timeout=DEADLINE_S)
        try:
            self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def operator_container(objects, kubeconfig, name):
    """The rendered operator Deployment's container as a podman run: its command, args and security context."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "sluice-operator"]
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc, psc = c["securityContext"], pod["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"] and not sc["allowPrivilegeEscalation"]
    # The chart's :8080/:8081 would collide with other programs on a shared host network: loopback, picked.
    args = [a for a in c["args"] if not a.startswith(("--metrics-address=", "--health-address="))]
    args += ["--metrics-address=127.0.0.1:0", "--health-address=127.0.0.1:0",
             "--kubeconfig=/var/run/sluice/kubeconfig", "--identity=" + name]
    return ["--network", "host", "--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges",
            "--user", "%d:%d" % (psc["runAsUser"], psc["runAsGroup"]),
            "--volume", "%s:/var/run/sluice/kubeconfig:ro" % kubeconfig,
            "--env", "POD_NAME=" + name, image()] + c["command"] + args


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_operator_from_the_image_under_the_charts_rbac(mode, tmp_path):
    sets = ["watchNamespace=team"] if mode == "namespaced" else []
    objects = render(sets)
    container = None
    with harness.Cluster(str(tmp_path), users={SERVICE_ACCOUNT: []}) as cluster:
        if cluster.real:
            pytest.skip("runs the operator under the test API server's RBAC policy")
        with open(os.path.join(CHART, "crds", "dataservices.sluice.dev.yaml")) as f:
            cluster.apply(f.read())
        for ns in (RELEASE_NS, "team", "other"):
            cluster.create_namespace(ns)
        cluster.admin("PUT", "rbac", policy_for(objects, RELEASE_NS, "sluice-operator"))
        kubeconfig = cluster.kubeconfig_for(SERVICE_ACCOUNT)
        os.chmod(kubeconfig, 0o644)  # readable by the container's UID 65532
        name = "sluice-operator-image-test-%d-%s" % (os.getpid(), mode)
        try:
            container = Container(name, operator_container(objects, kubeconfig, name))
            container.wait_for(r"msg=listening metrics_port=\d+")
            cluster.apply(dataservice("r", replicas=2), namespace="team")
            cluster.apply(dataservice("o", replicas=1), namespace="other")
            cluster.wait_for(lambda: len(live_pods(cluster, "team", worker_selector("r"))) == 2, DEADLINE_S,
                             "the operator in the image to create r's two worker pods\n" + container.log())
            lease = cluster.get("coordination.k8s.io/v1", "Lease", "sluice-operator", RELEASE_NS)
            assert lease["spec"]["holderIdentity"] == name
            if mode == "namespaced":
                # r is reconciled and Ready is reported only for it; o, outside the watched namespace, is never
                # seen (the operator lists DataServices in team only: the server would answer 403 elsewhere).
                cluster.wait_for(lambda: (cluster.get("sluice.dev/v1alpha1", "DataService", "r", "team")
                                          .get("status") or {}).get("observedGeneration"), DEADLINE_S,
                                 "r's status to be written")
                assert live_pods(cluster, "other", worker_selector("o")) == []
                assert not (cluster.get("sluice.dev/v1alpha1", "DataService", "o", "other").get("status") or {})
            else:
                cluster.wait_for(lambda: len(live_pods(cluster, "other", worker_selector("o"))) == 1, DEADLINE_S,
                                 "o's worker pod")
            log = container.log()
            assert "forbidden" not in log.lower() and " 403" not in log, log
        finally:
            if container:
                container.stop()
