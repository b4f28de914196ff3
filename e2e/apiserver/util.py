"""Small helpers shared by the API server modules: timestamps, JSON copies, name generation."""

import copy
import datetime
import json
import random
import time
import uuid

# Marker for an absent value (distinct from JSON null, which is None).
MISSING = object()

_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_rfc3339(offset_seconds=0):
    """The current UTC time as Kubernetes writes metav1.Time (seconds precision)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset_seconds))


def now_micro():
    """The current UTC time as metav1.MicroTime."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    """Parses an RFC 3339 timestamp; returns seconds since the epoch or None if malformed."""
    if not isinstance(text, str):
        return None
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        return datetime.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def new_uid():
    return str(uuid.uuid4())


def random_suffix(length=5):
    return "".join(random.choice(_NAME_SUFFIX_ALPHABET) for _ in range(length))


def deepcopy(value):
    """A deep copy of a JSON value (faster than copy.deepcopy for plain dicts and lists)."""
    if isinstance(value, dict):
        return {k: deepcopy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [deepcopy(v) for v in value]
    return value


def dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def dumps_bytes(value):
    return dumps(value).encode("utf-8")


def get_path(obj, path, default=None):
    """Reads obj[path[0]][path[1]]... returning default when any step is missing."""
    current = obj
    for key in path:
        if isinstance(current, dict) and key in current:
            current = current[key]
        else:
            return default
    return current


def set_path(obj, path, value):
    """Writes obj[path[0]]...[path[-1]] = value, creating intermediate dicts."""
    current = obj
    for key in path[:-1]:
        nxt = current.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            current[key] = nxt
        current = nxt
    current[path[-1]] = value


def parse_json_path(path):
    """Splits a simple JSON path such as `.spec.replicas` into keys."""
    return [part for part in path.strip().lstrip(".").split(".") if part]


def json_equal(a, b):
    """Structural equality that keeps bools and numbers apart (True != 1)."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False
        return all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return a == b


shallow_copy = copy.copy
