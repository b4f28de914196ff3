"""Replays the recorded Kubernetes exchanges (kube-fixtures/*.json) against a test API server and compares.

Most recordings form one story on one cluster (their resourceVersions increase from file to file: the CRD is
created in crd-lifecycle, `a` in crud, ...), so the chained files are replayed in that order on one fresh
server. The others were recorded on clusters of their own and each gets a fresh server prepared as its
recording says the cluster was (`SETUPS`: the DataService CRD that was installed, the scratch namespaces);
auth-errors also needs tokens and RBAC. Values that differ between any two runs (uids, resourceVersions,
continue tokens, timestamps, generated names, cluster IPs) are learnt from each response and substituted into
later requests, and ignored when comparing (also inside messages that quote an object). Everything else is
compared: status codes, content types, Warning headers (where recorded), Status reason/code/details/causes/
messages, object shapes (keys, types, list lengths), kinds, apiVersions, scalar values, managedFields entries
and their field sets, watch framing and event types.

Where the recording cannot be replayed literally, `ADJUSTMENTS` changes the request and says why; `ACTIONS`
make the writes a recorded cluster's controllers made between two exchanges (the test server runs none);
where the server knowingly answers differently, `KNOWN_DEVIATIONS` says why; `VERDICT_ONLY` names Statuses
whose message texts are not compared. All are reported, and a deviation that no longer shows up is itself a
failure (so the list stays true).
"""

import json
import os
import re
import threading
import time

FIXTURE_ENV = "SLUICE_KUBE_FIXTURES"
CHAIN = ["discovery", "crd-lifecycle", "crud", "update-conflict-patch", "validation", "server-side-apply",
         "status-scale", "watch", "watch-expired", "finalizers", "pods-ownership", "leases", "events"]
SEPARATE = ["auth-errors", "crd-validation", "dataservice-validation", "autoscaler-writes"]
USER_AGENT = "python-requests/2.28.1"  # the recordings' field manager is derived from this
# Files whose responses record every Warning header the server sent (`warnings`, absent when none): the
# replay requires exactly those warnings, in that order.
WARNING_FILES = {"crd-validation", "dataservice-validation", "autoscaler-writes"}


def installed_dataservice_crd(directory=None):
    """The DataService CRD that was installed while dataservice-validation and autoscaler-writes were recorded.

    Both notes say so: the CRD dataservices.sluice.dev at resourceVersion 554, whose spec is crd-validation's
    variant b-fixed (the project's CRD then, without the metadata description and with placement's default
    {policy: RemoteOnly, localCpuFraction: 0.5}). crd-validation exchange 2 sends exactly that CRD under the
    project's own name. Its schema has every field the autoscaler-writes requests use (spec.workers.local,
    workersToDelete, spec.autoscaling.enabled, status.autoscaler.stallRatio/lastDecision/lastScaleTime), so the
    replay installs it as recorded rather than the project's current CRD (which, for one, limits names to
    52 characters where the recording accepted 253).
    """
    body = load("crd-validation", directory)["exchanges"][2]["request"]["body"]
    return json.loads(json.dumps(body))


# Separate files -> how their cluster was prepared before the recording started.
SETUPS = {
    "crd-validation": {"crds": ["dataservice"], "namespaces": [],
                       "why": "exchange 2 answers 409 because dataservices.sluice.dev was installed"},
    "dataservice-validation": {"crds": ["dataservice"], "namespaces": ["fixture-validation"],
                               "why": "the note: the CRD was installed; fixture-validation was created for the "
                                      "real DataService of exchanges 76-95"},
    "autoscaler-writes": {"crds": ["dataservice"], "namespaces": ["fixture-autoscaler"],
                          "why": "the note: the DataService CRD as installed, in a scratch namespace created for "
                                 "the recording"},
}

# (file, exchange index) -> reason: a Status whose messages are compared by verdict only (the same status,
# reason, code, details and causes by field and reason, but not the message texts). Meant for CEL cost
# estimates, whose arithmetic (cel-go's estimator and Kubernetes' budget) the test server need not reproduce
# digit for digit. Empty: the test server's estimator (celcost.py) reproduces the factors of all three recorded
# cost refusals (crd-validation 17 and 18 "more than 100x", 19 "3.4x"), so their messages are compared in full.
VERDICT_ONLY = {}


