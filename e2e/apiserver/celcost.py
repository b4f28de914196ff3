"""Estimated cost of CRD validation rules, as the API server budgets them when a CRD is written.

Kubernetes refuses a rule whose estimated worst-case cost (cel-go's static estimator over sizes derived from
the schema: maxLength, maxItems, maxProperties, else what a 3 MiB request could hold) times the number of
times the rule can run (its node's cardinality) exceeds 10^7, and a schema whose rules together exceed 10^8.
`estimate(program, schema)` follows cel-go's cost model (checker/cost.go) and Kubernetes' size rules
(apiextensions-apiserver's schema/cel model) closely: identifiers and field selections cost 1, calls 1 plus
their arguments, string traversals 0.1 per byte, regex matches string x pattern, comprehensions their range
size times the cost of a step. Where a function's cost is not modelled exactly the estimate errs high (a rule
near the limit may be refused here that a real server takes; every rule the recordings show is judged alike).
Functions are pure; nothing here has state.
"""

import math

MAX_REQUEST_SIZE_BYTES = 3 * 1024 * 1024
PER_RULE_COST_LIMIT = 10 * 1000 * 1000        # apiextensions validation StaticEstimatedCostLimit
TOTAL_COST_LIMIT = 100 * 1000 * 1000          # StaticEstimatedCRDCostLimit
UNBOUNDED = None
_MAX = 2 ** 64 - 1
_STRING_TRAVERSAL = 0.1
_REGEX_LENGTH = 0.25
_LIST_BASE = 10
_MAP_BASE = 30
# Fixed JSON sizes of formatted strings (apiserver/pkg/cel: JSONDateSize, MaxDatetimeSizeJSON, ...).
_FORMAT_SIZES = {"date": 12, "date-time": 37, "duration": 22}


def _mul(a, b):
    return _MAX if a and b and a > _MAX // b else a * b


def _add(*values):
    return min(_MAX, sum(values))


def _factor(size, factor):
    return _MAX if size >= _MAX else int(math.ceil(size * factor))


# ------------------------------------------------------------------------------------------ sizes


def min_serialized_size(schema):
    """The smallest JSON a value of `schema` can be (apiextensions' estimateMinSizeJSON)."""
    if not isinstance(schema, dict):
        return 1
    typ = schema.get("type")
    if typ == "boolean":
        return 4
    if typ in ("number", "integer"):
        return 1
    if typ == "string":
        return 2
    if typ == "array":
        return 2
    if typ == "object":
        size = 2
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            prop = props.get(name)
            if isinstance(prop, dict) and "default" not in prop:
                size += len(name) + min_serialized_size(prop) + 4
        return size
    return 1


def max_items(schema):
    """The most items a list of `schema` can hold in one request."""
    if isinstance(schema.get("maxItems"), int):
        return schema["maxItems"]
    return (MAX_REQUEST_SIZE_BYTES - 2) // (min_serialized_size(schema.get("items")) + 1)


def max_properties(schema):
    """The most entries a map (additionalProperties) of `schema` can hold in one request."""
    if isinstance(schema.get("maxProperties"), int):
        return schema["maxProperties"]
    addl = schema.get("additionalProperties")
    return (MAX_REQUEST_SIZE_BYTES - 2) // (min_serialized_size(addl if isinstance(addl, dict) else None) + 6)


def value_size(schema):
    """The largest size (bytes of a string, items of a list, entries of a map) a value of `schema` has."""
    if not isinstance(schema, dict):
        return _MAX
    if schema.get("x-kubernetes-int-or-string"):
        return MAX_REQUEST_SIZE_BYTES - 2
    typ = schema.get("type")
    if typ == "string":
        if isinstance(schema.get("maxLength"), int):
            # maxLength counts code points; a code point is up to 4 bytes.
            return schema["maxLength"] * 4
        return _FORMAT_SIZES.get(schema.get("format"), MAX_REQUEST_SIZE_BYTES - 2)
    if typ == "array":
        return max_items(schema)
    if typ == "object":
        if schema.get("properties") is not None:
            return len(schema["properties"])
        if isinstance(schema.get("additionalProperties"), dict):
            return max_properties(schema)
        return _MAX
    if typ in ("integer", "number", "boolean"):
        return 1
    return _MAX


