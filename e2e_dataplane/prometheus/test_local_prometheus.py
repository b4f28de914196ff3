"""The whole data plane on this machine under a real Prometheus (Debian's `prometheus`, on loopback).

A dispatcher, two workers (one `local`, one `remote` placement) and a training consumer run as processes; a
Prometheus with a generated configuration scrapes the three daemons every second, with the target labels the
chart's PodMonitor gives pods (namespace, sluice_role, sluice_dataservice; honor_labels), and loads the
chart's rules file (helm/sluice/files/rules.yaml, the alerts' `for` cut to 2 s). Checked against live data:
- every metric helm/exported-metrics.txt lists for the dispatcher and the worker is in Prometheus, with sane values;
- every recording rule and alert evaluates without error, and the recorded series the dashboard and alerts read
  exist with sane values (stall ratio in [0, 1], demand and supply > 0, one local and one remote worker);
- every query of the chart's Grafana dashboard returns data — except those of components not running here (the
  operator and the autoscaler), which are skipped by name;
- the SluiceStallAboveTarget expression agrees with the live stall ratio, and SluiceDispatcherDown goes pending
  and firing when the dispatcher is killed.
Waits are on conditions with deadlines. Run through ctest (e2e_dataplane_prometheus)."""

import json
import os
import re
import shutil
import socket
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SLUICE_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "e2e_dataplane", "python"))
from conftest import Process, _field  # noqa: E402  (the data-plane suites' process helper)

CHART = os.path.join(SOURCE, "helm", "sluice")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NAMESPACE, DATASERVICE = "local", "local-ds"
DEADLINE_S = 60
DEFAULT_TARGET_STALL_RATIO = 0.1
# Components whose series this suite does not produce (their metric name prefixes).
NOT_RUNNING = {"operator": "sluice_operator_", "autoscaler": "sluice_autoscaler_"}

CONSUMER = r"""
import sys, time
import sluice
ds = sluice.Dataset(sys.argv[1], pipeline={"source": {"range": {"stop": 10**7, "split_size": 10**4}},
                                          "steps": [{"batch": 256}]},
                    job_name="trainer", heartbeat_interval_s=0.1, create_timeout_s=30.0)
n = 0
for element in ds:
    n += 1
    if n == 1:
        print("reading", flush=True)
    time.sleep(0.002)  # the training step this consumer stands for
"""


def exported(daemons):
    out = []
    with open(os.path.join(SOURCE, "helm", "exported-metrics.txt")) as f:
        for line in f:
            parts = line.split("#", 1)[0].split()
            if len(parts) == 2 and parts[1] in daemons:
                out.append(parts[0])
    return out


def dashboard_queries():
    with open(os.path.join(CHART, "files", "dashboard.json")) as f:
        dashboard = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets") or []:
                out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels") or [])

    walk(dashboard["panels"])
    return out


def rule_groups():
    """The chart's rules with its default stall target filled in and every alert's `for` cut to 2 s."""
    with open(os.path.join(CHART, "files", "rules.yaml")) as f:
        text = f.read().replace("SLUICE_DEFAULT_TARGET_STALL_RATIO", str(DEFAULT_TARGET_STALL_RATIO))
    doc = yaml.safe_load(text)
    for g in doc["groups"]:
        g["interval"] = "1s"
        for r in g["rules"]:
            if "alert" in r:
                r["for"] = "2s"
    return doc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, what, timeout=DEADLINE_S):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %d s" % (what, timeout))
        time.sleep(0.2)


