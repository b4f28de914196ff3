"""HTTP(S) transport of the test API server: routing, authentication, watch streaming, admin endpoints.

`ApiServer` binds a ThreadingHTTPServer (one thread per connection, HTTP/1.1 keep-alive) around a Registry.
Handlers parse the request, consult the fault injector and the authorizer, call the registry and write JSON;
watches stream chunked JSON lines from the watcher's queue, writing only outside the store lock. Settings
that tests may change at run time (bookmark interval, RBAC policy) are replaced atomically.
"""

import json
import queue
import re
import select
import socket
import ssl
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

import yaml

from . import errors, registry as reg
from .admin import Faults, Stats
from .auth import Policy, TokenAuthenticator, forbidden
from .deletion import delete_options
from .registry import Registry, RequestContext
from .store import Store, TooOld, Watcher

_JSON = "application/json"


class Config:
    def __init__(self, host="127.0.0.1", port=0, tls_cert=None, tls_key=None, token_file=None, rbac_policy=None,
                 history_size=10000, bookmark_interval=60.0, watch_timeout=1800.0, verbose=False):
        self.host = host
        self.port = port
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.token_file = token_file
        self.rbac_policy = rbac_policy
        self.history_size = history_size
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.verbose = verbose


class Route:
    """What a request path names: a discovery document or a resource (with its coordinates)."""

    def __init__(self, kind, group="", version="", resource="", namespace=None, name="", sub="", watch=False):
        self.kind = kind
        self.group = group
        self.version = version
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.sub = sub
        self.watch = watch


def parse_path(path):
    """Maps an API path to a Route; raises 404 for paths outside the API."""
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts:
        return Route("root")
    if parts == ["version"]:
        return Route("version")
    if parts[0] in ("healthz", "livez", "readyz"):
        return Route("health")
    if parts[0] == "api":
        if len(parts) == 1:
            return Route("api")
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis":
        if len(parts) == 1:
            return Route("apis")
        if len(parts) == 2:
            return Route("group", group=parts[1])
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise errors.path_not_found()
    if not rest:
        return Route("resources", group, version)
    watch = False
    if rest[0] == "watch":
        watch = True
        rest = rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace = rest[1]
        rest = rest[2:]
    if not rest or len(rest) > 3:
        raise errors.path_not_found()
    return Route("resource", group, version, rest[0], namespace, rest[1] if len(rest) > 1 else "",
                 rest[2] if len(rest) > 2 else "", watch)


def _go_json_error(raw, exc):
    text = raw.decode("utf-8", "replace")
    if exc.pos >= len(text.rstrip()):
        problem = "unexpected end of JSON input"
    else:
        problem = "invalid character '%s' looking for beginning of value" % text[exc.pos]
    snippet = text[:30] + (" ..." if len(text) > 30 else "")
    return "couldn't get version/kind; json parse error: %s (%s)" % (problem, snippet)


class _Pairs(list):
    """A JSON object as its key/value pairs, in order (so that duplicate keys are seen)."""


def _resolve_pairs(value, path, duplicates):
    if isinstance(value, _Pairs):
        out = {}
        for key, item in value:
            child = "%s.%s" % (path, key) if path else key
            if key in out:
                duplicates.append(child)
            out[key] = _resolve_pairs(item, child, duplicates)
        return out
    if isinstance(value, list):
        return [_resolve_pairs(item, "%s[%d]" % (path, i), duplicates) for i, item in enumerate(value)]
    return value


