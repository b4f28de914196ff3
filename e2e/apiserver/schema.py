"""Structural OpenAPI v3 schemas of custom resources: pruning, defaulting, validation and CEL rules.

`StructuralSchema(openapi)` compiles every `x-kubernetes-validations` rule up front (raising SchemaError with
field errors when a rule or the schema is unusable, so CRD creation fails loudly). The instance methods are
pure transformations of JSON values; a compiled schema is immutable and shared between request threads.
Error texts follow the API server's (go-openapi messages wrapped in field errors).
"""

import re

from . import cel, errors
from .util import deepcopy, parse_time

_OBJECT_META_FIELDS = {"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                       "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
                       "annotations", "ownerReferences", "finalizers", "managedFields"}
# Errors after which CEL rules are not evaluated (the object is too broken for rules to be meaningful).
_BLOCKING = {errors.REQUIRED, errors.TYPE_INVALID, errors.TOO_LONG, errors.TOO_MANY}


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_strings(v):
    return isinstance(v, list) and all(isinstance(i, str) for i in v)


# Keyword -> (check of its value, what it must be); a CRD schema breaking these is rejected.
KEYWORD_TYPES = {
    "type": (lambda v: isinstance(v, str), "a string"),
    "properties": (lambda v: isinstance(v, dict), "an object of schemas"),
    "additionalProperties": (lambda v: isinstance(v, (bool, dict)), "a boolean or a schema"),
    "items": (lambda v: isinstance(v, dict), "a schema"),
    "required": (_is_strings, "a list of strings"),
    "enum": (lambda v: isinstance(v, list), "a list"),
    "minimum": (_is_num, "a number"), "maximum": (_is_num, "a number"), "multipleOf": (_is_num, "a number"),
    "exclusiveMinimum": (lambda v: isinstance(v, bool), "a boolean"),
    "exclusiveMaximum": (lambda v: isinstance(v, bool), "a boolean"),
    "minLength": (_is_count, "a non-negative integer"), "maxLength": (_is_count, "a non-negative integer"),
    "minItems": (_is_count, "a non-negative integer"), "maxItems": (_is_count, "a non-negative integer"),
    "minProperties": (_is_count, "a non-negative integer"), "maxProperties": (_is_count, "a non-negative integer"),
    "pattern": (lambda v: isinstance(v, str), "a string"), "format": (lambda v: isinstance(v, str), "a string"),
    "nullable": (lambda v: isinstance(v, bool), "a boolean"),
    "x-kubernetes-validations": (lambda v: isinstance(v, list), "a list of rules"),
    "x-kubernetes-list-type": (lambda v: v in ("atomic", "set", "map"), "one of atomic, set, map"),
    "x-kubernetes-list-map-keys": (_is_strings, "a list of strings"),
    "x-kubernetes-map-type": (lambda v: v in ("atomic", "granular"), "atomic or granular"),
    "x-kubernetes-preserve-unknown-fields": (lambda v: isinstance(v, bool), "a boolean"),
    "x-kubernetes-int-or-string": (lambda v: isinstance(v, bool), "a boolean"),
    "x-kubernetes-embedded-resource": (lambda v: isinstance(v, bool), "a boolean"),
    "allOf": (lambda v: isinstance(v, list), "a list of schemas"),
    "anyOf": (lambda v: isinstance(v, list), "a list of schemas"),
    "oneOf": (lambda v: isinstance(v, list), "a list of schemas"),
    "not": (lambda v: isinstance(v, dict), "a schema"),
}


class SchemaError(Exception):
    def __init__(self, field_errors):
        super().__init__(errors.aggregate(field_errors))
        self.field_errors = field_errors


def _child(path, name):
    return "%s.%s" % (path, name) if path else name


def _index(path, i):
    return "%s[%d]" % (path, i)


def _schema_path(path, name):
    return "%s.properties[%s]" % (path, name)


class _Rule:
    __slots__ = ("program", "message", "text")

    def __init__(self, program, message, text):
        self.program = program
        self.message = message.strip() if isinstance(message, str) else message
        self.text = text.strip()

    def error_string(self):
        """Kubernetes' ruleErrorString: the message when there is one, else the rule."""
        return self.message or self.text

    def failure_message(self):
        """Kubernetes' ruleMessageOrDefault."""
        return self.message or "failed rule: %s" % self.text


