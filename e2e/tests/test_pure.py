"""Unit tests of the API server's pure parts: CEL, selectors, patches, managed fields, schemas, quantities."""

import json

import pytest

from e2e import quantity
from e2e.apiserver import cel, crdschema, crdtypes, errors, managedfields as mf, patch, typeschema as ts
from e2e.apiserver.schema import SchemaError, StructuralSchema
from e2e.apiserver.selection import parse_field_selector, parse_label_selector
from e2e.conformance.replay import Comparator, Substitutions

SPEC = {"type": "object", "properties": {
    "minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}, "replicas": {"type": "integer"},
    "policy": {"type": "string"}, "names": {"type": "array", "items": {"type": "string"}},
    "fraction": {"type": "number"}, "sub": {"type": "object", "properties": {"x": {"type": "integer"}}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}


def run(rule, value, old=None):
    program = cel.compile_rule(rule, SPEC)
    return program.evaluate(cel.typed_value(value, SPEC), cel.typed_value(old, SPEC) if old else None)


# ----------------------------------------------------------------------------------------------- CEL


@pytest.mark.parametrize("rule,value,expected", [
    ("self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
     {"minReplicas": 1, "replicas": 2, "maxReplicas": 3}, True),
    ("self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
     {"minReplicas": 1, "replicas": 4, "maxReplicas": 3}, False),
    ("has(self.sub)", {}, False),
    ("!has(self.sub) || self.sub.x > 1", {}, True),
    ("!has(self.sub) || self.sub.x > 1", {"sub": {"x": 0}}, False),
    ("self.policy == 'LocalOnly' ? self.replicas == 0 : true", {"policy": "LocalOnly", "replicas": 1}, False),
    ("self.policy == 'LocalOnly' ? self.replicas == 0 : true", {"policy": "Hybrid", "replicas": 1}, True),
    ("size(self.names) <= 3", {"names": ["a", "b", "c", "d"]}, False),
    ("self.names.size() == 2", {"names": ["a", "b"]}, True),
    ("self.policy in ['Hybrid', 'RemoteOnly']", {"policy": "Hybrid"}, True),
    ("'a' in self.labels", {"labels": {"a": "1"}}, True),
    ("self.names.all(n, n.startsWith('w-'))", {"names": ["w-1", "w-2"]}, True),
    ("self.names.exists(n, n.endsWith('2'))", {"names": ["w-1", "w-2"]}, True),
    ("self.names.exists_one(n, n.contains('w'))", {"names": ["w-1", "w-2"]}, False),
    ("self.names.filter(n, n != 'a').size() == 1", {"names": ["a", "b"]}, True),
    ("self.names.map(n, n + '!')[0] == 'a!'", {"names": ["a"]}, True),
    ("self.fraction > 0.0 && self.fraction <= 1.0", {"fraction": 1}, True),
    ("self.replicas % 2 == 1 && self.replicas / 2 == 1", {"replicas": 3}, True),
    ("-self.replicas < 0", {"replicas": 3}, True),
    ("self.policy.matches('^[A-Z][a-z]+$')", {"policy": "Hybrid"}, True),
    ("string(self.replicas) + 'x' == '3x'", {"replicas": 3}, True),
    ("int('7') == 7 && double(1) == 1.0", {}, True),
    ("self.names.join(',') == 'a,b'", {"names": ["a", "b"]}, True),
    ("self.replicas > 1 || self.missing_ok", {"replicas": 2}, True),
])
def test_cel_evaluation(rule, value, expected):
    schema = dict(SPEC, **{"x-kubernetes-preserve-unknown-fields": True})
    program = cel.compile_rule(rule, schema)
    assert program.evaluate(cel.typed_value(value, schema)) is expected


def test_cel_errors_are_errors_not_false():
    with pytest.raises(cel.CelError, match="no such key: maxReplicas"):
        run("self.minReplicas <= self.maxReplicas", {"minReplicas": 1})
    with pytest.raises(cel.CelError, match="division by zero"):
        run("self.replicas / 0 == 1", {"replicas": 1})
    # An error on one side of || is forgiven when the other side is true (CEL's commutative logic).
    assert run("self.sub.x > 1 || true", {}) is True


def test_cel_transition_rules_see_old_self():
    program = cel.compile_rule("self.replicas >= oldSelf.replicas", SPEC)
    assert program.uses_old_self
    assert program.evaluate({"replicas": 2}, {"replicas": 1}) is True
    assert program.evaluate({"replicas": 0}, {"replicas": 1}) is False


@pytest.mark.parametrize("rule,fragment", [
    ("self.nope > 1", "undefined field 'nope'"),
    ("quantity(self.policy) > 1", "undeclared reference to 'quantity'"),
    ("x > 1", "undeclared reference to 'x'"),
    ("self.policy < 3", "no matching overload"),
    ("self.policy == 1", "no matching overload"),
    ("self.replicas", "must evaluate to a bool"),
    ("self.replicas +", "Syntax error"),
    ("self.replicas > 'a", "Syntax error: token recognition error at: ''a'"),
    ("b'bytes' == self.policy", "bytes literals are not supported"),
    ("self.names.all(1, true)", "argument must be a simple name"),
    ("has(self)", "invalid argument to has() macro"),
    ("self.replicas > 1 ; true", "token recognition error"),
])
def test_cel_compile_errors(rule, fragment):
    with pytest.raises(cel.CelCompileError) as exc:
        cel.compile_rule(rule, SPEC)
    assert fragment in str(exc.value)


# ------------------------------------------------------------------------------------------ selectors


def test_label_selector_grammar():
    sel = parse_label_selector("a=b, c!=d, e in (x, y), f notin (z), g, !h, n>3")
    assert sel.matches({"a": "b", "e": "y", "g": "", "n": "4"})
    assert not sel.matches({"a": "b", "e": "y", "g": "", "n": "4", "h": "1"})
    assert not sel.matches({"a": "b", "c": "d", "e": "y", "g": "", "n": "4"})
    assert sel.equality_pairs() == [("a", "b")]
    assert parse_label_selector("").matches({})
    for bad in ("a in (b", "=b", "a b", "a in b", "a>x", "Bad Key=1"):
        with pytest.raises(errors.ApiError) as exc:
            parse_label_selector(bad)
        assert exc.value.code == 400


def test_field_selector_grammar():
    sel = parse_field_selector("spec.nodeName=n1,metadata.name!=x", {"spec.nodeName", "metadata.name"},
                               lambda f: "unsupported " + f)

    def getter(obj, field):
        return obj.get(field)

    assert sel.matches({"spec.nodeName": "n1", "metadata.name": "y"}, getter)
    assert not sel.matches({"spec.nodeName": "n1", "metadata.name": "x"}, getter)
    assert sel.required_value("spec.nodeName") == "n1"
    with pytest.raises(errors.ApiError) as exc:
        parse_field_selector("spec.other=1", {"metadata.name"}, lambda f: "unsupported " + f)
    assert exc.value.message == "unsupported spec.other"


# --------------------------------------------------------------------------------------------- patches


def test_merge_and_json_patch():
    doc = {"spec": {"a": 1, "b": {"c": 2}}, "list": [1, 2]}
    assert patch.merge_patch(doc, {"spec": {"a": None, "b": {"d": 3}}, "list": [3]}) == \
        {"spec": {"b": {"c": 2, "d": 3}}, "list": [3]}
    ops = [{"op": "add", "path": "/list/-", "value": 9}, {"op": "move", "from": "/spec/a", "path": "/a"},
           {"op": "copy", "from": "/a", "path": "/b"}, {"op": "remove", "path": "/list/0"},
           {"op": "test", "path": "/b", "value": 1}]
    assert patch.json_patch(doc, ops) == {"spec": {"b": {"c": 2}}, "list": [2, 9], "a": 1, "b": 1}
    assert doc["list"] == [1, 2], "patches never modify their input"
    with pytest.raises(patch.PatchError):
        patch.json_patch(doc, [{"op": "test", "path": "/spec/a", "value": 2}])
    with pytest.raises(patch.PatchError):
        patch.json_patch(doc, [{"op": "remove", "path": "/nope"}])


def test_json_patch_test_of_a_missing_member_is_null():
    # As evanphx/json-patch (the real API server's library): a missing member of an existing object tests
    # equal to null, and only to null; a missing parent or an index out of range fails the test.
    doc = {"metadata": {"name": "a"}, "list": [1]}
    guarded = [{"op": "test", "path": "/metadata/finalizers", "value": None},
               {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}]
    assert patch.json_patch(doc, guarded)["metadata"]["finalizers"] == ["x"]
    assert patch.json_patch({"a": None}, [{"op": "test", "path": "/a", "value": None}]) == {"a": None}
    for failing in ({"op": "test", "path": "/metadata/finalizers", "value": []},
                    {"op": "test", "path": "/metadata/labels/x", "value": None},
                    {"op": "test", "path": "/list/3", "value": None},
                    {"op": "test", "path": "/metadata/name", "value": None}):
        with pytest.raises(patch.PatchError):
            patch.json_patch(doc, [failing])
    with pytest.raises(patch.MalformedPatch):
        patch.json_patch(doc, {"op": "add"})
    with pytest.raises(patch.MalformedPatch):
        patch.json_patch(doc, [{"op": "frobnicate", "path": "/a"}])
    with pytest.raises(patch.MalformedPatch):
        patch.json_patch(doc, [{"op": "add", "path": "no-slash", "value": 1}])


def test_strategic_merge_patch_directives():
    node = ts.struct(containers=ts.keyed_list(["name"]), finalizers=ts.set_list(), args=ts.atomic_list())
    doc = {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}], "finalizers": ["x"],
           "args": ["1", "2"], "keep": {"p": 1, "q": 2}}
    out = patch.strategic_merge_patch(doc, {
        "containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}, {"name": "a", "$patch": "delete"}],
        "finalizers": ["y"], "args": ["3"], "keep": {"$retainKeys": ["p"], "p": 5}}, node)
    assert out["containers"] == [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}]
    assert out["finalizers"] == ["x", "y"] and out["args"] == ["3"] and out["keep"] == {"p": 5}
    out = patch.strategic_merge_patch(doc, {"$deleteFromPrimitiveList/finalizers": ["x"],
                                            "keep": {"$patch": "replace", "z": 1}}, node)
    assert out["finalizers"] == [] and out["keep"] == {"z": 1}


