"""The Helm chart helm/sluice: helm lint and helm template with default and non-default values (cluster-wide,
namespaced, autoscaler on, monitors on), and checks of the rendered objects, since no schema validation of
Kubernetes objects works offline (kubectl apply --dry-run=client needs a server): known apiVersions/kinds, no
duplicate YAML keys, names, selectors that select, probes and Service ports that exist, the hardened security
context, the Deployments' flags against the binaries' --help, and every RBAC rule against helm/rbac-usage.yaml
both ways. Also: crds/ and deploy/ in sync with the chart, values.schema.json refusing bad values with the
field named, the chart version following the project version.

Needs Helm (scripts/setup.sh installs it into .tools/bin) and, for the flag checks, the built binaries."""

import json
import os
import re
import subprocess

import pytest
import yaml

SOURCE = os.environ.get("SLUICE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SLUICE_BINARY_DIR") or os.path.join(SOURCE, "build")
HELM = os.path.join(os.environ.get("SLUICE_TOOLS_DIR") or os.path.join(SOURCE, ".tools"), "bin", "helm")
CHART = os.path.join(SOURCE, "helm", "sluice")
RELEASE_NS = "sluice-system"

# The flags sluice-autoscaler is agreed to take (it mirrors the operator's); checked against its --help
# instead once build/bin/sluice-autoscaler exists.
AUTOSCALER_FLAGS = {"--leader-elect", "--lease-namespace", "--metrics-address", "--health-address",
                    "--watch-namespace", "--prometheus-url", "--log-level", "--help"}

MONITORS = ["metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true",
            "metrics.prometheusRule.enabled=true", "metrics.dashboard.enabled=true"]
VALUE_SETS = {
    "default": [],
    "namespaced": ["watchNamespace=team"],
    "autoscaler": ["autoscaler.enabled=true", "prometheus.url=http://prometheus.monitoring:9090"],
    "namespaced-autoscaler-monitors": ["watchNamespace=team", "autoscaler.enabled=true",
                                       "prometheus.url=http://prometheus.monitoring:9090"] + MONITORS,
    "monitors": MONITORS,
    "no-leader-election": ["leaderElection.enabled=false", "operator.replicas=1"],
    "custom": ["image.repository=registry.example/sluice", "image.digest=sha256:" + "a" * 64,
               "imagePullSecrets[0].name=regcred", "priorityClassName=system-cluster-critical",
               "nodeSelector.pool=system", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
               "operator.resources.requests.cpu=250m", "serviceAccount.name=custom-sa",
               "autoscaler.enabled=true", "leaderElection.namespace=leases", "operator.extraArgs[0]=--kube-qps=20"],
}

