#!/usr/bin/env python3
"""Writes the DataService reference (docs/dataservice-reference.md) from the CRD's schema, so it cannot drift.

    scripts/crd-reference.py                  # rewrite docs/dataservice-reference.md from crds/dataservices.sluice.dev.yaml
    scripts/crd-reference.py --check          # exit 1 (with a diff) when the committed page differs from a fresh rendering
    scripts/crd-reference.py --crd F --output F|-

Every field of every served version gets a row: its path, type, default, constraints (required, enum, bounds,
lengths, pattern, format, list type) and description; an object's CEL rules (x-kubernetes-validations) are listed
with their messages under it. A field without a description is an error (the CRD promises one for every field),
except under the root `metadata`, where a real API server allows none. Errors name the CRD file (and the field),
exit code 2. Needs PyYAML (Debian's python3-yaml).
"""

import argparse
import difflib
import json
import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CRD = os.path.join("crds", "dataservices.sluice.dev.yaml")
DEFAULT_OUTPUT = os.path.join("docs", "dataservice-reference.md")
COMMAND = "python3 scripts/crd-reference.py"


class CrdError(Exception):
    """A CRD this script cannot document; the message names the file."""


def _fail(path, message):
    raise CrdError("%s: %s" % (path, message))


def _line(text):
    """Text on one line."""
    return " ".join(str(text).split())


def _cell(text):
    """Text for one Markdown table cell: one line, pipes escaped (also inside code spans, as GitHub wants)."""
    return _line(text).replace("|", "\\|")


def _code(value):
    """Inline code for a value (spaced double backticks when it holds a backtick)."""
    text = _line(value if isinstance(value, str) else json.dumps(value, separators=(", ", ": ")))
    return "`` %s ``" % text if "`" in text else "`%s`" % text


def _type_of(schema):
    if schema.get("x-kubernetes-int-or-string"):
        base = "integer or string"
    elif "type" in schema:
        base = schema["type"]
        if base == "array":
            items = schema.get("items") or {}
            base = "array of %s" % _type_of(items) if items else "array"
        elif base == "object" and "additionalProperties" in schema and not schema.get("properties"):
            extra = schema["additionalProperties"]
            base = "map of %s" % (_type_of(extra) if isinstance(extra, dict) else "any")
    elif "anyOf" in schema:
        base = " or ".join(_type_of(s) for s in schema["anyOf"])
    else:
        base = "any"
    if schema.get("format"):
        base += " (%s)" % schema["format"]
    return base


def _bound(schema, low_key, high_key, what=""):
    low, high = schema.get(low_key), schema.get(high_key)
    if low is not None and high is not None:
        return "%s%s..%s" % (what, low, high)
    if low is not None:
        return "%s≥ %s" % (what, low)
    if high is not None:
        return "%s≤ %s" % (what, high)
    return None


def _constraints(schema, required):
    out = []
    if required:
        out.append("**required**")
    if "enum" in schema:
        out.append("one of " + ", ".join(_code(v) for v in schema["enum"]))
    number = _bound(schema, "minimum", "maximum")
    if number:
        if schema.get("exclusiveMinimum") or schema.get("exclusiveMaximum"):
            number += " (exclusive)"
        out.append(number)
    for low, high, what in (("minLength", "maxLength", "length "), ("minItems", "maxItems", "items "),
                            ("minProperties", "maxProperties", "keys ")):
        bound = _bound(schema, low, high, what)
        if bound:
            out.append(bound)
    if "pattern" in schema:
        out.append("pattern " + _code(schema["pattern"]))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        out.append("list-map keyed by " + ", ".join(_code(k) for k in schema.get("x-kubernetes-list-map-keys") or []))
    elif list_type:
        out.append("list type " + _code(list_type))
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.append("unknown fields kept")
    if schema.get("nullable"):
        out.append("nullable")
    return "; ".join(out)


def _rules(schema):
    """[(rule, message)] of an object's CEL validations."""
    out = []
    for rule in schema.get("x-kubernetes-validations") or []:
        message = rule.get("message") or rule.get("messageExpression") or "(no message: the rule itself is shown)"
        out.append((rule.get("rule", ""), message))
    return out