class StructuralSchema:
    """A compiled schema (a CRD version's, or any node of one): prunes, defaults and validates values and runs
    its CEL rules. Whether a CRD's schema is acceptable at all is crdschema's business; this class only refuses
    what it cannot work with (malformed keywords, rules that do not compile)."""

    def __init__(self, openapi, error_path="spec.validation.openAPIV3Schema", compile_rules=True):
        if not isinstance(openapi, dict):
            raise SchemaError([errors.required(error_path, "schemas are required")])
        self.root = openapi
        self._rules = {}
        problems = []
        self._compile(openapi, error_path, problems, compile_rules)
        if problems:
            raise SchemaError(problems)

    # ------------------------------------------------------------------------------------ compilation

    def _compile(self, node, path, problems, compile_rules):
        if not isinstance(node, dict):
            problems.append(errors.invalid(path, node, "must be a schema object"))
            return
        bad = [errors.invalid("%s.%s" % (path, key), node[key], "must be %s" % what)
               for key, (check, what) in KEYWORD_TYPES.items() if key in node and not check(node[key])]
        if bad:
            problems.extend(bad)
            return
        for name, sub in (node.get("properties") or {}).items():
            self._compile(sub, _schema_path(path, name), problems, compile_rules)
        if isinstance(node.get("additionalProperties"), dict):
            self._compile(node["additionalProperties"], path + ".additionalProperties", problems, compile_rules)
        if isinstance(node.get("items"), dict):
            self._compile(node["items"], path + ".items", problems, compile_rules)
        rules = node.get("x-kubernetes-validations")
        if rules is None or not compile_rules:
            return
        compiled = []
        for i, rule in enumerate(rules):
            rule_path = "%s.x-kubernetes-validations[%d]" % (path, i)
            if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
                problems.append(errors.required(rule_path + ".rule", "rule is not specified"))
                continue
            try:
                program = cel.compile_rule(rule["rule"], node)
            except cel.CelCompileError as exc:
                problems.append(errors.invalid(rule_path + ".rule", rule["rule"], exc.detail()))
                continue
            compiled.append(_Rule(program, rule.get("message"), rule["rule"]))
        if compiled:
            self._rules[id(node)] = compiled

    # ------------------------------------------------------------------------------------ pruning

    def prune(self, obj):
        """Drops fields the schema does not declare (in place); returns their paths."""
        dropped = []
        for key in list(obj.keys()):
            if key in ("apiVersion", "kind"):
                continue
            if key == "metadata":
                meta = obj[key]
                if isinstance(meta, dict):
                    for mk in list(meta.keys()):
                        if mk not in _OBJECT_META_FIELDS:
                            dropped.append("metadata." + mk)
                            del meta[mk]
                continue
            self._prune_field(obj, key, self.root, "", dropped)
        return dropped

    def _prune_field(self, parent, key, schema, path, dropped):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        child_path = _child(path, key)
        if props is not None and key in props:
            self._prune_value(parent[key], props[key], child_path, dropped)
        elif isinstance(addl, dict):
            self._prune_value(parent[key], addl, child_path, dropped)
        elif addl is True or schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        else:
            dropped.append(child_path)
            del parent[key]

    def _prune_value(self, value, schema, path, dropped):
        if not isinstance(schema, dict):
            return
        if isinstance(value, dict):
            if schema.get("x-kubernetes-embedded-resource"):
                for key in list(value.keys()):
                    if key in ("apiVersion", "kind", "metadata"):
                        continue
                    self._prune_field(value, key, schema, path, dropped)
                return
            if schema.get("properties") is None and schema.get("additionalProperties") is None:
                if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("type") != "object":
                    return
            for key in list(value.keys()):
                self._prune_field(value, key, schema, path, dropped)
        elif isinstance(value, list):
            items = schema.get("items")
            if isinstance(items, dict):
                for i, item in enumerate(value):
                    self._prune_value(item, items, _index(path, i), dropped)

    # ------------------------------------------------------------------------------------ defaulting

    def default(self, obj):
        """Applies `default`s and removes nulls from non-nullable fields (in place)."""
        self._default(obj, self.root, top=True)

    def _default(self, value, schema, top=False):
        if not isinstance(schema, dict):
            return
        if isinstance(value, dict):
            props = schema.get("properties") or {}
            for key in list(value.keys()):
                if top and key in ("apiVersion", "kind", "metadata"):
                    continue
                sub = props.get(key)
                if sub is None and isinstance(schema.get("additionalProperties"), dict):
                    sub = schema["additionalProperties"]
                if value[key] is None and isinstance(sub, dict) and not sub.get("nullable"):
                    del value[key]
            for key, sub in props.items():
                if top and key in ("apiVersion", "kind", "metadata"):
                    continue
                if key not in value and isinstance(sub, dict) and "default" in sub:
                    value[key] = deepcopy(sub["default"])
            for key, item in value.items():
                if top and key in ("apiVersion", "kind", "metadata"):
                    continue
                sub = props.get(key)
                if sub is None and isinstance(schema.get("additionalProperties"), dict):
                    sub = schema["additionalProperties"]
                self._default(item, sub)
        elif isinstance(value, list):
            items = schema.get("items")
            if isinstance(items, dict):
                for i, item in enumerate(value):
                    if item is None and not items.get("nullable") and "default" in items:
                        value[i] = deepcopy(items["default"])
                    self._default(value[i], items)

    # ------------------------------------------------------------------------------------ validation

    def validate(self, obj, old=None):
        """All schema and rule violations of a (pruned, defaulted) object, as FieldErrors. Of the metadata,
        only name and generateName are validated, against what the root metadata schema says of them."""
        problems = []
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        root = dict(self.root)
        props = {k: v for k, v in (root.get("properties") or {}).items() if k not in ("apiVersion", "kind",
                                                                                      "metadata")}
        meta_schema = (root.get("properties") or {}).get("metadata")
        meta_props = (meta_schema.get("properties") or {}) if isinstance(meta_schema, dict) else {}
        restricted = {k: v for k, v in meta_props.items() if k in ("name", "generateName")}
        if restricted:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            body["metadata"] = {k: meta[k] for k in restricted if k in meta}
            props["metadata"] = {"type": "object", "properties": restricted}
        root["properties"] = props
        root["required"] = [r for r in root.get("required") or [] if r not in ("apiVersion", "kind", "metadata")]
        self._validate(body, root, "", problems)
        return problems

    def validate_rules(self, obj, old, problems):
        """Evaluates x-kubernetes-validations unless earlier problems make that meaningless."""
        if any(p.type in _BLOCKING for p in problems):
            problems.append(errors.invalid("<nil>", None, "some validation rules were not checked because the "
                                                          "object was invalid; correct the existing errors to "
                                                          "complete validation"))
            return problems
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        old_body = None if old is None else {k: v for k, v in old.items() if k not in ("apiVersion", "kind")}
        self._rules_walk(body, old_body, self.root, "", problems)
        return problems

    def validate_value(self, value):
        """Problems of a value against this schema with paths relative to it (the root named "", as the API
        server names a default it validates): `spec.x` style fields, "" for the value itself."""
        problems = []
        self._validate(value, self.root, "", problems, root="")
        return problems

    def validate_value_rules(self, value, old, problems):
        """Runs this schema's CEL rules (and those nested in it) over a value; fields relative to it."""
        self._rules_walk(value, old, self.root, "", problems)
        return problems

    def pruned_copy(self, value):
        """The value with every field this schema does not declare removed."""
        out = deepcopy(value)
        self._prune_value(out, self.root, "", [])
        return out

    def typing_error(self, obj):
        """What structured-merge-diff says when it types `obj` with this schema (server-side apply and
        managedFields): a field the schema does not declare or a value of the wrong kind, as
        `.spec.workers.foo: field not declared in schema`; None when the object types."""
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        return _typing_error(body, self.root, "", top=True)

    def _type_error(self, value, want, path, problems, root="body"):
        got = _json_type(value)
        problems.append(errors.type_invalid(path or "<nil>", got, "%s in body must be of type %s: %s"
                                            % (path or root, want, errors.go_quote(got))))

    def _validate(self, value, schema, path, problems, root="body"):
        if not isinstance(schema, dict):
            return
        typ = schema.get("type")
        if value is None:
            if schema.get("nullable"):
                return
            if typ:
                self._type_error(value, typ, path, problems, root)
            return
        if schema.get("x-kubernetes-int-or-string"):
            if not (isinstance(value, str) or _is_int(value)):
                # go-openapi checks the type, then still tries the alternatives (integer, string).
                self._type_error(value, "integer,string", path, problems, root)
                if schema.get("anyOf"):
                    self._any_of(value, schema["anyOf"], path, problems)
                return
        elif typ and not _type_matches(value, typ):
            self._type_error(value, typ, path, problems, root)
            return
        where = path or root
        if "enum" in schema and isinstance(schema["enum"], list):
            if not any(_json_equal(value, e) for e in schema["enum"]):
                problems.append(errors.not_supported(path, value, schema["enum"]))
        if _is_number(value):
            self._validate_number(value, schema, path, where, problems)
        if isinstance(value, str):
            self._validate_string(value, schema, path, where, problems)
        if isinstance(value, list):
            self._validate_array(value, schema, path, where, problems)
        if isinstance(value, dict):
            self._validate_object(value, schema, path, where, problems)
        for i, sub in enumerate(schema.get("allOf") or []):
            self._validate(value, sub, path, problems)
        if schema.get("anyOf") and not schema.get("x-kubernetes-int-or-string"):
            self._any_of(value, schema["anyOf"], path, problems)
        if schema.get("oneOf"):
            results = [self._errors_of(value, sub, path) for sub in schema["oneOf"]]
            passing = sum(1 for found in results if not found)
            if passing != 1:
                problems.append(_composite("%s must validate one and only one schema (oneOf)" % errors.go_quote(path)))
            if passing == 0:
                problems.extend(results[0])
        if isinstance(schema.get("not"), dict) and not self._errors_of(value, schema["not"], path):
            problems.append(_composite("%s must not validate the schema (not)" % errors.go_quote(path)))

    def _any_of(self, value, alternatives, path, problems):
        """go-openapi's anyOf: when none passes, a composite error and the first alternative's errors."""
        results = [self._errors_of(value, sub, path) for sub in alternatives]
        if any(not found for found in results):
            return
        problems.append(_composite("%s must validate at least one schema (anyOf)" % errors.go_quote(path)))
        problems.extend(results[0])

    def _errors_of(self, value, schema, path):
        found = []
        self._validate(value, schema, path, found)
        return found

    def _validate_number(self, value, schema, path, where, problems):
        if "minimum" in schema:
            low = schema["minimum"]
            if schema.get("exclusiveMinimum") is True and value <= low:
                problems.append(errors.invalid(path, value, "%s in body should be greater than %s"
                                               % (where, errors.go_number(low))))
            elif value < low:
                problems.append(errors.invalid(path, value, "%s in body should be greater than or equal to %s"
                                               % (where, errors.go_number(low))))
        if "maximum" in schema:
            high = schema["maximum"]
            if schema.get("exclusiveMaximum") is True and value >= high:
                problems.append(errors.invalid(path, value, "%s in body should be less than %s"
                                               % (where, errors.go_number(high))))
            elif value > high:
                problems.append(errors.invalid(path, value, "%s in body should be less than or equal to %s"
                                               % (where, errors.go_number(high))))
        if "multipleOf" in schema and schema["multipleOf"]:
            ratio = value / schema["multipleOf"]
            if abs(ratio - round(ratio)) > 1e-9:
                problems.append(errors.invalid(path, value, "%s in body should be a multiple of %s"
                                               % (where, errors.go_number(schema["multipleOf"]))))
        fmt = schema.get("format")
        if fmt == "int32" and _is_int(value) and not -2 ** 31 <= value < 2 ** 31:
            problems.append(errors.invalid(path, value, "%s in body should be a valid int32" % where))

    def _validate_string(self, value, schema, path, where, problems):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(errors.too_long(path, schema["maxLength"]))
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(errors.invalid(path, value, "%s in body should be at least %d chars long"
                                           % (where, schema["minLength"])))
        if "pattern" in schema and not _pattern_matches(schema["pattern"], value):
            problems.append(errors.invalid(path, value, "%s in body should match '%s'" % (where, schema["pattern"])))
        fmt = schema.get("format")
        if fmt == "date-time" and parse_time(value) is None:
            problems.append(errors.type_invalid(path, value, "%s in body must be of type date-time: %s"
                                                % (where, errors.go_quote(value))))
        elif fmt == "date" and not re.match(r"^\d{4}-\d{2}-\d{2}$", value):
            problems.append(errors.type_invalid(path, value, "%s in body must be of type date: %s"
                                                % (where, errors.go_quote(value))))

    def _validate_array(self, value, schema, path, where, problems):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(errors.too_many(path, len(value), schema["maxItems"]))
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(errors.invalid(path, len(value), "%s in body should have at least %d items"
                                           % (where, schema["minItems"])))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                self._validate(item, items, _index(path, i), problems)
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            seen = []
            for i, item in enumerate(value):
                if any(_json_equal(item, s) for s in seen):
                    problems.append(errors.duplicate(_index(path, i), item))
                seen.append(item)
        elif list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = set()
            for i, item in enumerate(value):
                if not isinstance(item, dict):
                    continue
                key = tuple(repr(item.get(k)) for k in keys)
                if key in seen:
                    problems.append(errors.duplicate(_index(path, i), {k: item.get(k) for k in keys}))
                seen.add(key)

    def _validate_object(self, value, schema, path, where, problems):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                problems.append(errors.required(_child(path, name)))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            problems.append(errors.too_many(path, len(value), schema["maxProperties"]))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            problems.append(errors.invalid(path, len(value), "%s in body should have at least %d properties"
                                           % (where, schema["minProperties"])))
        addl = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key)
            if sub is None and isinstance(addl, dict):
                sub = addl
            if sub is not None:
                self._validate(item, sub, _child(path, key), problems)

    # ------------------------------------------------------------------------------------ CEL rules

    def _rules_walk(self, value, old, schema, path, problems):
        if not isinstance(schema, dict) or value is None:
            return
        for rule in self._rules.get(id(schema), ()):
            if rule.program.uses_old_self and old is None:
                continue
            typed = cel.typed_value(value, schema)
            typed_old = cel.typed_value(old, schema) if old is not None else None
            try:
                result = rule.program.evaluate(typed, typed_old)
                if result is not True and result is not False:
                    raise cel.CelError("rule did not evaluate to a bool")
            except cel.CelError as exc:
                problems.append(errors.invalid(path or "<nil>", _schema_type_name(schema),
                                               "%s evaluating rule: %s" % (exc, rule.error_string())))
                continue
            if not result:
                problems.append(errors.invalid(path or "<nil>", _schema_type_name(schema), rule.failure_message()))
        if isinstance(value, dict):
            props = schema.get("properties") or {}
            addl = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) \
                else None
            for key, item in value.items():
                sub = props.get(key, addl)
                if sub is None or (not path and key in ("apiVersion", "kind", "metadata")):
                    continue
                old_item = old.get(key) if isinstance(old, dict) else None
                self._rules_walk(item, old_item, sub, _child(path, key), problems)
        elif isinstance(value, list):
            items = schema.get("items")
            if not isinstance(items, dict):
                return
            old_by_key = {}
            keys = schema.get("x-kubernetes-list-map-keys") or []
            if schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
                for o in old:
                    if isinstance(o, dict):
                        old_by_key[tuple(repr(o.get(k)) for k in keys)] = o
            for i, item in enumerate(value):
                old_item = None
                if old_by_key and isinstance(item, dict):
                    old_item = old_by_key.get(tuple(repr(item.get(k)) for k in keys))
                self._rules_walk(item, old_item, items, _index(path, i), problems)