KNOWN_KINDS = {
    ("v1", "ServiceAccount"), ("v1", "Service"), ("v1", "ConfigMap"), ("apps/v1", "Deployment"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"), ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace"}
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def helm(*args, check=True):
    if not os.access(HELM, os.X_OK):
        pytest.fail("%s is missing: scripts/setup.sh installs Helm 3.17 there" % HELM)
    r = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError("helm %s failed:\n%s%s" % (" ".join(args), r.stdout, r.stderr))
    return r


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with a key twice (the API server's strict decoding does too)."""


def _construct_mapping(loader, node, deep=False):
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(None, None, "duplicate key %r" % key, key_node.start_mark)
        keys.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def render(sets, include_crds=False):
    args = ["template", "sluice", CHART, "--namespace", RELEASE_NS]
    for s in sets:
        args += ["--set", s]
    if include_crds:
        args.append("--include-crds")
    out = helm(*args).stdout
    return [d for d in yaml.load_all(out, Loader=UniqueKeyLoader) if d]


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def value_of(sets, key, default=None):
    for s in sets:
        k, _, v = s.partition("=")
        if k == key:
            return v
    return default


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint(name):
    args = ["lint", "--strict", CHART, "--namespace", RELEASE_NS]
    for s in VALUE_SETS[name]:
        args += ["--set", s]
    r = helm(*args)
    assert "0 chart(s) failed" in r.stdout


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects(name):
    sets = VALUE_SETS[name]
    objects = render(sets, include_crds=True)
    names = set()
    for o in objects:
        assert (o["apiVersion"], o["kind"]) in KNOWN_KINDS, (o["apiVersion"], o["kind"])
        meta = o["metadata"]
        assert DNS1123_SUBDOMAIN.match(meta["name"]) and len(meta["name"]) <= 253, meta["name"]
        if o["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, o["kind"] + " is cluster-scoped"
        else:
            assert DNS1123_LABEL.match(meta.get("namespace", "")), "%s %s has no namespace" % (o["kind"], meta["name"])
        for k, v in (meta.get("labels") or {}).items():
            assert isinstance(v, str), "label %s of %s is not a string" % (k, meta["name"])
        key = (o["kind"], meta.get("namespace"), meta["name"])
        assert key not in names, "rendered twice: %s" % (key,)
        names.add(key)
    assert len(by_kind(objects, "CustomResourceDefinition")) == 1

    deployments = {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment")}
    autoscaler_on = value_of(sets, "autoscaler.enabled") == "true"
    assert set(deployments) == {"sluice-operator"} | ({"sluice-autoscaler"} if autoscaler_on else set())
    services = by_kind(objects, "Service")
    image = value_of(sets, "image.repository", "localhost/sluice")
    digest = value_of(sets, "image.digest")
    chart = yaml.safe_load(open(os.path.join(CHART, "Chart.yaml")))
    expected_image = image + ("@" + digest if digest else ":" + chart["appVersion"])
    for d in deployments.values():
        spec = d["spec"]
        template_labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= template_labels.items(), "the selector selects its pods"
        pod = spec["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 65532  # the image's user
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        assert container["image"] == expected_image
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["port"] in ports
        # Every Service selecting these pods targets a port they have.
        for svc in services:
            if svc["spec"]["selector"].items() <= template_labels.items():
                for p in svc["spec"]["ports"]:
                    assert p["targetPort"] in ports, (svc["metadata"]["name"], p)
        assert pod["serviceAccountName"]
        if value_of(sets, "imagePullSecrets[0].name"):
            assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        if value_of(sets, "priorityClassName"):
            assert pod["priorityClassName"] == "system-cluster-critical"
            assert pod["nodeSelector"] == {"pool": "system"}
            assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    for svc in services:
        assert any(svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
                   for d in deployments.values()), "Service %s selects no pods" % svc["metadata"]["name"]

    # Bindings name rendered roles and ServiceAccounts that exist (or the one given).
    roles = {(r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]) for r in objects
             if r["kind"] in ("Role", "ClusterRole")}
    accounts = {(a["metadata"]["namespace"], a["metadata"]["name"]) for a in by_kind(objects, "ServiceAccount")}
    for b in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], ns, ref["name"]) in roles, "binding %s names a missing role" % b["metadata"]["name"]
        for s in b["subjects"]:
            assert (s["namespace"], s["name"]) in accounts or s["name"] == value_of(sets, "serviceAccount.name")
    for d in deployments.values():
        sa = d["spec"]["template"]["spec"]["serviceAccountName"]
        assert (RELEASE_NS, sa) in accounts or sa == value_of(sets, "serviceAccount.name")

    # Monitors select what they should.
    for sm in by_kind(objects, "ServiceMonitor"):
        selected = [s for s in services if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in selected} == \
            {"operator"} | ({"autoscaler"} if autoscaler_on else set())
        assert all(e["port"] == "metrics" and e["honorLabels"] is True for e in sm["spec"]["endpoints"])
    for pm in by_kind(objects, "PodMonitor"):
        # The labels the operator puts on its pods (docs/operator.md, Objects created).
        assert pm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "sluice-operator"}
        assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        watch = value_of(sets, "watchNamespace")
        assert pm["spec"]["namespaceSelector"] == ({"matchNames": [watch]} if watch else {"any": True})
    for cm in by_kind(objects, "ConfigMap"):
        json.loads(cm["data"]["sluice.json"])


def help_flags(program):
    path = os.path.join(BUILD, "bin", program)
    if not os.path.exists(path):
        return None
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out))


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_deployment_args_are_flags_of_the_binaries(name):
    objects = render(VALUE_SETS[name])
    operator_flags = help_flags("sluice-operator")
    if operator_flags is None and os.environ.get("SLUICE_REQUIRE_BINARIES") == "1":
        pytest.fail("build/bin/sluice-operator is missing")
    flags = {"sluice-operator": operator_flags, "sluice-autoscaler": help_flags("sluice-autoscaler") or AUTOSCALER_FLAGS}
    checked = 0
    for d in by_kind(objects, "Deployment"):
        (c,) = d["spec"]["template"]["spec"]["containers"]
        (program,) = c["command"]
        known = flags[program]
        if known is None:
            continue
        for arg in c["args"]:
            flag = arg.split("=", 1)[0]
            assert flag in known, "%s: %s is not a flag of %s (see %s --help)" % (d["metadata"]["name"], arg, program, program)
            checked += 1
        if "--leader-elect" in c["args"]:
            assert any(a.startswith("--lease-namespace=") for a in c["args"])
    assert checked > 0