# --------------------------------------------------------------------------------------- managed fields


POD_NODE = ts.struct(metadata=ts.OBJECT_META, spec=ts.struct(containers=ts.keyed_list(["name"], ts.struct(
    ports=ts.keyed_list(["containerPort", "protocol"]), args=ts.atomic_list()))))


def test_fields_v1_round_trip_and_markers():
    paths = {(("f", "spec"),), (("f", "spec"), ("f", "a")), (("f", "metadata"), ("f", "labels"), ("f", "x"))}
    encoded = mf.encode_fields(paths)
    assert encoded == {"f:metadata": {"f:labels": {"f:x": {}}}, "f:spec": {".": {}, "f:a": {}}}
    assert mf.decode_fields(encoded) == paths
    with pytest.raises(ValueError):
        mf.decode_fields({"x:bad": {}})


def test_update_ownership_like_the_api_server():
    old = {"metadata": {"name": "p"}, "spec": {"containers": None}}
    new = {"metadata": {"name": "p", "labels": {"a": "1"}},
           "spec": {"containers": [{"name": "w", "image": "i", "args": ["x"],
                                    "ports": [{"containerPort": 80, "protocol": "TCP"}]}], "dns": "x",
                    "securityContext": {}}}
    mf.record_update(None, new, POD_NODE, "me", "v1", "", "main", False, "now", skeleton=old)
    fields = new["metadata"]["managedFields"][0]["fieldsV1"]
    assert fields == {"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                      "f:spec": {"f:containers": {'k:{"name":"w"}': {
                          ".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                          "f:ports": {".": {}, 'k:{"containerPort":80,"protocol":"TCP"}': {
                              ".": {}, "f:containerPort": {}, "f:protocol": {}}}}},
                          "f:dns": {}, "f:securityContext": {}}}
    # A second manager changing one field takes it over.
    changed = {"metadata": dict(new["metadata"]), "spec": dict(new["spec"], dns="y")}
    mf.record_update(new, changed, POD_NODE, "other", "v1", "", "main", False, "later")
    owners = {e["manager"]: e["fieldsV1"] for e in changed["metadata"]["managedFields"]}
    assert owners["other"] == {"f:spec": {"f:dns": {}}} and "f:dns" not in owners["me"]["f:spec"]


