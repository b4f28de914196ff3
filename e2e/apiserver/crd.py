"""CustomResourceDefinitions: validating them and serving the resources they define.

`CrdStrategy` handles the CustomResourceDefinition kind itself (defaulting, validation including compiling
every CEL rule). `resource_types_for(crd)` turns an accepted CRD into the ResourceTypes it serves, each with a
`CustomResourceStrategy` that prunes, defaults and validates objects against the version's structural schema.
Instances are immutable once built; the registry swaps them when a CRD changes.
"""

from . import errors, typeschema as ts
from .kinds import ResourceType, Strategy
from .schema import SchemaError, StructuralSchema
from .util import get_path, now_rfc3339, parse_json_path
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
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("conversion", {"strategy": "None"})

    def prepare_create(self, obj, ctx):
        spec = obj.get("spec") or {}
        stored = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")]
        obj["status"] = {"acceptedNames": {"kind": "", "plural": ""}, "conditions": None,
                         "storedVersions": stored}

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
        storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
        if len(storage) != 1:
            problems.append(errors.invalid("spec.versions", len(storage),
                                           "must have exactly one version marked as storage version"))
        seen = set()
        for i, version in enumerate(versions):
            path = "spec.versions[%d]" % i
            if not isinstance(version, dict) or not version.get("name"):
                problems.append(errors.required(path + ".name", ""))
                continue
            if version["name"] in seen:
                problems.append(errors.duplicate(path + ".name", version["name"]))
            seen.add(version["name"])
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is None:
                problems.append(errors.required(path + ".schema.openAPIV3Schema", "schemas are required"))
            else:
                try:
                    StructuralSchema(schema, path + ".schema.openAPIV3Schema")
                except SchemaError as exc:
                    problems.extend(exc.field_errors)
            scale = (version.get("subresources") or {}).get("scale")
            if scale is not None:
                for key, prefix in (("specReplicasPath", ".spec."), ("statusReplicasPath", ".status.")):
                    value = scale.get(key)
                    if not value:
                        problems.append(errors.required("%s.subresources.scale.%s" % (path, key), ""))
                    elif not value.startswith(prefix):
                        problems.append(errors.invalid("%s.subresources.scale.%s" % (path, key), value,
                                                       "should be a json path under %s" % prefix.rstrip(".")))
                selector = scale.get("labelSelectorPath")
                if selector and not (selector.startswith(".spec.") or selector.startswith(".status.")):
                    problems.append(errors.invalid(path + ".subresources.scale.labelSelectorPath", selector,
                                                   "should be a json path under either .spec or .status"))
        if old is not None:
            old_spec = old.get("spec") or {}
            for key in ("group",):
                if old_spec.get(key) != spec.get(key):
                    problems.append(errors.invalid("spec." + key, spec.get(key), "field is immutable"))
            if (old_spec.get("names") or {}).get("plural") != plural:
                problems.append(errors.invalid("spec.names.plural", plural, "field is immutable"))
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

    def validate(self, obj, old, rtype):
        problems = validate_object_meta(obj.get("metadata") or {}, rtype.namespaced, "subdomain")
        problems += self.schema.validate(obj, old)
        if self.scale is not None:
            spec_path, status_path, selector_path = self.scale
            for path, required in ((spec_path, False), (status_path, False)):
                value = get_path(obj, parse_json_path(path or ""))
                if value is not None and not (isinstance(value, int) and not isinstance(value, bool)
                                              and value >= 0):
                    problems.append(errors.invalid(path, value, "should be a non-negative integer"))
            if selector_path:
                value = get_path(obj, parse_json_path(selector_path))
                if value is not None and not isinstance(value, str):
                    problems.append(errors.invalid(selector_path, value, "should be a string"))
        self.schema.validate_rules(obj, old, problems)
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
