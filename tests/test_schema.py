"""forge.schema: every rejection names the file and the dotted field path, on one line."""
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.schema import Field, ListOf, SchemaError, load_yaml, pep440_specifier, validate
from tests.build_cli import run_build

SCHEMA = {
    "id": Field(str),
    "kind": Field(str, choices=("source", "moe-config")),
    "weight": Field(float, required=False, default=1.0),
    "enabled": Field(bool, required=False, default=True),
    "releases": Field(str, check=pep440_specifier),
    "files": Field(ListOf({"path": Field(str)}, min_items=1)),
}

REPO = Path(__file__).resolve().parents[1]

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
    # JSON holds integers of any size, and reaches float() here: OverflowError before
    ({"weight": 10 ** 400}, "f.yaml: weight: must be a number within about ±1.8e308 (got an integer"),
    ({"weight": float("inf")}, "f.yaml: weight: must be a finite number (got inf)"),
    ({"weight": float("nan")}, "f.yaml: weight: must be a finite number (got nan)"),
])
def test_bad_values_name_file_and_field(change, message):
    with pytest.raises(SchemaError) as failure:
        validate({**GOOD, **change}, SCHEMA, "f.yaml")
    assert str(failure.value).startswith(message)
    assert "\n" not in str(failure.value)


FREE = {"id": Field(str), "notes": Field(dict, required=False, default={}),
        "count": Field(int, required=False), "value": Field((int, float, str), required=False),
        "tags": Field(ListOf(str), required=False, default=[])}


@pytest.mark.parametrize("change, message", [
    ({"count": "2"}, "f.yaml: count: must be an integer (got a string)"),
    ({"count": True}, "f.yaml: count: must be an integer (got a boolean)"),
    ({"count": 2.0}, "f.yaml: count: must be an integer (got a number)"),
    ({"count": 2 ** 63}, "f.yaml: count: must be an integer within ±(2^63 - 1) (got one of 19 digits)"),
    ({"id": "x" * 100_001}, "f.yaml: id: must be text of at most 100000 characters (got 100001)"),
    ({"tags": ["t"] * 10_001}, "f.yaml: tags: must hold at most 10000 items (got 10001)"),
    ({"notes": {1: "x"}}, "f.yaml: notes.1: mapping keys must be text (got an integer: 1)"),
    ({"notes": {"k" * 100_001: "x"}},
     "f.yaml: notes." + "k" * 60 + "... (100001 characters): keys must be at most 100000 characters"),
    ({"value": float("nan")}, "f.yaml: value: must be a finite number (got nan)"),
    ({"value": None, 7: 1}, "f.yaml: 7: unknown field (known: count, id, notes, tags, value)"),
])
def test_strict_types_and_bounds(change, message):
    with pytest.raises(SchemaError) as failure:
        validate({"id": "a", **change}, FREE, "f.yaml")
    assert str(failure.value).startswith(message)
    assert "\n" not in str(failure.value)


def test_an_unknown_key_is_named_before_the_problems_inside_its_mapping():
    data = {**GOOD, "kind": "diff", "zz": 1, "extra": 1, "files": [{"path": 3}]}
    with pytest.raises(SchemaError, match=r"^f\.yaml: extra: unknown field \(known: enabled, files, "):
        validate(data, SCHEMA, "f.yaml")


def test_null_reads_as_absent_and_defaults_are_not_shared():
    first = validate({"id": "a", "count": None}, FREE, "f.yaml")
    assert first == {"id": "a", "notes": {}, "count": None, "value": None, "tags": []}
    first["tags"].append("changed")
    assert validate({"id": "a"}, FREE, "f.yaml")["tags"] == []
    # an integer where a number is among the kinds is a float, as YAML's `1` for `1.0`
    assert validate({"id": "a", "value": 2}, FREE, "f.yaml")["value"] == 2.0
    assert isinstance(validate({"id": "a", "value": 2}, FREE, "f.yaml")["value"], float)


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


# --- duplicate keys: refused by the one loader every YAML file goes through ---------------------

def test_duplicate_key_is_one_line_naming_file_line_and_key(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("a: 1\nnested:\n  b: 1\n  b: 2\n")
    with pytest.raises(SchemaError) as failure:
        load_yaml(path)
    assert str(failure.value) == f"{path}: line 4: duplicate key 'b' (each key may appear once)"


def test_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {x: 1, y: 1}\nd:\n  <<: *b\n  x: 2\n")
    assert load_yaml(path)["d"] == {"x": 2, "y": 1}


def _duplicate_first_key(text: str, key: str, value: str) -> str:
    """`text` with a second `key: value` line right after the first line that sets `key`."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith(f"{key}:"):
            indent = line[: len(line) - len(line.lstrip())]
            lines.insert(i + 1, f"{indent}{key}: {value}\n")
            return "".join(lines)
    raise AssertionError(f"no line sets {key}")


def _copy_repo_data(tmp_path: Path) -> Path:
    import shutil

    for name in ("patches", "recipes", "images"):
        shutil.copytree(REPO / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("relative, key, value, env, command", [
    ("patches/series.yaml", "checked_through", '"0.22.0"', "VLLM_FORGE_SERIES",
     ["patches", "--vllm", "0.25.0", "--offline"]),
    ("images/targets.yaml", "cuda_arch", '"9.0"', "VLLM_FORGE_TARGETS",
     ["release-matrix", "--vllm", "0.25.0"]),
    ("images/lock.yaml", "bases", "{}", "VLLM_FORGE_LOCK",
     ["--target", "a100", "--vllm", "0.25.0"]),
])
def test_duplicate_keys_in_project_files_are_refused_by_the_cli(tmp_path, relative, key, value, env,
                                                                command):
    """Before: PyYAML kept the last value silently (a manifest could say two things at once)."""
    root = _copy_repo_data(tmp_path)
    path = root / relative
    path.write_text(_duplicate_first_key(path.read_text(), key, value))
    result = run_build(*command, env={env: str(path)}, timeout=300)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: line ") and f"duplicate key '{key}'" in lines[0]


def test_duplicate_key_in_a_recipe_is_refused(tmp_path):
    from forge.serving.recipes import load_recipe

    root = _copy_repo_data(tmp_path) / "recipes"
    path = root / "gemma-4-26b-a4b-it.yaml"
    path.write_text(_duplicate_first_key(path.read_text(), "max_model_len", "1024"))
    with pytest.raises(SchemaError, match=r"line \d+: duplicate key 'max_model_len'") as failure:
        load_recipe("gemma-4-26b-a4b-it", "h200", root)
    assert "gemma-4-26b-a4b-it.yaml" in str(failure.value) and "\n" not in str(failure.value)


def test_manifest_bounds_must_be_ordered(tmp_path):
    """Before: checked_through 0.22.0 < checked_from 0.25.0 loaded, covering no release at all."""
    from forge.patching.series import load_series
    from tests.fixtures_patches import real_patch_entry, write_series

    entry, diff = real_patch_entry()
    path = write_series(tmp_path, [entry], {entry["files"][0]["path"]: diff},
                        checked_from="0.25.0", checked_through="0.22.0")
    with pytest.raises(ForgeError) as failure:
        load_series(path)
    assert str(failure.value) == (f"{path}: checked_through: must not be before checked_from "
                                  f"0.25.0 (got 0.22.0)")