def decode_body(raw, content_type, kind, duplicates=None):
    """The request body as a JSON value (JSON or YAML); 400 with the API server's wording when malformed.
    With a `duplicates` list, the paths of duplicate JSON keys (the last one wins) are appended to it."""
    if not raw:
        raise errors.bad_request("the object provided is unrecognized (must be of type %s): couldn't get "
                                 "version/kind; json parse error: unexpected end of JSON input" % kind)
    if content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
        try:
            return yaml.safe_load(raw.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise errors.bad_request("the object provided is unrecognized (must be of type %s): %s"
                                     % (kind, exc)) from exc
    try:
        text = raw.decode("utf-8")
        if duplicates is None:
            return json.loads(text)
        seen = []

        def dict_noting_duplicates(pairs):
            out = dict(pairs)
            if len(out) != len(pairs):
                seen.append(True)
            return out

        value = json.loads(text, object_pairs_hook=dict_noting_duplicates)
        if not seen:
            return value
        # Rare: decode again, keeping the pairs, to name the duplicate fields' paths.
        return _resolve_pairs(json.loads(text, object_pairs_hook=_Pairs), "", duplicates)
    except json.JSONDecodeError as exc:
        raise errors.bad_request("the object provided is unrecognized (must be of type %s): %s"
                                 % (kind, _go_json_error(raw, exc))) from exc
    except UnicodeDecodeError as exc:
        raise errors.bad_request("the object provided is unrecognized (must be of type %s): body is not UTF-8"
                                 % kind) from exc


class _OpenWatch:
    __slots__ = ("watcher", "path", "abort", "started")

    def __init__(self, watcher, path):
        self.watcher = watcher
        self.path = path
        self.abort = False
        self.started = time.time()


class ApiServer:
    """The test API server: registry + HTTP front end. start() serves in a background thread."""

    def __init__(self, config=None):
        self.config = config or Config()
        self.registry = Registry(Store(self.config.history_size))
        self.faults = Faults()
        self.stats = Stats()
        self.authenticator = (TokenAuthenticator.from_file(self.config.token_file) if self.config.token_file
                              else TokenAuthenticator(None))
        self.policy = Policy.from_file(self.config.rbac_policy) if self.config.rbac_policy else None
        self.bookmark_interval = self.config.bookmark_interval
        self.watch_timeout = self.config.watch_timeout
        self._watches_mu = threading.Lock()
        self._watches = set()
        self._ssl = None
        if self.config.tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.config.tls_cert, self.config.tls_key)
            self._ssl = ctx
        self.httpd = _HttpServer((self.config.host, self.config.port), _Handler, self)
        self._thread = None

    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def url(self):
        return "%s://%s:%d" % ("https" if self._ssl else "http", self.config.host, self.port)

    def start(self):
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="apiserver", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self):
        self.httpd.serve_forever()

    def shutdown(self):
        self.close_watches(None, abort=True)
        self.httpd.shutdown()
        self.httpd.server_close()

    # ----------------------------------------------------------------------------------- watches

    def add_watch(self, open_watch):
        with self._watches_mu:
            self._watches.add(open_watch)

    def remove_watch(self, open_watch):
        with self._watches_mu:
            self._watches.discard(open_watch)

    def close_watches(self, path_regex, abort=False):
        pattern = re.compile(path_regex) if path_regex else None
        with self._watches_mu:
            chosen = [w for w in self._watches if pattern is None or pattern.search(w.path)]
        for w in chosen:
            w.abort = abort
            w.watcher.close()
        return len(chosen)

    def watch_list(self):
        with self._watches_mu:
            return [{"path": w.path, "ageSeconds": round(time.time() - w.started, 3)} for w in self._watches]


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, address, handler, api):
        self.api = api
        super().__init__(address, handler)

    def finish_request(self, request, client_address):
        if self.api._ssl is not None:
            try:
                request = self.api._ssl.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)):
            return
        super().handle_error(request, client_address)


