"""Merge-relevant type information: which maps are granular, which lists are keyed, sets or atomic.

Server-side apply, managedFields and strategic merge patch all need to know, for every field, whether a list
is merged by key (containers by name), treated as a set (finalizers) or replaced whole (args), and whether a
map is a struct (declared fields) or a free-form map (labels). `TypeNode` carries exactly that. Built-in kinds
describe their interesting fields with the constructors below; anything not described is deduced from the
value (objects are open structs, lists are atomic), which is what Kubernetes does for untyped fields.
Nodes are immutable after construction and shared freely between threads.
"""

SCALAR = "scalar"
STRUCT = "struct"
MAP = "map"
LIST = "list"


class TypeNode:
    __slots__ = ("kind", "fields", "elem", "list_type", "keys", "atomic", "open")

    def __init__(self, kind, fields=None, elem=None, list_type=None, keys=None, atomic=False, open_=True):
        self.kind = kind
        self.fields = fields or {}
        self.elem = elem
        self.list_type = list_type
        self.keys = keys or []
        self.atomic = atomic
        self.open = open_

    def child(self, key):
        """(type of the child at `key`, whether the key is a declared struct field)."""
        if self.kind == STRUCT:
            node = self.fields.get(key)
            if node is not None:
                return node, True
            return DEDUCED, self.open
        if self.kind == MAP:
            return (self.elem or DEDUCED), False
        return DEDUCED, True

    def item(self):
        return self.elem or DEDUCED

    def is_leaf_for(self, value):
        """Whether a value of this type is compared and owned as a whole."""
        if self.atomic or self.kind == SCALAR:
            return True
        if self is DEDUCED:
            return not isinstance(value, dict)
        if self.kind == LIST:
            return self.list_type == "atomic" or not isinstance(value, list)
        return not isinstance(value, dict)


# A node for values without type information: objects are open structs, lists atomic.
DEDUCED = TypeNode(STRUCT)


def struct(**fields):
    return TypeNode(STRUCT, fields=fields)


def smap(elem=None):
    return TypeNode(MAP, elem=elem)


def atomic_map():
    return TypeNode(MAP, atomic=True)


def atomic_struct():
    return TypeNode(STRUCT, atomic=True)


def keyed_list(keys, item=None):
    return TypeNode(LIST, elem=item or DEDUCED, list_type="map", keys=list(keys))


def set_list():
    return TypeNode(LIST, elem=TypeNode(SCALAR), list_type="set")


def atomic_list():
    return TypeNode(LIST, list_type="atomic")


SCALAR_NODE = TypeNode(SCALAR)

OBJECT_META = struct(
    labels=smap(),
    annotations=smap(),
    finalizers=set_list(),
    ownerReferences=keyed_list(["uid"], atomic_struct()),
)


def from_openapi(schema):
    """Builds a TypeNode from a structural OpenAPI v3 schema (a CRD version's openAPIV3Schema)."""
    if not isinstance(schema, dict):
        return DEDUCED
    typ = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        return SCALAR_NODE
    if typ == "object" or (typ is None and ("properties" in schema or "additionalProperties" in schema)):
        atomic = schema.get("x-kubernetes-map-type") == "atomic"
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        if props:
            fields = {name: from_openapi(sub) for name, sub in props.items()}
            if schema.get("x-kubernetes-embedded-resource"):
                fields.setdefault("metadata", OBJECT_META)
            return TypeNode(STRUCT, fields=fields, atomic=atomic,
                            open_=bool(schema.get("x-kubernetes-preserve-unknown-fields")))
        if isinstance(addl, dict):
            return TypeNode(MAP, elem=from_openapi(addl), atomic=atomic)
        return TypeNode(STRUCT, atomic=atomic)
    if typ == "array":
        list_type = schema.get("x-kubernetes-list-type", "atomic")
        item = from_openapi(schema.get("items") or {})
        if list_type == "map":
            return TypeNode(LIST, elem=item, list_type="map", keys=list(schema.get("x-kubernetes-list-map-keys") or []))
        if list_type == "set":
            return TypeNode(LIST, elem=SCALAR_NODE, list_type="set")
        return TypeNode(LIST, elem=item, list_type="atomic")
    if typ is None and schema.get("x-kubernetes-preserve-unknown-fields"):
        return DEDUCED
    return SCALAR_NODE


def custom_resource_root(openapi_schema):
    node = from_openapi(openapi_schema or {})
    fields = dict(node.fields) if node.kind == STRUCT else {}
    fields["metadata"] = OBJECT_META
    return TypeNode(STRUCT, fields=fields, open_=True)
