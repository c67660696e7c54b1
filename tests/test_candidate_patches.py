"""Candidate patches (series.yaml `candidate: true`) and the first of them: the backport of vLLM PR
#52879, which lets the speculative verify pass use the Triton 3D split-KV attention path (the
other, triton-attn-group-kv-heads, is tested in tests/test_candidate_group_kv_heads.py).

A candidate's status is computed and shown like every patch's, on the real release trees; `build.py
apply` on a real unpacked install leaves it out unless `--with-candidate ID` names it, and the
image plan (what the Dockerfile's `build.py apply` writes) never carries it.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.patching import diffs
from forge.patching.readme_table import BEGIN, END, checked_releases
from forge.patching.series import load_series
from forge.patching.status import applied_statuses, release_status
from forge.upstream import releases
from tests.build_cli import copy_checkout
from tests.build_cli import run_build as run_in
from tests.fixtures_patches import real_patch_entry, snapshot, statuses_on_checked_releases, write_series
from tests.test_images_plan import copy_repo, plan, write_lock
from tests.test_patch_series import run_build

REPO = Path(__file__).resolve().parents[1]
PATCH = "triton-spec-decode-split-kv"
FLAG = "--with-candidate"
BACKEND = "vllm/v1/attention/backends/triton_attn.py"
LAUNCHER = "vllm/v1/attention/ops/triton_unified_attention.py"
A, N, C = "applies", "not-needed", "conflict"
APPLIES_ON = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0")
EXPECTED = {v: (A if v in APPLIES_ON else N) for v in (
    "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0",
    "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")}
# The launcher's gate before the patch: every multi-row batch on the 2D path.
OLD_GATE = b"        or max_seqlen_q > 1\n        or num_seqs > seq_threshold_3D\n"
# 0.33.0 carries upstream's own version of the change.
UPSTREAM_OWN = b"max_seqlen_q > MAX_3D_QUERY_LEN"



def test_the_candidate_is_in_the_manifest_as_one():
    series = load_series()
    patch = series.get(PATCH)
    assert patch.candidate and patch.kind == "source"
    assert PATCH in [p.id for p in series.patches if p.candidate]
    assert {k: v for k, v in patch.upstream.items() if v} == {"issue": 48076, "pr": 52879}
    assert patch.touches == [BACKEND, LAUNCHER]
    assert set(checked_releases(series)) == set(EXPECTED)


def test_status_on_every_release_is_what_its_source_says():
    patch = load_series().get(PATCH)
    for version, tree, computed in statuses_on_checked_releases(PATCH):
        assert computed.status == EXPECTED[version], (version, computed)
        launcher = (tree / LAUNCHER).read_bytes()
        if computed.status == A:
            assert OLD_GATE in launcher, version
            for rel, new in diffs.plan_diff(tree, patch.diffs).items():
                compile(new, rel, "exec", dont_inherit=True)
        # Outside the range: 0.21.0-0.27.0 (the diff fits, but only 0.27.1 on was read and
        # checked), 0.32.0 (the scratch sizing was rewritten: the diff conflicts) and 0.33.0
        # (upstream's own gate).
        if version == "0.32.0":
            with pytest.raises(diffs.HunkError):
                diffs.plan_diff(tree, patch.diffs)
        if version == "0.33.0":
            assert UPSTREAM_OWN in launcher and OLD_GATE not in launcher


def test_the_change_leaves_a_run_without_speculation_as_it_was():
    """Read from the patched 0.27.1 files: max_q_len_3D is 1 without a speculative config, the
    launcher's default is 1, so the scratch has seq_threshold_3D rows and the gate is the old one."""
    series = load_series()
    tree = releases.release_tree("0.27.1")
    patched = {rel: new.decode() for rel, new in
               diffs.plan_diff(tree, series.get(PATCH).diffs).items()}
    backend, launcher = patched[BACKEND], patched[LAUNCHER]
    assert "spec_config.num_speculative_tokens if spec_config is not None else 0" in backend
    assert "self.max_q_len_3D = min(1 + num_spec_tokens, MAX_Q_LEN_3D)" in backend
    assert "segm_rows = self.seq_threshold_3D * self.max_q_len_3D" in backend
    assert backend.count("(segm_rows, self.num_heads_q, self.num_par_softmax_segments)") == 2
    assert "    max_q_len_3D=1,\n" in launcher
    assert "        or max_seqlen_q > max_q_len_3D\n" in launcher
    # the other new conditions hold only for multi-row batches
    assert "            max_seqlen_q > 1\n            and (\n" \
           "                q.shape[0] > softmax_segm_output.shape[0]\n" in launcher


def patches_row(patch_id: str, version: str) -> list[str]:
    """The first three cells of a patch's row in `build.py patches --vllm VERSION --offline`."""
    result = run_build("patches", "--vllm", version, "--offline")
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith(patch_id)).split()[:3]


def test_build_patches_marks_the_candidate():
    result = run_build("patches", "--vllm", "0.27.1", "--offline")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith(PATCH))
    assert row.split()[:3] == [f"{PATCH}*", "source", A]
    assert f"*: a candidate: status shown, but `build.py apply` and image builds leave it out " \
           f"unless asked (`{FLAG} ID`)" in result.stdout
    matrix = run_build("patches", "--all", "--offline")
    assert matrix.returncode == 0, matrix.stderr
    assert f"{PATCH}*" in matrix.stdout.splitlines()[0].split()
    as_json = json.loads(run_build("patches", "--vllm", "0.27.1", "--offline", "--json").stdout)
    entry = next(p for p in as_json["patches"] if p["id"] == PATCH)
    assert entry["candidate"] is True and entry["status"] == A