_VERB_FOR_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sluice-test-apiserver/1"

    def log_message(self, fmt, *args):
        if self.server.api.config.verbose:
            super().log_message(fmt, *args)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # ----------------------------------------------------------------------------------- plumbing

    def _read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, code, body, content_type=_JSON, headers=None, warnings=()):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        for warning in warnings:
            self.send_header("Warning", '299 - %s' % json.dumps(warning))
        self.end_headers()
        self.wfile.write(body)

    def _send_obj(self, code, obj, warnings=()):
        self._send(code, json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(), warnings=warnings)

    def _send_error(self, err):
        self._send(err.code, json.dumps(err.status(), separators=(",", ":")).encode(), headers=err.headers)

    # ----------------------------------------------------------------------------------- dispatch

    def _dispatch(self, method):
        api = self.server.api
        split = urlsplit(self.path)
        path = split.path
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        verb, resource_label, code = "nonresource", "", 500
        try:
            raw = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        try:
            if path.startswith("/_admin"):
                verb = "admin"
                code = self._admin(method, path, raw)
                return
            route = parse_path(path)
            if route.kind == "resource":
                verb = self._verb(method, route, query)
                resource_label = route.resource + ("/" + route.sub if route.sub else "")
            fault = api.faults.take(method, verb, path)
            if fault is not None:
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.drop:
                    code = 0
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault.status is not None:
                    raise fault.error()
            user = api.authenticator.authenticate(self.headers.get("Authorization"))
            if route.kind == "resource":
                if api.policy is not None and not api.policy.allows(
                        user, verb, route.group, resource_label, route.namespace or "", route.name):
                    raise forbidden(user, verb, route.group, route.resource, route.sub, route.namespace,
                                    route.name)
                rtype = self._resolve(route)
                code = self._resource(method, verb, route, rtype, query, raw)
            else:
                if method != "GET":
                    raise errors.method_not_allowed()
                code = self._discovery(route)
        except errors.ApiError as err:
            code = err.code
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # any bug must still produce a Status, never a dropped connection
            traceback.print_exc()
            code = 500
            try:
                self._send_error(errors.internal_error("%s: %s" % (type(exc).__name__, exc)))
            except OSError:
                self.close_connection = True
        finally:
            if verb != "admin":
                agent = (self.headers.get("User-Agent") or "").split("/")[0]
                api.stats.record(verb, resource_label, code, agent)

    @staticmethod
    def _verb(method, route, query):
        if method == "GET":
            if route.name and not route.watch and query.get("watch") not in ("1", "true"):
                return "get"
            if route.watch or query.get("watch") in ("1", "true"):
                return "watch"
            return "list"
        if method == "DELETE":
            return "delete" if route.name else "deletecollection"
        return _VERB_FOR_METHOD.get(method, method.lower())

    def _resolve(self, route):
        rtype = self.server.api.registry.resolve(route.group, route.version, route.resource)
        if rtype is None:
            raise errors.path_not_found()
        if route.namespace is not None and not rtype.namespaced:
            raise errors.path_not_found()
        if rtype.namespaced and route.namespace is None and route.name:
            raise errors.path_not_found()
        if route.sub and route.sub not in rtype.subresources:
            raise errors.path_not_found()
        return rtype

    # ----------------------------------------------------------------------------------- discovery

    def _discovery(self, route):
        api = self.server.api
        registry = api.registry
        if route.kind == "health":
            self._send(200, b"ok", "text/plain; charset=utf-8")
            return 200
        if route.kind == "version":
            self._send_obj(200, {"major": "1", "minor": "26", "gitVersion": "v1.26.0-sluice-test",
                                 "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                                 "buildDate": "1970-01-01T00:00:00Z", "goVersion": "python%d.%d" % sys.version_info[:2],
                                 "compiler": "cpython", "platform": "linux/amd64"})
            return 200
        if route.kind == "root":
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
            paths += ["/apis/%s/%s" % (g, v) for g, vs, _ in registry.group_versions() if g for v in vs]
            self._send_obj(200, {"paths": sorted(paths)})
            return 200
        if route.kind == "api":
            self._send_obj(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "%s:%d" % (api.config.host, api.port)}]})
            return 200
        groups = []
        for group, versions, preferred in registry.group_versions():
            if not group:
                continue
            groups.append({"name": group,
                           "versions": [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in versions],
                           "preferredVersion": {"groupVersion": "%s/%s" % (group, preferred), "version": preferred}})
        if route.kind == "apis":
            self._send_obj(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            return 200
        if route.kind == "group":
            for group in groups:
                if group["name"] == route.group:
                    body = dict(group)
                    body.update({"kind": "APIGroup", "apiVersion": "v1"})
                    self._send_obj(200, body)
                    return 200
            raise errors.path_not_found()
        types = registry.types_for(route.group, route.version)
        if not types:
            raise errors.path_not_found()
        resources = []
        for rtype in sorted(types, key=lambda t: t.resource):
            resources.extend(rtype.discovery())
        group_version = "%s/%s" % (route.group, route.version) if route.group else route.version
        self._send_obj(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                             "resources": resources})
        return 200

    # ----------------------------------------------------------------------------------- resources

    def _context(self, query):
        manager = query.get("fieldManager")
        if not manager:
            agent = self.headers.get("User-Agent") or ""
            manager = agent.split("/")[0] or "unknown"
        validation = query.get("fieldValidation") or "Warn"
        if validation not in ("Strict", "Warn", "Ignore"):
            raise errors.bad_request('fieldValidation: Unsupported value: %s: supported values: "Ignore", "Warn", '
                                     '"Strict"' % errors.go_quote(validation))
        dry_run = query.get("dryRun")
        if dry_run not in (None, "", "All"):
            raise errors.bad_request('dryRun: Unsupported value: %s: supported values: "All"'
                                     % errors.go_quote(dry_run))
        return RequestContext(manager, dry_run == "All", validation)

    def _content_type(self):
        return (self.headers.get("Content-Type") or _JSON).split(";")[0].strip().lower()

    def _resource(self, method, verb, route, rtype, query, raw):
        registry = self.server.api.registry
        ns, name, sub = route.namespace, route.name, route.sub
        if verb not in rtype.verbs and not sub:
            raise errors.method_not_allowed()
        if method == "GET":
            if verb == "watch":
                if name:
                    query = dict(query)
                    query["fieldSelector"] = ",".join(filter(None, [query.get("fieldSelector"),
                                                                    "metadata.name=%s" % name]))
                return self._watch(route, rtype, query)
            if verb == "list":
                result = registry.list(rtype, ns, query)
                self._send(200, registry.list_json(result))
                return 200
            stored = registry.get(rtype, ns, name)
            if sub == "scale":
                self._send_obj(200, registry.scale_of(rtype, stored))
            elif sub in ("", "status"):
                self._send(200, registry.serialize(rtype, stored))
            else:
                raise errors.method_not_allowed()
            return 200
        ctx = self._context(query)
        if method == "POST":
            if sub == "binding" and name:
                body = decode_body(raw, self._content_type(), "Binding")
                self._send_obj(201, registry.bind(ns, name, body, ctx))
                return 201
            if name or sub:
                raise errors.method_not_allowed()
            body = decode_body(raw, self._content_type(), rtype.kind, ctx.duplicates)
            stored = registry.create(rtype, ns, body, ctx)
            self._send(201, registry.serialize(rtype, stored), warnings=ctx.warnings)
            return 201
        if method == "PUT":
            if not name:
                raise errors.method_not_allowed()
            if sub == "scale":
                body = decode_body(raw, self._content_type(), "Scale")
                self._send_obj(200, registry.update_scale(rtype, ns, name, body, ctx))
                return 200
            if sub not in ("", "status"):
                raise errors.method_not_allowed()
            body = decode_body(raw, self._content_type(), rtype.kind, ctx.duplicates)
            created, stored = registry.update(rtype, ns, name, body, ctx, sub)
            code = 201 if created else 200
            self._send(code, registry.serialize(rtype, stored), warnings=ctx.warnings)
            return code
        if method == "PATCH":
            if not name:
                raise errors.method_not_allowed()
            content_type = self._content_type()
            if content_type not in reg.PATCH_TYPES:
                raise errors.unsupported_media_type(content_type, reg.PATCH_TYPES)
            # An apply to a custom resource's /scale reaches its field manager (which cannot type a Scale).
            scale_apply = sub == "scale" and content_type == reg.APPLY_PATCH and not registry.is_builtin(rtype)
            if sub == "scale" and not scale_apply:
                self._send_obj(200, registry.update_scale(rtype, ns, name, None, ctx, content_type, raw))
                return 200
            if sub not in ("", "status") and not scale_apply:
                raise errors.method_not_allowed()
            created, stored = registry.patch(rtype, ns, name, content_type, raw, query, ctx, sub)
            code = 201 if created else 200
            self._send(code, registry.serialize(rtype, stored), warnings=ctx.warnings)
            return code
        if method == "DELETE":
            body = None
            if raw.strip():
                body = decode_body(raw, self._content_type(), "DeleteOptions")
            options = delete_options(query, body)
            ctx.dry_run = ctx.dry_run or options.dry_run
            if not name:
                result = registry.delete_collection(rtype, ns, query, options, ctx)
                self._send(200, registry.list_json(result))
                return 200
            code, answer = registry.delete(rtype, ns, name, options, ctx)
            if isinstance(answer, dict):
                self._send_obj(code, answer)
            else:
                deleted_now = registry.store.get(rtype.storage, registry._key(rtype, ns, name)) is None
                if not deleted_now and isinstance(body, dict) and body.get("orphanDependents") is False:
                    code = 202
                self._send(code, registry.serialize(rtype, answer))
            return code
        raise errors.method_not_allowed()

    # ----------------------------------------------------------------------------------- watch

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _client_gone(self):
        if isinstance(self.connection, ssl.SSLSocket):
            return False
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    def _watch(self, route, rtype, query):
        api = self.server.api
        registry = api.registry
        try:
            timeout = float(query.get("timeoutSeconds") or api.watch_timeout)
        except ValueError:
            raise errors.bad_request("timeoutSeconds must be a number") from None
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        try:
            watcher = registry.watch(rtype, route.namespace, query, self.path)
        except TooOld as exc:
            self._start_stream()
            status = errors.expired(str(exc)).status()
            self._chunk(json.dumps({"type": "ERROR", "object": status}, separators=(",", ":")).encode() + b"\n")
            self._chunk(b"")
            return 200
        open_watch = _OpenWatch(watcher, self.path)
        api.add_watch(open_watch)
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + api.bookmark_interval
        try:
            self._start_stream()
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = min(deadline, next_bookmark if bookmarks else deadline, now + 1.0) - now
                events = self._take_events(watcher, max(0.0, wait))
                if events is None:
                    break
                if events:
                    self._chunk(b"".join(self._event_line(rtype, etype, stored) for etype, stored in events))
                    continue
                now = time.monotonic()
                if bookmarks and now >= next_bookmark:
                    line = self._bookmark_line(rtype, watcher)
                    if line:
                        self._chunk(line)
                    next_bookmark = now + api.bookmark_interval
                elif self._client_gone():
                    return 200
            if open_watch.abort:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            else:
                self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            watcher.closed = True
            registry.store.unwatch(watcher)
            api.remove_watch(open_watch)
        return 200

    def _start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", _JSON)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    @staticmethod
    def _take_events(watcher, wait):
        """Up to 256 queued events; [] after `wait` seconds without any; None when the watch was closed."""
        out = []
        try:
            item = watcher.queue.get(timeout=wait) if wait > 0 else watcher.queue.get_nowait()
        except queue.Empty:
            return out
        while True:
            if item is Watcher.CLOSE:
                return None if not out else out
            out.append(item)
            if len(out) >= 256:
                return out
            try:
                item = watcher.queue.get_nowait()
            except queue.Empty:
                return out

    def _event_line(self, rtype, etype, stored):
        registry = self.server.api.registry
        return b'{"type":"%s","object":%s}\n' % (etype.encode(), registry.serialize(rtype, stored))

    def _bookmark_line(self, rtype, watcher):
        store = self.server.api.registry.store
        with store.lock:
            if not watcher.queue.empty():
                return None
            rv = store.rv
        obj = rtype.strategy.skeleton(rtype) if rtype.group in ("", "apps") else {}
        obj = dict(obj)
        obj["kind"] = rtype.kind
        obj["apiVersion"] = rtype.api_version
        meta = dict(obj.get("metadata") or {})
        meta["resourceVersion"] = str(rv)
        obj["metadata"] = meta
        return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + b"\n"

    # ----------------------------------------------------------------------------------- admin

    def _admin(self, method, path, raw):
        api = self.server.api
        try:
            body = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request("admin request body is not JSON: %s" % exc) from exc
        route = (method, path.rstrip("/"))
        if route == ("GET", "/_admin/stats"):
            stats = api.stats.snapshot()
            stats.update({"objects": api.registry.store.object_count(), "resourceVersion": api.registry.store.rv,
                          "openWatches": len(api.watch_list()), "faultsInjected": api.faults.injected})
            self._send_obj(200, stats)
        elif route == ("POST", "/_admin/stats/reset"):
            api.stats.reset()
            self._send_obj(200, {"reset": True})
        elif route == ("GET", "/_admin/faults"):
            self._send_obj(200, {"faults": api.faults.list()})
        elif route == ("POST", "/_admin/faults"):
            specs = body if isinstance(body, list) else [body]
            self._send_obj(201, {"faults": [api.faults.add(spec) for spec in specs]})
        elif route == ("DELETE", "/_admin/faults"):
            api.faults.clear()
            self._send_obj(200, {"faults": []})
        elif route == ("GET", "/_admin/watches"):
            self._send_obj(200, {"watches": api.watch_list()})
        elif route == ("POST", "/_admin/watches/close"):
            closed = api.close_watches(body.get("pathRegex"), bool(body.get("abort")))
            self._send_obj(200, {"closed": closed})
        elif route == ("POST", "/_admin/compact"):
            rv = body.get("resourceVersion")
            if rv is not None and not isinstance(rv, int):
                raise errors.bad_request("resourceVersion must be an integer")
            floor = api.registry.store.compact(rv)
            self._send_obj(200, {"compactedThrough": floor, "resourceVersion": api.registry.store.rv})
        elif route == ("POST", "/_admin/config"):
            unknown = set(body) - {"bookmarkIntervalSeconds", "watchTimeoutSeconds", "namespaceDeletionHold"}
            if unknown:
                raise errors.bad_request("unknown config field(s): %s" % ", ".join(sorted(unknown)))
            if "namespaceDeletionHold" in body:
                hold = body["namespaceDeletionHold"]
                if not isinstance(hold, list) or not all(isinstance(r, str) for r in hold):
                    raise errors.bad_request("namespaceDeletionHold must be a list of qualified resource names "
                                             "(e.g. [\"dataservices.sluice.dev\"])")
                api.registry.namespace_deletion_hold = frozenset(hold)
                api.registry.resume_namespace_deletion()
            if "bookmarkIntervalSeconds" in body:
                api.bookmark_interval = float(body["bookmarkIntervalSeconds"])
            if "watchTimeoutSeconds" in body:
                api.watch_timeout = float(body["watchTimeoutSeconds"])
            self._send_obj(200, {"bookmarkIntervalSeconds": api.bookmark_interval,
                                 "watchTimeoutSeconds": api.watch_timeout,
                                 "namespaceDeletionHold": sorted(getattr(api.registry, "namespace_deletion_hold",
                                                                         ()))})
        elif route == ("PUT", "/_admin/rbac"):
            try:
                api.policy = Policy(body)
            except ValueError as exc:
                raise errors.bad_request(str(exc)) from exc
            self._send_obj(200, {"rbac": "enabled"})
        elif route == ("DELETE", "/_admin/rbac"):
            api.policy = None
            self._send_obj(200, {"rbac": "disabled"})
        else:
            raise errors.path_not_found()
        return 200