# (file, exchange index) -> reason. The server answers differently on purpose; the comparison is still made
# and the differences must match the ones named in `expect`.
KNOWN_DEVIATIONS = {
    ("discovery", 2): {
        "reason": "the test server lists only the API groups it serves (apps, events.k8s.io, coordination.k8s.io, "
                  "apiextensions.k8s.io and CRD groups); the recorded cluster also had apiregistration, "
                  "authentication, batch, ... which are not modelled. Every group both list is compared in full, "
                  "except that autoscaling is served only at v2 (HorizontalPodAutoscalers, stored for the "
                  "autoscaler to find; the recorded cluster also served v1 and v2beta2).",
        "expect": r"^body\.groups(: |\[autoscaling\]\.versions: )",
    },
    ("status-scale", 3): {
        "reason": "the recorder edited this response in place before saving it: the real GET /scale answered the "
                  "object's spec.replicas 6 (resourceVersion 403), and the recording script then set 8 in the same "
                  "dict to send it back as the next exchange's PUT, so the saved response body is byte for byte "
                  "exchange 4's request body. The test server answers the real 6. (Across all fixtures only this "
                  "response and leases exchange 0's are identical to a later request body; the leases one differs "
                  "only in renewTime, which is compared as volatile.)",
        "expect": r"^body\.spec\.replicas: value 8 != 6$",
    },
    ("autoscaler-writes", 31): {
        "reason": "the same recorder artefact as status-scale 3: the real GET /scale (10b) answered the object's "
                  "spec.workers.replicas 5 (set by the applies 9a/9b), and the recording script then set 11 in "
                  "the same dict to send it as exchange 32's PUT (its body is byte for byte this saved response). "
                  "The test server answers the real 5.",
        "expect": r"^body\.spec\.replicas: value 11 != 5$",
    },
}


def _adjust_watch_timeout(request):
    request["query"] = dict(request["query"], timeoutSeconds="2")
    return request


# The HPA controller's writes between autoscaler-writes exchanges 53 and 54 (the recording let the cluster's own
# controller scale fx-hpa-target to minReplicas 3; the test server runs no HPA controller). Its User-Agent:
HPA_CONTROLLER_AGENT = ("rk-cm/v1.26.1 (linux/amd64) kubernetes/8f94681/"
                        "system:serviceaccount:kube-system:horizontal-pod-autoscaler")


def _act_as_hpa_controller(replayer, exchanges):
    """What kube-controller-manager's HPA controller did: read /scale, PUT it at 3, PUT the HPA's status."""
    ns_path = "/apis/sluice.dev/v1alpha1/namespaces/fixture-autoscaler/dataservices/fx-hpa-target/scale"
    headers = {"User-Agent": HPA_CONTROLLER_AGENT}
    scale = replayer.client.request("GET", ns_path, headers=headers).json()
    scale["spec"]["replicas"] = 3
    resp = replayer.client.request("PUT", ns_path, json.dumps(scale).encode(), "application/json",
                                   headers=headers)
    if resp.status != 200:
        raise AssertionError("the HPA controller's PUT /scale failed: %d %s" % (resp.status, resp.body[:300]))
    hpa_path = "/apis/autoscaling/v2/namespaces/fixture-autoscaler/horizontalpodautoscalers/fx-hpa"
    hpa = replayer.client.request("GET", hpa_path, headers=headers).json()
    hpa["status"] = json.loads(json.dumps(exchanges[55]["response"]["body"]["status"]))
    resp = replayer.client.request("PUT", hpa_path + "/status", json.dumps(hpa).encode(), "application/json",
                                   headers=headers)
    if resp.status != 200:
        raise AssertionError("the HPA controller's status update failed: %d %s" % (resp.status, resp.body[:300]))