def test_apply_conflict_message_lists_managers():
    node = ts.struct(metadata=ts.OBJECT_META, spec=ts.struct())
    live = {"metadata": {"name": "a"}, "spec": {"a": 1, "b": 1}}
    mf.record_update(None, live, node, "writer", "v1", "", "main", False, "2026-01-01T00:00:00Z")
    with pytest.raises(mf.ApplyConflict) as exc:
        mf.apply(live, {"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"a": 2, "b": 2}}, node, "ap", "",
                 "main", False, False, "t")
    err = exc.value.api_error()
    assert err.code == 409 and err.message == (
        'Apply failed with 2 conflicts: conflicts with "writer" using v1:\n- .spec.a\n- .spec.b')


# ---------------------------------------------------------------------------------------------- schemas


def test_schema_defaults_prunes_and_validates():
    schema = StructuralSchema({"type": "object", "properties": {"spec": {
        "type": "object", "required": ["image"],
        "properties": {"image": {"type": "string", "maxLength": 5}, "n": {"type": "integer", "default": 3},
                       "list": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                       "when": {"type": "string", "format": "date-time"}}}}})
    obj = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a", "junk": 1},
           "spec": {"image": "abc", "n": None, "extra": True}}
    assert sorted(schema.prune(obj)) == ["metadata.junk", "spec.extra"]
    schema.default(obj)
    assert obj["spec"] == {"image": "abc", "n": 3}
    obj["spec"].update(image="toolong", n="x", list=["a", "a"], when="yesterday")
    problems = {str(p) for p in schema.validate(obj)}
    assert problems == {"spec.image: Too long: may not be longer than 5",
                        'spec.n: Invalid value: "string": spec.n in body must be of type integer: "string"',
                        'spec.list[1]: Duplicate value: "a"',
                        'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: '
                        '"yesterday"'}