def cardinality_of_items(parent, schema):
    """How often a list's items (or a map's values) can occur, given the parent's cardinality (None: unbounded)."""
    if parent is UNBOUNDED:
        return UNBOUNDED
    if schema.get("type") == "array":
        limit = schema.get("maxItems")
    else:
        limit = schema.get("maxProperties")
    if not isinstance(limit, int):
        return UNBOUNDED
    return _mul(parent, limit)


def unbounded_cardinality(schema):
    """Kubernetes' worst case for a node under an unbounded list or map: as many as fit into a request."""
    return MAX_REQUEST_SIZE_BYTES // (min_serialized_size(schema) + 1)


# ------------------------------------------------------------------------------------------ estimator

class _Value:
    """The static facts the estimator keeps per expression: the schema when known, else a max size."""

    __slots__ = ("schema", "size")

    def __init__(self, schema=None, size=_MAX):
        self.schema = schema
        self.size = size


def _schema_value(schema):
    return _Value(schema, value_size(schema))


def _child_schema(schema, field):
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties") or {}
    if field in props:
        return props[field]
    addl = schema.get("additionalProperties")
    return addl if isinstance(addl, dict) else None


def _element_schema(schema):
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "array":
        return schema.get("items")
    addl = schema.get("additionalProperties")
    return addl if isinstance(addl, dict) else None