# (file, exchange index) -> function(replayer, exchanges), run before that exchange, and why.
ACTIONS = {
    ("autoscaler-writes", 54): (_act_as_hpa_controller,
                                "between exchanges 53 and 54 the recorded cluster's HPA controller (manager rk-cm) "
                                "scaled fx-hpa-target to the HPA's minReplicas 3 through /scale and wrote the HPA's "
                                "status; the test server runs no controllers, so the replay makes those two writes "
                                "with the controller's User-Agent (GET + PUT /scale, PUT /status with the recorded "
                                "status), and exchanges 54 and 55 then check what the server made of them."),
}

# (file, exchange index) -> (function(request) -> request, reason)
ADJUSTMENTS = {
    ("watch", 0): (_adjust_watch_timeout,
                   "the recorded watch ran for its 65 s timeout with bookmarks once a minute; the replay shortens "
                   "the timeout to 2 s and the server's bookmark interval to 0.3 s (admin config). The writes that "
                   "produced the recorded events (create w1, update it, delete it) are made while it runs."),
    ("watch-expired", 0): (None,
                           "the recording's watch from resourceVersion 1 failed because the cluster's watch cache had "
                           "moved on; the replay compacts the test server's history through resourceVersion 2 "
                           "first (POST /_admin/compact), which keeps the recorded Exact list at 2 answerable."),
}

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
_VOLATILE_KEYS = {"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "time", "lastTransitionTime",
                  "renewTime", "acquireTime", "eventTime", "continue", "clusterIP", "clusterIPs", "serverAddress",
                  "lastProbeTime"}
_VERSION_KEYS = {"buildDate", "compiler", "gitCommit", "gitTreeState", "gitVersion", "goVersion", "major", "minor",
                 "platform"}
_GENERATED = re.compile(r"^kube-api-access-[a-z0-9]{5}$")


def fixture_dir():
    env = os.environ.get(FIXTURE_ENV)
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    candidate = os.path.join(repo, "testing", "kube-fixtures")
    if os.path.isdir(candidate):
        return os.path.abspath(candidate)
    raise FileNotFoundError("kube-fixtures not found at %s: set %s" % (candidate, FIXTURE_ENV))


def load(name, directory=None):
    with open(os.path.join(directory or fixture_dir(), name + ".json")) as fh:
        return json.load(fh)


def all_fixture_names(directory=None):
    return sorted(f[:-5] for f in os.listdir(directory or fixture_dir()) if f.endswith(".json"))


# ------------------------------------------------------------------------------------------ comparison