def test_schema_errors_at_crd_creation():
    problems = crdschema.version_schema_problems(
        {"type": "object", "properties": {"a": {"properties": {}}, "b": {"type": "array"}}}, "x")
    assert {str(p) for p in problems} == {
        "x.properties[a].type: Required value: must not be empty for specified object fields",
        "x.properties[b].items: Required value: must be specified"}
    problems = crdschema.version_schema_problems(
        {"type": "object", "properties": {"c": {"type": "string", "pattern": "("}}}, "x")
    assert [str(p) for p in problems] == [
        'x.properties[c].pattern: Invalid value: "(": must be a valid regular expression, but isn\'t: error parsing '
        'regexp: missing closing ): `(`']
    with pytest.raises(SchemaError) as exc:
        StructuralSchema({"type": "object", "properties": {"a": {"type": "string", "maxLength": -1}}})
    assert "properties[a].maxLength: Invalid value: -1: must be a non-negative integer" in str(exc.value)


def test_quantities():
    assert quantity.cpu_millis("500m") == 500 and quantity.cpu_millis("2") == 2000
    assert quantity.as_int("1Gi") == 2 ** 30 and quantity.as_int("1e3") == 1000 and quantity.as_int("2k") == 2000
    for bad in ("two", "1Xi", "", "--1"):
        with pytest.raises(quantity.QuantityError):
            quantity.parse(bad)