class Walker:
    """Flattens one schema into rows (path, schema, required) in document order, checking descriptions."""

    def __init__(self, crd_path):
        self.crd_path = crd_path
        self.rows = []

    def walk(self, path, schema, required, describe=True):
        if not isinstance(schema, dict):
            _fail(self.crd_path, "the schema of %s is not a mapping" % path)
        if describe and not str(schema.get("description") or "").strip():
            _fail(self.crd_path, "%s has no description (every field of the CRD must say what it is)" % path)
        self.rows.append((path, schema, required))
        props = schema.get("properties")
        if props is not None:
            if not isinstance(props, dict):
                _fail(self.crd_path, "the properties of %s are not a mapping" % path)
            req = set(schema.get("required") or [])
            for name, child in props.items():
                self.walk("%s.%s" % (path, name), child, name in req, describe)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            self.walk("%s.<key>" % path, extra, False, describe)
        items = schema.get("items")
        if items is not None:
            if not isinstance(items, dict):
                _fail(self.crd_path, "the items of %s are not a mapping" % path)
            self.walk("%s[]" % path, items, False, describe)


def load_crd(path):
    try:
        with open(path) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    except OSError as exc:
        raise CrdError("%s: cannot read: %s" % (path, exc.strerror or exc))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = ":%d" % (mark.line + 1) if mark is not None else ""
        raise CrdError("%s%s: not valid YAML: %s" % (path, where, getattr(exc, "problem", None) or exc))
    crds = [d for d in docs if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1:
        _fail(path, "expected exactly one CustomResourceDefinition, found %d" % len(crds))
    crd = crds[0]
    spec = crd.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("names"), dict) or "kind" not in spec["names"]:
        _fail(path, "spec.names.kind is missing")
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        _fail(path, "spec.versions is missing or empty")
    for v in versions:
        if not isinstance(v, dict) or not v.get("name"):
            _fail(path, "a version without a name")
        schema = (v.get("schema") or {}).get("openAPIV3Schema") if isinstance(v.get("schema"), dict) else None
        if not isinstance(schema, dict):
            _fail(path, "version %s has no schema (spec.versions[].schema.openAPIV3Schema)" % v["name"])
    return crd


def _has_children(schema):
    return bool(schema.get("properties")) or isinstance(schema.get("additionalProperties"), dict) or (
        isinstance(schema.get("items"), dict))


def _table(rows, base):
    lines = ["| field | type | default | constraints | description |", "|---|---|---|---|---|"]
    for path, schema, required in rows:
        rel = path[len(base):].lstrip(".") if path.startswith(base) else path
        default = _cell(_code(schema["default"])) if "default" in schema else ""
        lines.append("| `%s` | %s | %s | %s | %s |" % (
            _cell(rel), _cell(_type_of(schema)), default, _cell(_constraints(schema, required)),
            _cell(schema.get("description", ""))))
    return lines


def _rules_list(rows):
    lines = []
    for path, schema, _ in rows:
        for rule, message in _rules(schema):
            lines.append("- `%s`: %s — rule %s" % (path, _line(message), _code(rule)))
    return lines


