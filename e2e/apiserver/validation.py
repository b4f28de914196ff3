"""Validation shared by all kinds: object names, ObjectMeta, labels and annotations. Pure functions."""

import re

from . import errors
from .selection import label_key_error, label_value_error

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                     "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                     "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MESSAGE = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                 "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1035_MESSAGE = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                   "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
                   "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


def name_problems(name, kind):
    """Messages for an invalid object name under the rule `kind` (subdomain, label, dns1035, path)."""
    out = []
    if kind == "subdomain":
        if len(name) > 253:
            out.append("must be no more than 253 characters")
        if not _SUBDOMAIN.match(name):
            out.append(SUBDOMAIN_MESSAGE)
    elif kind == "label":
        if len(name) > 63:
            out.append("must be no more than 63 characters")
        if not _LABEL.match(name):
            out.append(LABEL_MESSAGE)
    elif kind == "dns1035":
        if len(name) > 63:
            out.append("must be no more than 63 characters")
        if not _DNS1035.match(name):
            out.append(DNS1035_MESSAGE)
    elif kind == "path":
        if name in (".", "..") or "/" in name or "%" in name:
            out.append("may not contain '/' or '%' and may not be '.' or '..'")
    return out


def validate_object_meta(meta, namespaced, name_kind):
    """ObjectMeta checks every kind shares: name, namespace, labels, annotations, owner references."""
    problems = []
    name = meta.get("name")
    if not name:
        problems.append(errors.required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        problems.append(errors.invalid("metadata.name", name, "must be a string"))
    else:
        for message in name_problems(name, name_kind):
            problems.append(errors.invalid("metadata.name", name, message))
    if namespaced and not meta.get("namespace"):
        problems.append(errors.required("metadata.namespace", ""))
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            problems.append(errors.invalid("metadata.labels", labels, "must be a map of strings"))
        else:
            for key, value in labels.items():
                key_problem = label_key_error(key)
                if key_problem:
                    problems.append(errors.invalid("metadata.labels", key, key_problem))
                if not isinstance(value, str):
                    problems.append(errors.invalid("metadata.labels", value, "label values must be strings"))
                else:
                    value_problem = label_value_error(value)
                    if value_problem:
                        problems.append(errors.invalid("metadata.labels", value, value_problem))
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            problems.append(errors.invalid("metadata.annotations", annotations, "must be a map of strings"))
        else:
            for key in annotations:
                key_problem = label_key_error(key)
                if key_problem:
                    problems.append(errors.invalid("metadata.annotations", key, key_problem))
            if sum(len(k) + len(v) for k, v in annotations.items()) > 256 * 1024:
                problems.append(errors.too_long("metadata.annotations", 256 * 1024))
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            problems.append(errors.invalid("metadata.finalizers", finalizers, "must be a list of strings"))
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list):
            problems.append(errors.invalid("metadata.ownerReferences", refs, "must be a list"))
        else:
            controllers = 0
            for i, ref in enumerate(refs):
                path = "metadata.ownerReferences[%d]" % i
                if not isinstance(ref, dict):
                    problems.append(errors.invalid(path, ref, "must be an object"))
                    continue
                for field in ("apiVersion", "kind", "name", "uid"):
                    if not ref.get(field):
                        problems.append(errors.invalid(path + "." + field, ref.get(field, ""),
                                                       "%s must not be empty" % field))
                if ref.get("controller"):
                    controllers += 1
            if controllers > 1:
                problems.append(errors.invalid("metadata.ownerReferences", refs,
                                               "Only one reference can have Controller set to true"))
    return problems


_META_TYPES = {"name": "string", "generateName": "string", "namespace": "string", "selfLink": "string",
               "uid": "string", "resourceVersion": "string", "creationTimestamp": "string",
               "deletionTimestamp": "string", "generation": "int64", "deletionGracePeriodSeconds": "int64",
               "labels": "map[string]string", "annotations": "map[string]string", "finalizers": "[]string",
               "ownerReferences": "[]v1.OwnerReference", "managedFields": "[]v1.ManagedFieldsEntry"}


