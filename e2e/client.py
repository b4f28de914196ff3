"""A small Kubernetes REST client for the e2e harness, the process node and the conformance replay.

Reads kubeconfig files (token, client certificate, CA data/file, insecure-skip-tls-verify; exec plugins are
not supported and raise a clear error), keeps one keep-alive connection per thread, and streams watches line by
line. `KubeClient` is safe to share between threads (each thread gets its own connection).
"""

import base64
import http.client
import json
import os
import ssl
import tempfile
import threading
import time
from urllib.parse import urlencode, urlsplit

import yaml


class ApiException(Exception):
    """A non-2xx answer; `status` is the HTTP code, `body` the decoded Status (or text)."""

    def __init__(self, status, body, method="", path=""):
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", "") if isinstance(body, dict) else str(body)[:500]
        super().__init__("%s %s -> %d %s: %s" % (method, path, status, self.reason, message))


class KubeConfig:
    def __init__(self, server, token=None, ca_file=None, cert_file=None, key_file=None, insecure=False,
                 namespace="default"):
        self.server = server.rstrip("/")
        self.token = token
        self.ca_file = ca_file
        self.cert_file = cert_file
        self.key_file = key_file
        self.insecure = insecure
        self.namespace = namespace

    @classmethod
    def from_file(cls, path, context=None):
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
        name = context or doc.get("current-context")
        contexts = {c["name"]: c.get("context", {}) for c in doc.get("contexts") or []}
        if name not in contexts:
            raise ValueError("%s: context %r not found (have %s)" % (path, name, ", ".join(sorted(contexts))))
        ctx = contexts[name]
        clusters = {c["name"]: c.get("cluster", {}) for c in doc.get("clusters") or []}
        users = {u["name"]: u.get("user", {}) for u in doc.get("users") or []}
        cluster = clusters.get(ctx.get("cluster"))
        if cluster is None:
            raise ValueError("%s: cluster %r of context %r not found" % (path, ctx.get("cluster"), name))
        user = users.get(ctx.get("user"), {})
        if "exec" in user or "auth-provider" in user:
            raise ValueError("%s: user %r uses an exec/auth-provider plugin, which this client does not run; "
                             "use a token or client certificate kubeconfig" % (path, ctx.get("user")))
        base = os.path.dirname(os.path.abspath(path))
        token = user.get("token")
        if not token and user.get("tokenFile"):
            with open(os.path.join(base, user["tokenFile"])) as fh:
                token = fh.read().strip()
        return cls(cluster["server"], token,
                   ca_file=_file_or_data(cluster, "certificate-authority", base),
                   cert_file=_file_or_data(user, "client-certificate", base),
                   key_file=_file_or_data(user, "client-key", base),
                   insecure=bool(cluster.get("insecure-skip-tls-verify")),
                   namespace=ctx.get("namespace") or "default")


def _file_or_data(section, key, base):
    if section.get(key + "-data"):
        fd, path = tempfile.mkstemp(prefix="kubeconfig-", suffix=".pem")
        with os.fdopen(fd, "wb") as fh:
            fh.write(base64.b64decode(section[key + "-data"]))
        return path
    if section.get(key):
        return os.path.join(base, section[key])
    return None


def write_kubeconfig(path, server, token, ca_file=None, namespace="default"):
    """Writes a single-context kubeconfig (what the harness gives the operator and tests)."""
    cluster = {"server": server}
    if ca_file:
        cluster["certificate-authority"] = os.path.abspath(ca_file)
    elif server.startswith("https://"):
        cluster["insecure-skip-tls-verify"] = True
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "e2e",
           "clusters": [{"name": "e2e", "cluster": cluster}],
           "users": [{"name": "e2e", "user": {"token": token} if token else {}}],
           "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e", "namespace": namespace}}]}
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    return path


class Response:
    def __init__(self, status, headers, body, warnings=()):
        self.status = status
        self.headers = headers
        self.body = body
        self.warnings = list(warnings)  # every Warning header, in order (headers keeps only the last)

    @property
    def content_type(self):
        return (self.headers.get("Content-Type") or "").split(";")[0].strip()

    def json(self):
        return json.loads(self.body.decode("utf-8")) if self.body else None


