"""forge.schema: every rejection names the file and the dotted field path, on one line."""
import pytest

from forge.schema import Field, ListOf, SchemaError, load_yaml, pep440_specifier, validate

SCHEMA = {
    "id": Field(str),
    "kind": Field(str, choices=("source", "moe-config")),
    "weight": Field(float, required=False, default=1.0),
    "enabled": Field(bool, required=False, default=True),
    "releases": Field(str, check=pep440_specifier),
    "files": Field(ListOf({"path": Field(str)}, min_items=1)),
}
GOOD = {"id": "a", "kind": "source", "releases": ">=0.25", "files": [{"path": "x.diff"}]}


def test_valid_data_gets_defaults_and_int_widened_to_float():
    result = validate({**GOOD, "weight": 2}, SCHEMA, "f.yaml")
    assert result["weight"] == 2.0 and isinstance(result["weight"], float)
    assert result["enabled"] is True


@pytest.mark.parametrize("change, message", [
    ({"kind": "diff"}, "f.yaml: kind: must be one of source, moe-config (got 'diff')"),
    ({"extra": 1}, "f.yaml: extra: unknown field"),
    ({"files": []}, "f.yaml: files: must hold at least 1 item(s)"),
    ({"files": [{"path": 3}]}, "f.yaml: files[0].path: must be a string (got an integer)"),
    ({"files": [{"path": "p", "sha": "x"}]}, "f.yaml: files[0].sha: unknown field"),
    ({"releases": "=>0.25"}, "f.yaml: releases: not a PEP 440 version specifier"),
    ({"enabled": "yes"}, "f.yaml: enabled: must be a boolean (got a string)"),
    ({"weight": True}, "f.yaml: weight: must be a number (got a boolean)"),
])
def test_bad_values_name_file_and_field(change, message):
    with pytest.raises(SchemaError) as failure:
        validate({**GOOD, **change}, SCHEMA, "f.yaml")
    assert str(failure.value).startswith(message)
    assert "\n" not in str(failure.value)


def test_missing_required_field():
    data = dict(GOOD)
    del data["id"]
    with pytest.raises(SchemaError, match=r"^f\.yaml: id: required field is missing$"):
        validate(data, SCHEMA, "f.yaml")


def test_broken_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\nb: [unclosed\n")
    with pytest.raises(SchemaError) as failure:
        load_yaml(path)
    assert str(failure.value).startswith(f"{path}: line ") and "not valid YAML" in str(failure.value)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(SchemaError, match="cannot read"):
        load_yaml(tmp_path / "absent.yaml")