class _Estimator:
    def __init__(self, self_schema):
        self.self_schema = self_schema

    def cost(self, node, scope):
        """(max cost, _Value) of an AST node (see cel.py for the node shapes)."""
        kind = node[0]
        if kind == "lit":
            value = node[1]
            size = len(value) if isinstance(value, (str, list)) else 1
            return 0, _Value(None, size)
        if kind == "ident":
            if node[1] in scope:
                return 1, scope[node[1]]
            if node[1] in ("self", "oldSelf"):
                return 1, _schema_value(self.self_schema)
            return 1, _Value()
        if kind in ("select", "has"):
            cost, base = self.cost(node[1], scope)
            child = _child_schema(base.schema, node[2])
            if kind == "has":
                return _add(cost, 1), _Value(None, 1)
            return _add(cost, 1), _schema_value(child) if child is not None else _Value()
        if kind == "index":
            base_cost, base = self.cost(node[1], scope)
            index_cost, _ = self.cost(node[2], scope)
            element = _element_schema(base.schema)
            return _add(base_cost, index_cost, 1), _schema_value(element) if element is not None else _Value()
        if kind == "list":
            costs = [self.cost(item, scope)[0] for item in node[1]]
            return _add(_LIST_BASE, *costs), _Value(None, len(node[1]))
        if kind == "map":
            costs = [self.cost(k, scope)[0] + self.cost(v, scope)[0] for k, v in node[1]]
            return _add(_MAP_BASE, *costs), _Value(None, len(node[1]))
        if kind in ("not", "neg"):
            cost, _ = self.cost(node[1], scope)
            return _add(cost, 1), _Value(None, 1)
        if kind in ("and", "or"):
            left, _ = self.cost(node[1], scope)
            right, _ = self.cost(node[2], scope)
            return _add(left, right), _Value(None, 1)
        if kind == "cond":
            cond, _ = self.cost(node[1], scope)
            then_cost, then_value = self.cost(node[2], scope)
            else_cost, else_value = self.cost(node[3], scope)
            return _add(cond, max(then_cost, else_cost)), _Value(None, max(then_value.size, else_value.size))
        if kind == "binary":
            return self.binary(node, scope)
        if kind == "macro":
            return self.comprehension(node, scope)
        if kind == "call":
            return self.call(node, scope)
        return _MAX, _Value()

    def binary(self, node, scope):
        op = node[1]
        left_cost, left = self.cost(node[2], scope)
        right_cost, right = self.cost(node[3], scope)
        args = _add(left_cost, right_cost)
        if op in ("==", "!=", "<", "<=", ">", ">="):
            smallest = min(left.size, right.size)
            return _add(max(1, _factor(smallest, _STRING_TRAVERSAL)), args), _Value(None, 1)
        if op == "in":
            return _add(right.size, args), _Value(None, 1)
        if op == "+":
            size = _add(left.size, right.size)
            if left.size > 1 or right.size > 1:
                return _add(max(1, _factor(size, _STRING_TRAVERSAL)), args), _Value(None, size)
            return _add(1, args), _Value(None, 1)
        return _add(1, args), _Value(None, 1)

    def comprehension(self, node, scope):
        name, target, var, rest = node[1], node[2], node[3], node[4]
        range_cost, collection = self.cost(target, scope)
        count = collection.size
        element = _element_schema(collection.schema) if collection.schema is not None else None
        if isinstance(collection.schema, dict) and collection.schema.get("type") == "object":
            element = {"type": "string"}  # iterating a map yields its keys
        inner = dict(scope)
        inner[var] = _schema_value(element) if element is not None else _Value()
        step_costs = [self.cost(expr, inner)[0] for expr in rest]
        result_size = 1
        if name == "all":          # step: __result__ && p; condition: @not_strictly_false(__result__)
            per_item, init, result = _add(1, step_costs[0], 2), 0, 1
        elif name == "exists":     # step: __result__ || p; condition: @not_strictly_false(!__result__)
            per_item, init, result = _add(1, step_costs[0], 3), 0, 1
        elif name == "exists_one":  # step: p ? __result__ + 1 : __result__; result: __result__ == 1
            per_item, init, result = _add(step_costs[0], 2), 0, 2
        else:                      # map/filter: step appends [x] to the accumulated list
            append = _add(1, _LIST_BASE, max(1, _factor(_add(count, 1), _STRING_TRAVERSAL)))
            per_item, init, result = _add(append, *step_costs), _LIST_BASE, 1
            result_size = count
        return _add(range_cost, init, result, _mul(count, per_item)), _Value(None, result_size)

    def call(self, node, scope):
        name, target, arg_nodes = node[1], node[2], node[3]
        target_cost, receiver = (0, None) if target is None else self.cost(target, scope)
        evaluated = [self.cost(arg, scope) for arg in arg_nodes]
        args = _add(target_cost, *(c for c, _ in evaluated))
        values = [v for _, v in evaluated]
        subject = receiver if receiver is not None else (values[0] if values else _Value(None, 1))
        if name in ("startsWith", "endsWith") and values:
            return _add(_factor(values[0].size, _STRING_TRAVERSAL), args), _Value(None, 1)
        if name == "contains" and values:
            scan = _mul(max(1, _factor(subject.size, _STRING_TRAVERSAL)),
                        max(1, _factor(values[0].size, _STRING_TRAVERSAL)))
            return _add(scan, args), _Value(None, 1)
        if name == "matches":
            text, pattern = (receiver, values[0]) if receiver is not None else (values[0], values[1])
            scan = _mul(_factor(text.size, _STRING_TRAVERSAL), _factor(pattern.size, _REGEX_LENGTH))
            return _add(scan, args), _Value(None, 1)
        if name in ("lowerAscii", "upperAscii", "trim", "replace", "substring", "split", "join"):
            size = subject.size
            if name == "replace" and len(values) >= 2:
                size = _mul(size, max(1, values[1].size))
            return _add(max(1, _factor(size, _STRING_TRAVERSAL)), args), _Value(None, size)
        if name in ("indexOf", "lastIndexOf"):
            return _add(max(1, _factor(subject.size, _STRING_TRAVERSAL if receiver is not None and
                                       receiver.schema is not None and receiver.schema.get("type") == "string"
                                       else 1.0)), args), _Value(None, 1)
        if name in ("isSorted", "sum", "min", "max"):
            return _add(max(1, subject.size), args), _Value(None, 1)
        if name == "string" and values and values[0].size > 1:
            return _add(max(1, _factor(values[0].size, _STRING_TRAVERSAL)), args), _Value(None, values[0].size)
        if name == "dyn" and values:
            return _add(1, args), values[0]
        return _add(1, args), _Value(None, 1)


def estimate(program, schema):
    """The estimated worst-case cost of one evaluation of a compiled rule over a value of `schema`."""
    cost, _ = _Estimator(schema).cost(program.ast, {})
    return cost


def expression_cost(cost, cardinality, schema):
    """A rule's cost times how often it can run (Kubernetes' getExpressionCost)."""
    if cardinality is UNBOUNDED:
        cardinality = unbounded_cardinality(schema)
    return _mul(cost, cardinality)


def exceeded_message(name, cost, limit):
    """Kubernetes' getCostErrorMessage."""
    factor = float(cost) / float(limit)
    if factor > 100.0:
        text = "more than 100x"
    elif factor < 1.5:
        text = "%fx" % factor
    else:
        text = "%.1fx" % factor
    return ("%s exceeds budget by factor of %s (try simplifying the rule, or adding maxItems, maxProperties, and "
            "maxLength where arrays, maps, and strings are declared)" % (name, text))
