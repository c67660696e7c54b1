"""forge.patching.diffs: the strict pure-Python unified-diff engine.

Small hand-made cases pin the rules (exactly one match, byte-exact lines, reverse = swap
sides); the real-source tests cross-check the engine against `git apply` on real vLLM release
trees: upstream's own 0.25.0 -> 0.26.0 change set, and our patch on every checked release.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from forge.patching import diffs
from forge.patching.series import load_series
from forge.upstream import releases

SIMPLE = b"""# header comment: ignored
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -2,3 +2,3 @@
 def f():
-    return 1
+    return 2
 
"""


def write(root: Path, rel: str, data: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_applies_where_the_old_lines_are_even_if_the_line_number_is_wrong(tmp_path):
    write(tmp_path, "pkg/mod.py", b"import os\n\n\n\n\ndef f():\n    return 1\n\nx = 1\n")
    planned = diffs.plan_diff(tmp_path, diffs.parse_diff(SIMPLE, "simple.diff"))
    assert planned == {"pkg/mod.py": b"import os\n\n\n\n\ndef f():\n    return 2\n\nx = 1\n"}


def test_reverse_swaps_sides_and_restores_bytes(tmp_path):
    original = b"import os\ndef f():\n    return 1\n\nx = 1\n"
    write(tmp_path, "pkg/mod.py", original)
    parsed = diffs.parse_diff(SIMPLE, "simple.diff")
    patched = diffs.plan_diff(tmp_path, parsed)["pkg/mod.py"]
    write(tmp_path, "pkg/mod.py", patched)
    assert diffs.plan_diff(tmp_path, parsed, reverse=True)["pkg/mod.py"] == original
    with pytest.raises(diffs.HunkError, match="match nowhere"):
        diffs.plan_diff(tmp_path, parsed)   # forward no longer fits


def test_several_matches_is_an_error_naming_file_hunk_and_lines(tmp_path):
    write(tmp_path, "pkg/mod.py", b"def f():\n    return 1\n\ndef f():\n    return 1\n\n")
    with pytest.raises(diffs.HunkError) as caught:
        diffs.plan_diff(tmp_path, diffs.parse_diff(SIMPLE, "simple.diff"))
    assert str(caught.value) == ("pkg/mod.py: hunk 1 (line 2): its old lines match 2 places "
                                 "(lines 1, 4)")


def test_no_match_names_the_file_and_hunk(tmp_path):
    write(tmp_path, "pkg/mod.py", b"def f():\n    return 3\n\n")
    with pytest.raises(diffs.HunkError, match=r"pkg/mod.py: hunk 1 \(line 2\): .*match nowhere"):
        diffs.plan_diff(tmp_path, diffs.parse_diff(SIMPLE, "simple.diff"))


def test_lines_compare_byte_exact_crlf_and_whitespace_differ(tmp_path):
    write(tmp_path, "pkg/mod.py", b"def f():\r\n    return 1\r\n\r\n")
    with pytest.raises(diffs.HunkError):
        diffs.plan_diff(tmp_path, diffs.parse_diff(SIMPLE, "simple.diff"))
    write(tmp_path, "pkg/mod.py", b"def f():\n    return 1 \n\n")   # trailing space
    with pytest.raises(diffs.HunkError):
        diffs.plan_diff(tmp_path, diffs.parse_diff(SIMPLE, "simple.diff"))


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(diffs.HunkError, match="pkg/mod.py: file not found"):
        diffs.plan_diff(tmp_path, diffs.parse_diff(SIMPLE, "simple.diff"))


def test_no_newline_at_end_of_file_round_trips(tmp_path):
    diff = (b"--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n"
            b"+c\n\\ No newline at end of file\n")
    write(tmp_path, "f.txt", b"a\nb")
    parsed = diffs.parse_diff(diff, "eof.diff")
    assert diffs.plan_diff(tmp_path, parsed) == {"f.txt": b"a\nc"}
    write(tmp_path, "f.txt", b"a\nb\n")   # with a newline the old side does not match
    with pytest.raises(diffs.HunkError):
        diffs.plan_diff(tmp_path, parsed)


def test_create_and_delete_files(tmp_path):
    create = b"--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
    parsed = diffs.parse_diff(create, "create.diff")
    assert diffs.plan_diff(tmp_path, parsed) == {"new.txt": b"one\ntwo\n"}
    write(tmp_path, "new.txt", b"one\ntwo\n")
    assert diffs.plan_diff(tmp_path, parsed, reverse=True) == {"new.txt": None}
    with pytest.raises(diffs.HunkError, match="creates this file but it exists"):
        diffs.plan_diff(tmp_path, parsed)


def test_stacked_contents_let_a_second_diff_see_the_first(tmp_path):
    write(tmp_path, "pkg/mod.py", b"def f():\n    return 1\n\n")
    first = diffs.plan_diff(tmp_path, diffs.parse_diff(SIMPLE, "one.diff"))
    second = SIMPLE.replace(b"return 1", b"return 9").replace(b"return 2", b"return 1")
    second = second.replace(b"return 9", b"return 2")   # 2 -> 1: fits only after the first
    planned = diffs.plan_diff(tmp_path, diffs.parse_diff(second, "two.diff"), contents=first)
    assert planned["pkg/mod.py"] == b"def f():\n    return 1\n\n"


@pytest.mark.parametrize("text, problem", [
    (b"just prose\n", "no file sections"),
    (b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n", "ends early"),
    (b"--- a/x\n+++ b/x\n@@ nonsense @@\n", "malformed hunk header"),
    (b"--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n?a\n", "unexpected line"),
    (b"--- x\n+++ x\n@@ -1,1 +1,1 @@\n-a\n+b\n", "lacks the a/ or b/ prefix"),
])
def test_malformed_diffs_are_one_line_errors_naming_the_file(text, problem):
    with pytest.raises(diffs.DiffFormatError) as caught:
        diffs.parse_diff(text, "bad.diff")
    assert str(caught.value).startswith("bad.diff: ") and problem in str(caught.value)
    assert "\n" not in str(caught.value)


# --- cross-checks against git apply on real vLLM release trees ---------------------------------

def _git_apply_ok(tree: Path, diff_file: Path, reverse: bool = False) -> bool:
    command = ["git", "apply", "--check", *(["-R"] if reverse else []), str(diff_file)]
    return subprocess.run(command, cwd=tree, capture_output=True).returncode == 0


@pytest.mark.slow
def test_agrees_with_git_apply_for_our_patch_on_every_checked_release():
    series = load_series()
    versions = [str(v) for v in releases.list_releases(minimum=series.checked_from)]
    assert len(versions) >= 13
    for patch in series.patches:
        if patch.kind != "source":
            continue
        for version in versions:
            tree = releases.release_tree(version)
            for diff_file in patch.files:
                for reverse in (False, True):
                    ours = _engine_ok(tree, patch.diffs, reverse)
                    git = _git_apply_ok(tree, diff_file.absolute, reverse)
                    assert ours == git, (version, patch.id, "reverse" if reverse else "forward")


def _engine_ok(tree: Path, parsed, reverse: bool) -> bool:
    try:
        diffs.plan_diff(tree, parsed, reverse=reverse)
        return True
    except diffs.HunkError:
        return False


@pytest.mark.slow
def test_upstream_release_to_release_diff_gives_the_same_bytes_as_git_apply(tmp_path):
    """Diff the real 0.25.0 and 0.26.0 trees with git; apply it with our engine and with git."""
    old, new = releases.release_tree("0.25.0"), releases.release_tree("0.26.0")
    work = tmp_path / "work"
    shutil.copytree(old / "vllm", work / "a" / "vllm")
    shutil.copytree(new / "vllm", work / "b" / "vllm")
    diff_text = subprocess.run(["git", "diff", "--no-index", "--no-prefix", "-U3", "--no-renames",
                                "a/vllm", "b/vllm"], cwd=work, capture_output=True).stdout
    parsed = diffs.parse_diff(diff_text, "0.25.0-to-0.26.0.diff")
    assert len(parsed) > 400    # ~500 files change between these releases
    git_tree = tmp_path / "git"
    shutil.copytree(old / "vllm", git_tree / "vllm")
    (tmp_path / "all.diff").write_bytes(diff_text)
    subprocess.run(["git", "apply", str(tmp_path / "all.diff")], cwd=git_tree, check=True)
    fitted = ambiguous = 0
    for file_diff in parsed:
        try:
            planned = diffs.plan_diff(old, [file_diff])
        except diffs.HunkError as error:
            # Strictness is the only allowed difference: git places a hunk by its line number
            # when its old lines occur several times; we refuse.
            assert "places" in error.problem, str(error)
            ambiguous += 1
            continue
        fitted += 1
        for rel, data in planned.items():
            expected = (new / rel).read_bytes() if (new / rel).exists() else None
            assert data == expected, rel
            from_git = git_tree / rel
            assert data == (from_git.read_bytes() if from_git.exists() else None), rel
        try:   # and back again: the reverse on 0.26.0 restores 0.25.0 exactly
            back = diffs.plan_diff(new, [file_diff], reverse=True)
        except diffs.HunkError as error:
            assert "places" in error.problem, str(error)
            continue
        for rel, data in back.items():
            assert data == ((old / rel).read_bytes() if (old / rel).exists() else None), rel
    assert fitted > 0.9 * len(parsed), (fitted, ambiguous)


# --- paths: a diff names files inside the tree it is applied to (issue 20, item 8) --------------

@pytest.mark.parametrize("old, new", [
    ("/dev/null", "b/../x.py"),                 # up out of the tree
    ("a/pkg/../../x.py", "b/pkg/../../x.py"),   # up out of the tree, from inside it
    ("/dev/null", "b//abs/path.py"),            # an absolute path after the prefix
    ("a//abs/path.py", "b/pkg/mod.py"),         # on the old side too
    ("/dev/null", "b/pkg\\..\\..\\x.py"),       # a Windows separator
    ("/dev/null", "b/"),                        # no file at all
])
def test_a_diff_path_outside_the_tree_is_refused_at_parse_naming_file_and_line(old, new):
    data = f"--- {old}\n+++ {new}\n@@ -0,0 +1 @@\n+x = 1\n".encode()
    bad = next(name for name in (old, new) if name != "/dev/null" and name != "b/pkg/mod.py")
    line = 1 if bad == old else 2
    with pytest.raises(diffs.DiffFormatError) as refused:
        diffs.parse_diff(data, "escape.diff")
    assert str(refused.value) == (f"escape.diff: line {line}: file name {bad!r} is not a relative "
                                  "path inside the tree (no leading /, no .., no backslash)")


def test_a_diff_path_is_kept_in_its_normal_form():
    data = b"--- a/pkg/./mod.py\n+++ b/pkg//mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    [parsed] = diffs.parse_diff(data, "dots.diff")
    assert (parsed.old_path, parsed.new_path) == ("pkg/mod.py", "pkg/mod.py")