class KubeClient:
    def __init__(self, config, user_agent="sluice-e2e/1.0", timeout=30.0):
        self.config = config
        self.user_agent = user_agent
        self.timeout = timeout
        split = urlsplit(config.server)
        self._https = split.scheme == "https"
        self._host = split.hostname
        self._port = split.port or (443 if self._https else 80)
        self._local = threading.local()
        self._discovery = {}  # apiVersion -> {kind: (plural, namespaced)}
        self._ssl = None
        if self._https:
            ctx = ssl.create_default_context(cafile=config.ca_file) if config.ca_file else \
                ssl.create_default_context()
            if config.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if config.cert_file:
                ctx.load_cert_chain(config.cert_file, config.key_file)
            self._ssl = ctx

    @classmethod
    def from_kubeconfig(cls, path, **kwargs):
        return cls(KubeConfig.from_file(path), **kwargs)

    # ----------------------------------------------------------------------------------- transport

    def _connect(self, timeout):
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, content_type, extra):
        headers = {"User-Agent": self.user_agent, "Accept": "application/json"}
        if self.config.token:
            headers["Authorization"] = "Bearer " + self.config.token
        if content_type:
            headers["Content-Type"] = content_type
        headers.update(extra or {})
        return headers

    @staticmethod
    def _url(path, query):
        if query:
            return path + "?" + urlencode(query)
        return path

    @staticmethod
    def _encode(body):
        if body is None:
            return None
        if isinstance(body, bytes):
            return body
        if isinstance(body, str):
            return body.encode("utf-8")
        return json.dumps(body).encode("utf-8")

    def request(self, method, path, body=None, content_type=None, query=None, headers=None, timeout=None):
        """One request on this thread's keep-alive connection; retries once if the connection went stale."""
        data = self._encode(body)
        if data is not None and content_type is None:
            content_type = "application/json"
        url = self._url(path, query)
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._connect(timeout or self.timeout)
                self._local.conn = conn
            try:
                conn.request(method, url, body=data, headers=self._headers(content_type, headers))
                resp = conn.getresponse()
                payload = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    self._local.conn = None
                return Response(resp.status, dict(resp.getheaders()), payload,
                                resp.headers.get_all("Warning") or ())
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise RuntimeError("unreachable")

    def stream(self, path, query=None, timeout=None, headers=None):
        """Opens a streaming GET on its own connection; returns (connection, HTTPResponse)."""
        conn = self._connect(timeout or self.timeout)
        conn.request("GET", self._url(path, query), headers=self._headers(None, headers))
        return conn, conn.getresponse()

    def close(self):
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # ----------------------------------------------------------------------------------- JSON verbs

    def call(self, method, path, body=None, content_type=None, query=None, expect=(200, 201)):
        resp = self.request(method, path, body, content_type, query)
        decoded = None
        try:
            decoded = resp.json()
        except ValueError:
            decoded = resp.body.decode("utf-8", "replace")
        if resp.status not in expect and not 200 <= resp.status < 300:
            raise ApiException(resp.status, decoded, method, path)
        return decoded

    def get(self, path, query=None):
        return self.call("GET", path, query=query)

    def create(self, path, obj, query=None):
        return self.call("POST", path, obj, query=query)

    def replace(self, path, obj, query=None):
        return self.call("PUT", path, obj, query=query)

    def delete(self, path, query=None, body=None):
        return self.call("DELETE", path, body, query=query)

    def merge_patch(self, path, patch, query=None):
        return self.call("PATCH", path, patch, "application/merge-patch+json", query)

    def json_patch(self, path, ops, query=None):
        return self.call("PATCH", path, ops, "application/json-patch+json", query)

    def apply(self, path, obj, manager, force=False):
        query = {"fieldManager": manager}
        if force:
            query["force"] = "true"
        return self.call("PATCH", path, json.dumps(obj), "application/apply-patch+yaml", query)

    def watch(self, path, query=None, timeout=None):
        """Yields watch events (dicts) until the server ends the stream."""
        q = dict(query or {})
        q["watch"] = "true"
        if timeout is None and q.get("timeoutSeconds"):
            timeout = float(q["timeoutSeconds"]) + 30  # the server ends the stream; never time out first
        conn, resp = self.stream(path, q, timeout=timeout)
        try:
            if resp.status != 200:
                raise ApiException(resp.status, resp.read().decode("utf-8", "replace"), "GET", path)
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    # ----------------------------------------------------------------------------------- paths

    def resource_path(self, api_version, plural, namespace=None, name=None, sub=None):
        base = "/api/v1" if api_version == "v1" else "/apis/" + api_version
        parts = [base]
        if namespace:
            parts += ["namespaces", namespace]
        parts.append(plural)
        if name:
            parts.append(name)
        if sub:
            parts.append(sub)
        return "/".join(parts)

    def discover(self, api_version, kind):
        """(plural, namespaced) of a kind, through discovery (cached per client)."""
        cache = self._discovery
        if api_version not in cache:
            path = "/api/v1" if api_version == "v1" else "/apis/" + api_version
            doc = self.get(path)
            cache[api_version] = {r["kind"]: (r["name"], r["namespaced"]) for r in doc.get("resources", [])
                                  if "/" not in r["name"]}
        found = cache[api_version].get(kind)
        if found is None:
            cache.pop(api_version, None)
            raise KeyError("kind %s is not served by %s" % (kind, api_version))
        return found

    def path_for(self, obj, namespace=None, with_name=True):
        plural, namespaced = self.discover(obj["apiVersion"], obj["kind"])
        ns = (obj.get("metadata") or {}).get("namespace") or namespace or self.config.namespace
        name = (obj.get("metadata") or {}).get("name") if with_name else None
        return self.resource_path(obj["apiVersion"], plural, ns if namespaced else None, name)


def wait_until(predicate, timeout, interval=0.05, message="condition"):
    """Polls predicate() until it returns a truthy value (returned) or the deadline passes (TimeoutError)."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ApiException as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise TimeoutError("timed out after %.1fs waiting for %s%s" % (
                timeout, message, " (last error: %s)" % last_error if last_error else ""))
        time.sleep(interval)
