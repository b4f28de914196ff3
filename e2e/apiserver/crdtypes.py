"""The CustomResourceDefinition type of apiextensions.k8s.io/v1 as a v1.26 server decodes it.

- `unknown_fields(crd)`: the fields the v1.26 Go types do not have (a strict decoder's `unknown field "..."`,
  e.g. a rule's `messageExpression`, which arrived in v1.27), removed from the object; the paths read like the
  decoder's: `spec.versions[0].schema.openAPIV3Schema.properties.spec.x-kubernetes-validations[0].foo`.
- `normalize_schema(schema)`: what Go's `omitempty` drops when the CRD is stored and served again
  (`default: null`, `properties: {}`, `nullable: false`, empty strings and lists).
- `GoVersion` / `GoVersions`: versions as the API server's messages print them (Go's %#v of the internal
  CustomResourceDefinitionVersion, with schema, subresources and columns moved to the spec when shared).
Pure functions over JSON values.
"""

from . import errors

_ANY = "any"  # arbitrary JSON (default, example, enum values)
_SCHEMA = "schema"
_SCHEMA_OR_BOOL = "schema-or-bool"
_SCHEMA_OR_ARRAY = "schema-or-array"
_SCHEMA_MAP = "schema-map"
_SCHEMA_LIST = "schema-list"
_STRING_LIST = "string-list"
_SCALAR = "scalar"

# JSONSchemaProps of apiextensions.k8s.io/v1 in v1.26.
_SCHEMA_FIELDS = {
    "id": _SCALAR, "$schema": _SCALAR, "$ref": _SCALAR, "description": _SCALAR, "type": _SCALAR,
    "format": _SCALAR, "title": _SCALAR, "default": _ANY, "maximum": _SCALAR, "exclusiveMaximum": _SCALAR,
    "minimum": _SCALAR, "exclusiveMinimum": _SCALAR, "maxLength": _SCALAR, "minLength": _SCALAR,
    "pattern": _SCALAR, "maxItems": _SCALAR, "minItems": _SCALAR, "uniqueItems": _SCALAR, "multipleOf": _SCALAR,
    "enum": _ANY, "maxProperties": _SCALAR, "minProperties": _SCALAR, "required": _STRING_LIST,
    "items": _SCHEMA_OR_ARRAY, "allOf": _SCHEMA_LIST, "oneOf": _SCHEMA_LIST, "anyOf": _SCHEMA_LIST,
    "not": _SCHEMA, "properties": _SCHEMA_MAP, "additionalProperties": _SCHEMA_OR_BOOL,
    "patternProperties": _SCHEMA_MAP, "dependencies": _ANY, "additionalItems": _SCHEMA_OR_BOOL,
    "definitions": _SCHEMA_MAP, "externalDocs": {"description": _SCALAR, "url": _SCALAR}, "example": _ANY,
    "nullable": _SCALAR, "x-kubernetes-preserve-unknown-fields": _SCALAR,
    "x-kubernetes-embedded-resource": _SCALAR, "x-kubernetes-int-or-string": _SCALAR,
    "x-kubernetes-list-map-keys": _STRING_LIST, "x-kubernetes-list-type": _SCALAR,
    "x-kubernetes-map-type": _SCALAR,
    # v1.26's ValidationRule has rule and message only (messageExpression came in v1.27, reason and fieldPath
    # in v1.28).
    "x-kubernetes-validations": [{"rule": _SCALAR, "message": _SCALAR}],
}