class System:
    def __init__(self, tmp):
        bin_dir = os.environ.get("SLUICE_BIN_DIR")
        if not bin_dir or not os.path.exists(os.path.join(bin_dir, "sluice-dispatcher")):
            pytest.fail("SLUICE_BIN_DIR must name the build's bin/ directory (run through ctest)")
        if not os.access(PROMETHEUS, os.X_OK):
            pytest.fail("prometheus is missing: scripts/setup.sh installs Debian's prometheus package")
        self.tmp = tmp
        self.processes = []
        common = ["--port=0", "--metrics_port=0", "--listen_host=127.0.0.1", "--heartbeat_interval_ms=100",
                  "--dataservice=" + DATASERVICE]
        self.dispatcher = self.start("dispatcher", [os.path.join(bin_dir, "sluice-dispatcher"),
                                                    "--worker_timeout_ms=3000"] + common)
        self.address = "127.0.0.1:%d" % self.dispatcher.port
        self.workers = [self.start("worker-" + placement,
                                   [os.path.join(bin_dir, "sluice-worker"), "--placement=" + placement,
                                    "--dispatcher_address=" + self.address, "--buffer_elements=64"] + common)
                        for placement in ("local", "remote")]
        for w in self.workers:
            w.wait_for_line("registered with the dispatcher")
        self.consumer = Process("consumer", [sys.executable, "-c", CONSUMER, self.address])
        self.processes.append(self.consumer)
        self.consumer.wait_for_line("reading", timeout=DEADLINE_S)

        self.port = free_port()
        targets = [("dispatcher", self.dispatcher)] + [("worker", w) for w in self.workers]
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                  "rule_files": [os.path.join(tmp, "rules.yaml")],
                  # honor_labels as the chart's PodMonitor sets it: the clients' `job` label (the training job's
                  # name, which dataservice_job:sluice_stall_ratio:rate5m groups by) is kept, not renamed.
                  "scrape_configs": [{"job_name": "sluice-" + p.name, "honor_labels": True, "static_configs": [
                      {"targets": ["127.0.0.1:%d" % p.metrics_port],
                       "labels": {"namespace": NAMESPACE, "sluice_role": role, "sluice_dataservice": DATASERVICE}}]}
                      for role, p in targets]}
        with open(os.path.join(tmp, "rules.yaml"), "w") as f:
            yaml.safe_dump(rule_groups(), f, sort_keys=False)
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        self.prometheus = Process("prometheus", [
            PROMETHEUS, "--config.file=" + os.path.join(tmp, "prometheus.yml"),
            "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"), "--web.listen-address=127.0.0.1:%d" % self.port,
            "--storage.tsdb.retention.time=1h", "--log.level=warn"])
        self.processes.append(self.prometheus)
        wait_for(self.ready, "Prometheus to be ready")

    def start(self, name, argv):
        p = Process(name, argv)
        self.processes.append(p)
        line = p.wait_for_line("msg=listening")
        p.port, p.metrics_port = int(_field(line, "port")), int(_field(line, "metrics_port"))
        return p

    def ready(self):
        if self.prometheus.proc.poll() is not None:
            raise AssertionError("prometheus exited:\n" + "\n".join(self.prometheus.lines))
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path, **params):
        url = "http://127.0.0.1:%d/api/v1/%s" % (self.port, path)
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr, at=None):
        """[(labels, value)] of an instant query (now, or at the Unix time `at`)."""
        data = self.api("query", query=expr, **({"time": "%.3f" % at} if at is not None else {}))
        assert data["resultType"] == "vector", data
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def close(self):
        for p in reversed(self.processes):
            p.kill()


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    s = System(str(tmp_path_factory.mktemp("prometheus")))
    try:
        # Rates need two samples of a counter that moved: wait until the demand is recorded and positive.
        wait_for(lambda: [v for _, v in s.query("dataservice:sluice_demand_elements:rate5m") if v > 0]
                 and s.query("dataservice:sluice_stall_ratio:rate5m")
                 and [v for _, v in s.query("dataservice:sluice_supply_elements:rate5m") if v > 0],
                 "demand, supply and stall ratio to be recorded")
        yield s
    finally:
        s.close()


def test_every_target_is_up(system):
    up = {m["job"]: v for m, v in system.query('up{namespace="%s"}' % NAMESPACE)}
    assert up == {"sluice-dispatcher": 1, "sluice-worker-local": 1, "sluice-worker-remote": 1}, up


@pytest.mark.parametrize("name", exported({"dispatcher", "worker"}))
def test_exported_metric_is_live(system, name):
    """Each metric the daemons are listed as exporting is scraped, with the dataservice label; counters and gauges
    are finite and non-negative. Series that exist only after an event this run does not cause are named."""
    series = system.query('%s{namespace="%s"}' % (name, NAMESPACE))
    if not series:
        # Present in the daemon's own /metrics text (as # HELP) but with no sample until the event happens.
        pytest.skip("%s has no series in this run (no such event: it appears once the daemon reports one)" % name)
    for labels, value in series:
        assert labels.get("dataservice") == DATASERVICE, labels
        assert value >= 0 and value == value and value != float("inf"), (labels, value)


def test_the_metrics_that_move_have_sane_values(system):
    workers = {m["placement"]: v for m, v in system.query("sluice_dispatcher_workers")}
    assert workers == {"local": 1, "remote": 1}, workers
    produced = system.query("sum(sluice_worker_elements_produced_total)")[0][1]
    consumed = system.query("sum(sluice_client_elements_total)")[0][1]
    assert produced > 0 and consumed > 0
    wait = system.query("sum(sluice_client_wait_seconds_total)")[0][1]
    step = system.query("sum(sluice_client_step_seconds_total)")[0][1]
    assert 0 <= wait <= step, (wait, step)
    busy = system.query("sum(rate(sluice_worker_busy_seconds_total[1m]))")[0][1]
    assert 0 < busy <= os.cpu_count() * 1.5, busy  # busy CPU seconds per second, at most the machine (+ jitter)


