"""`triton-spec-decode-split-kv`: the backport of vLLM PR #52879, which lets the speculative verify
pass use the Triton 3D split-KV attention path. A candidate until it won end to end on an H200
(record h200-0.27.1-bench-26b-a4b-l30-splitkv); shipped since, so `build.py apply` and the images apply it wherever its
status is `applies` (0.27.1-0.31.x).

Read on the real release trees (PyPI sdists, cached): the status is `applies` exactly where the
entry's `releases` say, the patched code keeps a run without speculation as it was, git apply
agrees, and a plain `build.py apply` on a real unpacked 0.27.1 writes it and reverts it.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from packaging.version import Version

from forge.patching import diffs
from forge.patching.readme_table import checked_releases
from forge.patching.series import load_series
from forge.upstream import releases
from tests.fixtures_patches import applied_record, snapshot, source_patches_applying, statuses_on_checked_releases
from tests.test_candidate_patches import patches_row
from tests.test_images_plan import copy_repo, plan, write_lock
from tests.test_patch_series import run_build

PATCH = "triton-spec-decode-split-kv"
BACKEND = "vllm/v1/attention/backends/triton_attn.py"
LAUNCHER = "vllm/v1/attention/ops/triton_unified_attention.py"
A, N = "applies", "not-needed"
APPLIES_ON = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0")
EXPECTED = {v: (A if v in APPLIES_ON else N) for v in (
    "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0",
    "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")}
# 0.32.0 still has the old gate (the entry's fixes_marker) and no upstream fix: needed, but the
# diff conflicts there, so the range stops before it.
EXPECTED["0.32.0"] = "needed-not-carried"
# The launcher's gate before the patch: every multi-row batch on the 2D path.
OLD_GATE = b"        or max_seqlen_q > 1\n        or num_seqs > seq_threshold_3D\n"
NEW_GATE = b"        or max_seqlen_q > max_q_len_3D\n"
# 0.33.0 on carry upstream's own version of the change.
UPSTREAM_OWN = b"max_seqlen_q > MAX_3D_QUERY_LEN"


def test_the_entry_ships_with_its_end_to_end_evidence():
    series = load_series()
    patch = series.get(PATCH)
    assert not patch.candidate and patch.kind == "source"
    assert {k: v for k, v in patch.upstream.items() if v} == {"issue": 48076, "pr": 52879}
    assert patch.touches == [BACKEND, LAUNCHER] and patch.releases == ">=0.27.1,<0.32.0"
    assert set(checked_releases(series)) == set(EXPECTED)
    for evidence in ("h200-0.27.1-bench-26b-a4b-l30-splitkv", "h200-0.27.1-smoke-26b-a4b-v2-splitkv",
                     "h200-0.27.1-bench-26b-a4b-l30-stock-splitkv"):
        assert evidence in patch.why, evidence
    assert "--with-candidate" not in patch.why


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
        # checked), 0.32.0 (the scratch sizing was rewritten: the diff conflicts) and 0.33.0 on
        # (upstream's own gate).
        if version == "0.32.0":
            with pytest.raises(diffs.HunkError):
                diffs.plan_diff(tree, patch.diffs)
        if Version(version) >= Version("0.33.0"):
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
    assert NEW_GATE.decode() in launcher
    # the other new conditions hold only for multi-row batches
    assert "            max_seqlen_q > 1\n            and (\n" \
           "                q.shape[0] > softmax_segm_output.shape[0]\n" in launcher


def test_git_apply_agrees_where_it_applies():
    patch = load_series().get(PATCH)
    for version in APPLIES_ON:
        result = subprocess.run(["git", "apply", "--check", str(patch.files[0].absolute)],
                                cwd=releases.release_tree(version), capture_output=True)
        assert result.returncode == 0, (version, result.stderr)


def test_build_patches_shows_it_unmarked():
    assert patches_row(PATCH, "0.27.1") == [PATCH, "source", A]
    as_json = json.loads(run_build("patches", "--vllm", "0.27.1", "--offline", "--json").stdout)
    entry = next(p for p in as_json["patches"] if p["id"] == PATCH)
    assert "candidate" not in entry and entry["status"] == A


def test_a_plain_apply_writes_it_and_a_revert_restores_every_byte(vllm_site):
    site = vllm_site("0.27.1")
    original = snapshot(site)
    applied = run_build("apply", "--site-packages", str(site), "--vllm", "0.27.1")
    assert applied.returncode == 0, applied.stderr
    # This site holds no transformers to pin: the source patches the series applies to 0.27.1
    # (this one, and gemma4-mtp-draft-kv-scales in another file), no more.
    expected = source_patches_applying("0.27.1")
    assert PATCH in expected
    first = applied.stdout.splitlines()[0]
    assert first.startswith(f"applied {len(expected)} patch(es) to vLLM 0.27.1") and \
        first.endswith(": " + ", ".join(expected))
    assert applied_record(site)["applied"] == expected
    for rel in (BACKEND, LAUNCHER):
        assert (site / rel).read_bytes() != original[rel], rel
        compile((site / rel).read_bytes(), rel, "exec", dont_inherit=True)
    assert NEW_GATE in (site / LAUNCHER).read_bytes()
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original



def test_the_h200_image_of_0_27_1_carries_it(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    entry = plan(repo, "h200", "0.27.1", write_lock(tmp_path / "lock.yaml", "0.27.1"))
    assert {p["id"]: p["status"] for p in entry["patches"]}[PATCH] == A