def test_apply_leaves_the_candidate_out_unless_asked(vllm_site):
    site = vllm_site("0.27.1")
    original = snapshot(site)
    plain = run_build("apply", "--site-packages", str(site), "--vllm", "0.27.1")
    assert plain.returncode == 0, plain.stderr
    assert PATCH not in plain.stdout.splitlines()[0]
    assert f"{PATCH}: candidate, not applied ({A}); `{FLAG} {PATCH}` applies it" in plain.stdout
    # 0.27.1 needs no other file patched (this site holds no transformers to pin): nothing written.
    assert plain.stdout.startswith("nothing to apply to vLLM 0.27.1"), plain.stdout
    assert snapshot(site) == original

    asked = run_build("apply", "--site-packages", str(site), "--vllm", "0.27.1", FLAG, PATCH)
    assert asked.returncode == 0, asked.stderr
    assert PATCH in asked.stdout.splitlines()[0]
    assert PATCH in _record(site)["applied"]
    for rel in (BACKEND, LAUNCHER):
        assert (site / rel).read_bytes() != original[rel], rel
        compile((site / rel).read_bytes(), rel, "exec", dont_inherit=True)
    assert b"or max_seqlen_q > max_q_len_3D\n" in (site / LAUNCHER).read_bytes()
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original


def _record(site: Path) -> dict:
    return json.loads((site / "vllm" / ".vllm-forge" / "applied.json").read_text())


@pytest.mark.parametrize("patch_id, problem", [
    ("no-such-patch", "has no patch with that id"),
    ("gemma4-mtp-share-embeddings", "not a candidate in"),
])
def test_a_bad_with_candidate_is_refused_in_one_line(vllm_site, patch_id, problem):
    site = vllm_site("0.27.1")
    original = snapshot(site)
    result = run_build("apply", "--site-packages", str(site), FLAG, PATCH, FLAG, patch_id)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {FLAG} {patch_id}: "), lines
    assert problem in lines[0]
    assert snapshot(site) == original


def test_with_candidate_and_revert_are_refused_together(vllm_site):
    result = run_build("apply", "--site-packages", str(vllm_site("0.27.1")), "--revert", FLAG, PATCH)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {FLAG}: not with --revert (a revert restores every patched file, candidates "
        "included)"]


def test_the_image_plan_and_the_dockerfile_leave_the_candidate_out(tmp_path):
    series = load_series()
    statuses = release_status("0.27.1", offline=True, series=series)
    assert PATCH in {s.id for s in statuses}
    assert PATCH not in {s.id for s in applied_statuses(statuses, series)}
    assert PATCH in {s.id for s in applied_statuses(statuses, series, frozenset({PATCH}))}
    repo = copy_repo(tmp_path / "repo")
    entry = plan(repo, "h200", "0.27.1", write_lock(tmp_path / "lock.yaml", "0.27.1"))
    assert PATCH not in {p["id"] for p in entry["patches"]}
    assert PATCH not in json.dumps(entry)
    assert FLAG not in (REPO / "images" / "Dockerfile").read_text()


@pytest.mark.parametrize("value, problem", [
    (False, "write it only as `candidate: true`"),
    ("yes", "must be"),
])
def test_a_bad_candidate_field_is_refused_naming_file_and_field(tmp_path, value, problem):
    entry, diff = real_patch_entry(candidate=value)
    path = write_series(tmp_path, [entry], {"source/p.diff": diff})
    with pytest.raises(ForgeError) as caught:
        load_series(path, check_index=False)
    message = str(caught.value)
    assert message.startswith(f"{path}: patches[0].candidate: ") and problem in message
    assert "\n" not in message


def test_the_readme_table_marks_the_candidate():
    table = (REPO / "README.md").read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    header = table.strip().splitlines()[0]
    assert f"`{PATCH}` (candidate)" in header
    column = [c.strip() for c in header.split("|")].index(f"`{PATCH}` (candidate)")
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > column and cells[1] in EXPECTED:
            assert cells[column] == EXPECTED[cells[1]], line
    assert f"- `{PATCH}` (candidate: not applied by `build.py apply` or the images unless asked, " \
           f"`{FLAG} {PATCH}`)" in table


def test_git_apply_agrees_where_the_candidate_applies():
    patch = load_series().get(PATCH)
    for version in APPLIES_ON:
        result = subprocess.run(["git", "apply", "--check", str(patch.files[0].absolute)],
                                cwd=releases.release_tree(version), capture_output=True)
        assert result.returncode == 0, (version, result.stderr)


def test_a_refreshed_candidate_stays_a_candidate(tmp_path):
    """refresh-patch rewrites the entry from its fields: `candidate` is one of them."""
    checkout = copy_checkout(tmp_path / "checkout")
    started = run_in("refresh-patch", PATCH, "--vllm", "0.27.1", cwd=checkout)
    assert started.returncode == 0, started.stderr
    launcher = checkout / "build" / "patch-work" / PATCH / LAUNCHER
    text = launcher.read_text()
    launcher.write_text(text.replace("# Most query rows per sequence the 3D path takes",
                                     "# The most query rows per sequence the 3D path takes", 1))
    finished = run_in("refresh-patch", PATCH, "--vllm", "0.27.1", "--finish", cwd=checkout)
    assert finished.returncode == 0, finished.stderr
    refreshed = load_series(checkout / "patches" / "series.yaml", check_index=False).get(PATCH)
    assert refreshed.candidate and refreshed.files[0].sha256 != load_series().get(PATCH).files[0].sha256
