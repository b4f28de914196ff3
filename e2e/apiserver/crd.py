"""CustomResourceDefinitions: validating them and serving the resources they define.

`CrdStrategy` handles the CustomResourceDefinition kind itself (defaulting, validation including compiling
every CEL rule). `resource_types_for(crd)` turns an accepted CRD into the ResourceTypes it serves, each with a
`CustomResourceStrategy` that prunes, defaults and validates objects against the version's structural schema.
Instances are immutable once built; the registry swaps them when a CRD changes.
"""

from . import crdschema, crdtypes, errors, typeschema as ts
from .kinds import ResourceType, Strategy
from .schema import StructuralSchema
from .util import json_equal, now_rfc3339
from .validation import validate_object_meta

CRD_NODE = ts.struct(
    metadata=ts.OBJECT_META,
    spec=ts.struct(versions=ts.atomic_list(),
                   names=ts.struct(shortNames=ts.atomic_list(), categories=ts.atomic_list())),
    status=ts.struct(conditions=ts.keyed_list(["type"]), storedVersions=ts.atomic_list(),
                     acceptedNames=ts.struct(shortNames=ts.atomic_list(), categories=ts.atomic_list())),
)


def _version_priority(version):
    """Kubernetes' version ordering: GA > beta > alpha, higher numbers first."""
    import re
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version)
    if not m:
        return (3, 0, 0, version)
    major = int(m.group(1))
    stage = {"alpha": 2, "beta": 1, None: 0}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor, version)