class Comparator:
    """Compares a recorded response body with an actual one; collects human-readable differences."""

    def __init__(self, substitutions, verdict_only=False):
        self.subs = substitutions
        self.verdict_only = verdict_only  # Status messages not compared, causes by field and reason only

    def compare(self, expected, actual, path="body"):
        diffs = []
        self._compare(self.subs.apply_expected(expected), actual, path, diffs, None)
        return diffs

    def _compare(self, exp, act, path, diffs, key):
        if isinstance(exp, dict) and exp.get("kind") == "Status" and isinstance(act, dict):
            self._compare_status(exp, act, path, diffs)
            return
        if _kind(exp) != _kind(act):
            if not (key in _VOLATILE_KEYS and exp is None or act is None and key in _VOLATILE_KEYS):
                diffs.append("%s: type %s != %s" % (path, _kind(exp), _kind(act)))
            return
        if isinstance(exp, dict):
            missing = sorted(set(exp) - set(act))
            extra = sorted(set(act) - set(exp))
            if missing:
                diffs.append("%s: missing keys %s" % (path, missing))
            if extra:
                diffs.append("%s: unexpected keys %s" % (path, extra))
            for k in sorted(set(exp) & set(act)):
                if k == "name" and isinstance(exp.get("generateName"), str) and isinstance(act[k], str) \
                        and _generated_from(exp["generateName"], exp[k]):
                    if not _generated_from(act.get("generateName") or "", act[k]):
                        diffs.append("%s.name: %s is not generated from %s" % (path, json.dumps(act[k]),
                                                                            json.dumps(exp["generateName"])))
                elif k == "managedFields" and isinstance(exp[k], list):
                    self._compare_managed(exp[k], act[k], path + ".managedFields", diffs)
                elif k == "groups" and path == "body":
                    self._compare_named(exp[k], act[k], path + ".groups", diffs)
                elif k == "resources" and path == "body":
                    self._compare_named(exp[k], act[k], path + ".resources", diffs)
                else:
                    self._compare(exp[k], act[k], "%s.%s" % (path, k), diffs, k)
            return
        if isinstance(exp, list):
            if len(exp) != len(act):
                diffs.append("%s: %d items != %d" % (path, len(exp), len(act)))
                return
            for i, (e, a) in enumerate(zip(exp, act)):
                self._compare(e, a, "%s[%d]" % (path, i), diffs, key)
            return
        if key in _VOLATILE_KEYS or (path.startswith("body.") and key in _VERSION_KEYS and "." not in path[5:]):
            return
        if isinstance(exp, str) and (_TIMESTAMP.match(exp) or _GENERATED.match(exp)):
            return
        if exp != act:
            diffs.append("%s: value %s != %s" % (path, json.dumps(exp), json.dumps(act)))

    def _compare_named(self, exp, act, path, diffs):
        """Lists of named entries (discovery groups/resources) compared by name."""
        exp_by = {e.get("name"): e for e in exp}
        act_by = {a.get("name"): a for a in act}
        if [e.get("name") for e in exp] != [a.get("name") for a in act]:
            diffs.append("%s: names %s != %s" % (path, [e.get("name") for e in exp], [a.get("name") for a in act]))
        for name in sorted(set(exp_by) & set(act_by)):
            self._compare(exp_by[name], act_by[name], "%s[%s]" % (path, name), diffs, None)

    def _compare_managed(self, exp, act, path, diffs):
        def key(entry):
            return (entry.get("manager"), entry.get("operation"), entry.get("subresource", ""))

        exp_by = {key(e): e for e in exp}
        act_by = {key(a): a for a in act}
        if set(exp_by) != set(act_by):
            diffs.append("%s: managers %s != %s" % (path, sorted(exp_by), sorted(act_by)))
        for k in sorted(set(exp_by) & set(act_by), key=str):
            self._compare(exp_by[k], act_by[k], "%s[%s]" % (path, "/".join(filter(None, k))), diffs, None)

    def _compare_status(self, exp, act, path, diffs):
        for k in ("kind", "apiVersion", "status", "reason", "code", "metadata"):
            if exp.get(k) != act.get(k):
                diffs.append("%s.%s: %s != %s" % (path, k, json.dumps(exp.get(k)), json.dumps(act.get(k))))
        if set(exp) != set(act):
            diffs.append("%s: keys %s != %s" % (path, sorted(exp), sorted(act)))
        exp_details, act_details = exp.get("details"), act.get("details")
        if (exp_details is None) != (act_details is None):
            diffs.append("%s.details: present %s != %s" % (path, exp_details is not None, act_details is not None))
        elif exp_details is not None:
            if set(exp_details) != set(act_details):
                diffs.append("%s.details: keys %s != %s" % (path, sorted(exp_details), sorted(act_details)))
            for k in ("name", "group", "kind", "uid", "retryAfterSeconds"):
                if exp_details.get(k) != act_details.get(k):
                    diffs.append("%s.details.%s: %s != %s" % (path, k, json.dumps(exp_details.get(k)),
                                                              json.dumps(act_details.get(k))))
            exp_causes = sorted(json.dumps(self._cause_key(c), sort_keys=True)
                                for c in exp_details.get("causes") or [])
            act_causes = sorted(json.dumps(self._cause_key(c), sort_keys=True)
                                for c in act_details.get("causes") or [])
            if exp_causes != act_causes:
                diffs.append("%s.details.causes: %s != %s" % (path, exp_causes, act_causes))
        if self.verdict_only:
            return
        if not _same_message(_masked_status(exp), _masked_status(act)):
            diffs.append("%s.message: %s != %s" % (path, json.dumps(exp.get("message")),
                                                   json.dumps(act.get("message"))))


    def _cause_key(self, cause):
        if not isinstance(cause, dict):
            return cause
        if self.verdict_only:
            return {"field": cause.get("field"), "reason": cause.get("reason")}
        out = dict(cause)
        if isinstance(out.get("message"), str):
            out["message"] = _mask_volatile(out["message"])
        return out


