"""`build.py new-patch` / `refresh-patch`: a release's real vllm/ tree unpacked into
build/patch-work/ID of a copy of the checkout, edited as a user would, then `--finish` writes
the diff, its sha256 and the manifest entry; the result is applied with the project's own apply
path and with git to fresh copies of the release."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from forge.commands.cli import build_parser
from forge.errors import ForgeError
from forge.patching import authoring, diff_writer, diffs, headers
from forge.patching.series import load_series, save_series
from forge.patching.status import status_of
from forge.upstream import releases
from tests.build_cli import REPO_ROOT, copy_checkout, run_build
from tests.fixtures_patches import make_site_packages, snapshot

METRICS = "vllm/v1/spec_decode/metrics.py"
OLD_LINE, NEW_LINE = '"SpecDecoding metrics: "', '"SpecDecoding metrics (vllm-forge): "'
FINISH_FIELDS = ["--title", "Mark the drafter's metrics line", "--why", "Logs show the patched engine.",
                 "--issue", "44006"]


def forge(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return run_build(*args, cwd=repo, timeout=600)


def work(repo: Path, patch_id: str) -> Path:
    return repo / "build" / "patch-work" / patch_id


def edit(path: Path, old: str, new: str) -> bytes:
    text = path.read_text()
    assert text.count(old) == 1, path
    path.write_text(text.replace(old, new))
    return path.read_bytes()


def entry(repo: Path, patch_id: str) -> dict:
    data = yaml.safe_load((repo / "patches" / "series.yaml").read_text())
    return next(p for p in data["patches"] if p["id"] == patch_id)


def status_line(repo: Path, vllm: str, patch_id: str) -> list[str]:
    result = forge(repo, "patches", "--vllm", vllm)
    assert result.returncode in (0, 3), result.stderr     # 3: some patch conflicts there
    return next(line.split() for line in result.stdout.splitlines() if line.startswith(patch_id + " "))


def git_apply_check(diff: Path, vllm: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`git apply --check` in a fresh copy of the release's files the diff names (all that git
    reads of the tree: a file it adds must be absent, one it changes present and matching)."""
    tree, release = tmp_path / f"fresh-{vllm}-{diff.stem}", releases.release_tree(vllm)
    named = re.findall(r"^(?:---|\+\+\+) [ab]/(\S+)$", diff.read_text(), re.M)
    assert named, f"{diff} names no file"
    for relative in named:
        if (release / relative).is_file():
            (tree / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(release / relative, tree / relative)
    tree.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["git", "apply", "--check", str(diff)], cwd=tree, capture_output=True,
                          text=True, env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)})


