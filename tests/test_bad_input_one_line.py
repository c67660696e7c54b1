"""Hostile input through the real CLI (issue 20, item 4): every cause that used to end in a
traceback is one line naming the file and field (or the flag), exit 2, and nothing is written.

Each test runs `python3 build.py ...` in a fresh process against real files: copies of the
project's own YAML, real verify reports written by verify's writer, real directories."""
import json
import shutil
from pathlib import Path

import pytest

from forge.schema import kind_name
from tests.build_cli import REPO_ROOT, run_build
from tests.test_published import DIGEST_A, REPOSITORY, TAG, write_report


def assert_one_line_refusal(result, *expected_parts: str) -> str:
    """Exit 2, no traceback, stderr one `error:` line holding every expected part."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for part in expected_parts:
        assert part in lines[0], lines[0]
    return lines[0]


def tree_of(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


# --- project YAML ------------------------------------------------------------------------------

def test_targets_yaml_that_is_not_utf8_is_one_line_naming_file_and_line(tmp_path):
    targets = tmp_path / "targets.yaml"
    original = (REPO_ROOT / "images" / "targets.yaml").read_bytes()
    targets.write_bytes(original + b"\n# caf\xe9\n")   # printf '\n# caf\xe9\n' >> images/targets.yaml
    line = original.count(b"\n") + 2
    result = run_build("--target", "gb10", "--vllm", "0.27.1", "--plan",
                       env={"VLLM_FORGE_TARGETS": str(targets)})
    assert_one_line_refusal(result, f"{targets}: line {line}: not UTF-8 text (byte 0xe9)")
    assert result.stdout == ""


def copy_of_patches(tmp_path: Path) -> Path:
    shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches")
    return tmp_path / "patches" / "series.yaml"


def text_lines(path: Path) -> int:
    return path.read_text().count("\n")


def test_series_with_two_unknown_keys_of_different_types_is_one_line(tmp_path):
    series = copy_of_patches(tmp_path)
    with series.open("a") as out:
        out.write("1: x\nzz: y\n")           # printf '1: x\nzz: y\n' >> patches/series.yaml
    before = tree_of(tmp_path)
    result = run_build("patches", "--vllm", "0.25.0", "--offline",
                       env={"VLLM_FORGE_SERIES": str(series)})
    # a number as a key is refused where the YAML is read, with its line (it would reach sorted()
    # beside the text keys)
    line = text_lines(series) - 1
    assert_one_line_refusal(result, f"{series}: line {line}: the key '1' is read as a number, "
                                    "not text (keys must be text: quote it)")
    assert tree_of(tmp_path) == before


def test_series_mapping_keys_of_mixed_types_in_a_patch_entry_are_one_line(tmp_path):
    series = copy_of_patches(tmp_path)
    text = series.read_text()
    series.write_text(text.replace("  title: Share the target", "  7: seven\n  zz: y\n  title: Share the target", 1))
    result = run_build("patches", "--vllm", "0.25.0", "--offline",
                       env={"VLLM_FORGE_SERIES": str(series)})
    line = series.read_text().split("\n").index("  7: seven") + 1
    assert_one_line_refusal(result, f"{series}: line {line}: the key '7' is read as a number")


# --- output paths: checked before anything is written or moved ----------------------------------

def publish_args(index: Path, report: Path, *extra: str) -> list[str]:
    return ["publish", "--index", str(index), "--repository", REPOSITORY, "--target", "gb10",
            "--vllm", "0.27.1", "--immutable-tag", TAG, "--digest", DIGEST_A,
            "--verify-report", str(report), *extra]


def test_publish_github_output_into_a_missing_directory_writes_no_index(tmp_path):
    report = write_report(tmp_path, True)
    index = tmp_path / "published.json"
    outputs = tmp_path / "missing" / "github_output"
    result = run_build(*publish_args(index, report, "--github-output", str(outputs)))
    assert_one_line_refusal(result, f"--github-output {outputs}: the folder {outputs.parent} "
                                    "does not exist")
    assert not index.exists()          # the index used to be written before the output failed
    assert result.stdout == ""


def test_publish_index_naming_a_directory_is_one_line(tmp_path):
    report = write_report(tmp_path, True)
    before = tree_of(tmp_path)
    result = run_build(*publish_args(tmp_path, report))
    assert_one_line_refusal(result, f"--index {tmp_path}: is a directory, not a file")
    assert tree_of(tmp_path) == before


def test_published_index_naming_a_directory_is_one_line(tmp_path):
    result = run_build("published", "--index", str(tmp_path))
    assert_one_line_refusal(result, f"{tmp_path}: is a directory, not a regular file; an index "
                                    "must be a regular file")


@pytest.mark.parametrize("command, flag", [
    (["bake", "--vllm", "0.25.0"], "--output"),
    (["release-matrix", "--vllm", "0.25.0"], "--github-output"),
    (["upstream-watch", "--offline"], "--pr-body"),
    (["upstream-watch", "--offline"], "--github-output"),
    (["tune-moe", "--dtype", "bf16"], "--results"),     # refused before the GPU run, not after
])
@pytest.mark.parametrize("bad", ["directory", "missing folder"])
def test_output_file_flags_are_checked_before_the_command_runs(tmp_path, command, flag, bad):
    target = tmp_path if bad == "directory" else tmp_path / "missing" / "out"
    problem = ("is a directory, not a file" if bad == "directory"
               else f"the folder {tmp_path / 'missing'} does not exist")
    result = run_build(*command, flag, str(target))
    assert_one_line_refusal(result, f"{flag} {target}: {problem}")
    assert list(tmp_path.iterdir()) == []   # bake used to unpack its build contexts first
    assert result.stdout == ""


# --- verify reports ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", [["architectures"], {"architectures": 1}, 7])
def test_publish_refuses_a_report_whose_check_name_is_not_text(tmp_path, name):
    report = write_report(tmp_path, True)
    data = json.loads(report.read_text())
    data["checks"][0]["name"] = name
    report.write_text(json.dumps(data))
    index = tmp_path / "published.json"
    result = run_build(*publish_args(index, report))
    assert_one_line_refusal(result, f"{report}: checks[0].name: must be a string "
                                    f"(got {kind_name(type(name))})")
    assert not index.exists()


def test_publish_refuses_a_report_whose_check_gating_is_not_a_boolean(tmp_path):
    report = write_report(tmp_path, True)
    data = json.loads(report.read_text())
    data["checks"][1]["gating"] = "yes"
    report.write_text(json.dumps(data))
    result = run_build(*publish_args(tmp_path / "published.json", report))
    assert_one_line_refusal(result, f"{report}: checks[1].gating: must be a boolean (got a string)")


# --- the cache -----------------------------------------------------------------------------------

def test_cache_variable_naming_a_file_is_one_line_and_the_file_is_kept(tmp_path):
    cache = tmp_path / "cache"
    cache.write_text("not a directory\n")
    result = run_build("patches", "--vllm", "0.25.0", env={"VLLM_FORGE_CACHE": str(cache)})
    assert_one_line_refusal(result, f"$VLLM_FORGE_CACHE {cache}: is not a directory")
    assert cache.read_text() == "not a directory\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]


# --- usage errors: one line naming the command and the flag, not the whole usage ------------------

@pytest.mark.parametrize("args, expected", [
    (["serve", "--recipe", "r", "--target", "t", "--vllm", "0.27.1", "--port", "abc"],
     "error: build.py serve: argument --port: invalid int value: 'abc'"),
    (["tune-moe", "--batch-sizes", "1,,2"],
     "error: build.py tune-moe: argument --batch-sizes: not comma-separated whole numbers: '1,,2'"),
    (["tune-moe", "--k", "0"], "error: build.py tune-moe: argument --k: every number must be 1 or more"),
    (["roofline", "--recipe", "r", "--target", "t", "--vllm", "0.27.1", "--step-cost-ratio", "nan"],
     "argument --step-cost-ratio: must be a finite number above 0 (got 'nan')"),
    (["patches", "--vllm", "0.25.0", "\x1b[2J"], "unrecognized arguments: \\x1b[2J"),
])
def test_usage_error_is_one_line_naming_the_flag(args, expected):
    result = run_build(*args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert "\x1b" not in result.stderr