class CrdStrategy(Strategy):
    type_node = CRD_NODE
    has_generation = True
    status_subresource = True

    def skeleton(self, rtype):
        return {"metadata": {"creationTimestamp": None},
                "spec": {"group": "", "names": {"plural": "", "kind": ""}, "scope": "", "versions": None},
                "status": {"conditions": None, "acceptedNames": {"plural": "", "kind": ""},
                           "storedVersions": None}}

    def decode(self, obj, rtype):
        """Decodes a CRD as v1.26's types do: unknown fields dropped (and returned), omitempty applied."""
        dropped = crdtypes.unknown_fields(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("conversion", {"strategy": "None"})
            for version in spec.get("versions") or []:
                schema = (version.get("schema") if isinstance(version, dict) else None) or {}
                if isinstance(schema, dict) and isinstance(schema.get("openAPIV3Schema"), dict):
                    crdtypes.normalize_schema(schema["openAPIV3Schema"])
        return dropped

    def prepare_create(self, obj, ctx):
        spec = obj.get("spec") or {}
        stored = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]
        obj["status"] = {"acceptedNames": {"kind": "", "plural": ""}, "conditions": None,
                         "storedVersions": stored[:1]}

    def validate(self, obj, old, rtype):
        problems = validate_object_meta(obj.get("metadata") or {}, False, "subdomain")
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return problems + [errors.required("spec", "")]
        group = spec.get("group")
        names = spec.get("names") or {}
        plural = names.get("plural")
        if not group:
            problems.append(errors.required("spec.group", ""))
        if not plural:
            problems.append(errors.required("spec.names.plural", ""))
        if not names.get("kind"):
            problems.append(errors.required("spec.names.kind", ""))
        name = (obj.get("metadata") or {}).get("name")
        if group and plural and name != "%s.%s" % (plural, group):
            problems.append(errors.invalid("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            problems.append(errors.not_supported("spec.scope", spec.get("scope"), ["Cluster", "Namespaced"]))
        versions = spec.get("versions")
        if not isinstance(versions, list) or not versions:
            problems.append(errors.required("spec.versions", "must have exactly one version marked as storage "
                                                             "version"))
            return problems
        if not all(isinstance(v, dict) for v in versions):
            return problems + [errors.invalid("spec.versions", versions, "must be a list of versions")]
        # As the API server converts a v1 CRD internally: a schema, subresources or printer columns that are the
        # same in every version move to spec.validation, spec.subresources, spec.additionalPrinterColumns, and
        # errors name those paths.
        shared = {key: all(json_equal(v.get(key), versions[0].get(key)) for v in versions)
                  for key in ("schema", "subresources", "additionalPrinterColumns")}
        names_seen = set()
        for i, version in enumerate(versions):
            path = "spec.versions[%d]" % i
            if not version.get("name"):
                problems.append(errors.required(path + ".name", ""))
                continue
            if not isinstance(version["name"], str):
                return problems + [errors.invalid(path + ".name", version["name"], "must be a string")]
            names_seen.add(version["name"])
        if len(names_seen) != len([v for v in versions if v.get("name")]):
            problems.append(errors.invalid("spec.versions", crdtypes.GoVersions(versions, shared),
                                           "must contain unique version names"))
        storage = [v for v in versions if v.get("storage")]
        if len(storage) != 1:
            problems.append(errors.invalid("spec.versions", crdtypes.GoVersions(versions, shared),
                                           "must have exactly one version marked as storage version"))
        for i, version in enumerate(versions):
            path = "spec.versions[%d]" % i
            if not (shared["schema"] and i > 0):
                schema_path = ("spec.validation" if shared["schema"] else path + ".schema") + ".openAPIV3Schema"
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema is None:
                    problems.append(errors.required(path + ".schema.openAPIV3Schema", "schemas are required"))
                else:
                    problems.extend(crdschema.version_schema_problems(schema, schema_path))
            if not (shared["subresources"] and i > 0):
                sub_path = "spec.subresources" if shared["subresources"] else path + ".subresources"
                problems.extend(_subresource_problems(version.get("subresources"), sub_path))
            if not (shared["additionalPrinterColumns"] and i > 0):
                col_path = ("spec.additionalPrinterColumns" if shared["additionalPrinterColumns"]
                            else path + ".additionalPrinterColumns")
                for j, column in enumerate(version.get("additionalPrinterColumns") or []):
                    problems.extend(_column_problems(column, "%s[%d]" % (col_path, j)))
        if old is None:
            # The stored versions a create records (the first storage version) must name every storage version.
            stored = (obj.get("status") or {}).get("storedVersions") or []
            for version in storage:
                if version.get("name") not in stored:
                    problems.append(errors.invalid("status.storedVersions", crdtypes.GoVersion(version, shared),
                                                   "must have the storage version " + str(version.get("name"))))
        if old is not None:
            old_spec = old.get("spec") or {}
            for key in ("group",):
                if old_spec.get(key) != spec.get(key):
                    problems.append(errors.invalid("spec." + key, spec.get(key), "field is immutable"))
            if (old_spec.get("names") or {}).get("plural") != plural:
                problems.append(errors.invalid("spec.names.plural", plural, "field is immutable"))
        return problems


_COLUMN_TYPES = ("boolean", "date", "integer", "number", "string")
_COLUMN_FORMATS = ("byte", "date", "date-time", "double", "float", "int32", "int64", "password")


def _simple_json_path_problems(value, path):
    if not isinstance(value, str) or not value:
        return [errors.invalid(path, value, "must not be empty")]
    if not value.startswith("."):
        return [errors.invalid(path, value, "must be a simple json path starting with .")]
    return []


def _column_problems(column, path):
    """ValidateCustomResourceColumnDefinition (v1.26 checks only the leading dot of jsonPath)."""
    if not isinstance(column, dict):
        return [errors.invalid(path, column, "must be an object")]
    problems = []
    if not column.get("name"):
        problems.append(errors.required(path + ".name", ""))
    typ = column.get("type")
    if not typ:
        problems.append(errors.required(path + ".type", "must be one of %s" % ",".join(_COLUMN_TYPES)))
    elif typ not in _COLUMN_TYPES:
        problems.append(errors.invalid(path + ".type", typ, "must be one of %s" % ",".join(_COLUMN_TYPES)))
    fmt = column.get("format")
    if fmt and fmt not in _COLUMN_FORMATS:
        problems.append(errors.invalid(path + ".format", fmt, "must be one of %s" % ",".join(_COLUMN_FORMATS)))
    if not column.get("jsonPath"):
        problems.append(errors.required(path + ".JSONPath", ""))
    else:
        problems.extend(_simple_json_path_problems(column["jsonPath"], path + ".JSONPath"))
    return problems


def _subresource_problems(subresources, path):
    """ValidateCustomResourceDefinitionSubresources: scale paths under .spec / .status."""
    scale = (subresources or {}).get("scale") if isinstance(subresources, dict) else None
    if not isinstance(scale, dict):
        return []
    problems = []
    for key, prefix in (("specReplicasPath", ".spec."), ("statusReplicasPath", ".status.")):
        value = scale.get(key)
        where = "%s.scale.%s" % (path, key)
        if not value:
            problems.append(errors.required(where, ""))
            continue
        found = _simple_json_path_problems(value, where)
        if found:
            problems.extend(found)
        elif not value.startswith(prefix):
            problems.append(errors.invalid(where, value, "should be a json path under %s" % prefix.rstrip(".")))
    selector = scale.get("labelSelectorPath")
    if selector:
        where = path + ".scale.labelSelectorPath"
        found = _simple_json_path_problems(selector, where)
        problems.extend(found)
        if not isinstance(selector, str):
            return problems
        if not (selector.startswith(".spec.") or selector.startswith(".status.")):
            problems.append(errors.invalid(where, selector, "should be a json path under either .spec or .status"))
    return problems


def established_status(crd):
    """The status the apiextensions controllers give a CRD once its names are accepted."""
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    names.setdefault("singular", names.get("kind", "").lower())
    names.setdefault("listKind", names.get("kind", "") + "List")
    now = now_rfc3339()
    status = dict(crd.get("status") or {})
    status["acceptedNames"] = names
    status["conditions"] = [
        {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts",
         "message": "no conflicts found"},
        {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted",
         "message": "the initial names have been accepted"},
    ]
    stored = list(status.get("storedVersions") or [])
    for version in spec.get("versions") or []:
        if version.get("storage") and version.get("name") not in stored:
            stored.append(version["name"])
    status["storedVersions"] = stored
    return status


class CustomResourceStrategy(Strategy):
    """Objects of one CRD version: pruned, defaulted and validated by its structural schema."""

    has_generation = True
    allow_create_on_update = False
    allow_unconditional_update = False

    def __init__(self, group, kind, schema, subresources):
        self.group = group
        self.kind = kind
        self.schema = schema
        self.type_node = ts.custom_resource_root(schema.root)
        self.status_subresource = "status" in subresources
        scale = subresources.get("scale")
        self.scale = None
        if scale is not None:
            self.scale = (scale.get("specReplicasPath"), scale.get("statusReplicasPath"),
                          scale.get("labelSelectorPath"))

    def qualified_kind(self, rtype):
        return self.group, self.kind

    def skeleton(self, rtype):
        return {}

    def unsupported_field_message(self, label):
        return '"%s" is not a known field selector: only "metadata.name", "metadata.namespace"' % label

    def decode(self, obj, rtype):
        dropped = self.schema.prune(obj)
        self.schema.default(obj)
        return dropped

    def typing_error(self, obj):
        return self.schema.typing_error(obj)

    def validate(self, obj, old, rtype):
        problems = validate_object_meta(obj.get("metadata") or {}, rtype.namespaced, "subdomain")
        problems += self.schema.validate(obj, old)
        if self.scale is not None:
            problems += _scale_problems(obj, *self.scale)
        self.schema.validate_rules(obj, old, problems)
        return problems


def _nested(obj, path, expected, expected_name):
    """unstructured.NestedInt64/NestedString: (value, error text) for a .a.b path (None when absent)."""
    fields = [f for f in path.split(".") if f]
    value = obj
    for i, name in enumerate(fields):
        if value is None:
            return None, None
        if not isinstance(value, dict):
            return None, "%s accessor error: %s is of the type %s, expected map[string]interface{}" % (
                "." + ".".join(fields[:i + 1]), errors.go_plain(value), errors.go_type(value))
        if name not in value:
            return None, None
        value = value[name]
    if value is None or expected(value):
        return value, None
    return None, "%s accessor error: %s is of the type %s, expected %s" % (
        "." + ".".join(fields), errors.go_plain(value), errors.go_type(value), expected_name)


def _scale_problems(obj, spec_path, status_path, selector_path):
    """The API server's ValidateScaleSpec/ValidateScaleStatus: the replica paths must hold int64s that are
    not negative, the selector path a string."""
    problems = []
    for path in (spec_path, status_path):
        if not path:
            continue
        value, error = _nested(obj, path, lambda v: isinstance(v, int) and not isinstance(v, bool), "int64")
        if error:
            problems.append(errors.invalid(path, 0, error))
        elif value is not None and value < 0:
            problems.append(errors.invalid(path, value, "should be a non-negative integer"))
        elif value is not None and value > 2 ** 31 - 1:
            problems.append(errors.invalid(path, value, "should be less than or equal to 2147483647"))
    if selector_path:
        _, error = _nested(obj, selector_path, lambda v: isinstance(v, str), "string")
        if error:
            problems.append(errors.invalid(selector_path, "", error))
    return problems


def resource_types_for(crd):
    """The ResourceTypes an accepted CRD serves (one per served version). Raises SchemaError."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec["group"]
    plural = names["plural"]
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        schema = StructuralSchema((version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"})
        subresources = version.get("subresources") or {}
        strategy = CustomResourceStrategy(group, names["kind"], schema, subresources)
        sub_names = [s for s in ("status", "scale") if s in subresources]
        out.append(ResourceType(group, version["name"], plural, names["kind"], strategy,
                                namespaced=spec.get("scope") == "Namespaced",
                                short_names=names.get("shortNames") or [],
                                singular=names.get("singular") or names["kind"].lower(),
                                discovery_singular=names.get("singular") or names["kind"].lower(),
                                subresources=sub_names, categories=names.get("categories") or [],
                                verbs=["delete", "deletecollection", "get", "list", "patch", "create", "update",
                                       "watch"],
                                storage="%s/%s" % (group, plural)))
    return out


def preferred_version(versions):
    return sorted(versions, key=_version_priority)[0]


def version_sort_key(version):
    return _version_priority(version)