def test_new_patch_on_a_real_release_gives_a_diff_that_applies(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    started = forge(repo, "new-patch", "spec-metrics-mark", "--vllm", "0.25.0")
    assert started.returncode == 0, started.stderr
    assert "build/patch-work/spec-metrics-mark/vllm" in started.stdout
    assert "new-patch spec-metrics-mark --vllm 0.25.0 --finish" in started.stdout
    edited = edit(work(repo, "spec-metrics-mark") / METRICS, OLD_LINE, NEW_LINE)
    finished = forge(repo, "new-patch", "spec-metrics-mark", "--vllm", "0.25.0", "--finish",
                     *FINISH_FIELDS)
    assert finished.returncode == 0, finished.stderr
    assert "spec-metrics-mark  0.24.0  not-needed" in finished.stdout
    assert "spec-metrics-mark  0.33.0  applies" in finished.stdout
    assert not work(repo, "spec-metrics-mark").exists()
    diff = repo / "patches" / "source" / "spec-metrics-mark.diff"
    added = entry(repo, "spec-metrics-mark")
    assert added["kind"] == "source" and added["releases"] == ">=0.25.0"
    assert added["upstream"] == {"issue": 44006} and added["why"] == "Logs show the patched engine.\n"
    assert added["files"] == [{"path": "source/spec-metrics-mark.diff",
                               "sha256": hashlib.sha256(diff.read_bytes()).hexdigest()}]
    assert headers.body_of(diff.read_bytes()).startswith(f"--- a/{METRICS}\n+++ b/{METRICS}\n".encode())
    assert load_series(repo / "patches" / "series.yaml", check_index=False).patches[-1].id == \
        "spec-metrics-mark"
    assert status_line(repo, "0.25.0", "spec-metrics-mark")[:3] == ["spec-metrics-mark", "source",
                                                                      "applies"]
    assert git_apply_check(diff, "0.25.0", tmp_path).returncode == 0
    site = make_site_packages("0.25.0", tmp_path / "site")
    applied = forge(repo, "apply", "--site-packages", str(site))
    assert applied.returncode == 0, applied.stderr
    installed = (site / METRICS).read_bytes()
    assert NEW_LINE.encode() in installed and OLD_LINE.encode() not in installed
    others = [p.id for p in load_series(repo / "patches" / "series.yaml", check_index=False).patches
              if METRICS in (p.touches or []) and p.id != "spec-metrics-mark"]
    if not others:          # a patch added since may change the same file elsewhere
        assert installed == edited
    assert forge(repo, "patch-headers", "--check").returncode == 0


def test_a_change_that_overlaps_an_earlier_patch_is_refused(tmp_path):
    """`apply` stacks the series in order: a diff that fits the pristine release but not after
    gemma4-mtp-share-embeddings (same lines) would fail every 0.25.0 image build."""
    repo = copy_checkout(tmp_path / "repo")
    assert forge(repo, "new-patch", "log-wording", "--vllm", "0.25.0").returncode == 0
    edit(work(repo, "log-wording") / "vllm/v1/spec_decode/llm_base_proposer.py",
         "Sharing target model embedding weights with the draft model.",
         "Sharing the target model's embedding weights with the draft model.")
    before = snapshot(repo / "patches")
    refused = forge(repo, "new-patch", "log-wording", "--vllm", "0.25.0", "--finish", *FINISH_FIELDS,
                    "--releases", ">=0.25.0,<0.27")
    assert refused.returncode == 3
    # the patches 0.25.0 takes before it, in series order, the overlapping one among them
    assert re.search(r"vLLM 0\.25\.0: log-wording does not fit once gemma4-mtp-share-embeddings"
                     r"(, [a-z0-9.-]+)* applied", refused.stderr), refused.stderr
    assert snapshot(repo / "patches") == before and work(repo, "log-wording").is_dir()


def _series_without_the_0_24_variant(repo: Path) -> None:
    """The series as it was before structured-draft-window-0.24 existed: one entry whose range
    takes in 0.24.0, whose loop its diff does not fit (a conflict there)."""
    series = load_series(repo / "patches" / "series.yaml", check_index=False)
    series.patches = [p for p in series.patches if p.id != "structured-draft-window-0.24"]
    series.get("structured-draft-window").releases = ">=0.21.0,<0.25"
    (repo / "patches" / "source" / "structured-draft-window-0.24.diff").unlink()
    save_series(series)


def test_refresh_patch_for_a_release_it_conflicts_on_adds_a_variant(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    _series_without_the_0_24_variant(repo)
    assert status_line(repo, "0.24.0", "structured-draft-window")[2] == "conflict"
    started = forge(repo, "refresh-patch", "structured-draft-window", "--vllm", "0.24.0")
    tree = work(repo, "structured-draft-window")
    rejected = tree / "vllm/v1/structured_output/__init__.py.rej"
    assert started.returncode == 1 and rejected.is_file()
    assert "__init__.py.rej" in started.stdout and "--finish" in started.stdout
    before = snapshot(repo / "patches")
    not_yet = forge(repo, "refresh-patch", "structured-draft-window", "--vllm", "0.24.0", "--finish")
    assert not_yet.returncode == 2 and "__init__.py.rej is left" in not_yet.stderr
    assert snapshot(repo / "patches") == before
    # The user's fix: upstream's own change of 0.24.0's loop (the committed variant's diff).
    rejected.unlink()
    upstream = load_series(check_index=False).get("structured-draft-window-0.24")
    _apply_in_place(tree, upstream)
    done = forge(repo, "refresh-patch", "structured-draft-window", "--vllm", "0.24.0", "--finish")
    assert done.returncode == 0, done.stderr
    assert "added structured-draft-window-0.24 for >=0.24.0,<0.25" in done.stdout
    assert entry(repo, "structured-draft-window")["releases"] == ">=0.21.0,<0.24.0"
    variant = entry(repo, "structured-draft-window-0.24")
    assert variant["releases"] == ">=0.24.0,<0.25" and variant["upstream"]["pr"] == 44297
    diff = repo / "patches" / variant["files"][0]["path"]
    assert variant["files"][0]["sha256"] == hashlib.sha256(diff.read_bytes()).hexdigest()
    assert git_apply_check(diff, "0.24.0", tmp_path).returncode == 0
    assert git_apply_check(diff, "0.23.0", tmp_path).returncode != 0
    assert status_line(repo, "0.24.0", "structured-draft-window-0.24")[2] == "applies"
    assert status_line(repo, "0.23.0", "structured-draft-window")[2] == "applies"
    assert status_line(repo, "0.24.0", "structured-draft-window")[2] == "not-needed"
    assert forge(repo, "patch-headers", "--check").returncode == 0


def _apply_in_place(tree: Path, patch) -> None:
    for rel, content in diffs.plan_diff(tree, patch.diffs).items():
        (tree / rel).write_bytes(content)


def test_refresh_patch_rewrites_the_diff_in_place_when_it_still_serves_every_release(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    patch_id = "gemma4-mtp-share-embeddings"
    assert forge(repo, "refresh-patch", patch_id, "--vllm", "0.26.0").returncode == 0
    tree = work(repo, patch_id)
    untouched = forge(repo, "refresh-patch", patch_id, "--vllm", "0.26.0", "--finish")
    assert untouched.returncode == 0 and "nothing to write" in untouched.stdout
    assert not tree.exists() and snapshot(repo / "patches") == snapshot(REPO_ROOT / "patches")
    assert forge(repo, "refresh-patch", patch_id, "--vllm", "0.25.0").returncode == 0
    edit(tree / "vllm/v1/spec_decode/llm_base_proposer.py", "# width check does not apply to them.",
         "# width check does not apply to them (MTP).")
    # No longer upstream's change, so from 0.27.0 (which carries upstream's) it fits neither way.
    conflicting = forge(repo, "refresh-patch", patch_id, "--vllm", "0.25.0", "--finish")
    assert conflicting.returncode == 3
    assert f"vLLM 0.27.0: {patch_id} would conflict" in conflicting.stderr and "--releases" in conflicting.stderr
    assert snapshot(repo / "patches") == snapshot(REPO_ROOT / "patches") and tree.is_dir()
    done = forge(repo, "refresh-patch", patch_id, "--vllm", "0.25.0", "--finish", "--releases", ">=0.21.0,<0.27")
    assert done.returncode == 0, done.stderr
    assert f"refreshed {patch_id} in place" in done.stdout
    series = load_series(repo / "patches" / "series.yaml", check_index=False)
    assert series.get(patch_id).releases == ">=0.21.0,<0.27"
    assert [p.id for p in series.patches] == [p.id for p in load_series(check_index=False).patches]
    assert b"(MTP)." in series.get(patch_id).files[0].absolute.read_bytes()
    for vllm in ("0.25.0", "0.25.1", "0.26.0"):
        version = Version(vllm)
        assert status_of(series.get(patch_id), releases.release_tree(vllm), version).status == "applies"


BAD_INPUT = [
    ("unknown id", ["refresh-patch", "no-such-patch", "--vllm", "0.25.0"], "refresh-patch ID: "),
    ("existing id", ["new-patch", "gemma4-mtp-share-embeddings", "--vllm", "0.25.0"], "new-patch ID: "),
    ("bad id", ["new-patch", "../escape", "--vllm", "0.25.0"], "new-patch ID: must be letters"),
    ("unpublished release", ["new-patch", "x-fix", "--vllm", "0.25.7"], "--vllm: vLLM 0.25.7 has no sdist"),
    ("release past the series", ["new-patch", "x-fix", "--vllm", "0.99.0"], "--vllm: 0.99.0 is newer"),
    ("no work dir", ["new-patch", "x-fix", "--vllm", "0.25.0", "--finish", *FINISH_FIELDS],
     "--finish: no work tree build/patch-work/x-fix"),
    ("no work dir (refresh)", ["refresh-patch", "structured-reasoning-trim", "--vllm", "0.24.0", "--finish"],
     "--finish: no work tree build/patch-work/structured-reasoning-trim"),
    ("entry flag too early", ["new-patch", "x-fix", "--vllm", "0.25.0", "--title", "t"],
     "--title: only with --finish"),
    ("refresh out of range", ["refresh-patch", "structured-draft-window", "--vllm", "0.26.0"],
     "--vllm: 0.26.0 is outside structured-draft-window's releases"),
    ("not a source patch", ["refresh-patch", "fastapi-included-router-path", "--vllm", "0.22.0"],
     "refresh-patch ID: fastapi-included-router-path is a dependency patch"),
    ("fix already upstream", ["refresh-patch", "gemma4-mtp-share-embeddings", "--vllm", "0.27.0"],
     "--vllm: gemma4-mtp-share-embeddings is already-upstream on vLLM 0.27.0"),
]


@pytest.fixture(scope="module")
def refusing_checkout(tmp_path_factory) -> Path:
    """One copy for every refusal: each case compares the whole copy before and after its own
    run, so a case that wrote anything fails itself, whichever ran before it."""
    return copy_checkout(tmp_path_factory.mktemp("refusals") / "repo")


@pytest.mark.parametrize("name, args, message", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_one_line_naming_the_flag_and_writes_nothing(refusing_checkout, name, args, message):
    repo = refusing_checkout
    before = snapshot(repo)
    result = forge(repo, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr, result.stderr
    after = snapshot(repo)
    assert {k for k in after if "__pycache__" not in k} == {k for k in before if "__pycache__" not in k}
    assert all(after[k] == before[k] for k in before if "__pycache__" not in k)


def test_a_started_work_tree_is_not_overwritten_and_a_finish_needs_its_fields(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    assert forge(repo, "new-patch", "x-fix", "--vllm", "0.25.0").returncode == 0
    edited = edit(work(repo, "x-fix") / METRICS, OLD_LINE, NEW_LINE)
    again = forge(repo, "new-patch", "x-fix", "--vllm", "0.25.0")
    assert again.returncode == 2 and "build/patch-work/x-fix exists" in again.stderr
    assert (work(repo, "x-fix") / METRICS).read_bytes() == edited
    for args, flag in ((["--why", "w", "--issue", "1"], "--title"), (["--title", "t", "--why", "w"], "--issue"),
                       ([*FINISH_FIELDS, "--releases", ">=0.26"], "--releases"),
                       ([*FINISH_FIELDS, "--fixes-marker", "no such text"], "--fixes-marker")):
        refused = forge(repo, "new-patch", "x-fix", "--vllm", "0.25.0", "--finish", *args)
        assert refused.returncode == 2 and refused.stderr.startswith(f"error: {flag}: "), refused.stderr
    wrong_release = forge(repo, "new-patch", "x-fix", "--vllm", "0.26.0", "--finish", *FINISH_FIELDS)
    assert wrong_release.returncode == 2 and "--vllm: build/patch-work/x-fix holds vLLM 0.25.0" in \
        wrong_release.stderr
    assert snapshot(repo / "patches") == snapshot(REPO_ROOT / "patches")


def test_a_finish_killed_between_its_writes_is_completed_by_the_next(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    assert forge(repo, "new-patch", "x-fix", "--vllm", "0.25.0").returncode == 0
    tree = work(repo, "x-fix")
    edit(tree / METRICS, OLD_LINE, NEW_LINE)
    series = load_series(repo / "patches" / "series.yaml", check_index=False)
    fields = {"id": "x-fix", "title": "t", "why": "w\n", "releases": ">=0.25.0",
              "upstream": {"issue": 1}, "fixes_marker": None}
    outcome = authoring.new_entry(series, tree, "0.25.0", fields)
    # Killed after the journal and the diff, before the manifest: what the finish had written.
    (tree / "finish.json").write_text(json.dumps({str(k): v.decode() for k, v in outcome.writes.items()}))
    diff_path, manifest = list(outcome.writes)
    diff_path.write_bytes(outcome.writes[diff_path])
    assert "x-fix" not in manifest.read_text()
    resumed = forge(repo, "new-patch", "x-fix", "--vllm", "0.25.0", "--finish")
    assert resumed.returncode == 0, resumed.stderr
    assert "completed the finish that was interrupted" in resumed.stdout
    assert not tree.exists()
    assert load_series(manifest, check_index=False).get("x-fix").files[0].absolute == diff_path
    assert forge(repo, "new-patch", "x-fix", "--vllm", "0.25.0").returncode == 2   # the id is taken


GUIDE = REPO_ROOT / "docs" / "guides" / "adding-a-patch.md"


def guide_commands() -> list[list[str]]:
    """Every `python3 build.py ...` line of the guide's shell blocks, continuations joined."""
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line)[2:] for line in lines if line.startswith("python3 build.py ")]


def test_every_command_of_the_guide_parses_as_typed():
    commands = guide_commands()
    assert {c[0] for c in commands} >= {"new-patch", "refresh-patch", "patch-headers", "patches"}
    parser = build_parser()
    for words in commands:
        parser.parse_args(words)        # argparse exits (fails the test) on a flag it lacks


def test_a_hunk_whose_context_repeats_gets_more_until_it_fits_once():
    """vLLM 0.25.0's assets/video.py holds the same 6 lines twice (lines 44-49 and 81-86): a diff
    with diff's usual 3 lines of context would fit two places, which the engine refuses."""
    rel = "vllm/assets/video.py"
    old = (releases.release_tree("0.25.0") / rel).read_bytes()
    lines = old.split(b"\n")
    assert lines[43:49] == lines[80:86]
    new = b"\n".join([*lines[:46], b"    # opened above", *lines[46:]])
    written = diff_writer.file_diff(rel, old, new)
    (parsed,) = diffs.parse_diff(written, rel)
    assert len(parsed.hunks[0].old_lines) > 6           # more than 3 lines each side
    assert diffs.plan_file(Path(rel), parsed, old) == new


def test_added_and_deleted_files_are_diffed_and_stale_tool_files_are_not(tmp_path):
    pristine = releases.release_tree("0.25.0")
    edited = tmp_path / "edited"
    shutil.copytree(pristine / "vllm", edited / "vllm")
    (edited / "vllm/assets/video.py").unlink()
    (edited / "vllm/forge_note.py").write_text("NOTE = 'patched'\n")
    (edited / "vllm/__pycache__").mkdir(exist_ok=True)
    (edited / "vllm/__pycache__/forge_note.cpython-312.pyc").write_bytes(b"\0compiled")
    (edited / "vllm/envs.py.orig").write_text("left by patch\n")
    written = diff_writer.tree_diff(pristine, edited)
    parsed = diffs.parse_diff(written, "tree.diff")
    assert [(d.old_path, d.new_path) for d in parsed] == [
        ("vllm/assets/video.py", None), (None, "vllm/forge_note.py")]
    planned = diffs.plan_diff(pristine, parsed)
    assert planned == {"vllm/assets/video.py": None, "vllm/forge_note.py": b"NOTE = 'patched'\n"}
    fresh = tmp_path / "fresh"
    shutil.copytree(pristine / "vllm", fresh / "vllm")
    (tmp_path / "tree.diff").write_bytes(written)
    git = subprocess.run(["git", "apply", str(tmp_path / "tree.diff")], cwd=fresh, capture_output=True,
                         text=True, env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert git.returncode == 0, git.stderr
    assert not (fresh / "vllm/assets/video.py").exists()
    assert (fresh / "vllm/forge_note.py").read_text() == "NOTE = 'patched'\n"


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_symbolic_link_in_the_edited_tree_is_refused_not_read_through(tmp_path, link):
    # A link to a file outside the tree put that file's bytes into the patch, exit 0.
    pristine = releases.release_tree("0.25.0")
    edited = tmp_path / "edited"
    shutil.copytree(pristine / "vllm", edited / "vllm")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("TOKEN = 'not for a patch'\n")
    where = edited / "vllm" / ("stolen.py" if link == "file" else "stolen")
    where.symlink_to(outside / "secret.py" if link == "file" else outside)
    with pytest.raises(ForgeError, match="a symbolic link; a source patch holds regular files only"):
        diff_writer.tree_diff(pristine, edited)
