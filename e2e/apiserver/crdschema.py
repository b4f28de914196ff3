"""What a v1.26 API server checks in a CRD version's openAPIV3Schema before it accepts the CRD.

Mirrors apiextensions-apiserver's validation of a CustomResourceDefinition (ValidateCustomResourceDefinition-
OpenAPISchema, the structural schema rules and ValidateDefaults), with its messages and field paths:
- unsupported keywords ($ref, id, definitions, uniqueItems, ...), properties together with additionalProperties,
  invalid patterns (RE2 syntax), list and map types (map keys required or defaulted, set items atomic);
- structural rules: every field has a type (the root is an object), arrays have items, value validations
  (allOf/anyOf/oneOf/not) carry no types, defaults, descriptions or extensions, and the root `metadata` may
  only restrict name and generateName (a description, labels or rules there are refused);
- CEL rules compile (cel-go's messages, with the source line and a caret), return a bool, and fit the cost
  budget (celcost: per rule and for the whole schema);
- only when the schema is structural: every default is valid against its own schema and CEL rules exactly as
  written (nested defaults are not applied first) and has no fields pruning would drop.
`version_schema_problems(schema, path)` returns field errors; it is pure and thread-safe.
"""

import re

from . import cel, celcost, errors
from .schema import KEYWORD_TYPES, SchemaError, StructuralSchema

_TYPES = ("array", "boolean", "integer", "number", "object", "string")
_METADATA_ALLOWED = ("name", "generateName")
_VALUE_VALIDATIONS = ("allOf", "anyOf", "oneOf", "not")


class ValidationRule:
    """A rule as the error messages print it: Go's %#v of apiextensions.ValidationRule (v1.26: Rule, Message)."""

    def __init__(self, rule):
        self.rule = rule

    def go_repr(self):
        return "apiextensions.ValidationRule{Rule:%s, Message:%s}" % (
            errors.go_quote(str(self.rule.get("rule", ""))), errors.go_quote(str(self.rule.get("message") or "")))


def _key(path, name):
    return "%s.properties[%s]" % (path, name)


# --------------------------------------------------------------------------------------------- regexps


def go_regexp_error(pattern):
    """The error Go's regexp.Compile (RE2 syntax) gives for `pattern`, or None when it compiles."""
    for construct in ("(?=", "(?!", "(?<=", "(?<!", "(?P=", "(?#"):
        at = pattern.find(construct)
        if at >= 0:
            return "error parsing regexp: invalid or unsupported Perl syntax: `%s`" % construct
    backref = re.search(r"\\[1-9]", pattern)
    if backref:
        return "error parsing regexp: invalid escape sequence: `%s`" % backref.group(0)
    try:
        re.compile(pattern)
        return None
    except re.error as exc:
        message, pos = exc.msg, exc.pos or 0
    if message.startswith("unterminated character set"):
        start = pattern.rfind("[", 0, pos + 1)
        return "error parsing regexp: missing closing ]: `%s`" % pattern[max(start, 0):]
    if message.startswith("missing ), unterminated subpattern"):
        return "error parsing regexp: missing closing ): `%s`" % pattern
    if message.startswith("unbalanced parenthesis"):
        return "error parsing regexp: unexpected ): `%s`" % pattern
    if message.startswith("nothing to repeat"):
        return "error parsing regexp: missing argument to repetition operator: `%s`" % pattern[pos:pos + 1]
    if message.startswith("multiple repeat"):
        return "error parsing regexp: invalid nested repetition operator: `%s`" % pattern[max(pos - 1, 0):pos + 1]
    if message.startswith("bad escape"):
        return "error parsing regexp: invalid escape sequence: `%s`" % pattern[pos:pos + 2]
    if message.startswith("bad character range"):
        return "error parsing regexp: invalid character class range: `%s`" % message.split("range ", 1)[-1]
    return "error parsing regexp: %s: `%s`" % (message, pattern)


# --------------------------------------------------------------------------------------------- the walk


class _Context:
    """Where a schema node is: its error path, its cardinality, and what the rules above it allow."""

    def __init__(self, path, cardinality=1, root=False, in_metadata=False):
        self.path = path
        self.cardinality = cardinality
        self.root = root
        self.in_metadata = in_metadata