# ---------------------------------------------------------------------------------------- comparator


def test_conformance_comparator_catches_differences():
    subs = Substitutions()
    recorded = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a", "uid": "u1", "resourceVersion": "5",
                                                                "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"n": 1, "list": [1]}}
    same = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a", "uid": "u2", "resourceVersion": "9",
                                                            "creationTimestamp": "2027-01-01T00:00:00Z"},
            "spec": {"n": 1, "list": [1]}}
    assert Comparator(subs).compare(recorded, same) == []
    subs.learn(recorded, same)
    assert subs.apply_request({"metadata": {"resourceVersion": "5", "uid": "u1"}}) == \
        {"metadata": {"resourceVersion": "9", "uid": "u2"}}
    different = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "b", "uid": "u2"},
                 "spec": {"n": "1", "list": [1, 2], "extra": 0}}
    diffs = Comparator(subs).compare(recorded, different)
    assert any("metadata.name: value" in d for d in diffs)
    assert any("missing keys ['creationTimestamp', 'resourceVersion']" in d for d in diffs)
    assert any("spec.n: type number != str" in d for d in diffs)
    assert any("spec.list: 1 items != 2" in d for d in diffs)
    assert any("unexpected keys ['extra']" in d for d in diffs)
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound",
              "code": 404, "message": "x"}
    assert Comparator(subs).compare(status, dict(status, reason="Gone", code=410))


def test_required_node_affinity_terms():
    from e2e.processnode import podspec

    def pod(terms):
        return {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}}}

    by_name = pod([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}])
    assert podspec.affinity_allows(by_name, "gpu-1", {})
    assert not podspec.affinity_allows(by_name, "gpu-2", {})
    by_label = pod([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]},
                                          {"key": "gpu", "operator": "Exists"}]}])
    assert podspec.affinity_allows(by_label, "n", {"zone": "b", "gpu": "1"})
    assert not podspec.affinity_allows(by_label, "n", {"zone": "a", "gpu": "1"})
    assert not podspec.affinity_allows(by_label, "n", {"zone": "b"})
    either = pod([{"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["8"]}]},
                  {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["small"]}]}])
    assert podspec.affinity_allows(either, "big", {"cpu": "16"})
    assert podspec.affinity_allows(either, "small", {"cpu": "4"})
    assert not podspec.affinity_allows(either, "other", {"cpu": "4"})
    assert not podspec.affinity_allows(pod([{}]), "n", {})       # an empty term matches nothing
    assert podspec.affinity_allows({"spec": {}}, "n", {})        # no affinity: anywhere
    # fits() applies it only when it knows the node's name.
    assert podspec.fits(by_name, {}, [], 1000, 1 << 30, 10, node_name="gpu-1")
    assert not podspec.fits(by_name, {}, [], 1000, 1 << 30, 10, node_name="gpu-2")


# ------------------------------------------------------------------------------------- CRD schema checks

WORKERS = {"type": "object", "properties": {
    "replicas": {"type": "integer", "default": 1},
    "names": {"type": "array", "maxItems": 1024, "items": {"type": "string", "maxLength": 63}}}}


def _crd_schema(**spec):
    return {"type": "object", "properties": {"spec": dict({"type": "object", "properties": {}}, **spec)}}


def _problems(schema):
    return sorted(str(p) for p in crdschema.version_schema_problems(schema, "s"))