def _typing_error(value, schema, path, top=False):
    if value is None or not isinstance(schema, dict):
        return None
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return None
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, (dict, list)):
            return "%s: expected scalar, got %s" % (path, "map" if isinstance(value, dict) else "list")
        return None
    typ = schema.get("type")
    if typ in ("integer", "number"):
        if not _is_number(value):
            return "%s: expected numeric (int or float), got %s" % (path, errors.go_type(value))
        return None
    if typ == "string":
        if not isinstance(value, str):
            return "%s: expected string, got %s" % (path, errors.go_plain(value))
        return None
    if typ == "boolean":
        if not isinstance(value, bool):
            return "%s: expected boolean, got %s" % (path, errors.go_plain(value))
        return None
    if typ == "array":
        if not isinstance(value, list):
            return "%s: expected list, got %s" % (path, errors.go_plain(value))
        for i, item in enumerate(value):
            found = _typing_error(item, schema.get("items"), "%s[%d]" % (path, i))
            if found:
                return found
        return None
    if typ == "object" or top:
        if not isinstance(value, dict):
            return "%s: expected map, got %s" % (path, errors.go_plain(value))
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for key, item in value.items():
            child = "%s.%s" % (path, key)
            if key in props:
                found = _typing_error(item, props[key], child)
            elif isinstance(addl, dict):
                found = _typing_error(item, addl, child)
            elif addl is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                found = None
            else:
                found = "%s: field not declared in schema" % child
            if found:
                return found
    return None


def _composite(message):
    """A go-openapi CompositeError as the API server reports it: no field (the validated root), no value."""
    return errors.invalid("<nil>", "", message)


_PATTERNS = {}


def _pattern_matches(pattern, value):
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        try:
            compiled = re.compile(pattern)
        except re.error:
            compiled = False
        _PATTERNS[pattern] = compiled
    return compiled is False or compiled.search(value) is not None


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_json_integer(value):
    """go-openapi's integer check: a JSON integer, or a float with an integral value (2.0)."""
    return _is_int(value) or (isinstance(value, float) and value.is_integer())


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_matches(value, typ):
    if typ == "integer":
        return _is_json_integer(value)
    if typ == "number":
        return _is_number(value)
    if typ == "string":
        return isinstance(value, str)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "array":
        return isinstance(value, list)
    if typ == "object":
        return isinstance(value, dict)
    return True


def _json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if _is_int(value):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _schema_type_name(schema):
    return schema.get("type") or ("integer,string" if schema.get("x-kubernetes-int-or-string") else "object")


def _json_equal(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b
