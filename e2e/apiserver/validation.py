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