def rbac_usage():
    with open(os.path.join(SOURCE, "helm", "rbac-usage.yaml")) as f:
        return yaml.safe_load(f)


def test_rbac_usage_evidence_is_in_the_code():
    for controller, entries in rbac_usage().items():
        for e in entries:
            ev = e.get("evidence")
            assert ev, "%s: %s %s has no evidence" % (controller, e["resource"], e["verbs"])
            path = os.path.join(SOURCE, ev["file"])
            if controller == "autoscaler" and not os.path.exists(path):
                continue  # its code has not landed in this tree yet
            text = open(path).read()
            assert ev["text"] in text, "%s no longer contains %r (rbac-usage.yaml, %s %s %s): drop or re-justify the right" % (
                ev["file"], ev["text"], controller, e["resource"], e["verbs"])


def granted(objects, account, sets):
    """{(scope, group, resource, verb)} the rendered bindings give `account`; scope is cluster (ClusterRole),
    or the namespace of the Role."""
    roles = {(r["kind"], r["metadata"].get("namespace"), r["metadata"]["name"]): r for r in objects
             if r["kind"] in ("Role", "ClusterRole")}
    out = set()
    for b in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == RELEASE_NS
                   for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        role_ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], role_ns, ref["name"])]
        scope = "cluster" if b["kind"] == "ClusterRoleBinding" else b["metadata"]["namespace"]
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "*" not in rule["verbs"] and "*" not in rule["resources"]
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add((scope, g, r, v))
    return out


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rbac_is_exactly_what_the_controllers_call(name):
    sets = VALUE_SETS[name]
    objects = render(sets)
    watch = value_of(sets, "watchNamespace")
    lease_ns = value_of(sets, "leaderElection.namespace", RELEASE_NS)
    elect = value_of(sets, "leaderElection.enabled") != "false"
    accounts = {"operator": value_of(sets, "serviceAccount.name") or "sluice-operator"}
    if value_of(sets, "autoscaler.enabled") == "true":
        accounts["autoscaler"] = "sluice-autoscaler"
    usage = rbac_usage()
    for controller, account in accounts.items():
        want = set()
        for e in usage[controller]:
            scope = {"watched": watch or "cluster", "cluster": "cluster", "lease": lease_ns}[e["scope"]]
            if e["scope"] == "lease" and not elect:
                continue
            want |= {(scope, e["group"], e["resource"], v) for v in e["verbs"]}
        got = granted(objects, account, sets)
        assert got - want == set(), "%s is granted rights no call needs: %s" % (controller, sorted(got - want))
        assert want - got == set(), "%s lacks rights it needs: %s" % (controller, sorted(want - got))


def test_rbac_create_false_renders_no_rbac():
    objects = render(["rbac.create=false", "autoscaler.enabled=true"])
    assert not [o for o in objects if o["apiVersion"].startswith("rbac.")]