class _Result:
    def __init__(self):
        self.schema_errors = []
        self.cel_errors = []
        self.costs = []  # (cost, rule path)
        self.unconvertible = False  # something no structural schema can be built from ($ref, malformed, ...)

    def merge(self, other):
        self.schema_errors += other.schema_errors
        self.cel_errors += other.cel_errors
        self.costs += other.costs
        self.unconvertible = self.unconvertible or other.unconvertible


def _keyword_problems(node, path):
    return [errors.invalid("%s.%s" % (path, key), node[key], "must be %s" % what)
            for key, (check, what) in KEYWORD_TYPES.items() if key in node and not check(node[key])]


def _openapi(node, ctx):
    """ValidateCustomResourceDefinitionOpenAPISchema: keyword rules, recursion, rules and their cost."""
    out = _Result()
    path = ctx.path
    if not isinstance(node, dict):
        out.schema_errors.append(errors.invalid(path, node, "must be a schema object"))
        out.unconvertible = True
        return out
    bad = _keyword_problems(node, path)
    if bad:
        out.schema_errors += bad
        out.unconvertible = True
        return out
    typ = node.get("type")
    if typ is not None and typ not in _TYPES:
        out.schema_errors.append(errors.not_supported(path + ".type", typ, list(_TYPES)))
    for key, what in (("id", "id is not supported"), ("additionalItems", "additionalItems is not supported"),
                      ("patternProperties", "patternProperties is not supported"),
                      ("definitions", "definitions is not supported"),
                      ("dependencies", "dependencies is not supported"), ("$ref", "$ref is not supported")):
        if node.get(key) not in (None, "", {}, []):
            out.schema_errors.append(errors.forbidden("%s.%s" % (path, key), what))
            out.unconvertible = True
    if isinstance(node.get("items"), list):
        out.schema_errors.append(errors.forbidden(path + ".items", "items must be a schema object and not an array"))
        out.unconvertible = True
    if node.get("uniqueItems") is True:
        out.schema_errors.append(errors.forbidden(path + ".uniqueItems", "uniqueItems cannot be set to true since "
                                                                         "the runtime complexity becomes quadratic"))
    if isinstance(node.get("pattern"), str):
        problem = go_regexp_error(node["pattern"])
        if problem:
            out.schema_errors.append(errors.invalid(path + ".pattern", node["pattern"],
                                                    "must be a valid regular expression, but isn't: " + problem))
    addl = node.get("additionalProperties")
    if addl is not None:
        if node.get("properties") and (addl is not True):
            out.schema_errors.append(errors.forbidden(path + ".additionalProperties",
                                                      "additionalProperties and properties are mutual exclusive"))
        if isinstance(addl, dict):
            out.merge(_openapi(addl, _Context(path + ".additionalProperties",
                                              celcost.cardinality_of_items(ctx.cardinality, node),
                                              in_metadata=ctx.in_metadata)))
    for name, sub in (node.get("properties") or {}).items():
        meta = (ctx.root or node.get("x-kubernetes-embedded-resource")) and name == "metadata"
        out.merge(_openapi(sub, _Context(_key(path, name), ctx.cardinality, in_metadata=meta or ctx.in_metadata)))
    if isinstance(node.get("not"), dict):
        out.merge(_openapi(node["not"], _Context(path + ".not", ctx.cardinality)))
    for key in ("allOf", "oneOf", "anyOf"):
        for i, sub in enumerate(node.get(key) or []):
            out.merge(_openapi(sub, _Context("%s.%s[%d]" % (path, key, i), ctx.cardinality)))
    items = node.get("items")
    if isinstance(items, dict):
        out.merge(_openapi(items, _Context(path + ".items", celcost.cardinality_of_items(ctx.cardinality, node))))
    if node.get("x-kubernetes-preserve-unknown-fields") is False:
        out.schema_errors.append(errors.invalid(path + ".x-kubernetes-preserve-unknown-fields", False,
                                                "must be true or undefined"))
    map_type = node.get("x-kubernetes-map-type")
    if map_type is not None and typ != "object":
        message = "must be object if x-kubernetes-map-type is specified"
        out.schema_errors.append(errors.required(path + ".type", message) if not typ
                                 else errors.invalid(path + ".type", typ, message))
    list_type = node.get("x-kubernetes-list-type")
    if list_type is not None and typ != "array":
        message = "must be array if x-kubernetes-list-type is specified"
        out.schema_errors.append(errors.required(path + ".type", message) if not typ
                                 else errors.invalid(path + ".type", typ, message))
    elif list_type == "set" and isinstance(items, dict):
        if items.get("type") == "array" and items.get("x-kubernetes-list-type") not in (None, "atomic"):
            out.schema_errors.append(errors.invalid(path + ".items.x-kubernetes-list-type",
                                                    items.get("x-kubernetes-list-type"),
                                                    "must be atomic as item of a list with x-kubernetes-list-type=set"))
        if items.get("type") == "object" and items.get("x-kubernetes-map-type") != "atomic":
            out.schema_errors.append(errors.invalid(path + ".items.x-kubernetes-map-type",
                                                    items.get("x-kubernetes-list-type"),
                                                    "must be atomic as item of a list with x-kubernetes-list-type=set"))
    keys = node.get("x-kubernetes-list-map-keys") or []
    if list_type == "map":
        out.schema_errors += _list_map_problems(node, path, keys)
    elif keys:
        out.schema_errors.append(errors.forbidden(path + ".x-kubernetes-list-map-keys",
                                                  "must only be set if x-kubernetes-list-type is map"))
    rules = node.get("x-kubernetes-validations")
    if rules:
        out.merge(_rules(node, rules, ctx, checked=not out.schema_errors))
    return out