@pytest.mark.parametrize("schema,expected", [
    ({"type": "object", "properties": {"metadata": {"type": "object", "description": "d"}}},
     ["s.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata "
      "is implicitly specified"]),
    ({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 52}, "generateName": {"type": "string"}}}}}, []),
    (_crd_schema(properties={"p": {"type": "object", "default": {},
                                   "x-kubernetes-validations": [{"rule": "self.policy == 'x'", "message": "m"}],
                                   "properties": {"policy": {"type": "string", "default": "x"}}}}),
     ['s.properties[spec].properties[p].default: Invalid value: "object": no such key: policy evaluating rule: m']),
    (_crd_schema(properties={"n": {"type": "integer", "minimum": 1, "default": 0}}),
     ["s.properties[spec].properties[n].default: Invalid value: 0:  in body should be greater than or equal to 1"]),
    (_crd_schema(properties={"o": {"type": "object", "properties": {"a": {"type": "string"}},
                                   "default": {"a": "x", "b": 1}}}),
     ['s.properties[spec].properties[o].default: Invalid value: map[string]interface {}{"a":"x", "b":1}: must not '
      'have unknown fields']),
    (_crd_schema(properties={"l": {"type": "array"}}),
     ["s.properties[spec].properties[l].items: Required value: must be specified"]),
    (_crd_schema(properties={"l": {"type": "array", "uniqueItems": True, "items": {"type": "string"}}}),
     ["s.properties[spec].properties[l].uniqueItems: Forbidden: uniqueItems cannot be set to true since the "
      "runtime complexity becomes quadratic"]),
    (_crd_schema(properties={"w": {"$ref": "#/definitions/W"}}),
     ["s.properties[spec].properties[w].$ref: Forbidden: $ref is not supported"]),
    (_crd_schema(properties={"r": {"type": "integer", "anyOf": [{"type": "string"}]}}),
     ["s.properties[spec].properties[r].anyOf[0].type: Forbidden: must be empty to be structural"]),
    (_crd_schema(properties={"c": {"type": "array", "x-kubernetes-list-type": "map",
                                   "x-kubernetes-list-map-keys": ["k"],
                                   "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}),
     ["s.properties[spec].properties[c].items.properties[k].default: Required value: this property is in "
      "x-kubernetes-list-map-keys, so it must have a default or be a required property"]),
    (_crd_schema(properties={"t": {"type": "array", "x-kubernetes-list-type": "set",
                                   "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}),
     ['s.properties[spec].properties[t].items.x-kubernetes-map-type: Invalid value: "null": must be atomic as item '
      'of a list with x-kubernetes-list-type=set']),
    (_crd_schema(properties={"m": {"type": "object", "properties": {"a": {"type": "string"}},
                                   "additionalProperties": {"type": "string"}}}),
     ["s.properties[spec].properties[m].additionalProperties: Forbidden: additionalProperties and properties are "
      "mutual exclusive"]),
    ({"properties": {}}, ["s.type: Required value: must not be empty at the root"]),
])
def test_crd_schema_rules_of_a_real_server(schema, expected):
    assert _problems(schema) == expected


def test_crd_schema_cel_rules_compile_and_fit_the_cost_budget():
    def workers(rule, **names):
        node = json.loads(json.dumps(WORKERS))
        for key, value in names.items():
            if value is None:
                del node["properties"]["names"][key]
            else:
                node["properties"]["names"][key] = value
        node["properties"]["names"]["x-kubernetes-validations"] = [{"rule": rule, "message": "m"}]
        return _problems(_crd_schema(properties={"workers": node}))

    nested = "self.all(x, self.exists(y, y.startsWith(x)))"
    assert workers(nested, maxItems=16) == []
    over = workers(nested)  # 1024 names of at most 63 characters: 3.4 times the per-rule budget
    assert over == ["s.properties[spec].properties[workers].properties[names].x-kubernetes-validations[0].rule: "
                    "Forbidden: estimated rule cost exceeds budget by factor of 3.4x (try simplifying the rule, or "
                    "adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"]
    unbounded = workers(nested, maxItems=None)
    rule_path = "s.properties[spec].properties[workers].properties[names].x-kubernetes-validations[0].rule"
    assert [p.split(": ", 2)[:2] for p in unbounded] == [[rule_path, "Forbidden"], [rule_path, "Forbidden"],
                                                        ["s", "Forbidden"]]
    assert "contributed to estimated rule cost total" in unbounded[0] and "more than 100x" in unbounded[1]
    assert "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by " \
           "factor of more than 100x" in unbounded[2]
    assert workers("self.all(x, x.size() > 0)", maxItems=None) == []  # cheap on ~1M items: within budget
    broken = workers("self.size() >")
    assert len(broken) == 1 and "compilation failed: ERROR: <input>:1:14: Syntax error: mismatched input '<EOF>'" \
        in broken[0] and broken[0].endswith("\n | self.size() >\n | .............^")
    assert "apiextensions.ValidationRule{Rule:\"self.size() >\", Message:\"m\"}" in broken[0]
    assert workers("self.size() + 1")[0].endswith(": cel expression must evaluate to a bool")


def test_cel_errors_point_at_their_line_and_column():
    with pytest.raises(cel.CelCompileError) as exc:
        cel.compile_rule("self.replicas > 0 &&\n  self.nope == 1", SPEC)
    assert str(exc.value) == ("compilation failed: ERROR: <input>:2:7: undefined field 'nope'\n"
                              " |   self.nope == 1\n | ......^")


@pytest.mark.parametrize("pattern,message", [
    ("^[a-z]+$", None),
    ("[a-", "error parsing regexp: missing closing ]: `[a-`"),
    ("(ab", "error parsing regexp: missing closing ): `(ab`"),
    ("*a", "error parsing regexp: missing argument to repetition operator: `*`"),
    ("a(?=b)", "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
    ("(a)\\1", "error parsing regexp: invalid escape sequence: `\\1`"),
])
def test_patterns_are_judged_as_go_regexps(pattern, message):
    assert crdschema.go_regexp_error(pattern) == message


def test_crd_decoding_drops_unknown_fields_and_zero_values():
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x"},
           "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
               "type": "object", "properties": {"spec": {"type": "object", "nullable": False, "properties": {
                   "n": {"type": "integer", "default": None, "x-kubernetes-validations": [
                       {"rule": "self > 0", "messageExpression": "'no'"}]}}}}}}}], "bogus": 1}}
    assert sorted(crdtypes.unknown_fields(crd)) == [
        "spec.bogus", "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.n."
                      "x-kubernetes-validations[0].messageExpression"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    crdtypes.normalize_schema(schema)
    assert schema == {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "n": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]}}}}}


def test_conformance_comparator_by_verdict_only_and_generated_names():
    def refusal(factor, field="s.rule"):
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Invalid",
                "code": 422, "message": "x is invalid: %s: Forbidden: factor of %s" % (field, factor),
                "details": {"name": "x", "kind": "K", "causes": [
                    {"reason": "FieldValueForbidden", "field": field, "message": "Forbidden: factor of " + factor}]}}

    assert Comparator(Substitutions()).compare(refusal("3.4x"), refusal("3.5x"))
    assert Comparator(Substitutions(), verdict_only=True).compare(refusal("3.4x"), refusal("3.5x")) == []
    assert Comparator(Substitutions(), verdict_only=True).compare(refusal("3.4x"), refusal("3.4x", "t.rule"))
    recorded = {"metadata": {"generateName": "fx-gen-", "name": "fx-gen-w79k7"}}
    assert Comparator(Substitutions()).compare(recorded, {"metadata": {"generateName": "fx-gen-",
                                                                       "name": "fx-gen-2b4x9"}}) == []
    assert Comparator(Substitutions()).compare(recorded, {"metadata": {"generateName": "fx-gen-",
                                                                       "name": "other-2b4x9"}})