def test_service_account_create_false_needs_a_name():
    r = helm("template", "sluice", CHART, "--set", "serviceAccount.create=false", check=False)
    assert r.returncode != 0
    assert "serviceAccount.name: name an existing ServiceAccount" in r.stderr
    objects = render(["serviceAccount.create=false", "serviceAccount.name=mine"])
    assert not by_kind(objects, "ServiceAccount")
    assert by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"] == "mine"


@pytest.mark.parametrize("setting,message", [
    ("operator.replicas=zero", "operator.replicas: Invalid type. Expected: integer, given: string"),
    ("operator.replicas=0", "operator.replicas: Must be greater than or equal to 1"),
    ("imagee.tag=x", "Additional property imagee is not allowed"),
    ("image.pullPolicy=Sometimes", "image.pullPolicy must be one of the following"),
    ("image.digest=latest", "image.digest: Does not match pattern"),
    ("watchNamespace=Team_A", "watchNamespace: Does not match pattern"),
    ("prometheus.url=prometheus:9090", "prometheus.url: Does not match pattern"),
    ("metrics.serviceMonitor.interval=30", "metrics.serviceMonitor.interval: Invalid type"),
    ("metrics.prometheusRule.defaultTargetStallRatio=2", "defaultTargetStallRatio: Must be less than or equal to 1"),
    ("metrics.prometheusRule.defaultTargetStallRatio=high", "defaultTargetStallRatio: Does not match pattern"),
    ("operator.logLevel=verbose", "operator.logLevel must be one of the following"),
    ("operator.extraArgs[0]=leader-elect", "operator.extraArgs.0: Does not match pattern"),
])
def test_bad_values_are_refused_naming_the_field(setting, message):
    r = helm("template", "sluice", CHART, "--set", setting, check=False)
    assert r.returncode != 0, "accepted " + setting
    assert "values don't meet the specifications of the schema" in r.stderr and message in r.stderr, r.stderr


def test_chart_crds_are_the_top_level_crds():
    top = sorted(f for f in os.listdir(os.path.join(SOURCE, "crds")) if f.endswith(".yaml"))
    chart = sorted(f for f in os.listdir(os.path.join(CHART, "crds")) if f.endswith(".yaml"))
    assert chart == top, "helm/sluice/crds/ holds %s, crds/ %s: run scripts/sync-chart.sh" % (chart, top)
    for f in top:
        a = open(os.path.join(SOURCE, "crds", f), "rb").read()
        b = open(os.path.join(CHART, "crds", f), "rb").read()
        assert a == b, "helm/sluice/crds/%s differs from crds/%s: run scripts/sync-chart.sh" % (f, f)