def render(crd, crd_path, crd_label):
    spec = crd["spec"]
    names = spec["names"]
    kind = names["kind"]
    group = spec.get("group", "")
    out = ["# %s reference" % kind, "",
           "<!-- Generated by scripts/crd-reference.py from %s: do not edit by hand. -->" % crd_label, "",
           "Generated from the CustomResourceDefinition `%s` (`%s`) by `%s`; the test `docs_crd_reference` fails "
           "when this page differs from a fresh rendering. What the fields do, with examples: "
           "[operator.md](operator.md#crd-reference) and [autoscaling.md](autoscaling.md)." % (
               crd_label, crd.get("metadata", {}).get("name", ""), COMMAND), ""]
    facts = ["- Group `%s`, kind `%s`, plural `%s`, scope %s." % (group, kind, names.get("plural", ""),
                                                                     spec.get("scope", ""))]
    if names.get("shortNames"):
        facts.append("- Short names: %s." % ", ".join(_code(n) for n in names["shortNames"]))
    if names.get("categories"):
        facts.append("- Categories: %s (`kubectl get %s` lists it)." % (
            ", ".join(_code(c) for c in names["categories"]), names["categories"][0]))
    out += facts + [""]
    for version in spec["versions"]:
        vname = version["name"]
        flags = [w for w, on in (("served", version.get("served")), ("storage", version.get("storage"))) if on]
        out += ["## %s/%s (%s)" % (group, vname, ", ".join(flags) or "not served"), ""]
        sub = version.get("subresources") or {}
        if sub:
            out.append("Subresources: %s." % ", ".join(
                "`%s`" % k if k != "scale" else "`scale` (spec replicas `%s`, status replicas `%s`, selector `%s`)" % (
                    sub["scale"].get("specReplicasPath", ""), sub["scale"].get("statusReplicasPath", ""),
                    sub["scale"].get("labelSelectorPath", "")) for k in sub))
            out.append("")
        columns = version.get("additionalPrinterColumns") or []
        if columns:
            out += ["`kubectl get` columns:", "", "| column | type | from | description |", "|---|---|---|---|"]
            for col in columns:
                out.append("| %s | %s | %s | %s |" % (_cell(col.get("name", "")), _cell(col.get("type", "")),
                                                     _cell(_code(col.get("jsonPath", ""))),
                                                     _cell(col.get("description", ""))))
            out.append("")
        schema = version["schema"]["openAPIV3Schema"]
        props = schema.get("properties") or {}
        top_required = set(schema.get("required") or [])
        if "metadata" in props:
            walker = Walker(crd_path)
            walker.walk("metadata", props["metadata"], False, describe=False)
            rows = [r for r in walker.rows if r[0] != "metadata"]
            if rows:
                out += ["### metadata", "",
                        "What the schema allows beyond standard object metadata (a real API server accepts only "
                        "`name` and `generateName` here, and no descriptions):", ""]
                out += _table(rows, "metadata") + [""]
        for top in ("spec", "status"):
            if top not in props:
                continue
            walker = Walker(crd_path)
            walker.walk(top, props[top], top in top_required)
            root = walker.rows[0][1]
            children = root.get("properties") or {}
            req = set(root.get("required") or [])
            out += ["### %s%s" % (top, " (required)" if top in top_required else ""), "",
                    _line(root.get("description", "")), ""]
            rules = _rules_list(walker.rows[:1])
            if rules:
                out += ["Rules:", ""] + rules + [""]
            # Fields without fields of their own in one table; each object or array with fields in its section.
            simple = [name for name in children if not _has_children(children[name])]
            if simple:
                out += _table([r for r in walker.rows if r[0] in {"%s.%s" % (top, n) for n in simple}], top) + [""]
            for name in children:
                if name in simple:
                    continue
                path = "%s.%s" % (top, name)
                rows = [r for r in walker.rows if r[0] == path or r[0].startswith(path + ".")
                        or r[0].startswith(path + "[]")]
                head = rows[0][1]
                notes = []
                if name in req:
                    notes.append("required")
                if "default" in head:
                    notes.append("default %s" % _code(head["default"]))
                out += ["#### %s%s" % (path, " (%s)" % "; ".join(notes) if notes else ""), ""]
                out += ["%s: %s" % (_line(_type_of(head)), _line(head.get("description", ""))), ""]
                constraints = _constraints(head, False)
                if constraints:
                    out += ["Constraints: %s." % constraints, ""]
                out += _table(rows[1:], path) + [""]
                rules = _rules_list(rows)
                if rules:
                    out += ["Rules (CEL, checked by the API server):", ""] + rules + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crd", default=None, help="the CRD file (default: %s in the repository)" % DEFAULT_CRD)
    parser.add_argument("--output", default=None,
                        help="the page to write, or - for stdout (default: %s in the repository)" % DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 with a diff when the page differs from a fresh rendering")
    args = parser.parse_args(argv)
    crd_path = args.crd or os.path.join(REPO, DEFAULT_CRD)
    output = args.output or os.path.join(REPO, DEFAULT_OUTPUT)
    label = os.path.relpath(crd_path, REPO) if os.path.abspath(crd_path).startswith(REPO + os.sep) else crd_path
    try:
        text = render(load_crd(crd_path), crd_path, label)
    except CrdError as exc:
        print("crd-reference: %s" % exc, file=sys.stderr)
        return 2
    if args.check:
        try:
            with open(output) as fh:
                current = fh.read()
        except OSError:
            current = ""
        if current == text:
            return 0
        diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), output + " (committed)",
                                         output + " (fresh)", lineterm="", n=1))
        shown = diff[:80] + (["... (%d more diff lines)" % (len(diff) - 80)] if len(diff) > 80 else [])
        print("\n".join(shown), file=sys.stderr)
        print("crd-reference: %s is stale: it differs from a fresh rendering of %s; run `%s` and commit the result"
              % (output, crd_path, COMMAND), file=sys.stderr)
        return 1
    if output == "-":
        sys.stdout.write(text)
    else:
        with open(output, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