def _json_kind(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def check_object_meta_types(meta, kind):
    """Rejects ObjectMeta fields of the wrong JSON type with the decoder's 400, as the API server does."""
    def fail(field, value, go_type):
        raise errors.bad_request('%s in version "v1" cannot be handled as a %s: json: cannot unmarshal %s into Go '
                                 'struct field ObjectMeta.metadata.%s of type %s'
                                 % (kind, kind, _json_kind(value), field, go_type))

    for field, go_type in _META_TYPES.items():
        value = meta.get(field)
        if value is None:
            continue
        if go_type == "string" and not isinstance(value, str):
            fail(field, value, go_type)
        elif go_type == "int64" and (not isinstance(value, int) or isinstance(value, bool)):
            fail(field, value, go_type)
        elif go_type == "map[string]string":
            if not isinstance(value, dict):
                fail(field, value, go_type)
            for item in value.values():
                if not isinstance(item, str):
                    fail(field, item, "string")
        elif go_type.startswith("[]"):
            if not isinstance(value, list):
                fail(field, value, go_type)
            for item in value:
                if go_type == "[]string" and not isinstance(item, str):
                    fail(field, item, "string")
                if go_type != "[]string" and not isinstance(item, dict):
                    fail(field, item, go_type[2:])


# The JSON shapes the decoder of a built-in kind insists on (dotted paths; `[]` steps into list items).
_OBJ, _LIST, _STRMAP = "object", "array", "map of strings"
BUILTIN_SHAPES = {
    "Pod": {"spec": _OBJ, "status": _OBJ, "spec.containers": _LIST, "spec.containers[]": _OBJ,
            "spec.initContainers": _LIST, "spec.initContainers[]": _OBJ, "spec.volumes": _LIST,
            "spec.volumes[]": _OBJ, "spec.tolerations": _LIST, "spec.tolerations[]": _OBJ,
            "spec.nodeSelector": _STRMAP, "spec.containers[].ports": _LIST, "spec.containers[].ports[]": _OBJ,
            "spec.containers[].env": _LIST, "spec.containers[].env[]": _OBJ, "spec.containers[].resources": _OBJ,
            "spec.containers[].volumeMounts": _LIST, "spec.containers[].volumeMounts[]": _OBJ,
            "spec.containers[].args": _LIST, "spec.containers[].command": _LIST, "status.conditions": _LIST,
            "status.conditions[]": _OBJ, "status.containerStatuses": _LIST, "status.podIPs": _LIST},
    "Service": {"spec": _OBJ, "status": _OBJ, "spec.ports": _LIST, "spec.ports[]": _OBJ, "spec.selector": _STRMAP},
    "Node": {"spec": _OBJ, "status": _OBJ, "spec.taints": _LIST, "spec.taints[]": _OBJ, "status.conditions": _LIST,
             "status.conditions[]": _OBJ, "status.capacity": _OBJ, "status.allocatable": _OBJ,
             "status.addresses": _LIST},
    "Namespace": {"spec": _OBJ, "status": _OBJ},
    "ConfigMap": {"data": _STRMAP, "binaryData": _STRMAP},
    "Secret": {"data": _STRMAP, "stringData": _STRMAP},
    "PersistentVolumeClaim": {"spec": _OBJ, "status": _OBJ, "spec.resources": _OBJ, "spec.accessModes": _LIST},
    "Lease": {"spec": _OBJ},
    "Event": {"involvedObject": _OBJ, "regarding": _OBJ, "source": _OBJ, "deprecatedSource": _OBJ,
              "series": _OBJ, "related": _OBJ},
    "Deployment": {"spec": _OBJ, "status": _OBJ, "spec.template": _OBJ, "spec.template.spec": _OBJ,
                   "spec.selector": _OBJ},
    "CustomResourceDefinition": {"spec": _OBJ, "status": _OBJ, "spec.names": _OBJ, "spec.versions": _LIST,
                                 "spec.versions[]": _OBJ, "spec.versions[].schema": _OBJ,
                                 "spec.versions[].schema.openAPIV3Schema": _OBJ, "spec.versions[].subresources": _OBJ,
                                 "spec.versions[].subresources.scale": _OBJ,
                                 "spec.versions[].additionalPrinterColumns": _LIST,
                                 "spec.versions[].additionalPrinterColumns[]": _OBJ, "spec.conversion": _OBJ},
}
BUILTIN_SHAPES["StatefulSet"] = BUILTIN_SHAPES["ReplicaSet"] = BUILTIN_SHAPES["Deployment"]


def _shape_ok(value, shape):
    if shape == _OBJ:
        return isinstance(value, dict)
    if shape == _LIST:
        return isinstance(value, list)
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def check_builtin_shapes(obj, kind, api_version):
    """400 (like the decoder) when a built-in kind's field has the wrong JSON type."""
    shapes = BUILTIN_SHAPES.get(kind) or {}

    def values_at(path):
        current = [obj]
        for step in path.split("."):
            items = step.endswith("[]")
            key = step[:-2] if items else step
            nxt = []
            for value in current:
                if isinstance(value, dict) and value.get(key) is not None:
                    child = value[key]
                    if items:
                        nxt.extend(child if isinstance(child, list) else [])
                    else:
                        nxt.append(child)
            current = nxt
        return current

    for path, shape in shapes.items():
        for value in values_at(path):
            if not _shape_ok(value, shape):
                raise errors.bad_request('%s in version "%s" cannot be handled as a %s: json: cannot unmarshal %s '
                                         'into Go struct field %s.%s of type %s'
                                         % (kind, api_version, kind, _json_kind(value), kind,
                                            path.replace("[]", ""), shape))
