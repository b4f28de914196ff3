"""Pipeline specs parsed from Python go through the C++ parser (same errors as the CLI)."""

import pytest

import sluice

RANGE_YAML = "source:\n  range: {stop: 10}\nsteps:\n  - batch: {size: 4}\n"


def test_yaml_dict_and_file_give_the_same_pipeline(tmp_path):
    from_yaml = sluice.parse_pipeline(RANGE_YAML)
    from_dict = sluice.parse_pipeline({"source": {"range": {"stop": 10}}, "steps": [{"batch": {"size": 4}}]})
    path = tmp_path / "p.yaml"
    path.write_text(RANGE_YAML)
    from_path = sluice.parse_pipeline(str(path))
    from_pathlike = sluice.parse_pipeline(path)
    assert from_yaml.fingerprint == from_dict.fingerprint == from_path.fingerprint == from_pathlike.fingerprint
    assert from_path.filename == str(path)
    assert "range" in from_yaml.canonical_yaml


def test_auto_in_a_dict_and_quoted_in_yaml_is_auto():
    plain = sluice.parse_pipeline(
        "source: {range: {stop: 10}}\nsteps:\n  - map: {parallelism: auto, ops: [{cast: {field: value, dtype: float32}}]}\n"
        "  - prefetch: auto\n"
    )
    as_dict = sluice.parse_pipeline(
        {
            "source": {"range": {"stop": 10}},
            "steps": [
                {"map": {"parallelism": "auto", "ops": [{"cast": {"field": "value", "dtype": "float32"}}]}},
                {"prefetch": "auto"},
            ],
        }
    )
    quoted = sluice.parse_pipeline(
        "source: {range: {stop: 10}}\nsteps:\n  - map: {parallelism: 'auto', ops: [{cast: {field: value, dtype: float32}}]}\n"
        '  - prefetch: "auto"\n'
    )
    assert plain.fingerprint == as_dict.fingerprint == quoted.fingerprint


def test_errors_name_the_file_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("source:\n  range: {stop: 10}\nsteps:\n  - batch: {size: abc}\n")
    with pytest.raises(ValueError) as e:
        sluice.parse_pipeline(str(path))
    msg = str(e.value)
    assert str(path) in msg
    assert ":4:" in msg
    assert "size" in msg


def test_the_same_error_as_the_cpp_parser():
    from sluice import _sluice

    text = "source:\n  nosuchsource: {}\n"
    with pytest.raises(ValueError) as via_package:
        sluice.parse_pipeline(text)
    with pytest.raises(ValueError) as via_binding:
        _sluice.parse_pipeline(text, "<string>")
    assert str(via_package.value) == str(via_binding.value)
    assert "nosuchsource" in str(via_package.value)


def test_missing_file_and_wrong_types():
    with pytest.raises(ValueError, match="cannot open"):
        sluice.parse_pipeline("/nonexistent/pipeline.yaml")
    with pytest.raises(TypeError, match="pipeline"):
        sluice.parse_pipeline(42)


def test_dataset_rejects_a_bad_spec_before_connecting():
    # Nothing listens on this address: the spec error must come first.
    with pytest.raises(ValueError, match="steps"):
        sluice.Dataset("127.0.0.1:1", pipeline="source:\n  range: {stop: 3}\nsteps: 7\n")
