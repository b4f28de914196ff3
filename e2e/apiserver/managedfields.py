"""Field ownership (metadata.managedFields) and server-side apply, modelled on structured-merge-diff.

A field path is a tuple of elements; an element is (prefix, text) exactly as FieldsV1 spells it:
("f", "spec") for a field, ("k", '{"name":"worker"}') for a keyed list item, ("v", '"x"') for a set
member, ("i", "3") for a list index. A field set is a Python set of paths. The functions are pure; callers
hold whatever lock protects the objects they pass in.
"""

import json

from . import errors
from .typeschema import LIST, SCALAR
from .util import MISSING, deepcopy, json_equal

APPLY = "Apply"
UPDATE = "Update"

# metadata fields the server sets; an applied configuration cannot change them.
_SERVER_METADATA = ("creationTimestamp", "selfLink", "uid", "generation", "managedFields", "resourceVersion",
                    "deletionTimestamp", "deletionGracePeriodSeconds", "clusterName")
# metadata fields never owned by anyone.
_IGNORED_METADATA = ("name", "namespace", "creationTimestamp", "selfLink", "uid", "generation", "managedFields",
                     "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "clusterName")


def _canonical(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def item_element(node, item, index):
    """The path element naming a list item under `node` (keyed, set member or index)."""
    if node.list_type == "map" and isinstance(item, dict):
        return ("k", _canonical({k: item.get(k) for k in node.keys if k in item}))
    if node.list_type == "set":
        return ("v", _canonical(item))
    return ("i", str(index))


def _is_empty(value):
    return value is MISSING or value is None or (isinstance(value, (dict, list)) and not value)


def _items_by_element(node, value):
    out = {}
    if isinstance(value, list):
        for index, item in enumerate(value):
            out.setdefault(item_element(node, item, index), item)
    return out


class Comparison:
    __slots__ = ("added", "modified", "removed")

    def __init__(self):
        self.added = set()
        self.modified = set()
        self.removed = set()

    def changed(self):
        return self.added | self.modified | self.removed


def compare(lhs, rhs, node, path=(), out=None):
    """Structured diff of two values (MISSING for absent) like structured-merge-diff's Compare."""
    if out is None:
        out = Comparison()
    leaf = (node.is_leaf_for(rhs if rhs is not MISSING else lhs)
            or (_is_empty(lhs) and _is_empty(rhs))
            or (lhs not in (MISSING, None) and rhs not in (MISSING, None) and type(lhs) is not type(rhs)))
    if leaf:
        if lhs is MISSING and rhs is MISSING:
            return out
        if lhs is MISSING:
            out.added.add(path)
        elif rhs is MISSING:
            out.removed.add(path)
        elif not json_equal(lhs, rhs):
            out.modified.add(path)
        return out
    if isinstance(lhs, dict) or isinstance(rhs, dict):
        left = lhs if isinstance(lhs, dict) else {}
        right = rhs if isinstance(rhs, dict) else {}
        for key in list(left.keys()) + [k for k in right.keys() if k not in left]:
            child, _ = node.child(key)
            compare(left.get(key, MISSING), right.get(key, MISSING), child, path + (("f", key),), out)
    elif isinstance(lhs, list) or isinstance(rhs, list):
        item_node = node.item()
        left = _items_by_element(node, lhs)
        right = _items_by_element(node, rhs)
        for pe in list(left.keys()) + [k for k in right.keys() if k not in left]:
            compare(left.get(pe, MISSING), right.get(pe, MISSING), item_node, path + (pe,), out)
    if path:
        if lhs is MISSING:
            out.added.add(path)
        elif rhs is MISSING:
            out.removed.add(path)
    return out


def to_fieldset(value, node, path=(), out=None):
    """The set of fields a value sets (structured-merge-diff's ToFieldSet), used for appliers."""
    if out is None:
        out = set()
    if node.kind == SCALAR or not isinstance(value, (dict, list)):
        out.add(path)
        return out
    if isinstance(value, list):
        if node.kind != LIST or node.list_type == "atomic":
            out.add(path)
            return out
        item_node = node.item()
        for index, item in enumerate(value):
            child_path = path + (item_element(node, item, index),)
            to_fieldset(item, item_node, child_path, out)
            out.add(child_path)
        return out
    if node.atomic:
        out.add(path)
        return out
    for key, val in value.items():
        child, declared = node.child(key)
        child_path = path + (("f", key),)
        to_fieldset(val, child, child_path, out)
        if val is None or (isinstance(val, dict) and not val) or not declared:
            out.add(child_path)
    return out


# ----------------------------------------------------------------------------------------------- FieldsV1


def encode_fields(paths):
    """A field set as the FieldsV1 JSON object ('.' marks a member that also has children)."""
    root = {}
    members = set()
    for path in paths:
        node = root
        for element in path:
            node = node.setdefault("%s:%s" % element, {})
        members.add(path)

    def mark(node, prefix):
        for key in list(node.keys()):
            child = node[key]
            kind, _, text = key.partition(":")
            child_path = prefix + ((kind, text),)
            mark(child, child_path)
            if child and child_path in members:
                child["."] = {}
        return node

    mark(root, ())

    def ordered(node):
        return {k: ordered(node[k]) for k in sorted(node.keys())}

    return ordered(root)


def decode_fields(fields_v1):
    """The inverse of encode_fields; raises ValueError on malformed input."""
    out = set()

    def walk(node, prefix):
        if not isinstance(node, dict):
            raise ValueError("fieldsV1 entries must be objects")
        for key, child in node.items():
            if key == ".":
                out.add(prefix)
                continue
            kind, sep, text = key.partition(":")
            if not sep or kind not in ("f", "k", "v", "i"):
                raise ValueError("unknown fieldsV1 key %r" % key)
            path = prefix + ((kind, text),)
            if not child:
                out.add(path)
            else:
                walk(child, path)

    walk(fields_v1 or {}, ())
    return out


def path_string(path):
    """A path as structured-merge-diff prints it: .spec.containers[name="w"].image."""
    parts = []
    for kind, text in path:
        if kind == "f":
            parts.append("." + text)
        elif kind == "k":
            fields = json.loads(text)
            parts.append("[" + ",".join("%s=%s" % (k, _canonical(v)) for k, v in sorted(fields.items())) + "]")
        elif kind == "v":
            parts.append("[=%s]" % text)
        else:
            parts.append("[%s]" % text)
    return "".join(parts)


# ------------------------------------------------------------------------------------------ entries


class Entry:
    """One managedFields entry: a manager's owned fields for one operation."""

    __slots__ = ("manager", "operation", "api_version", "subresource", "time", "fields")

    def __init__(self, manager, operation, api_version, subresource, time, fields):
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.subresource = subresource
        self.time = time
        self.fields = fields

    def key(self):
        return (self.manager, self.operation, self.api_version if self.operation == UPDATE else "",
                self.subresource or "")

    def to_json(self):
        out = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = encode_fields(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def describe(self):
        """The manager as conflict messages print it (the identifier never carries the time)."""
        text = errors.go_quote(self.manager)
        if self.subresource:
            text += " with subresource %s" % errors.go_quote(self.subresource)
        if self.operation == UPDATE:
            text += " using %s" % self.api_version
        return text


def decode_entries(managed_fields):
    """Parses metadata.managedFields; raises ValueError when malformed."""
    entries = {}
    if managed_fields is None:
        return entries
    if not isinstance(managed_fields, list):
        raise ValueError("metadata.managedFields must be a list")
    for raw in managed_fields:
        if not isinstance(raw, dict):
            raise ValueError("metadata.managedFields entries must be objects")
        operation = raw.get("operation")
        if operation not in (APPLY, UPDATE):
            raise ValueError("metadata.managedFields operation must be Apply or Update, not %r" % operation)
        if raw.get("fieldsType", "FieldsV1") != "FieldsV1":
            raise ValueError("metadata.managedFields fieldsType must be FieldsV1")
        entry = Entry(raw.get("manager", ""), operation, raw.get("apiVersion", ""), raw.get("subresource", ""),
                      raw.get("time"), decode_fields(raw.get("fieldsV1")))
        entries[entry.key()] = entry
    return entries


def _sort_key(entry):
    # Same order as the API server: operation, time, manager, apiVersion, subresource.
    return (entry.operation, entry.time or "", entry.manager, entry.api_version, entry.subresource or "")


def _store_entries(obj, entries):
    meta = obj.setdefault("metadata", {})
    encoded = encode_entries(entries)
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)


def encode_entries(entries):
    kept = [e for e in entries.values() if e.fields]
    return [e.to_json() for e in sorted(kept, key=_sort_key)]


# ------------------------------------------------------------------------------------------ operations


def strip_for_compare(obj, scope, status_reset):
    """The part of an object that ownership is tracked for.

    scope "main" drops status when the resource resets it (status subresource), scope "status" keeps only
    status; identity and server-set metadata are never owned."""
    if obj is None or obj is MISSING:
        return {}
    out = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if scope == "status" and key != "status":
            continue
        if scope == "main" and status_reset and key == "status":
            continue
        if key == "metadata" and isinstance(value, dict):
            continue
        out[key] = value
    if scope != "status":
        # metadata exists on every object, so it is never itself "added" (no '.' on f:metadata).
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        out["metadata"] = {k: v for k, v in meta.items() if k not in _IGNORED_METADATA}
    return out


def _request_entries(new_obj, old_obj):
    """Entries to start from: the request's managedFields when it changed them, else the stored ones."""
    new_raw = (new_obj.get("metadata") or {}).get("managedFields")
    old_raw = ((old_obj or {}).get("metadata") or {}).get("managedFields")
    if new_raw and not json_equal(new_raw, old_raw):
        return decode_entries(new_raw)
    return decode_entries(old_raw)


def record_update(old_obj, new_obj, node, manager, api_version, subresource, scope, status_reset, now,
                  skeleton=None):
    """Updates new_obj's managedFields for an Update operation (create, PUT, PATCH) by `manager`.

    old_obj is None for a create; then `skeleton` (what an empty object of the kind serializes to) is the
    baseline, so fields present in every object are not reported as newly added."""
    entries = _request_entries(new_obj, old_obj)
    baseline = old_obj if old_obj is not None else (skeleton or {})
    diff = compare(strip_for_compare(baseline, scope, status_reset),
                   strip_for_compare(new_obj, scope, status_reset), node)
    touched = diff.added | diff.modified
    key = (manager, UPDATE, api_version, subresource or "")
    for entry_key, entry in entries.items():
        if entry_key != key:
            entry.fields = entry.fields - touched - diff.removed
    entry = entries.get(key)
    if entry is None:
        entry = Entry(manager, UPDATE, api_version, subresource or "", now, set())
        entries[key] = entry
    new_fields = (entry.fields | touched) - diff.removed
    if touched or old_obj is None:
        entry.time = now  # the operation took fields: the object changed
    entry.fields = new_fields
    _store_entries(new_obj, entries)
    return new_obj


# --------------------------------------------------------------------------------------------- apply


def merge_applied(live, config, node):
    """Merges an applied configuration into the live value (keyed lists by key, sets by value)."""
    if isinstance(config, dict) and not node.atomic and node.kind != SCALAR:
        base = live if isinstance(live, dict) else {}
        out = dict(base)
        for key, value in config.items():
            child, _ = node.child(key)
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge_applied(base.get(key, MISSING), value, child)
        return out
    if isinstance(config, list) and node.kind == LIST and node.list_type in ("map", "set"):
        return _merge_list_items(live if isinstance(live, list) else [], config, node)
    return deepcopy(config)


def _merge_list_items(lhs, rhs, node):
    """The items of a keyed list after an apply, in the order structured-merge-diff gives them (its
    mergingWalker.visitListItems): live items the configuration lacks keep their place, applied items follow the
    configuration's order, and an item both have is placed where the configuration has it. So applying [b, c] over
    [a, c] gives [a, b, c] (a real server answers `spec.ports[1]` for the duplicate that makes)."""
    lhs_pes = [item_element(node, item, i) for i, item in enumerate(lhs)]
    rhs_pes = [item_element(node, item, i) for i, item in enumerate(rhs)]
    lhs_by, rhs_by = {}, {}
    for pe, item in zip(lhs_pes, lhs):
        lhs_by.setdefault(pe, item)
    for pe, item in zip(rhs_pes, rhs):
        rhs_by.setdefault(pe, item)
    shared = [pe for pe in rhs_pes if pe in lhs_by]
    next_shared = shared.pop(0) if shared else None
    merged, out = set(), []
    li = ri = 0
    while li < len(lhs_pes) or ri < len(rhs_pes):
        if li < len(lhs_pes) and ri < len(rhs_pes):
            pe = lhs_pes[li]
            if pe == rhs_pes[ri]:
                merged.add(pe)
                out.append(merge_applied(lhs_by.get(pe, MISSING), rhs_by[pe], node.item()))
                li, ri = li + 1, ri + 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in rhs_by and next_shared is not None and next_shared != pe:
                li += 1  # a shared item, but not the one due now
                continue
        if li < len(lhs_pes):
            pe = lhs_pes[li]
            if pe not in rhs_by:
                out.append(deepcopy(lhs[li]))
                li += 1
                continue
            if pe in merged:
                li += 1
                continue
        if ri < len(rhs_pes):
            pe = rhs_pes[ri]
            merged.add(pe)
            out.append(merge_applied(lhs_by.get(pe, MISSING), rhs_by[pe], node.item()))
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
    return out


def _remove_path(obj, path, node):
    """Deletes the value at path from obj (in place); missing steps are ignored."""
    if not path:
        return
    current, current_node = obj, node
    for i, (kind, text) in enumerate(path):
        last = i == len(path) - 1
        if kind == "f":
            if not isinstance(current, dict) or text not in current:
                return
            if last:
                del current[text]
                return
            current_node, _ = current_node.child(text)
            current = current[text]
        else:
            if not isinstance(current, list):
                return
            found = None
            for idx, item in enumerate(current):
                if item_element(current_node, item, idx) == (kind, text):
                    found = idx
                    break
            if found is None:
                return
            if last:
                del current[found]
                return
            current = current[found]
            current_node = current_node.item()


def _has_prefix(paths, prefix):
    n = len(prefix)
    return any(p[:n] == prefix for p in paths)


class ApplyConflict(Exception):
    def __init__(self, conflicts):
        super().__init__("apply conflict")
        self.conflicts = conflicts  # list of (Entry, path)

    def api_error(self):
        causes = [{"reason": "FieldManagerConflict", "message": "conflict with %s" % entry.describe(),
                   "field": path_string(path)} for entry, path in self.conflicts]
        if len(self.conflicts) == 1:
            entry, path = self.conflicts[0]
            message = "Apply failed with 1 conflict: conflict with %s: %s" % (entry.describe(), path_string(path))
        else:
            by_manager = {}
            for entry, path in self.conflicts:
                by_manager.setdefault(entry.describe(), []).append(path_string(path))
            lines = []
            for manager in sorted(by_manager):
                lines.append("conflicts with %s:" % manager)
                lines.extend("- %s" % p for p in sorted(by_manager[manager]))
            message = "Apply failed with %d conflicts: %s" % (len(self.conflicts), "\n".join(lines))
        return errors.ApiError(409, "Conflict", message, {"causes": causes})


def apply(live_obj, config, node, manager, subresource, scope, status_reset, force, now):
    """Server-side apply of `config` over `live_obj` (None when creating).

    Returns the merged object with managedFields set. Raises ApplyConflict when another manager owns a
    field the configuration changes and force is false."""
    entries = decode_entries(((live_obj or {}).get("metadata") or {}).get("managedFields"))
    key = (manager, APPLY, "", subresource or "")
    previous = entries.get(key)
    last_set = previous.fields if previous else set()
    config_scoped = strip_for_compare(config, scope, status_reset)
    if not config_scoped.get("metadata"):
        config_scoped.pop("metadata", None)
    config_set = to_fieldset(config_scoped, node)
    config_set.discard(())

    base = deepcopy(live_obj) if live_obj is not None else {}
    merged = merge_applied(base, _scoped_config_for_merge(config, scope, status_reset), node)
    others = [e for k, e in entries.items() if k != key]
    other_fields = set()
    for entry in others:
        other_fields |= entry.fields
    # Fields this manager applied before and dropped now go away unless someone else owns them; so do
    # the parents that only held them (structured-merge-diff makes named fields members before removing).
    dropped = set(last_set - config_set)
    for path in list(dropped):
        dropped.update(path[:i] for i in range(1, len(path)))
    for path in sorted(dropped, key=len):
        if _has_prefix(config_set, path) or _has_prefix(other_fields, path):
            continue
        _remove_path(merged, path, node)

    diff = compare(strip_for_compare(live_obj, scope, status_reset),
                   strip_for_compare(merged, scope, status_reset), node)
    changed = diff.added | diff.modified
    conflicts = []
    for entry in others:
        for path in sorted(entry.fields & changed):
            conflicts.append((entry, path))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for entry in others:
        entry.fields = entry.fields - changed - diff.removed if force else entry.fields - diff.removed
    # The time is the last apply that changed the object; an apply that changes nothing keeps the entry's
    # time (a new entry then has none), as structured-merge-diff returns no object for a no-op.
    unchanged = live_obj is not None and json_equal(_without_managed(live_obj), _without_managed(merged))
    time = (previous.time if previous is not None else None) if unchanged else now
    entries[key] = Entry(manager, APPLY, _api_version(config), subresource or "", time, config_set)
    _store_entries(merged, entries)
    return merged


def _without_managed(obj):
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return dict(obj, metadata=meta)


def _api_version(config):
    return config.get("apiVersion", "") if isinstance(config, dict) else ""


def _scoped_config_for_merge(config, scope, status_reset):
    out = {}
    for key, value in config.items():
        if scope == "status" and key not in ("status",):
            continue
        if scope == "main" and status_reset and key == "status":
            continue
        if key == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in _SERVER_METADATA}
        out[key] = value
    return out


def scale_entries(managed_fields, replicas_path):
    """The managedFields a Scale carries (the scale handler's ToSubresource): every entry owning the
    replicas path, as an autoscaling/v1 entry owning spec.replicas."""
    owned = tuple(("f", part) for part in replicas_path)
    out = []
    for entry in sorted(decode_entries(managed_fields).values(), key=_sort_key):
        if owned in entry.fields:
            out.append(Entry(entry.manager, entry.operation, "autoscaling/v1", entry.subresource, entry.time,
                             {(("f", "spec"), ("f", "replicas"))}).to_json())
    return out


def strip_paths(obj, paths_predicate):
    """Removes owned paths matching a predicate from every entry (used by the scale subresource)."""
    meta = obj.get("metadata") or {}
    entries = decode_entries(meta.get("managedFields"))
    for entry in entries.values():
        entry.fields = {p for p in entry.fields if not paths_predicate(p)}
    _store_entries(obj, entries)


__all__ = ["APPLY", "UPDATE", "ApplyConflict", "Comparison", "apply", "compare",
           "decode_entries", "decode_fields", "encode_entries", "encode_fields", "path_string", "record_update",
           "strip_paths", "to_fieldset"]