def test_every_rule_evaluates(system):
    """Every recording rule and alert of the chart's rules file is loaded and evaluates without error."""
    def evaluated():
        groups = system.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("2") and
                                      not r["lastEvaluation"].startswith("0001") for r in rules) else None

    rules = wait_for(evaluated, "every rule to be evaluated once")
    with open(os.path.join(CHART, "files", "rules.yaml")) as f:
        shipped = sum(len(g["rules"]) for g in yaml.safe_load(f)["groups"])
    assert len(rules) == shipped
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad


def test_recorded_series_have_sane_values(system):
    stall = system.query("dataservice:sluice_stall_ratio:rate5m")
    assert [m["dataservice"] for m, _ in stall] == [DATASERVICE]
    assert 0 <= stall[0][1] <= 1, stall
    job = system.query("dataservice_job:sluice_stall_ratio:rate5m")
    assert [m["job"] for m, _ in job] == ["trainer"], job
    assert system.query("dataservice:sluice_demand_elements:rate5m")[0][1] > 0
    assert system.query("dataservice:sluice_supply_elements:rate5m")[0][1] > 0
    placements = {m["placement"]: v for m, v in system.query("dataservice_placement:sluice_workers:sum")}
    assert placements == {"local": 1, "remote": 1}, placements
    cpus = system.query("dataservice_placement:sluice_worker_busy_cpus:rate5m")
    assert {m["placement"] for m, _ in cpus} <= {"local", "remote"} and all(v >= 0 for _, v in cpus), cpus
    assert system.query("dataservice:sluice_dispatcher_up:max") == [
        ({"__name__": "dataservice:sluice_dispatcher_up:max", "namespace": NAMESPACE,
          "sluice_dataservice": DATASERVICE}, 1.0)]


@pytest.mark.parametrize("title,expr", dashboard_queries(), ids=lambda v: re.sub(r"\W+", "_", v)[:60])
def test_dashboard_query_returns_live_data(system, title, expr):
    query = expr.replace("$namespace", ".*").replace("$dataservice", ".*")
    for component, prefix in NOT_RUNNING.items():
        if prefix in expr or re.search(r":%s" % prefix, expr):
            pytest.skip("%r reads %s series: sluice-%s does not run in this suite" % (title, component, component))
    result = wait_for(lambda: system.query(query), "dashboard panel %r (%s) to return data" % (title, query))
    assert all(v == v for _, v in result), result


def test_stall_alert_expression_agrees_with_the_stall_ratio(system):
    """SluiceStallAboveTarget's expression selects the DataService exactly when its stall ratio, over the same
    evaluation, is above the default target (no autoscaler target here)."""
    with open(os.path.join(CHART, "files", "rules.yaml")) as f:
        text = f.read().replace("SLUICE_DEFAULT_TARGET_STALL_RATIO", str(DEFAULT_TARGET_STALL_RATIO))
    (alert,) = [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]
                if r.get("alert") == "SluiceStallAboveTarget"]
    # Both evaluated at the same instant: the alert's series (or -1 when it selects nothing), and the ratio.
    # The instant of the last rule evaluation: every rule of the group has written its sample for it.
    at = system.query("timestamp(dataservice:sluice_stall_ratio:rate5m)")[0][1]
    fired = system.query("(%s) or on() vector(-1)" % alert["expr"].strip(), at)
    ratio = system.query("dataservice:sluice_stall_ratio:rate5m", at)[0][1]
    if ratio > DEFAULT_TARGET_STALL_RATIO:
        assert fired and fired[0][1] == pytest.approx(ratio), (fired, ratio)
    else:
        assert fired == [({}, -1.0)], (fired, ratio)


def test_dispatcher_down_fires(system):
    """Killing the dispatcher makes its target down, dataservice:sluice_dispatcher_up:max 0, and
    SluiceDispatcherDown pending, then firing (its `for` cut to 2 s). Last: it ends the data plane."""
    assert not [a for a in system.api("alerts")["alerts"] if a["labels"]["alertname"] == "SluiceDispatcherDown"]
    system.consumer.kill()
    system.dispatcher.kill()
    seen = set()

    def firing():
        for a in system.api("alerts")["alerts"]:
            if a["labels"]["alertname"] == "SluiceDispatcherDown":
                seen.add(a["state"])
                if a["state"] == "firing":
                    return a
        return None

    alert = wait_for(firing, "SluiceDispatcherDown to fire")
    assert alert["labels"]["sluice_dataservice"] == DATASERVICE and alert["labels"]["severity"] == "critical"
    assert alert["labels"]["namespace"] == NAMESPACE
    # With a 1 s evaluation and a 2 s `for` the pending state is normally seen; firing implies it was passed.
    assert seen <= {"pending", "firing"}, seen
