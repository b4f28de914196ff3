"""The API's semantics: create/get/list/update/patch/delete/watch with Kubernetes' rules.

Registry owns the served resource types (built-in and CRD-defined) and implements every verb on top of the
Store: preconditions and 409s, decode defaults, managedFields, validation, generation, status and scale
subresources, server-side apply and CRD establishment; deletion, finalizers, garbage collection and namespace
cleanup come from DeletionMixin (deletion.py). Each write runs entirely under `store.lock` (so GC and
finalizer cascades are atomic); nothing in here does network I/O. Methods return `Stored` objects (immutable;
`serialize()` renders them as a resource type serves them), Status dicts, or raise errors.ApiError.
"""

import base64
import binascii
import json

import yaml

from . import autoscaling, errors, managedfields, patch as patching
from .crd import CrdStrategy, established_status, preferred_version, resource_types_for, version_sort_key
from .deletion import FOREGROUND, DeletionMixin
from .kinds import ResourceType, builtin_types
from .schema import SchemaError
from .selection import parse_field_selector, parse_label_selector
from .store import ADDED, MODIFIED, Store, Stored, TooOld, Watcher
from .validation import check_builtin_shapes, check_object_meta_types
from .util import deepcopy, get_path, json_equal, new_uid, now_rfc3339, parse_json_path, random_suffix, set_path

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH, STRATEGIC_PATCH]

_SERVER_METADATA = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                    "selfLink", "name", "namespace")
_CONTINUE_VERSION = "meta.k8s.io/v1"


class RequestContext:
    """Who is asking and how: the field manager, dry-run and field-validation settings, collected warnings,
    the duplicate fields the body's JSON had, and (for a strict patch) the patched object, which a strict
    decoding error quotes."""

    def __init__(self, manager="unknown", dry_run=False, field_validation="Warn", user="admin"):
        self.manager = manager
        self.dry_run = dry_run
        self.field_validation = field_validation
        self.user = user
        self.warnings = []
        self.duplicates = []
        self.patched = None


class ListResult:
    def __init__(self, rtype, items, rv, continue_token, remaining):
        self.rtype = rtype
        self.items = items  # Stored objects
        self.rv = rv
        self.continue_token = continue_token
        self.remaining = remaining


