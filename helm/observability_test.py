"""The chart's observability: its alerts and recording rules tested with promtool on synthetic series
(helm/rules_test.yaml), every rule exercised, and every metric a rule or a dashboard query reads being one the
daemons export — helm/exported-metrics.txt, itself held against the metric tables of docs/metrics.md and
docs/operator.md. Needs Helm (scripts/setup.sh) and promtool (Debian's prometheus)."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

SOURCE = os.environ.get("SLUICE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELM = os.path.join(os.environ.get("SLUICE_TOOLS_DIR") or os.path.join(SOURCE, ".tools"), "bin", "helm")
CHART = os.path.join(SOURCE, "helm", "sluice")
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                   "offset", "inf", "nan", "atan2"}


def helm(*args):
    if not os.access(HELM, os.X_OK):
        pytest.fail("%s is missing: scripts/setup.sh installs Helm 3.17 there" % HELM)
    r = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def rendered(template, *sets):
    args = ["template", "sluice", CHART, "--namespace", "sluice-system", "--show-only", "templates/" + template]
    for s in sets:
        args += ["--set", s]
    return yaml.safe_load(helm(*args))


@pytest.fixture(scope="module")
def rule_groups():
    rule = rendered("prometheusrule.yaml", "metrics.prometheusRule.enabled=true",
                    "metrics.prometheusRule.defaultTargetStallRatio=0.1")
    assert rule["kind"] == "PrometheusRule"
    return rule["spec"]["groups"]


@pytest.fixture(scope="module")
def dashboard():
    cm = rendered("dashboard-configmap.yaml", "metrics.dashboard.enabled=true")
    shipped = json.loads(cm["data"]["sluice.json"])
    with open(os.path.join(CHART, "files", "dashboard.json")) as f:
        assert json.load(f) == shipped, "the ConfigMap holds files/dashboard.json as it is"
    return shipped


def exported_metrics():
    """{name: daemon} from helm/exported-metrics.txt."""
    out = {}
    with open(os.path.join(SOURCE, "helm", "exported-metrics.txt")) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            assert len(parts) == 2, "helm/exported-metrics.txt line %d: expected 'name daemon', got %r" % (n, line)
            assert parts[0] not in out, "helm/exported-metrics.txt line %d: %s listed twice" % (n, parts[0])
            out[parts[0]] = parts[1]
    return out


def documented_metrics(path, prefix):
    """Metric names in the first cell of the Markdown table rows of `path` that start with `prefix`."""
    names = set()
    with open(os.path.join(SOURCE, path)) as f:
        for line in f:
            if line.startswith("| `" + prefix):
                first_cell = line.split("|")[1]
                names |= set(re.findall(r"`(%s[a-z0-9_]*)" % prefix, first_cell))
    return names


def metric_names(expr):
    """The metric names (and recorded series) a PromQL expression reads; functions, keywords, labels and
    Grafana variables are left out."""
    expr = re.sub(r"\$\{?\w+\}?", "x", expr)                      # Grafana variables
    expr = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)                          # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)                         # ranges, subqueries
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"label_values\s*\(([^,()]*),\s*\w+\s*\)", r"(\1)", expr)  # Grafana: label_values(m, label)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr):
        name, call = m.group(1), m.group(2)
        if call or name in PROMQL_KEYWORDS or name in ("x",):
            continue
        names.add(name)
    return names


def test_metric_names_of_an_expression():
    assert metric_names('sum by (namespace, job) (rate(sluice_client_wait_seconds_total{job=~"$job"}[5m]))') == \
        {"sluice_client_wait_seconds_total"}
    assert metric_names("a:b:rate5m > on (namespace) c_total unless ignoring(x) d offset 5m") == {"a:b:rate5m", "c_total", "d"}
    assert metric_names('label_values(sluice_dispatcher_workers{namespace=~"$namespace"}, dataservice)') == \
        {"sluice_dispatcher_workers"}
    assert metric_names("histogram_quantile(0.9, sum(rate(x_bucket[5m])) by (le))") == {"x_bucket"}
    assert metric_names('max(up{sluice_role="dispatcher"}) == 0 and 1e3 > bool 2') == {"up"}


def test_exported_metrics_match_the_docs():
    listed = exported_metrics()
    for daemons, doc, prefixes in [(("dispatcher", "worker"), "docs/metrics.md", ("sluice_client_", "sluice_dispatcher_",
                                                                              "sluice_worker_")),
                                   (("operator",), "docs/operator.md", ("sluice_operator_",))]:
        documented = set().union(*(documented_metrics(doc, p) for p in prefixes))
        assert documented, "no metric table found in " + doc
        ours = {n for n, d in listed.items() if d in daemons}
        assert ours - documented == set(), "helm/exported-metrics.txt lists what %s does not: %s" % (doc, ours - documented)
        assert documented - ours == set(), "%s documents what helm/exported-metrics.txt lacks: %s" % (doc, documented - ours)
    autoscaler = {n for n, d in listed.items() if d == "autoscaler"}
    assert autoscaler and all(n.startswith("sluice_autoscaler_") for n in autoscaler)
    for doc in ("docs/autoscaling.md", "docs/autoscaler.md"):
        if os.path.exists(os.path.join(SOURCE, doc)):
            documented = documented_metrics(doc, "sluice_autoscaler_")
            if documented:  # a metrics table in the autoscaler's page
                assert documented == autoscaler, "%s and helm/exported-metrics.txt disagree: %s" % (
                    doc, documented ^ autoscaler)


def recorded(rule_groups):
    return {r["record"]: r["expr"] for g in rule_groups for r in g["rules"] if "record" in r}


def test_rules_read_only_exported_metrics(rule_groups):
    exported = exported_metrics()
    records = recorded(rule_groups)
    for g in rule_groups:
        for r in g["rules"]:
            for name in metric_names(r["expr"]):
                assert name in exported or name in records, "%s reads %s, which no daemon exports" % (
                    r.get("record") or r.get("alert"), name)
            if "alert" in r:
                raw = [n for n in metric_names(r["expr"]) if n.startswith("sluice_autoscaler_")]
                assert not raw, "alert %s names %s: read the recorded series (one place for those names)" % (r["alert"], raw)
    # Every exported autoscaler metric has a recording rule (the one place that names them).
    read = set().union(*(metric_names(e) for e in records.values()))
    missing = {n for n, d in exported.items() if d == "autoscaler"} - read
    assert not missing, "no recording rule reads %s" % missing


def test_alerts_and_recording_rules_with_promtool(rule_groups, tmp_path):
    with open(tmp_path / "rules.rendered.yaml", "w") as f:
        yaml.safe_dump({"groups": rule_groups}, f, sort_keys=False)
    shutil.copy(os.path.join(SOURCE, "helm", "rules_test.yaml"), tmp_path / "rules_test.yaml")
    check = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "rules.rendered.yaml")], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "rules_test.yaml")], capture_output=True,
                          text=True, timeout=120)
    assert test.returncode == 0, test.stdout + test.stderr


def test_every_rule_is_tested(rule_groups):
    with open(os.path.join(SOURCE, "helm", "rules_test.yaml")) as f:
        tests = yaml.safe_load(f)["tests"]
    exprs = [t["expr"] for case in tests for t in case.get("promql_expr_test", [])]
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    quiet = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if not t.get("exp_alerts")}
    for g in rule_groups:
        for r in g["rules"]:
            if "record" in r:
                assert r["record"] in exprs, "recording rule %s has no promql_expr_test" % r["record"]
            else:
                assert r["alert"] in fired, "alert %s is never tested firing" % r["alert"]
                assert r["alert"] in quiet, "alert %s is never tested staying quiet" % r["alert"]


def test_the_alerts_the_issue_asks_for(rule_groups):
    alerts = {r["alert"]: r for g in rule_groups for r in g["rules"] if "alert" in r}
    assert {"SluiceStallAboveTarget", "SluiceWorkersAtMax", "SluiceDispatcherDown",
            "SluiceAutoscalerHoldingOnMissingMetrics", "SluiceOperatorReconcileErrors"} <= set(alerts)
    assert alerts["SluiceStallAboveTarget"]["for"] == "10m"
    for a in alerts.values():
        assert a["labels"]["severity"] in ("warning", "critical")
        assert a["annotations"]["summary"] and a["annotations"]["description"]


def dashboard_queries(dash):
    out = []
    panels = list(dash["panels"])
    while panels:
        p = panels.pop()
        panels += p.get("panels", [])
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append(("variable " + v["name"], q))
    return out


def test_dashboard_queries_name_exported_metrics(dashboard, rule_groups):
    exported = exported_metrics()
    records = recorded(rule_groups)
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 10
    for where, expr in queries:
        names = metric_names(expr)
        assert names, "%s: no metric in %r" % (where, expr)
        for name in names:
            assert name in exported or name in records, "%s: %s is neither exported by a daemon " \
                "(helm/exported-metrics.txt) nor recorded by the chart's rules" % (where, name)
            assert not name.startswith("sluice_autoscaler_"), \
                "%s reads %s: read the recorded series (one place for those names)" % (where, name)
    # What the dashboard is for: stall, demand vs supply, workers local/remote, decisions.
    read = set().union(*(metric_names(e) for _, e in queries))
    for needed in ["dataservice:sluice_stall_ratio:rate5m", "dataservice:sluice_demand_elements:rate5m",
                   "dataservice:sluice_supply_elements:rate5m", "dataservice_placement:sluice_workers:sum",
                   "dataservice_placement:sluice_autoscaler_desired_workers:max",
                   "dataservice_direction:sluice_autoscaler_decisions:increase10m"]:
        assert needed in read, needed


def test_dashboard_is_well_formed(dashboard):
    ids = []
    panels = list(dashboard["panels"])
    while panels:
        p = panels.pop()
        panels += p.get("panels", [])
        ids.append(p["id"])
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["targets"] and all(t["refId"] and t["legendFormat"] for t in p["targets"]), p["title"]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    assert dashboard["uid"] == "sluice-overview"
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "namespace", "dataservice"]
