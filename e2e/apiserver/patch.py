"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

Pure functions over JSON values. Errors raise PatchError (the patch does not apply: 422) or
MalformedPatch (the body is not a patch of that type: 400), which the registry turns into Status objects.
"""

from .typeschema import LIST, SCALAR
from .util import MISSING, deepcopy, json_equal


class PatchError(Exception):
    """The patch is well formed but cannot be applied to this object."""


class MalformedPatch(Exception):
    """The patch body is not a valid patch document."""


# ------------------------------------------------------------------------------------------ merge patch


def merge_patch(target, patch):
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ------------------------------------------------------------------------------------------- JSON patch


def _pointer(path):
    if path == "":
        return []
    if not isinstance(path, str) or not path.startswith("/"):
        raise MalformedPatch("invalid JSON pointer %r: must start with '/'" % (path,))
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container, token, allow_end=False):
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError("invalid array index %r" % token)
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not allow_end):
        raise PatchError("array index %d out of bounds" % idx)
    return idx


def _parent(doc, tokens):
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError("doc is missing path: %s" % token)
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token)]
        else:
            raise PatchError("doc is missing path: %s" % token)
    return current


def _get(doc, tokens):
    current = doc
    for token in tokens:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError("doc is missing path: %s" % token)
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token)]
        else:
            raise PatchError("doc is missing path: %s" % token)
    return current


def _add(doc, tokens, value):
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError("cannot add to a scalar")
    return doc


def _remove(doc, tokens):
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError("remove operation does not apply: doc is missing path: %s" % last)
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last))
    raise PatchError("cannot remove from a scalar")


def _test_target(doc, tokens):
    """The value a `test` operation compares, as Kubernetes' JSON patch library (evanphx/json-patch) sees it:
    a missing member of an existing object reads as null, so `{"op": "test", "path": "/metadata/finalizers",
    "value": null}` passes on an object without finalizers. A missing parent or an array index out of range
    is MISSING (the test fails)."""
    try:
        parent = _parent(doc, tokens) if tokens else None
    except PatchError:
        return MISSING
    if tokens and isinstance(parent, dict) and tokens[-1] not in parent:
        return None
    try:
        return _get(doc, tokens)
    except PatchError:
        return MISSING


def json_patch(target, operations):
    """Applies an RFC 6902 operation list; a failing `test` raises PatchError."""
    if not isinstance(operations, list):
        raise MalformedPatch("json patch must be a list of operations")
    doc = deepcopy(target)
    for i, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op:
            raise MalformedPatch("json patch operation %d has no \"op\"" % i)
        kind = op["op"]
        if "path" not in op:
            raise MalformedPatch("json patch operation %d (%s) has no \"path\"" % (i, kind))
        tokens = _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise MalformedPatch("json patch operation %d (%s) has no \"value\"" % (i, kind))
        if kind == "add":
            doc = _add(doc, tokens, deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, tokens)
        elif kind == "replace":
            _get(doc, tokens)
            if not tokens:
                doc = deepcopy(op["value"])
            else:
                parent = _parent(doc, tokens)
                if isinstance(parent, dict):
                    parent[tokens[-1]] = deepcopy(op["value"])
                else:
                    parent[_index(parent, tokens[-1])] = deepcopy(op["value"])
        elif kind == "test":
            have = _test_target(doc, tokens)
            if have is MISSING or not json_equal(have, op["value"]):
                raise PatchError("testing value %s failed" % op["path"])
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise MalformedPatch("json patch operation %d (%s) has no \"from\"" % (i, kind))
            source = _pointer(op["from"])
            value = _remove(doc, source) if kind == "move" else deepcopy(_get(doc, source))
            doc = _add(doc, tokens, value)
        else:
            raise MalformedPatch("unknown json patch operation %r" % (kind,))
    return doc


# ------------------------------------------------------------------------------- strategic merge patch

_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"


def strategic_merge_patch(target, patch, node):
    """Kubernetes' strategic merge patch for built-in kinds: lists with a merge key merge by that key,
    set-like lists union, other lists are replaced; `$patch`, `$retainKeys`, `$deleteFromPrimitiveList`
    and `$setElementOrder` directives are honoured."""
    if not isinstance(patch, dict):
        raise MalformedPatch("strategic merge patch must be a JSON object")
    return _smp_map(target if isinstance(target, dict) else {}, patch, node)


def _smp_map(target, patch, node):
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return {k: deepcopy(v) for k, v in patch.items() if k != _DIRECTIVE}
    if directive == "delete":
        return MISSING
    if directive is not None:
        raise MalformedPatch("unknown patch directive %r" % (directive,))
    out = dict(target)
    retain = patch.get(_RETAIN)
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN) or key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE):]
            if isinstance(out.get(field), list) and isinstance(value, list):
                out[field] = [v for v in out[field] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
            continue
        child, _ = node.child(key)
        merged = _smp_value(out.get(key, MISSING), value, child)
        if merged is MISSING:
            out.pop(key, None)
        else:
            out[key] = merged
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _smp_value(target, value, node):
    if isinstance(value, dict) and not node.atomic and node.kind != SCALAR:
        return _smp_map(target if isinstance(target, dict) else {}, value, node)
    if isinstance(value, list) and node.kind == LIST and node.list_type in ("map", "set"):
        return _smp_list(target if isinstance(target, list) else [], value, node)
    return deepcopy(value)


def _smp_list(target, patch, node):
    if node.list_type == "set":
        out = list(target)
        for item in patch:
            if item not in out:
                out.append(deepcopy(item))
        return out
    merge_key = node.keys[0] if node.keys else None
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return [deepcopy(item) for item in patch if not (isinstance(item, dict) and _DIRECTIVE in item)]
    out = [deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or merge_key is None or merge_key not in item:
            out.append(deepcopy(item))
            continue
        position = next((i for i, existing in enumerate(out)
                         if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]), None)
        if item.get(_DIRECTIVE) == "delete":
            if position is not None:
                del out[position]
            continue
        if position is None:
            out.append(_smp_map({}, item, node.item()))
        else:
            out[position] = _smp_map(out[position], item, node.item())
    return out