def _list_map_problems(node, path, keys):
    problems = []
    items = node.get("items")
    if not keys:
        problems.append(errors.required(path + ".x-kubernetes-list-map-keys",
                                        "must not be empty if x-kubernetes-list-type is map"))
    if items is None:
        problems.append(errors.required(path + ".items", "must have a schema if x-kubernetes-list-type is map"))
        return problems
    if not isinstance(items, dict) or _keyword_problems(items, path + ".items"):
        return problems  # the items' own check reports what is malformed there
    if items.get("type") != "object":
        problems.append(errors.invalid(path + ".items.type", items.get("type"),
                                       "must be object if parent array's x-kubernetes-list-type is map"))
        return problems
    props = items.get("properties") or {}
    required = set(items.get("required") or [])
    seen = set()
    for key in keys:
        prop = props.get(key)
        if prop is None:
            problems.append(errors.invalid(path + ".x-kubernetes-list-map-keys", keys,
                                           "entries must all be names of item properties"))
        else:
            if isinstance(prop, dict) and prop.get("type") in ("array", "object"):
                problems.append(errors.invalid("%s.items.properties[%s].type" % (path, key), items.get("type"),
                                               "must be a scalar type if parent array's x-kubernetes-list-type "
                                               "is map"))
            if isinstance(prop, dict) and "default" not in prop and key not in required:
                problems.append(errors.required("%s.items.properties[%s].default" % (path, key),
                                                "this property is in x-kubernetes-list-map-keys, so it must have "
                                                "a default or be a required property"))
        if key in seen:
            problems.append(errors.invalid(path + ".x-kubernetes-list-map-keys", keys,
                                           "must not contain duplicate entries"))
        seen.add(key)
    return problems


def _rules(node, rules, ctx, checked):
    out = _Result()
    path = ctx.path + ".x-kubernetes-validations"
    for i, rule in enumerate(rules):
        rule_path = "%s[%d]" % (path, i)
        if not isinstance(rule, dict):
            out.schema_errors.append(errors.invalid(rule_path, rule, "must be an object"))
            continue
        text = rule.get("rule")
        message = rule.get("message")
        if not isinstance(text, str) or not text.strip():
            out.schema_errors.append(errors.required(rule_path + ".rule", "rule is not specified"))
        elif message is not None and not isinstance(message, str):
            out.schema_errors.append(errors.invalid(rule_path + ".message", message, "must be a string"))
        elif message and not message.strip():
            out.schema_errors.append(errors.invalid(rule_path + ".message", message,
                                                    "message must be non-empty if specified"))
        elif message and ("\n" in message or "\r" in message):
            out.schema_errors.append(errors.invalid(rule_path + ".message", message,
                                                    "message must not contain line breaks"))
        elif ("\n" in text.strip() or "\r" in text.strip()) and not message:
            out.schema_errors.append(errors.required(rule_path + ".message",
                                                     "message must be specified if rule contains line breaks"))
    if out.schema_errors or not checked:
        return out
    for i, rule in enumerate(rules):
        rule_path = "%s[%d].rule" % (path, i)
        try:
            program = cel.compile_rule(rule["rule"], node)
        except cel.CelCompileError as exc:
            out.cel_errors.append(errors.invalid(rule_path, ValidationRule(rule), exc.detail()))
            continue
        cost = celcost.expression_cost(celcost.estimate(program, node), ctx.cardinality, node)
        if cost > celcost.PER_RULE_COST_LIMIT:
            out.cel_errors.append(errors.forbidden(rule_path, celcost.exceeded_message(
                "estimated rule cost", cost, celcost.PER_RULE_COST_LIMIT)))
        out.costs.append((cost, rule_path))
    return out


