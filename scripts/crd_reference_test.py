"""Tests of scripts/crd-reference.py: the committed docs/dataservice-reference.md is current, a synthetic CRD renders
every kind of fact the page promises, and malformed CRDs are refused with an error naming the file (ctest
docs_crd_reference)."""

import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "crd-reference.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True, timeout=60)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


SMALL = """\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: widgets.example.dev
    spec:
      group: example.dev
      names: {kind: Widget, plural: widgets, shortNames: [wd]}
      scope: Namespaced
      versions:
        - name: v1
          served: true
          storage: true
          subresources:
            status: {}
          schema:
            openAPIV3Schema:
              type: object
              description: A widget.
              required: [spec]
              properties:
                spec:
                  type: object
                  description: What the widget should be.
                  required: [size]
                  x-kubernetes-validations:
                    - rule: "self.size <= self.limit"
                      message: size must not exceed limit
                  properties:
                    size:
                      type: integer
                      minimum: 1
                      maximum: 9
                      description: How big | how wide.
                    limit:
                      type: integer
                      default: 5
                      description: The largest size.
                    colour:
                      type: string
                      enum: [red, blue]
                      description: Its colour.
                    labels:
                      type: object
                      description: Free labels.
                      additionalProperties:
                        type: string
                        description: One label value.
                    parts:
                      type: array
                      maxItems: 3
                      description: Its parts.
                      items:
                        type: object
                        description: One part.
                        required: [name]
                        properties:
                          name: {type: string, minLength: 1, description: "The part's name."}
                status:
                  type: object
                  description: What the widget is.
                  properties:
                    seen: {type: string, format: date-time, description: "When it was last seen."}
    """


def test_committed_reference_is_current():
    result = run("--check")
    assert result.returncode == 0, (
        "docs/dataservice-reference.md differs from a fresh rendering of crds/dataservices.sluice.dev.yaml; "
        "run `python3 scripts/crd-reference.py` and commit the page:\n" + result.stderr)


def test_every_crd_field_is_on_the_page():
    import yaml
    with open(os.path.join(REPO, "crds", "dataservices.sluice.dev.yaml")) as fh:
        crd = yaml.safe_load(fh)
    with open(os.path.join(REPO, "docs", "dataservice-reference.md")) as fh:
        page = fh.read()

    def names(schema, out):
        for name, child in (schema.get("properties") or {}).items():
            out.add(name)
            names(child, out)
        if isinstance(schema.get("items"), dict):
            names(schema["items"], out)
        if isinstance(schema.get("additionalProperties"), dict):
            names(schema["additionalProperties"], out)
        return out

    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in names(schema, set()) - {"apiVersion", "kind", "metadata"}:
        assert ("`%s`" % name in page or ".%s`" % name in page or ".%s " % name in page
                or "#### spec.%s" % name in page or "#### status.%s" % name in page), name
    for rule in ("self.port != self.metricsPort", "has(self.configMapRef) != has(self.inline)"):
        assert rule in page


def test_small_crd_renders_every_fact(tmp_path):
    crd = write(tmp_path, "widgets.yaml", SMALL)
    result = run("--crd", crd, "--output", "-")
    assert result.returncode == 0, result.stderr
    page = result.stdout
    assert page.startswith("# Widget reference\n")
    assert "Short names: `wd`" in page
    assert "### spec (required)" in page
    # type, default, bounds, required, enum, escaped pipe, map, array, item fields, format
    assert "| `size` | integer |  | **required**; 1..9 | How big \\| how wide. |" in page
    assert "| `limit` | integer | `5` |  | The largest size. |" in page
    assert "one of `red`, `blue`" in page
    assert "#### spec.labels" in page and "| `<key>` | string |" in page
    assert "#### spec.parts" in page and "items ≤ 3" in page
    assert "| `[].name` | string |  | **required**; length ≥ 1 | The part's name. |" in page
    assert "- `spec`: size must not exceed limit — rule `self.size <= self.limit`" in page
    assert "| `seen` | string (date-time) |" in page


def test_check_names_the_command_when_stale(tmp_path):
    crd = write(tmp_path, "widgets.yaml", SMALL)
    page = tmp_path / "page.md"
    assert run("--crd", crd, "--output", str(page)).returncode == 0
    assert run("--crd", crd, "--output", str(page), "--check").returncode == 0
    page.write_text(page.read_text().replace("The largest size.", "The biggest size."))
    result = run("--crd", crd, "--output", str(page), "--check")
    assert result.returncode == 1
    assert "is stale" in result.stderr and "python3 scripts/crd-reference.py" in result.stderr
    assert "-| `limit` | integer | `5` |  | The biggest size. |" in result.stderr


MALFORMED = {
    "no-schema": ("""\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: widgets.example.dev}
        spec:
          group: example.dev
          names: {kind: Widget, plural: widgets}
          versions:
            - name: v1
              served: true
        """, "version v1 has no schema"),
    "not-yaml": ("kind: CustomResourceDefinition\nspec: [unclosed\n", "not valid YAML"),
    "no-crd": ("apiVersion: v1\nkind: ConfigMap\n", "expected exactly one CustomResourceDefinition, found 0"),
    "no-versions": ("""\
        kind: CustomResourceDefinition
        spec:
          names: {kind: Widget}
        """, "spec.versions is missing or empty"),
    "undescribed": ("""\
        kind: CustomResourceDefinition
        spec:
          group: example.dev
          names: {kind: Widget, plural: widgets}
          versions:
            - name: v1
              schema:
                openAPIV3Schema:
                  type: object
                  properties:
                    spec:
                      type: object
                      description: What it should be.
                      properties:
                        size: {type: integer}
        """, "spec.size has no description"),
    "bad-properties": ("""\
        kind: CustomResourceDefinition
        spec:
          names: {kind: Widget}
          versions:
            - name: v1
              schema:
                openAPIV3Schema:
                  type: object
                  properties:
                    spec: [not, a, mapping]
        """, "the schema of spec is not a mapping"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_crd_is_refused_naming_the_file(tmp_path, case):
    text, expected = MALFORMED[case]
    crd = write(tmp_path, case + ".yaml", text)
    out = tmp_path / "out.md"
    result = run("--crd", crd, "--output", str(out))
    assert result.returncode == 2, result
    assert crd in result.stderr and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_yaml_error_names_the_line(tmp_path):
    crd = write(tmp_path, "bad.yaml", "kind: CustomResourceDefinition\nspec:\n  names: {kind: Widget\n  x: 1\n")
    result = run("--crd", crd, "--output", "-")
    assert result.returncode == 2
    assert "%s:" % crd in result.stderr and "not valid YAML" in result.stderr


def test_missing_file_is_named(tmp_path):
    missing = str(tmp_path / "absent.yaml")
    result = run("--crd", missing, "--output", "-")
    assert result.returncode == 2 and missing in result.stderr and "cannot read" in result.stderr