_OBJECT_META = {name: _ANY for name in (
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields")}
_NAMES = {"plural": _SCALAR, "singular": _SCALAR, "shortNames": _ANY, "kind": _SCALAR, "listKind": _SCALAR,
          "categories": _ANY}
_SERVICE_REFERENCE = {"namespace": _SCALAR, "name": _SCALAR, "path": _SCALAR, "port": _SCALAR}
CRD_FIELDS = {
    "apiVersion": _SCALAR, "kind": _SCALAR, "metadata": _OBJECT_META,
    "spec": {
        "group": _SCALAR, "names": _NAMES, "scope": _SCALAR, "preserveUnknownFields": _SCALAR,
        "versions": [{
            "name": _SCALAR, "served": _SCALAR, "storage": _SCALAR, "deprecated": _SCALAR,
            "deprecationWarning": _SCALAR, "schema": {"openAPIV3Schema": _SCHEMA},
            "subresources": {"status": {}, "scale": {"specReplicasPath": _SCALAR, "statusReplicasPath": _SCALAR,
                                                     "labelSelectorPath": _SCALAR}},
            "additionalPrinterColumns": [{"name": _SCALAR, "type": _SCALAR, "format": _SCALAR,
                                          "description": _SCALAR, "priority": _SCALAR, "jsonPath": _SCALAR}],
        }],
        "conversion": {"strategy": _SCALAR, "webhook": {
            "clientConfig": {"url": _SCALAR, "service": _SERVICE_REFERENCE, "caBundle": _SCALAR},
            "conversionReviewVersions": _ANY}},
    },
    "status": {
        "conditions": [{"type": _SCALAR, "status": _SCALAR, "lastTransitionTime": _SCALAR, "reason": _SCALAR,
                        "message": _SCALAR}],
        "acceptedNames": _NAMES, "storedVersions": _ANY,
    },
}


def unknown_fields(obj, fields=None, path=""):
    """Removes (in place) and returns the paths of fields the CRD type does not have."""
    found = []
    _walk(obj, CRD_FIELDS if fields is None else fields, path, found)
    return found


def _join(path, key):
    return "%s.%s" % (path, key) if path else key


def _walk(value, shape, path, found):
    if shape in (_ANY, _SCALAR, _STRING_LIST):
        return
    if shape == _SCHEMA:
        _walk(value, _SCHEMA_FIELDS, path, found)
        return
    if shape == _SCHEMA_OR_BOOL:
        if isinstance(value, dict):
            _walk(value, _SCHEMA_FIELDS, path, found)
        return
    if shape == _SCHEMA_OR_ARRAY:
        if isinstance(value, list):
            for i, item in enumerate(value):
                _walk(item, _SCHEMA_FIELDS, "%s[%d]" % (path, i), found)
        elif isinstance(value, dict):
            _walk(value, _SCHEMA_FIELDS, path, found)
        return
    if shape == _SCHEMA_MAP:
        if isinstance(value, dict):
            for key, item in value.items():
                _walk(item, _SCHEMA_FIELDS, _join(path, key), found)
        return
    if shape == _SCHEMA_LIST:
        if isinstance(value, list):
            for i, item in enumerate(value):
                _walk(item, _SCHEMA_FIELDS, "%s[%d]" % (path, i), found)
        return
    if isinstance(shape, list):
        if isinstance(value, list):
            for i, item in enumerate(value):
                _walk(item, shape[0], "%s[%d]" % (path, i), found)
        return
    if isinstance(shape, dict) and isinstance(value, dict):
        for key in list(value.keys()):
            if key not in shape:
                found.append(_join(path, key))
                del value[key]
            else:
                _walk(value[key], shape[key], _join(path, key), found)


# ---------------------------------------------------------------------------------------------- omitempty

# JSONSchemaProps fields whose zero value Go drops (omitempty on a non-pointer: bools, strings, slices, maps).
_OMIT_FALSE = ("exclusiveMaximum", "exclusiveMinimum", "uniqueItems", "nullable", "x-kubernetes-embedded-resource",
               "x-kubernetes-int-or-string")
_OMIT_EMPTY_STRING = ("id", "$schema", "description", "type", "format", "title", "pattern")
_OMIT_EMPTY_LIST = ("enum", "required", "allOf", "oneOf", "anyOf", "x-kubernetes-list-map-keys",
                    "x-kubernetes-validations")
_OMIT_EMPTY_MAP = ("properties", "patternProperties", "definitions", "dependencies")
# Pointers and JSON values: only an explicit null is dropped.
_OMIT_NULL = ("default", "example", "maximum", "minimum", "maxLength", "minLength", "maxItems", "minItems",
              "multipleOf", "maxProperties", "minProperties", "items", "not", "additionalProperties",
              "additionalItems", "externalDocs", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type",
              "x-kubernetes-map-type", "$ref")


def normalize_schema(schema):
    """Drops (in place) what Go's omitempty would not serialize, recursively."""
    if not isinstance(schema, dict):
        return schema
    for key in list(schema.keys()):
        value = schema[key]
        if key in _OMIT_FALSE and value is False:
            del schema[key]
        elif key in _OMIT_EMPTY_STRING and value == "":
            del schema[key]
        elif key in _OMIT_EMPTY_LIST and (value is None or value == []):
            del schema[key]
        elif key in _OMIT_EMPTY_MAP and (value is None or value == {}):
            del schema[key]
        elif key in _OMIT_NULL and value is None:
            del schema[key]
    for key in ("properties", "patternProperties", "definitions"):
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                normalize_schema(sub)
    for key in ("allOf", "oneOf", "anyOf"):
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                normalize_schema(sub)
    for key in ("items", "not", "additionalProperties", "additionalItems"):
        value = schema.get(key)
        if isinstance(value, dict):
            normalize_schema(value)
        elif isinstance(value, list):
            for sub in value:
                normalize_schema(sub)
    return schema


# ---------------------------------------------------------------------------------------------- Go's %#v


def _go_bool(value):
    return "true" if value else "false"


class GoVersion:
    """One version as the API server's messages print it (internal CustomResourceDefinitionVersion)."""

    def __init__(self, version, shared):
        self.version = version
        self.shared = shared

    def go_repr(self):
        v = self.version

        def pointer(key, type_name):
            if self.shared.get(key) or v.get(key) is None:
                return "(*apiextensions.%s)(nil)" % type_name
            return "(*apiextensions.%s)(0xc000000000)" % type_name

        warning = v.get("deprecationWarning")
        warning_text = "(*string)(nil)" if warning is None else "(*string)(0xc000000000)"
        columns = v.get("additionalPrinterColumns")
        if self.shared.get("additionalPrinterColumns") or not columns:
            columns_text = "[]apiextensions.CustomResourceColumnDefinition(nil)"
        else:
            columns_text = "[]apiextensions.CustomResourceColumnDefinition{%s}" % ", ".join(
                "apiextensions.CustomResourceColumnDefinition{Name:%s, Type:%s, Format:%s, Description:%s, "
                "Priority:%d, JSONPath:%s}" % (errors.go_quote(str(c.get("name", ""))),
                                               errors.go_quote(str(c.get("type", ""))),
                                               errors.go_quote(str(c.get("format", ""))),
                                               errors.go_quote(str(c.get("description", ""))),
                                               int(c.get("priority") or 0),
                                               errors.go_quote(str(c.get("jsonPath", ""))))
                for c in columns if isinstance(c, dict))
        return ("apiextensions.CustomResourceDefinitionVersion{Name:%s, Served:%s, Storage:%s, Deprecated:%s, "
                "DeprecationWarning:%s, Schema:%s, Subresources:%s, AdditionalPrinterColumns:%s}"
                % (errors.go_quote(str(v.get("name", ""))), _go_bool(v.get("served")), _go_bool(v.get("storage")),
                   _go_bool(v.get("deprecated")), warning_text, pointer("schema", "CustomResourceValidation"),
                   pointer("subresources", "CustomResourceSubresources"), columns_text))


class GoVersions:
    def __init__(self, versions, shared):
        self.versions = versions
        self.shared = shared

    def go_repr(self):
        return "[]apiextensions.CustomResourceDefinitionVersion{%s}" % ", ".join(
            GoVersion(v, self.shared).go_repr() for v in self.versions)