# --------------------------------------------------------------------------------------------- structural


def _structural(node, path, level):
    """ValidateStructural: types everywhere, items for arrays, nothing generic inside value validations,
    and object metadata restricted to name and generateName. level: "root", "field" or "metadata"."""
    problems = []
    if not isinstance(node, dict):
        return problems
    typ = node.get("type")
    special = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    if level == "root":
        if not typ:
            problems.append(errors.required(path + ".type", "must not be empty at the root"))
        elif typ != "object":
            problems.append(errors.invalid(path + ".type", typ, "must be object at the root"))
    elif not typ and not special:
        problems.append(errors.required(path + ".type", "must not be empty for specified object fields"))
    if typ == "array" and node.get("items") is None:
        problems.append(errors.required(path + ".items", "must be specified"))
    for key in _VALUE_VALIDATIONS:
        subs = node.get(key)
        if key == "not":
            subs = [subs] if isinstance(subs, dict) else []
        for i, sub in enumerate(subs or []):
            sub_path = "%s.not" % path if key == "not" else "%s.%s[%d]" % (path, key, i)
            if key == "anyOf" and _int_or_string_pattern(node):
                continue
            problems += _nested_value_validation(sub, sub_path)
    props = node.get("properties") or {}
    for name, sub in props.items():
        sub_path = _key(path, name)
        if name == "metadata" and (level == "root" or node.get("x-kubernetes-embedded-resource")):
            problems += _metadata(sub, sub_path)
        else:
            problems += _structural(sub, sub_path, "field")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _structural(node["additionalProperties"], path + ".additionalProperties", "field")
    if isinstance(node.get("items"), dict):
        problems += _structural(node["items"], path + ".items", "field")
    return problems


def _int_or_string_pattern(node):
    alternatives = node.get("anyOf") or []
    return bool(node.get("x-kubernetes-int-or-string")) and all(
        isinstance(a, dict) and set(a) <= {"type"} and a.get("type") in ("integer", "string") for a in alternatives)


def _nested_value_validation(node, path):
    problems = []
    if not isinstance(node, dict):
        return problems
    for key, message in (("type", "must be empty to be structural"), ("title", "must be empty to be structural"),
                         ("description", "must be empty to be structural"),
                         ("x-kubernetes-list-map-keys", "must be empty to be structural"),
                         ("x-kubernetes-validations", "must be empty to be structural")):
        if node.get(key):
            problems.append(errors.forbidden("%s.%s" % (path, key), message))
    if "default" in node:
        problems.append(errors.forbidden(path + ".default", "must be undefined to be structural"))
    for key in ("nullable", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
                "x-kubernetes-int-or-string"):
        if node.get(key):
            problems.append(errors.forbidden("%s.%s" % (path, key), "must be false to be structural"))
    for key in ("x-kubernetes-list-type", "x-kubernetes-map-type"):
        if key in node:
            problems.append(errors.forbidden("%s.%s" % (path, key), "must be undefined to be structural"))
    if "metadata" in (node.get("properties") or {}):
        problems.append(errors.forbidden(_key(path, "metadata"), "must not be specified in a nested context"))
    for key in _VALUE_VALIDATIONS:
        subs = node.get(key)
        if key == "not":
            subs = [subs] if isinstance(subs, dict) else []
        for i, sub in enumerate(subs or []):
            problems += _nested_value_validation(sub, "%s.not" % path if key == "not" else
                                                 "%s.%s[%d]" % (path, key, i))
    for name, sub in (node.get("properties") or {}).items():
        problems += _nested_value_validation(sub, _key(path, name))
    if isinstance(node.get("items"), dict):
        problems += _nested_value_validation(node["items"], path + ".items")
    return problems