def encode_continue(rv, last_key):
    raw = json.dumps({"v": _CONTINUE_VERSION, "rv": rv, "start": last_key + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token):
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
        if data.get("v") != _CONTINUE_VERSION or not isinstance(data.get("rv"), int):
            raise ValueError("unknown continue token version")
        return data["rv"], str(data.get("start", ""))
    except (ValueError, binascii.Error, UnicodeDecodeError, AttributeError) as exc:
        raise errors.bad_request("continue key is not valid: %s" % exc) from exc


class Registry(DeletionMixin):
    """Served resource types and every verb on them (deletion semantics live in DeletionMixin)."""

    def __init__(self, store=None, namespaces=("default", "kube-system", "kube-public", "kube-node-lease")):
        self.store = store or Store()
        self._types = {}
        self._bucket_types = {}
        self._builtin_groups = []
        self._crd_types = {}  # CRD name -> [ResourceType]
        self._lock = self.store.lock
        for rtype in builtin_types() + autoscaling.resource_types():
            self._register(rtype, builtin=True)
        self._register(ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                    "CustomResourceDefinition", CrdStrategy(), namespaced=False,
                                    short_names=["crd", "crds"], subresources=["status"],
                                    categories=["api-extensions"]), builtin=True)
        for name in namespaces:
            self.create(self.resolve("", "v1", "namespaces"), None,
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                        RequestContext("kube-apiserver"))

    # ------------------------------------------------------------------------------------ types

    def _register(self, rtype, builtin=False):
        with self._lock:
            self._types[(rtype.group, rtype.version, rtype.resource)] = rtype
            current = self._bucket_types.get(rtype.storage)
            if current is None or (rtype.group == "" and current.group != ""):
                self._bucket_types[rtype.storage] = rtype
            if builtin and rtype.group not in self._builtin_groups:
                self._builtin_groups.append(rtype.group)
            self.store.bucket(rtype.storage, rtype.strategy.indexed_fields)

    def resolve(self, group, version, resource):
        with self._lock:
            return self._types.get((group, version, resource))

    def types_for(self, group, version):
        with self._lock:
            return [t for (g, v, _), t in self._types.items() if g == group and v == version]

    def group_versions(self):
        """[(group, [versions], preferred)] in discovery order (built-in groups first)."""
        with self._lock:
            versions = {}
            for (g, v, _) in self._types:
                versions.setdefault(g, set()).add(v)
            order = [g for g in self._builtin_groups] + sorted(g for g in versions if g not in self._builtin_groups)
            out = []
            for group in order:
                if group not in versions:
                    continue
                vs = sorted(versions[group], key=version_sort_key)
                out.append((group, vs, preferred_version(vs)))
            return out

    def bucket_type(self, storage):
        with self._lock:
            return self._bucket_types.get(storage)

    # ------------------------------------------------------------------------------------ views

    def view(self, rtype, stored_obj):
        return rtype.strategy.to_view(stored_obj, rtype)

    def serialize(self, rtype, stored, item=False):
        """JSON bytes of a stored object as rtype serves it (cached on the immutable Stored)."""
        key = (rtype.api_version, rtype.kind, item)
        data = stored.cache.get(key)
        if data is None:
            obj = self.view(rtype, stored.obj)
            if item:
                obj = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
            data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
            stored.cache[key] = data
        return data

    @staticmethod
    def list_items_carry_kind(rtype):
        return rtype.group not in ("", "apps", "autoscaling", "events.k8s.io", "coordination.k8s.io",
                                   "apiextensions.k8s.io")

    # ------------------------------------------------------------------------------------ helpers

    @staticmethod
    def _key(rtype, ns, name):
        return (ns or "" if rtype.namespaced else "", name)

    def _check_kind(self, rtype, obj):
        if not isinstance(obj, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type %s)" % rtype.kind)
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if api_version and api_version != rtype.api_version:
            raise errors.bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                                     % (api_version, rtype.api_version))
        if kind and kind != rtype.kind:
            raise errors.bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                                     % (kind, rtype.kind))
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        meta = obj.get("metadata")
        if meta is None:
            obj["metadata"] = {}
        elif not isinstance(meta, dict):
            raise errors.bad_request('%s in version "%s" cannot be handled as a %s: json: cannot unmarshal %s into '
                                     'Go struct field %s.metadata of type v1.ObjectMeta'
                                     % (rtype.kind, rtype.version, rtype.kind, type(meta).__name__, rtype.kind))
        else:
            check_object_meta_types(meta, rtype.kind)
            try:
                managedfields.decode_entries(meta.get("managedFields"))
            except ValueError as exc:
                raise self._invalid(rtype, meta.get("name") or "", [
                    errors.invalid("metadata.managedFields", "", str(exc))]) from exc
        if self.is_builtin(rtype):
            check_builtin_shapes(obj, rtype.kind, rtype.version)

    @staticmethod
    def _normalize_metadata(obj):
        """Empty metadata maps and lists are omitted, as Go's omitempty does in a real server."""
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            for key in ("labels", "annotations", "finalizers", "ownerReferences", "managedFields"):
                if key in meta and meta[key] in ([], {}, None):
                    del meta[key]

    def _invalid(self, rtype, name, problems):
        group, kind = rtype.strategy.qualified_kind(rtype)
        return errors.invalid_object(group, kind, name, problems)

    def _handle_dropped(self, rtype, dropped, ctx):
        """Unknown (pruned) and duplicate fields under fieldValidation: Strict refuses them (400 for a body,
        422 quoting the patched object for a patch), Warn (the default) answers with Warning headers."""
        found = ['duplicate field "%s"' % d for d in ctx.duplicates]
        found += ['unknown field "%s"' % d for d in sorted(dropped or ())]
        ctx.duplicates = []
        if not found:
            return
        if ctx.field_validation == "Strict":
            detail = "strict decoding error: " + ", ".join(found)
            if ctx.patched is not None:
                raise errors.invalid_object("", "", "", [errors.invalid("patch", go_json(ctx.patched), detail)])
            raise errors.bad_request('%s in version "%s" cannot be handled as a %s: %s'
                                     % (rtype.kind, rtype.version, rtype.kind, detail))
        if ctx.field_validation != "Ignore":
            ctx.warnings.extend(found)

    def _namespace_admission(self, rtype, ns, name):
        if not rtype.namespaced:
            return
        stored = self.store.get("/namespaces", ("", ns))
        if stored is None:
            raise errors.not_found("", "namespaces", ns)
        if (stored.obj.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.namespace_terminating(rtype.group, rtype.resource, name, ns)

    def _crd_admission(self, rtype):
        crd = self._owning_crd(rtype)
        if crd is not None and (crd.obj.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.ApiError(405, "MethodNotAllowed",
                                  "create not allowed while custom resource definition is terminating", {})

    def _owning_crd(self, rtype):
        if rtype.group in self._builtin_groups:
            return None
        return self.store.get("apiextensions.k8s.io/customresourcedefinitions",
                              ("", "%s.%s" % (rtype.resource, rtype.group)))

    def _get_stored(self, rtype, ns, name):
        stored = self.store.get(rtype.storage, self._key(rtype, ns, name))
        if stored is None:
            raise errors.not_found(rtype.group, rtype.resource, name)
        return stored

    # ------------------------------------------------------------------------------------ reads

    def get(self, rtype, ns, name):
        return self._get_stored(rtype, ns, name)

    def list(self, rtype, ns, query):
        label_sel = parse_label_selector(query.get("labelSelector"))
        strategy = rtype.strategy
        field_sel = parse_field_selector(query.get("fieldSelector"), strategy.supported_field_labels(),
                                         strategy.unsupported_field_message)
        limit = _int_param(query, "limit", 0)
        token = query.get("continue") or ""
        rv_text = query.get("resourceVersion")
        match = query.get("resourceVersionMatch") or ""
        if match and match not in ("Exact", "NotOlderThan"):
            raise errors.bad_request("resourceVersionMatch: Unsupported value: %s" % errors.go_quote(match))
        if match and not rv_text:
            raise errors.bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if token and rv_text:
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        requested = _parse_rv(rv_text) if rv_text else None
        namespace = ns if rtype.namespaced else None
        label_pairs = label_sel.equality_pairs()
        field_values = [(f, field_sel.required_value(f)) for f in strategy.indexed_fields
                        if field_sel.required_value(f) is not None]
        start = ""
        if requested is not None and match != "Exact" and requested > self.store.rv:
            if not self.store.wait_for_rv(requested, 3.0):
                raise errors.too_large_resource_version(requested, self.store.rv)
        with self._lock:
            if token:
                list_rv, start = decode_continue(token)
                try:
                    pairs = self.store.snapshot(rtype.storage, namespace, list_rv)
                except TooOld:
                    raise errors.expired(
                        "The provided continue parameter is too old to display a consistent list result. You can "
                        "start a new list without the continue parameter, or use the continue token in this "
                        "response to retrieve the remainder of the results. Continuing with the provided token "
                        "results in an inconsistent list - objects that were created, modified, or deleted "
                        "between the time the first chunk was returned and now may show up in the list.")
            elif match == "Exact" and requested:
                if requested > self.store.rv:
                    raise errors.too_large_resource_version(requested, self.store.rv)
                list_rv = requested
                try:
                    pairs = self.store.snapshot(rtype.storage, namespace, requested)
                except TooOld:
                    raise errors.expired("The resourceVersion for the provided list is too old.")
            else:
                list_rv = self.store.rv
                pairs = self.store.current(rtype.storage, namespace, label_pairs, field_values)
        if rv_text == "0" and not token:
            limit = 0
        if namespace is None and rtype.namespaced:
            keyed = sorted(((k[0] + "/" + k[1], s) for k, s in pairs), key=lambda kv: kv[0])
        else:
            keyed = [(k[1], s) for k, s in pairs]
        selectors_used = not label_sel.empty() or not field_sel.empty()

        def matches(stored):
            obj = stored.obj
            if not label_sel.matches((obj.get("metadata") or {}).get("labels")):
                return False
            if field_sel.empty():
                return True
            return field_sel.matches(self.view(rtype, obj), strategy.field_value)

        items = []
        next_token = ""
        remaining = None
        for index in range(len(keyed)):
            keystr, stored = keyed[index]
            if start and keystr < start:
                continue
            if not matches(stored):
                continue
            if limit and len(items) >= limit:
                next_token = encode_continue(list_rv, items[-1][0])
                if not selectors_used:
                    remaining = sum(1 for k, _ in keyed[index:] if not start or k >= start)
                break
            items.append((keystr, stored))
        return ListResult(rtype, [s for _, s in items], list_rv, next_token, remaining)

    def list_result(self, rtype, stored_items):
        return ListResult(rtype, stored_items, self.store.rv, "", None)

    def list_json(self, result):
        rtype = result.rtype
        meta = {"resourceVersion": str(result.rv)}
        carry = self.list_items_carry_kind(rtype)
        if result.continue_token or carry:
            meta["continue"] = result.continue_token
        if result.remaining is not None:
            meta["remainingItemCount"] = result.remaining
        head = json.dumps({"apiVersion": rtype.api_version, "items": None, "kind": rtype.list_kind,
                           "metadata": meta}, separators=(",", ":")).encode()
        items = b",".join(self.serialize(rtype, s, item=not carry) for s in result.items)
        return head.replace(b'"items":null', b'"items":[' + items + b"]", 1)

    # ------------------------------------------------------------------------------------ watch

    def watch(self, rtype, ns, query, info=""):
        """Opens a watch; returns the Watcher (events queued) or raises TooOld / ApiError."""
        label_sel = parse_label_selector(query.get("labelSelector"))
        strategy = rtype.strategy
        field_sel = parse_field_selector(query.get("fieldSelector"), strategy.supported_field_labels(),
                                         strategy.unsupported_field_message)
        namespace = ns if rtype.namespaced else None

        def predicate(obj):
            if not label_sel.matches((obj.get("metadata") or {}).get("labels")):
                return False
            return field_sel.empty() or field_sel.matches(self.view(rtype, obj), strategy.field_value)

        watcher = Watcher(rtype.storage, namespace, predicate, info)
        rv_text = query.get("resourceVersion") or ""
        with self._lock:
            if rv_text in ("", "0"):
                initial = [(k, s) for k, s in self.store.current(rtype.storage, namespace) if predicate(s.obj)]
                self.store.watch(watcher, None, initial)
            else:
                self.store.watch(watcher, _parse_rv(rv_text), ())
        return watcher

    # ------------------------------------------------------------------------------------ create

    def create(self, rtype, ns, body, ctx, managed="update"):
        """POST. Returns the created Stored object."""
        obj = body
        self._check_kind(rtype, obj)
        meta = obj["metadata"]
        strategy = rtype.strategy
        if rtype.namespaced:
            if meta.get("namespace") and ns and meta["namespace"] != ns:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent "
                                         "on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        name = meta.get("name") or ""
        dropped = strategy.decode(obj, rtype)
        self._handle_dropped(rtype, dropped, ctx)
        self._normalize_metadata(obj)
        # The field manager types the object as sent, before the status is dropped.
        untypable = strategy.typing_error(obj) if managed == "update" else None
        if strategy.status_subresource and not getattr(strategy, "keep_status_on_create", False):
            obj.pop("status", None)
        now = now_rfc3339()
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(key, None)
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = now
        if strategy.has_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if managed == "update":
            meta.pop("managedFields", None)
            if untypable is None:
                managedfields.record_update(None, obj, strategy.type_node, ctx.manager, rtype.api_version, "",
                                            "main", strategy.status_subresource, now, strategy.skeleton(rtype))
            # else: as the API server, whose field manager fails on an object it cannot type and then stores
            # the object without any managedFields.
        with self._lock:
            self._namespace_admission(rtype, ns, name)
            self._crd_admission(rtype)
            strategy.prepare_create(obj, ctx)
            problems = strategy.validate(obj, None, rtype)
            if problems:
                raise self._invalid(rtype, name, problems)
            key = self._key(rtype, ns, name)
            if self.store.get(rtype.storage, key) is not None:
                raise errors.already_exists(rtype.group, rtype.resource, name)
            stored_obj = strategy.from_view(obj, rtype)
            if ctx.dry_run:
                return Stored(stored_obj, self.store.rv)
            stored = self.store.commit(rtype.storage, key, stored_obj, ADDED)
            if rtype.resource == "customresourcedefinitions" and rtype.group == "apiextensions.k8s.io":
                self._establish_crd(stored)
            self.collect_new_dependent(rtype, stored)
            return stored

    # ------------------------------------------------------------------------------------ update

    def update(self, rtype, ns, name, body, ctx, subresource=""):
        """PUT on the object or its status. Returns (created?, Stored)."""
        self._check_kind(rtype, body)
        meta = body["metadata"]
        self._check_identity(rtype, ns, name, meta)
        with self._lock:
            old = self.store.get(rtype.storage, self._key(rtype, ns, name))
            if old is None:
                if subresource or not rtype.strategy.allow_create_on_update:
                    raise errors.not_found(rtype.group, rtype.resource, name)
                meta.pop("resourceVersion", None)
                return True, self.create(rtype, ns, body, ctx)
            rv = meta.get("resourceVersion")
            if not rv:
                if not rtype.strategy.allow_unconditional_update:
                    raise self._invalid(rtype, name, [errors.invalid("metadata.resourceVersion", "0x0",
                                                                     "must be specified for an update")])
            elif rv != old.obj["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.group, rtype.resource, name)
            uid = meta.get("uid")
            if uid and uid != old.obj["metadata"].get("uid"):
                raise errors.conflict(rtype.group, rtype.resource, name,
                                      "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                      % (uid, old.obj["metadata"].get("uid")))
            return False, self._write(rtype, old, body, ctx, subresource, "update")

    def _check_identity(self, rtype, ns, name, meta):
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                     % (meta["name"], name))
        if rtype.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on "
                                     "the request")
        meta["name"] = name
        if rtype.namespaced:
            meta["namespace"] = ns

    def _write(self, rtype, old, new, ctx, subresource, managed):
        """Finishes an update of `old` (Stored) to `new` (view, owned by us). Caller holds the lock."""
        strategy = rtype.strategy
        old_view = self.view(rtype, old.obj)
        dropped = strategy.decode(new, rtype)
        self._handle_dropped(rtype, dropped, ctx)
        self._normalize_metadata(new)
        if subresource == "status":
            status = new.get("status")
            applied = (new.get("metadata") or {}).get("managedFields")
            new = deepcopy(old_view)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
            if managed == "preset":  # an apply to /status: the entries it computed
                new["metadata"].pop("managedFields", None)
                if applied:
                    new["metadata"]["managedFields"] = applied
        elif strategy.status_subresource:
            if "status" in old_view:
                new["status"] = deepcopy(old_view["status"])
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        old_meta = old_view.get("metadata") or {}
        for key in _SERVER_METADATA:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        now = now_rfc3339()
        scope = "status" if subresource == "status" else "main"
        if managed == "update":
            if strategy.typing_error(new) is None:
                managedfields.record_update(old_view, new, strategy.type_node, ctx.manager, rtype.api_version,
                                            subresource, scope, strategy.status_subresource, now)
            else:
                meta.pop("managedFields", None)
        strategy.prepare_update(new, old_view, ctx)
        problems = strategy.validate(new, old_view, rtype)
        if problems:
            raise self._invalid(rtype, meta.get("name", ""), problems)
        if strategy.has_generation and subresource != "status" and strategy.spec_changed(new, old_view):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if subresource == "status":
            strategy.after_status_update(new)
        stored_new = strategy.from_view(new, rtype)
        stored_new["metadata"]["resourceVersion"] = old.obj["metadata"]["resourceVersion"]
        if json_equal(stored_new, old.obj):
            return old
        if ctx.dry_run:
            return Stored(stored_new, old.rv)
        key = self._key(rtype, meta.get("namespace"), meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers") \
                and not meta.get("deletionGracePeriodSeconds"):
            return self._final_remove(rtype.storage, key, stored_new)
        stored = self.store.commit(rtype.storage, key, stored_new, MODIFIED, old)
        if rtype.resource == "customresourcedefinitions" and rtype.group == "apiextensions.k8s.io" and not subresource:
            self._reregister_crd(stored)
        self._after_finalizer_change(rtype, stored)
        return stored

    def _after_finalizer_change(self, rtype, stored):
        """A terminating owner waiting in foreground may be done once its dependents are gone."""
        meta = stored.obj.get("metadata") or {}
        if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
            self._check_foreground(rtype.storage, stored)

    # ------------------------------------------------------------------------------------ patch

    def patch(self, rtype, ns, name, content_type, raw, query, ctx, subresource=""):
        """PATCH of any supported type. Returns (created?, Stored)."""
        if content_type == APPLY_PATCH:
            return self._apply(rtype, ns, name, raw, query, ctx, subresource)
        try:
            body = json.loads(raw.decode("utf-8") if raw else "null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request("error decoding patch: %s" % exc) from exc
        if content_type == STRATEGIC_PATCH and not self.is_builtin(rtype):
            raise errors.unsupported_media_type(content_type, [JSON_PATCH, MERGE_PATCH, APPLY_PATCH])
        with self._lock:
            old = self._get_stored(rtype, ns, name)
            old_view = self.view(rtype, old.obj)
            try:
                if content_type == MERGE_PATCH:
                    if not isinstance(body, dict):
                        raise patching.MalformedPatch("merge patch must be a JSON object")
                    new = patching.merge_patch(old_view, body)
                elif content_type == JSON_PATCH:
                    new = patching.json_patch(old_view, body)
                else:
                    new = patching.strategic_merge_patch(old_view, body, rtype.strategy.type_node)
            except patching.PatchError:
                raise errors.unprocessable_patch()
            except patching.MalformedPatch as exc:
                raise errors.bad_request(str(exc))
            if not isinstance(new, dict):
                raise errors.bad_request("the patch produced a %s, not an object" % type(new).__name__)
            new = deepcopy(new)
            if ctx.field_validation == "Strict":
                ctx.patched = deepcopy(new)
            self._check_kind(rtype, new)
            meta = new["metadata"]
            if meta.get("name", name) != name:
                raise errors.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                         % (meta.get("name"), name))
            rv = meta.get("resourceVersion")
            if rv and rv != old.obj["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.group, rtype.resource, name)
            uid = meta.get("uid")
            if uid and uid != old.obj["metadata"].get("uid"):
                raise errors.conflict(rtype.group, rtype.resource, name,
                                      "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                      % (uid, old.obj["metadata"].get("uid")))
            return False, self._write(rtype, old, new, ctx, subresource, "update")

    def is_builtin(self, rtype):
        return rtype.group in self._builtin_groups

    def _apply(self, rtype, ns, name, raw, query, ctx, subresource):
        manager = query.get("fieldManager")
        if not manager:
            raise errors.invalid_object("meta.k8s.io", "PatchOptions", "", [
                errors.required("fieldManager", "is required for apply patch")])
        force = (query.get("force") or "").lower() == "true"
        try:
            config = yaml.safe_load(raw.decode("utf-8")) if raw else None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise errors.bad_request("error decoding YAML: %s" % exc) from exc
        if not isinstance(config, dict):
            raise errors.bad_request("the apply patch must be a YAML or JSON object, not %s"
                                     % type(config).__name__)
        # As the API server's field manager: the version first, then whether it can type the configuration.
        expected = "autoscaling/v1" if subresource == "scale" else rtype.api_version
        version = config.get("apiVersion") if isinstance(config.get("apiVersion"), str) else ""
        if version != expected:
            raise errors.bad_request("Incorrect version specified in apply patch. Specified patch version: %s, "
                                     "expected: %s" % (version, expected))
        kind = config.get("kind") if isinstance(config.get("kind"), str) else ""
        meta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
        where = "%s/%s; %s, Kind=%s" % (meta.get("namespace") or "", meta.get("name") or "", version, kind)
        if subresource == "scale" or kind != rtype.kind:
            raise errors.ApiError(500, "", "failed to create typed patch object (%s): no corresponding type for "
                                           "%s, Kind=%s" % (where, version, kind), None)
        typing = rtype.strategy.typing_error(config)
        if typing:
            raise errors.ApiError(500, "", "failed to create typed patch object (%s): %s" % (where, typing), None)
        self._check_kind(rtype, config)
        meta = config["metadata"]
        self._check_identity(rtype, ns, name, meta)
        strategy = rtype.strategy
        scope = "status" if subresource == "status" else "main"
        ctx.manager = manager
        with self._lock:
            old = self.store.get(rtype.storage, self._key(rtype, ns, name))
            old_view = self.view(rtype, old.obj) if old is not None else None
            if old is None and subresource:
                raise errors.not_found(rtype.group, rtype.resource, name)
            rv = meta.get("resourceVersion")
            if rv and (old is None or rv != old.obj["metadata"]["resourceVersion"]):
                raise errors.conflict(rtype.group, rtype.resource, name)
            try:
                merged = managedfields.apply(old_view, config, strategy.type_node, manager, subresource, scope,
                                             strategy.status_subresource, force, now_rfc3339())
            except managedfields.ApplyConflict as exc:
                raise exc.api_error()
            if old is None:
                merged["metadata"].pop("resourceVersion", None)
                return True, self.create(rtype, ns, merged, ctx, managed="preset")
            return False, self._write(rtype, old, merged, ctx, subresource, "preset")

    # ------------------------------------------------------------------------------------ scale

    def _scale_paths(self, rtype):
        scale = rtype.strategy.scale
        if scale is None or "scale" not in rtype.subresources:
            raise errors.path_not_found()
        return scale

    def scale_of(self, rtype, stored, managed_fields=False):
        """The autoscaling/v1 Scale of an object (Go's field order; spec.replicas 0 is omitted, as omitempty
        does). With managed_fields, the Scale is the one a patch applies to: it also carries the object's
        managedFields as the server's scale handler converts them (ToSubresource: the entries owning the
        replicas path, as spec.replicas of autoscaling/v1)."""
        spec_path, status_path, selector_path = self._scale_paths(rtype)
        obj = stored.obj
        meta = obj.get("metadata") or {}
        replicas = get_path(obj, parse_json_path(spec_path))
        status = {"replicas": get_path(obj, parse_json_path(status_path)) or 0}
        if selector_path:
            selector = get_path(obj, parse_json_path(selector_path))
        else:
            selector = _selector_string((obj.get("spec") or {}).get("selector"))
        if selector:
            status["selector"] = selector
        scale_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                      if k in meta}
        if managed_fields:
            entries = managedfields.scale_entries(meta.get("managedFields"), parse_json_path(spec_path))
            if entries:
                scale_meta["managedFields"] = entries
        # A patch applies to the Scale with spec.replicas present even when 0 (a recorded JSON patch `replace
        # /spec/replicas` of a Scale at 0 succeeds); a read omits it.
        spec = {"replicas": replicas or 0} if replicas or managed_fields else {}
        return {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": scale_meta, "spec": spec,
                "status": status}

    def update_scale(self, rtype, ns, name, body, ctx, patch_type=None, raw=None):
        """PUT or PATCH of /scale: the replicas go to the object's specReplicasPath, which is then validated as
        the object (a custom resource's schema and rules judge the value; the Scale itself is checked only
        for the built-in kinds). As in v1.26, the writer gets no managedFields entry and every previous owner
        of the replicas path loses it."""
        spec_path, _, _ = self._scale_paths(rtype)
        with self._lock:
            old = self._get_stored(rtype, ns, name)
            if patch_type is not None:
                current = self.scale_of(rtype, old, managed_fields=True)
                try:
                    data = json.loads(raw.decode("utf-8") if raw else "null")
                    if patch_type == MERGE_PATCH:
                        body = patching.merge_patch(current, data)
                    elif patch_type == JSON_PATCH:
                        body = patching.json_patch(current, data)
                    elif patch_type == STRATEGIC_PATCH:
                        body = patching.merge_patch(current, data)
                    else:
                        raise errors.unsupported_media_type(patch_type, [JSON_PATCH, MERGE_PATCH])
                except (ValueError, UnicodeDecodeError) as exc:
                    raise errors.bad_request("error decoding patch: %s" % exc) from exc
                except patching.PatchError:
                    raise errors.unprocessable_patch()
                except patching.MalformedPatch as exc:
                    raise errors.bad_request(str(exc))
            if not isinstance(body, dict):
                raise errors.bad_request("the object provided is unrecognized (must be of type Scale)")
            replicas = (body.get("spec") or {}).get("replicas") if isinstance(body.get("spec"), dict) else None
            replicas = 0 if replicas is None else replicas
            if not isinstance(replicas, int) or isinstance(replicas, bool) or not -2 ** 31 <= replicas < 2 ** 31:
                problem = "json: cannot unmarshal %s into Go struct field ScaleSpec.spec.replicas of type int32" \
                    % _go_json_kind(replicas)
                if patch_type is not None:
                    raise errors.invalid_object("", "", "", [errors.invalid(
                        "patch", json.dumps(body, separators=(",", ":"), ensure_ascii=False), problem)])
                raise errors.bad_request('Scale in version "v1" cannot be handled as a Scale: ' + problem)
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old.obj["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.group, rtype.resource, name)
            if self.is_builtin(rtype) and replicas < 0:
                raise errors.invalid_object("autoscaling", "Scale", name, [
                    errors.invalid("spec.replicas", replicas, "must be greater than or equal to 0")])
            new = deepcopy(self.view(rtype, old.obj))
            set_path(new, parse_json_path(spec_path), replicas)
            owned = tuple(("f", part) for part in parse_json_path(spec_path))
            managedfields.strip_paths(new, lambda p: p[:len(owned)] == owned)
            stored = self._write(rtype, old, new, ctx, "scale", "preset")
            return self.scale_of(rtype, stored)

    # ------------------------------------------------------------------------------------ binding

    def bind(self, ns, name, body, ctx):
        pods = self.resolve("", "v1", "pods")
        if not isinstance(body, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type Binding)")
        target = (body.get("target") or {}).get("name")
        if not target:
            raise errors.invalid_object("", "Binding", name, [errors.required("target.name", "")])
        with self._lock:
            old = self._get_stored(pods, ns, name)
            node = (old.obj.get("spec") or {}).get("nodeName")
            if node:
                raise errors.conflict("", "pods/binding", name, "pod %s is already assigned to node %s"
                                      % (name, errors.go_quote(node)))
            if (old.obj.get("metadata") or {}).get("deletionTimestamp"):
                raise errors.conflict("", "pods/binding", name, "pod %s is being deleted, cannot be assigned to a "
                                                                "host" % name)
            new = deepcopy(old.obj)
            new["spec"]["nodeName"] = target
            status = new.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": now_rfc3339()})
            status["conditions"] = conditions
            if not ctx.dry_run:
                self.store.commit(pods.storage, self._key(pods, ns, name), new, MODIFIED, old)
        return errors.success_status(201)

    # ------------------------------------------------------------------------------------ CRDs

    def _establish_crd(self, stored):
        crd = stored.obj
        try:
            types = resource_types_for(crd)
        except SchemaError:
            return
        conflict = self._names_conflict(crd)
        new = deepcopy(crd)
        if conflict:
            new["status"]["conditions"] = [{"type": "NamesAccepted", "status": "False",
                                            "lastTransitionTime": now_rfc3339(), "reason": "PluralConflict",
                                            "message": conflict}]
        else:
            new["status"] = established_status(crd)
        ctx = RequestContext("kube-apiserver")
        crd_type = self.resolve("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        managedfields.record_update(crd, new, crd_type.strategy.type_node, ctx.manager, crd_type.api_version,
                                    "status", "status", True, now_rfc3339())
        self.store.commit(crd_type.storage, ("", crd["metadata"]["name"]), new, MODIFIED, stored)
        if not conflict:
            self._crd_types[crd["metadata"]["name"]] = types
            for rtype in types:
                self._register(rtype)

    def _names_conflict(self, crd):
        spec = crd.get("spec") or {}
        group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
        for (g, _, resource), rtype in self._types.items():
            if g == group and resource == plural and crd["metadata"]["name"] not in self._crd_types:
                return '"%s" is already in use' % plural
        return None

    def _reregister_crd(self, stored):
        name = stored.obj["metadata"]["name"]
        try:
            types = resource_types_for(stored.obj)
        except SchemaError:
            return
        for rtype in self._crd_types.get(name, []):
            self._types.pop((rtype.group, rtype.version, rtype.resource), None)
        self._crd_types[name] = types
        for rtype in types:
            self._register(rtype)

    def _unregister_crd(self, crd):
        name = crd["metadata"]["name"]
        for rtype in self._crd_types.pop(name, []):
            self._types.pop((rtype.group, rtype.version, rtype.resource), None)
            self._bucket_types.pop(rtype.storage, None)
            self.store.drop_bucket(rtype.storage)


def _go_json_kind(value):
    """How Go's JSON decoder names a value it cannot put into an int32 field."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number %s" % json.dumps(value)
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def go_json(value):
    """JSON as Go's encoding/json writes a map (keys sorted, no spaces, <>& escaped)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _selector_string(selector):
    if not isinstance(selector, dict):
        return ""
    parts = ["%s=%s" % (k, v) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = expr.get("operator")
        values = ",".join(sorted(expr.get("values") or []))
        if op == "In":
            parts.append("%s in (%s)" % (expr.get("key"), values))
        elif op == "NotIn":
            parts.append("%s notin (%s)" % (expr.get("key"), values))
        elif op == "Exists":
            parts.append(expr.get("key"))
        elif op == "DoesNotExist":
            parts.append("!" + expr.get("key"))
    return ",".join(parts)


def _parse_rv(text):
    try:
        value = int(text)
        if value < 0:
            raise ValueError
        return value
    except (TypeError, ValueError):
        raise errors.bad_request('invalid resource version "%s"' % text) from None


def _int_param(query, name, default):
    value = query.get(name)
    if value in (None, ""):
        return default
    try:
        number = int(value)
        if number < 0:
            raise ValueError
        return number
    except ValueError:
        raise errors.bad_request("invalid %s %s: must be a non-negative integer" % (name, errors.go_quote(value))) \
            from None