# Volatile values embedded in message texts (a 422 that quotes the patched object: its timestamps and
# resourceVersion; uids are substituted before comparing).
_EMBEDDED_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")
_EMBEDDED_RV = re.compile(r'(resourceVersion\\?":\\?")\d+')


def _mask_volatile(text):
    return _EMBEDDED_RV.sub(r"\1<rv>", _EMBEDDED_TIME.sub("<time>", text))


def _masked_status(status):
    out = dict(status)
    if isinstance(out.get("message"), str):
        out["message"] = _mask_volatile(out["message"])
    details = out.get("details")
    if isinstance(details, dict) and details.get("causes"):
        details = dict(details)
        details["causes"] = [dict(c, message=_mask_volatile(c["message"])) if isinstance(c, dict) and
                             isinstance(c.get("message"), str) else c for c in details["causes"]]
        out["details"] = details
    return out


def _same_message(exp, act):
    want, have = exp.get("message") or "", act.get("message") or ""
    if want == have:
        return True
    mask = re.compile(r"\d+")
    if exp.get("reason") == "Expired" and mask.sub("N", want) == mask.sub("N", have):
        return True
    causes = (exp.get("details") or {}).get("causes") or []
    if exp.get("reason") == "Invalid" and len(causes) > 1:
        # Kubernetes reports several causes in map-iteration order; compare the parts, not their order.
        prefix = want.split(": [", 1)[0]
        if not have.startswith(prefix + ": [") or len(want) != len(have):
            return False
        return all("%s: %s" % (c.get("field"), c.get("message")) in have for c in causes)
    return False


def _generated_from(prefix, name):
    """A name the server generated from generateName: the prefix and five random characters."""
    return bool(prefix) and name.startswith(prefix) and re.match(r"^[a-z0-9]{5}$", name[len(prefix):]) is not None


def _kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