def _metadata(node, path):
    """The root (or an embedded resource's) metadata schema may only be `type: object` restricting name and
    generateName (strings); anything else is refused as a real server refuses it."""
    problems = []
    if not isinstance(node, dict):
        return [errors.invalid(path, node, "must be a schema object")]
    if node.get("type") != "object":
        problems.append(errors.invalid(path + ".type", node.get("type"), "must be object"))
    rest = {k: v for k, v in node.items() if k not in ("type", "properties")}
    props = node.get("properties") or {}
    extra_props = [name for name in props if name not in _METADATA_ALLOWED]
    if rest or extra_props:
        problems.append(errors.forbidden(path, "must not specify anything other than name and generateName, but "
                                               "metadata is implicitly specified"))
    for name in _METADATA_ALLOWED:
        sub = props.get(name)
        if isinstance(sub, dict) and sub.get("type") != "string":
            problems.append(errors.invalid("%s.properties[%s].type" % (path, name), sub.get("type"),
                                           "must be string"))
    return problems


# --------------------------------------------------------------------------------------------- defaults


def _defaults(node, path, root=False):
    """ValidateDefaults: each default against its own schema and rules as written, and fully pruned."""
    problems = []
    if not isinstance(node, dict):
        return problems
    if "default" in node and node["default"] is not None and not root:
        problems += _default_problems(node, path + ".default")
    for name, sub in (node.get("properties") or {}).items():
        if root and name == "metadata":
            continue
        problems += _defaults(sub, _key(path, name))
    if isinstance(node.get("additionalProperties"), dict):
        problems += _defaults(node["additionalProperties"], path + ".additionalProperties")
    if isinstance(node.get("items"), dict):
        problems += _defaults(node["items"], path + ".items")
    return problems


def _rebase(problem, base):
    field = problem.field
    if field in ("", "<nil>"):
        problem.field = base
    else:
        problem.field = base + "." + field
    return problem


def _default_problems(node, path):
    value = node["default"]
    try:
        schema = StructuralSchema(node, path, compile_rules=False)
    except SchemaError as exc:
        return exc.field_errors
    found = schema.validate_value(value)
    if found:
        return [_rebase(p, path) for p in found]
    problems = []
    try:
        rules_schema = StructuralSchema(node, path)
    except SchemaError:
        rules_schema = None
    if rules_schema is not None:
        rule_problems = []
        rules_schema.validate_value_rules(value, value, rule_problems)
        problems += [_rebase(p, path) for p in rule_problems]
    pruned = schema.pruned_copy(value)
    if pruned != value:
        problems.append(errors.invalid(path, value, "must not have unknown fields"))
    return problems


# --------------------------------------------------------------------------------------------- entry point


def version_schema_problems(openapi, path):
    """All problems a v1.26 server reports for one CRD version schema at `path` (…openAPIV3Schema)."""
    if not isinstance(openapi, dict):
        return [errors.invalid(path, openapi, "must be a schema object")]
    result = _openapi(openapi, _Context(path, 1, root=True))
    problems = result.schema_errors + result.cel_errors
    total = sum(cost for cost, _ in result.costs)
    if total > celcost.TOTAL_COST_LIMIT:
        # The four most expensive rules are named, leaving out those below 1% of the limit.
        expensive = [c for c in result.costs if c[0] >= celcost.TOTAL_COST_LIMIT // 100]
        for cost, rule_path in sorted(expensive, key=lambda c: -c[0])[:4]:
            problems.append(errors.forbidden(rule_path, "contributed to estimated rule cost total exceeding cost "
                                                        "limit for entire OpenAPIv3 schema"))
        problems.append(errors.forbidden(path, celcost.exceeded_message(
            "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema", total,
            celcost.TOTAL_COST_LIMIT)))
    if result.unconvertible:
        return problems  # as the API server, which hides what it cannot build a structural schema from
    structural = _structural(openapi, path, "root")
    if structural:
        return problems + structural
    return problems + _defaults(openapi, path, root=True)
