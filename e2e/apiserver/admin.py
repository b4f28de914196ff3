"""Test controls of the API server: injected faults and request statistics.

`Faults` holds fault rules added through POST /_admin/faults; request threads consult it before serving.
`Stats` counts requests by Kubernetes verb and resource. Both are guarded by their own mutex and safe to
use from every request thread.
"""

import re
import threading

from . import errors

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


class FaultRule:
    """Answer matching requests with `status` (or drop the connection / delay) `count` times."""

    def __init__(self, rule_id, spec):
        if not isinstance(spec, dict):
            raise errors.bad_request("a fault must be a JSON object")
        unknown = set(spec) - {"method", "pathRegex", "status", "count", "retryAfter", "message", "delaySeconds",
                               "dropConnection", "verb"}
        if unknown:
            raise errors.bad_request("unknown fault field(s): %s (known: method, verb, pathRegex, status, count, "
                                     "retryAfter, message, delaySeconds, dropConnection)" % ", ".join(sorted(unknown)))
        self.id = rule_id
        self.method = (spec.get("method") or "").upper() or None
        self.verb = spec.get("verb") or None
        try:
            self.path = re.compile(spec.get("pathRegex") or ".*")
        except re.error as exc:
            raise errors.bad_request("pathRegex does not compile: %s" % exc) from exc
        self.status = spec.get("status")
        self.drop = bool(spec.get("dropConnection"))
        self.delay = float(spec.get("delaySeconds") or 0)
        if self.status is None and not self.drop and not self.delay:
            raise errors.bad_request("a fault needs status, dropConnection or delaySeconds")
        if self.status is not None and (not isinstance(self.status, int) or not 400 <= self.status <= 599):
            raise errors.bad_request("fault status must be an HTTP error code (400-599)")
        count = spec.get("count", 1)
        if not isinstance(count, int):
            raise errors.bad_request("fault count must be an integer (<= 0 means unlimited)")
        self.remaining = count if count > 0 else None
        self.retry_after = spec.get("retryAfter")
        self.message = spec.get("message")
        self.fired = 0

    def matches(self, method, verb, path):
        if self.method and self.method != method:
            return False
        if self.verb and self.verb != verb:
            return False
        return self.path.search(path) is not None

    def error(self):
        return errors.status_for_code(self.status, self.message, self.retry_after)

    def describe(self):
        return {"id": self.id, "method": self.method, "verb": self.verb, "pathRegex": self.path.pattern,
                "status": self.status, "remaining": self.remaining, "fired": self.fired,
                "retryAfter": self.retry_after, "delaySeconds": self.delay, "dropConnection": self.drop}


class Faults:
    def __init__(self):
        self._mu = threading.Lock()
        self._rules = []
        self._next_id = 1
        self.injected = 0

    def add(self, spec):
        with self._mu:
            rule = FaultRule(self._next_id, spec)
            self._next_id += 1
            self._rules.append(rule)
            return rule.describe()

    def clear(self):
        with self._mu:
            self._rules = []

    def list(self):
        with self._mu:
            return [r.describe() for r in self._rules]

    def take(self, method, verb, path):
        """The first matching rule (consuming one use of it), or None."""
        with self._mu:
            for rule in self._rules:
                if rule.matches(method, verb, path):
                    rule.fired += 1
                    self.injected += 1
                    if rule.remaining is not None:
                        rule.remaining -= 1
                        if rule.remaining <= 0:
                            self._rules.remove(rule)
                    return rule
            return None


class Stats:
    def __init__(self):
        self._mu = threading.Lock()
        self._verbs = {}
        self._by_resource = {}
        self._codes = {}
        self._clients = {}
        self._total = 0

    def reset(self):
        with self._mu:
            self._verbs = {}
            self._by_resource = {}
            self._codes = {}
            self._clients = {}
            self._total = 0

    def record(self, verb, resource, code, client=""):
        """Counts one request; `client` is the User-Agent's product name (text before the first '/')."""
        with self._mu:
            self._total += 1
            self._verbs[verb] = self._verbs.get(verb, 0) + 1
            key = "%s %s" % (verb, resource) if resource else verb
            self._by_resource[key] = self._by_resource.get(key, 0) + 1
            self._codes[str(code)] = self._codes.get(str(code), 0) + 1
            entry = self._clients.setdefault(client or "unknown", {"verbs": {}, "byResource": {}, "failed": 0})
            entry["verbs"][verb] = entry["verbs"].get(verb, 0) + 1
            entry["byResource"][key] = entry["byResource"].get(key, 0) + 1
            if not 200 <= int(code) < 400:
                entry["failed"] += 1

    def snapshot(self):
        with self._mu:
            clients = {name: {"verbs": dict(e["verbs"]), "byResource": dict(e["byResource"]), "failed": e["failed"],
                              "writes": sum(v for k, v in e["verbs"].items() if k in WRITE_VERBS)}
                       for name, e in self._clients.items()}
            return {"requests": self._total, "verbs": dict(self._verbs), "byResource": dict(self._by_resource),
                    "codes": dict(self._codes), "byClient": clients,
                    "writes": sum(v for k, v in self._verbs.items() if k in WRITE_VERBS)}