class Substitutions:
    """Recorded volatile value -> the value this server used, learnt from responses."""

    def __init__(self):
        self.exact = {}  # resourceVersions and continue tokens
        self.uids = {}

    def learn(self, expected, actual):
        if isinstance(expected, dict) and isinstance(actual, dict):
            for k, v in expected.items():
                if k not in actual:
                    continue
                if k in ("resourceVersion", "continue") and isinstance(v, str) and isinstance(actual[k], str) and v:
                    self.exact.setdefault(v, actual[k])
                elif k == "uid" and isinstance(v, str) and isinstance(actual[k], str):
                    self.uids.setdefault(v, actual[k])
                else:
                    self.learn(v, actual[k])
        elif isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
            for e, a in zip(expected, actual):
                self.learn(e, a)

    def _uid_text(self, text):
        for old, new in self.uids.items():
            if old in text:
                text = text.replace(old, new)
        return text

    def apply_expected(self, value):
        """The recorded value with recorded uids replaced (fieldsV1 keys and messages embed them)."""
        if isinstance(value, dict):
            return {self._uid_text(k): self.apply_expected(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.apply_expected(v) for v in value]
        if isinstance(value, str):
            return self._uid_text(value)
        return value

    def apply_request(self, value, key=None):
        if isinstance(value, dict):
            return {k: self.apply_request(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.apply_request(v, key) for v in value]
        if isinstance(value, str):
            if key in ("resourceVersion", "continue") and value in self.exact:
                return self.exact[value]
            return self._uid_text(value)
        return value


# ------------------------------------------------------------------------------------------ replay


class ExchangeResult:
    def __init__(self, file, index, request, diffs, deviation=None, adjustment=None, verdict_only=None):
        self.file = file
        self.index = index
        self.request = request
        self.diffs = diffs
        self.deviation = deviation
        self.adjustment = adjustment
        self.verdict_only = verdict_only

    def label(self):
        r = self.request
        return "%s[%d] %s %s" % (self.file, self.index, r["method"], r["path"])

    def failures(self):
        """Differences that are not explained by a known deviation (and stale deviations)."""
        if self.deviation is None:
            return self.diffs
        pattern = re.compile(self.deviation["expect"])
        unexplained = [d for d in self.diffs if not pattern.search(d)]
        if not any(pattern.search(d) for d in self.diffs):
            unexplained.append("known deviation no longer occurs; remove it from KNOWN_DEVIATIONS: %s"
                               % self.deviation["reason"])
        return unexplained


class Replayer:
    """Drives one server through fixture files; `client` is an e2e.client.KubeClient for it."""

    def __init__(self, client, admin_client=None, tokens=None):
        self.client = client
        self.admin = admin_client or client
        self.subs = Substitutions()
        self.tokens = tokens or {}

    def prepare(self, name, directory=None):
        """Makes a fresh server look like the cluster `name` was recorded on (SETUPS)."""
        setup = SETUPS[name]
        writes = [("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", installed_dataservice_crd(directory))
                  for crd in setup["crds"] if crd == "dataservice"]
        writes += [("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
                   for ns in setup["namespaces"]]
        for path, body in writes:
            resp = self.client.request("POST", path, json.dumps(body).encode(), "application/json")
            if resp.status != 201:
                raise AssertionError("preparing the server for %s (%s): POST %s answered %d %s"
                                     % (name, setup["why"], path, resp.status, resp.body[:500]))

    def run_file(self, name, data):
        results = []
        for index, exchange in enumerate(data["exchanges"]):
            action = ACTIONS.get((name, index))
            if action is not None:
                action[0](self, data["exchanges"])
            results.append(self.run_exchange(name, index, exchange))
        return results

    def run_exchange(self, name, index, exchange):
        request = json.loads(json.dumps(exchange["request"]))
        expected = exchange["response"]
        adjustment = ADJUSTMENTS.get((name, index))
        if adjustment and adjustment[0] is not None:
            request = adjustment[0](request)
        request = self._substitute(request)
        if name == "watch-expired" and index == 0:
            self.admin.call("POST", "/_admin/compact", {"resourceVersion": 2})
        verdict_only = VERDICT_ONLY.get((name, index))
        if "events" in expected:
            diffs = self._run_watch(name, request, expected)
        else:
            diffs = self._run_plain(name, index, request, expected, verdict_only is not None)
        action = ACTIONS.get((name, index))
        notes = [text for text in (adjustment[1] if adjustment else None, action[1] if action else None) if text]
        return ExchangeResult(name, index, request, diffs, KNOWN_DEVIATIONS.get((name, index)),
                              " ".join(notes) or None, verdict_only)

    def _substitute(self, request):
        request["query"] = self.subs.apply_request(request.get("query") or {})
        body = request.get("body")
        if isinstance(body, (dict, list)):
            body = self.subs.apply_request(body)
            rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if rv and rv not in self.subs.exact.values() and request["method"] == "PUT":
                # A version produced by a write whose answer carried no object (pods/binding): learn it.
                current = self.client.request("GET", request["path"].rsplit("/status", 1)[0]).json()
                self.subs.exact.setdefault(rv, current["metadata"]["resourceVersion"])
                body = self.subs.apply_request(body)
        elif isinstance(body, str):
            body = self.subs.apply_request(body)
        request["body"] = body
        return request

    def _headers(self, name, index, request):
        headers = dict(request.get("headers") or {})  # a User-Agent of the recorded client's own
        token = self.tokens.get((name, index))
        if token:
            headers["Authorization"] = "Bearer " + token
        return headers

    def _send(self, name, index, request):
        body = request.get("body")
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        return self.client.request(request["method"], request["path"], data, request.get("content_type"),
                                   request.get("query") or None, headers=self._headers(name, index, request))

    def _run_plain(self, name, index, request, expected, verdict_only=False):
        resp = self._send(name, index, request)
        diffs = []
        if resp.status != expected["status"]:
            diffs.append("status %d != %d (%s)" % (expected["status"], resp.status, resp.body[:300]))
        if resp.content_type != expected.get("content_type"):
            diffs.append("content type %s != %s" % (expected.get("content_type"), resp.content_type))
        if name in WARNING_FILES and resp.warnings != (expected.get("warnings") or []):
            diffs.append("warnings %s != %s" % (expected.get("warnings") or [], resp.warnings))
        try:
            actual = resp.json()
        except ValueError:
            return diffs + ["body is not JSON: %r" % resp.body[:200]]
        diffs += Comparator(self.subs, verdict_only).compare(expected.get("body"), actual)
        self.subs.learn(expected.get("body"), actual)
        return diffs

    def _run_watch(self, name, request, expected):
        query = dict(request.get("query") or {})
        if name == "watch":
            previous = self.admin.call("POST", "/_admin/config", {})["bookmarkIntervalSeconds"]
            self.admin.call("POST", "/_admin/config", {"bookmarkIntervalSeconds": 0.3})
        conn, resp = self.client.stream(request["path"], query, timeout=30)
        lines = []
        diffs = []
        done = threading.Event()

        def reader():
            try:
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    lines.append(line)
            finally:
                done.set()

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        try:
            if name == "watch":
                self._drive_watch(request["path"])
            if not done.wait(30):
                diffs.append("watch stream did not end")
        finally:
            conn.close()
            if name == "watch":
                self.admin.call("POST", "/_admin/config", {"bookmarkIntervalSeconds": previous})
        if resp.status != expected["status"]:
            diffs.append("status %d != %d" % (expected["status"], resp.status))
        content_type = (resp.getheader("Content-Type") or "").split(";")[0]
        if content_type != expected.get("content_type"):
            diffs.append("content type %s != %s" % (expected.get("content_type"), content_type))
        if expected.get("transfer_encoding") and resp.getheader("Transfer-Encoding") != expected["transfer_encoding"]:
            diffs.append("transfer encoding %s != %s" % (expected["transfer_encoding"],
                                                         resp.getheader("Transfer-Encoding")))
        try:
            events = [json.loads(line) for line in lines if line.strip()]
        except ValueError as exc:
            return diffs + ["watch line is not JSON: %s" % exc]
        if any(not line.endswith(b"\n") for line in lines):
            diffs.append("watch events must each end with a newline")
        want = expected["events"]
        want_types = [e["type"] for e in want if e["type"] != "BOOKMARK"]
        have_types = [e["type"] for e in events if e["type"] != "BOOKMARK"]
        if want_types != have_types:
            diffs.append("event types %s != %s" % (want_types, have_types))
        if any(e["type"] == "BOOKMARK" for e in want):
            tail = [e["type"] for e in events[len(have_types):]]
            if not tail or set(tail) != {"BOOKMARK"}:
                diffs.append("expected BOOKMARK events after the others, got %s" % tail)
        comparator = Comparator(self.subs)
        plain_want = [e for e in want if e["type"] != "BOOKMARK"]
        plain_have = [e for e in events if e["type"] != "BOOKMARK"]
        for i, (e, a) in enumerate(zip(plain_want, plain_have)):
            diffs += comparator.compare(e, a, "events[%d]" % i)
        bookmarks_want = [e for e in want if e["type"] == "BOOKMARK"]
        bookmarks_have = [e for e in events if e["type"] == "BOOKMARK"]
        if bookmarks_want and bookmarks_have:
            diffs += comparator.compare(bookmarks_want[0], bookmarks_have[0], "bookmark")
        return diffs

    def _drive_watch(self, collection_path):
        """The writes behind watch.json's events, made once the watch is registered."""
        deadline = time.monotonic() + 10
        while not self.admin.call("GET", "/_admin/watches")["watches"]:
            if time.monotonic() > deadline:
                raise TimeoutError("the watch never registered")
            time.sleep(0.01)
        obj = {"apiVersion": "fixtures.sluice.dev/v1alpha1", "kind": "Sample",
               "metadata": {"name": "w1", "namespace": "fixtures"},
               "spec": {"image": "sluice-worker:dev", "replicas": 2}}
        self.client.call("POST", collection_path, obj)
        self.client.call("PATCH", collection_path + "/w1", {"spec": {"replicas": 3}}, "application/merge-patch+json")
        self.client.call("DELETE", collection_path + "/w1")