def test_deploy_is_rendered_from_the_chart():
    r = subprocess.run([os.path.join(SOURCE, "scripts", "sync-chart.sh"), "--check"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    # And deploy/ holds what the e2e RBAC test and a kubectl user need.
    docs = [d for d in yaml.safe_load_all(open(os.path.join(SOURCE, "deploy", "operator", "rbac.yaml"))) if d]
    assert {d["kind"] for d in docs} == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                         "RoleBinding"}
    # deploy/autoscaler/: the autoscaler's objects only (least privilege: its own ServiceAccount and rules).
    docs = [d for d in yaml.safe_load_all(open(os.path.join(SOURCE, "deploy", "autoscaler", "rbac.yaml"))) if d]
    assert {d["kind"] for d in docs} == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                         "RoleBinding"}
    assert all(d["metadata"]["name"].startswith("sluice-autoscaler") for d in docs if d["kind"] != "Namespace")
    rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in rules), rules
    assert not any(v in r["verbs"] for r in rules for v in ("create", "delete", "update")
                   if r["resources"] != ["events"]), rules
    docs = [d for d in yaml.safe_load_all(open(os.path.join(SOURCE, "deploy", "autoscaler", "deployment.yaml"))) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["command"] == ["sluice-autoscaler"]


def test_chart_version_follows_the_project_version():
    chart = yaml.safe_load(open(os.path.join(CHART, "Chart.yaml")))
    version = re.search(r"project\(sluice VERSION (\S+)", open(os.path.join(SOURCE, "CMakeLists.txt")).read())[1]
    assert chart["version"] == version and chart["appVersion"] == version


def test_package():
    """`helm package` makes an archive holding the CRD and the dashboard and rule files."""
    import tarfile
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        helm("package", CHART, "--destination", d)
        (archive,) = os.listdir(d)
        with tarfile.open(os.path.join(d, archive)) as tar:
            names = set(tar.getnames())
    for f in ["sluice/Chart.yaml", "sluice/values.schema.json", "sluice/crds/dataservices.sluice.dev.yaml",
              "sluice/files/rules.yaml", "sluice/files/dashboard.json", "sluice/templates/NOTES.txt"]:
        assert f in names, f


def render_notes(tmp_path, sets):
    """NOTES.txt as `helm install` would print it (helm template leaves it out): a copy of the chart renders it
    through tpl into a ConfigMap."""
    import shutil
    chart = tmp_path / "sluice"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "NOTES.txt")
    (chart / "templates" / "notes-check.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n'
        'data:\n  notes: {{ tpl (.Files.Get "files/NOTES.txt") . | quote }}\n')
    args = ["template", "sluice", str(chart), "--namespace", RELEASE_NS, "--show-only", "templates/notes-check.yaml"]
    for s in sets:
        args += ["--set", s]
    return yaml.safe_load(helm(*args).stdout)["data"]["notes"]


def test_notes(tmp_path):
    notes = render_notes(tmp_path, [])
    assert "sluice-operator: 2 replica(s), leader election in sluice-system, reconciling DataServices in every namespace." in notes
    assert "Image: localhost/sluice:0.1.0" in notes and "WARNING" not in notes and "autoscaler" not in notes
    notes = render_notes(tmp_path / "b", ["watchNamespace=team", "autoscaler.enabled=true",
                                          "metrics.dashboard.enabled=true", "metrics.prometheusRule.enabled=true"])
    assert "reconciling DataServices in namespace team." in notes
    assert "prometheus.url is empty" in notes
    assert "enable metrics.podMonitor.enabled" in notes  # rules without the data plane's metrics
    assert "the dashboard reads the recorded series" not in notes  # the rules are enabled
    notes = render_notes(tmp_path / "c", ["metrics.dashboard.enabled=true"])
    assert "the dashboard reads the recorded series of the chart's PrometheusRule" in notes


def test_sync_chart_names_and_fixes_what_is_stale(tmp_path):
    """scripts/sync-chart.sh on a copy of the repository: --check names a changed CRD and a hand-edited deploy/
    file and exits 1; without --check it brings both back in line."""
    import shutil
    for d in ("crds", "helm/sluice", "deploy", "scripts"):
        shutil.copytree(os.path.join(SOURCE, d), tmp_path / d)
    env = dict(os.environ, SLUICE_TOOLS_DIR=os.path.dirname(os.path.dirname(HELM)))
    script = str(tmp_path / "scripts" / "sync-chart.sh")
    crd = tmp_path / "crds" / "dataservices.sluice.dev.yaml"
    crd.write_text(crd.read_text() + "# changed\n")
    rbac = tmp_path / "deploy" / "operator" / "rbac.yaml"
    rbac.write_text(rbac.read_text().replace('verbs: ["list", "watch", "patch"]', 'verbs: ["*"]'))
    r = subprocess.run([script, "--check"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "stale: helm/sluice/crds/dataservices.sluice.dev.yaml deploy/operator/rbac.yaml (run scripts/sync-chart.sh)" \
        in r.stderr, r.stderr
    r = subprocess.run([script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "helm/sluice/crds/dataservices.sluice.dev.yaml").read_text() == crd.read_text()
    assert '["*"]' not in rbac.read_text()
    assert subprocess.run([script, "--check"], env=env, capture_output=True, timeout=120).returncode == 0
