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
_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
# Errors after which CEL rules are not evaluated (the object is too broken for rules to be meaningful).
_BLOCKING = {errors.REQUIRED, errors.TYPE_INVALID, errors.TOO_LONG, errors.TOO_MANY}


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_strings(v):
    return isinstance(v, list) and all(isinstance(i, str) for i in v)


# Keyword -> (check of its value, what it must be); a CRD schema breaking these is rejected.
_KEYWORD_TYPES = {
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
    __slots__ = ("program", "message", "message_program", "text")

    def __init__(self, program, message, message_program, text):
        self.program = program
        self.message = message
        self.message_program = message_program
        self.text = text


class StructuralSchema:
    """A compiled CRD version schema."""

    def __init__(self, openapi, error_path="spec.validation.openAPIV3Schema"):
        if not isinstance(openapi, dict):
            raise SchemaError([errors.required(error_path, "schemas are required")])
        self.root = openapi
        self._rules = {}
        problems = []
        self._compile(openapi, error_path, problems, root=True)
        if problems:
            raise SchemaError(problems)

    # ------------------------------------------------------------------------------------ compilation

    def _compile(self, node, path, problems, root=False):
        if not isinstance(node, dict):
            problems.append(errors.invalid(path, node, "must be a schema object"))
            return
        bad = [errors.invalid("%s.%s" % (path, key), node[key], "must be %s" % what)
               for key, (check, what) in _KEYWORD_TYPES.items() if key in node and not check(node[key])]
        if bad:
            problems.extend(bad)
            return
        typ = node.get("type")
        if typ is not None and typ not in _TYPES:
            problems.append(errors.not_supported(path + ".type", typ, sorted(_TYPES)))
        if root and typ not in (None, "object"):
            problems.append(errors.invalid(path + ".type", typ, "must be object at the root"))
        special = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        if typ is None and not root and not special and not any(k in node for k in ("allOf", "anyOf", "oneOf",
                                                                                    "not")):
            problems.append(errors.required(path + ".type", "must not be empty for specified object fields"))
        if "pattern" in node:
            try:
                re.compile(node["pattern"])
            except re.error as exc:
                problems.append(errors.invalid(path + ".pattern", node["pattern"], "invalid regex: %s" % exc))
        for name, sub in (node.get("properties") or {}).items():
            self._compile(sub, _schema_path(path, name), problems)
        if isinstance(node.get("additionalProperties"), dict):
            self._compile(node["additionalProperties"], path + ".additionalProperties", problems)
        if typ == "array":
            if not isinstance(node.get("items"), dict):
                problems.append(errors.required(path + ".items", "must be specified for arrays"))
            else:
                self._compile(node["items"], path + ".items", problems)
        if node.get("x-kubernetes-list-type") == "map" and not node.get("x-kubernetes-list-map-keys"):
            problems.append(errors.required(path + ".x-kubernetes-list-map-keys",
                                            "must not be empty if x-kubernetes-list-type is map"))
        rules = node.get("x-kubernetes-validations")
        if rules is not None:
            if not isinstance(rules, list):
                problems.append(errors.invalid(path + ".x-kubernetes-validations", rules, "must be a list"))
                return
            compiled = []
            for i, rule in enumerate(rules):
                rule_path = "%s.x-kubernetes-validations[%d]" % (path, i)
                if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
                    problems.append(errors.required(rule_path + ".rule", "must be a string"))
                    continue
                unknown = set(rule) - {"rule", "message", "messageExpression", "reason", "fieldPath"}
                if unknown:
                    problems.append(errors.invalid(rule_path, sorted(unknown)[0],
                                                   "unsupported field in validation rule"))
                    continue
                try:
                    program = cel.compile_rule(rule["rule"], node)
                except cel.CelCompileError as exc:
                    problems.append(errors.invalid(rule_path + ".rule", rule["rule"],
                                                   "compilation failed: %s" % exc))
                    continue
                message_program = None
                if "messageExpression" in rule:
                    try:
                        message_program = cel.compile_expression(rule["messageExpression"], node, "string")
                    except cel.CelCompileError as exc:
                        problems.append(errors.invalid(rule_path + ".messageExpression", rule["messageExpression"],
                                                       "messageExpression compilation failed: %s" % exc))
                        continue
                compiled.append(_Rule(program, rule.get("message"), message_program, rule["rule"]))
            if compiled:
                self._rules[id(node)] = compiled
        for key in ("allOf", "anyOf", "oneOf"):
            for i, sub in enumerate(node.get(key) or []):
                if isinstance(sub, dict) and "x-kubernetes-validations" in sub:
                    problems.append(errors.forbidden("%s.%s[%d].x-kubernetes-validations" % (path, key, i),
                                                     "must be empty inside %s" % key))

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
        """All schema and rule violations of a (pruned, defaulted) object, as FieldErrors."""
        problems = []
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        root = dict(self.root)
        props = {k: v for k, v in (root.get("properties") or {}).items() if k not in ("apiVersion", "kind",
                                                                                      "metadata")}
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

    def _type_error(self, value, want, path, problems):
        got = _json_type(value)
        problems.append(errors.type_invalid(path or "<nil>", got, "%s in body must be of type %s: %s"
                                            % (path or "body", want, errors.go_quote(got))))

    def _validate(self, value, schema, path, problems):
        if not isinstance(schema, dict):
            return
        typ = schema.get("type")
        if value is None:
            if schema.get("nullable"):
                return
            if typ:
                self._type_error(value, typ, path, problems)
            return
        if schema.get("x-kubernetes-int-or-string"):
            if not (isinstance(value, str) or _is_int(value)):
                self._type_error(value, "integer,string", path, problems)
                return
        elif typ and not _type_matches(value, typ):
            self._type_error(value, typ, path, problems)
            return
        where = path or "body"
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
        if schema.get("anyOf"):
            if not any(not self._errors_of(value, sub, path) for sub in schema["anyOf"]):
                problems.append(errors.invalid(path, value, "%s in body must validate at least one schema (anyOf)"
                                               % where))
        if schema.get("oneOf"):
            passing = sum(1 for sub in schema["oneOf"] if not self._errors_of(value, sub, path))
            if passing != 1:
                problems.append(errors.invalid(path, value, "%s in body must validate one and only one schema "
                                                            "(oneOf)" % where))
        if isinstance(schema.get("not"), dict) and not self._errors_of(value, schema["not"], path):
            problems.append(errors.invalid(path, value, "%s in body must not validate the schema (not)" % where))

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
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
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
                                               "%s evaluating rule: %s" % (exc, rule.text)))
                continue
            if not result:
                problems.append(errors.invalid(path or "<nil>", _schema_type_name(schema),
                                               self._rule_message(rule, typed, typed_old)))
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

    @staticmethod
    def _rule_message(rule, typed, typed_old):
        if rule.message_program is not None:
            try:
                text = rule.message_program.evaluate(typed, typed_old)
                if isinstance(text, str) and text.strip():
                    return text
            except cel.CelError:
                pass
        return rule.message or "failed rule: %s" % rule.text


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_matches(value, typ):
    if typ == "integer":
        return _is_int(value)
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
