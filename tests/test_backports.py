"""The backports of vLLM PR #43982, PR #44297 and PR #47920 (patches/series.yaml), on the real
release trees.

For every release the series checks (0.21.0..0.34.0) the status the engine computes must be what the release's own
source says: `applies` where the buggy lines are there and the patched file still compiles,
`already-upstream` where upstream's fixed lines are there, `not-needed` outside the range or
where upstream rewrote the code after fixing it (the buggy lines gone, the fix's mechanism
there). git apply must agree with the engine, and `build.py apply` must patch a real install of
each affected release and revert it byte for byte.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.version import Version

from forge.patching import diffs
from forge.patching.readme_table import checked_releases
from forge.patching.series import load_series
from forge.patching.status import status_of
from forge.upstream import releases
from tests.fixtures_patches import snapshot
from tests.test_patch_series import run_build

SPEC_GEMMA4 = "vllm/v1/spec_decode/gemma4.py"
SO_INIT = "vllm/v1/structured_output/__init__.py"
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
AR_SPEC = "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py"
TD_AR_SPEC = "vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py"
# _prepare_decode_inputs_kernel with upstream's fix: the draft seq_lens are computed outside the
# branch and stored always (0.27.0 lines 639-650; from 0.32.0 in target_dependent_ar).
SEQ_LEN_OUTSIDE = b"    seq_len = target_seq_len - num_rejected\n    if ADVANCE_DRAFT_POSITIONS:\n"


@dataclass(frozen=True)
class SourceFacts:
    """What a release's source says about one bug: the lines that carry it, the lines of
    upstream's fix, and (optionally) where the fix lives on once upstream rewrote that code."""
    bug: tuple[tuple[str, bytes], ...]          # (file, line): all present -> the bug is there
    fix: tuple[tuple[str, bytes], ...]          # all present -> upstream's fix, verbatim
    fix_rewritten: tuple[tuple[str, bytes], ...] = ()   # any present -> the fix, rewritten

    def has(self, tree: Path, pairs) -> bool:
        return all(_has(tree, rel, line) for rel, line in pairs)

    def has_any(self, tree: Path, pairs) -> bool:
        return any(_has(tree, rel, line) for rel, line in pairs)


def _has(tree: Path, rel: str, line: bytes) -> bool:
    path = tree / rel
    return path.is_file() and line in path.read_bytes()


FACTS = {
    # PR #43982: the stored per-group block table was swapped in unsliced.
    "gemma4-mtp-block-table-slice": SourceFacts(
        bug=((SPEC_GEMMA4, b"cm.block_table_tensor = self._per_group_block_tables[gid]\n"),),
        fix=((SPEC_GEMMA4, b"cm.block_table_tensor = self._per_group_block_tables[gid]"
                           b"[:batch_size]\n"),
             (SPEC_GEMMA4, b"batch_size = common_attn_metadata.batch_size()\n"))),
    # PR #47920: the draft seq_lens were stored only if ADVANCE_DRAFT_POSITIONS (not Gemma 4 MTP).
    "gemma4-mtp-draft-seq-lens": SourceFacts(
        bug=((AR_SPEC, b"        seq_len = target_seq_len - num_rejected\n"
                       b"        seq_len = tl.minimum(seq_len + 1, max_model_len)\n"
                       b"        tl.store(seq_lens_ptr + req_idx, seq_len)\n"),),
        fix=((AR_SPEC, SEQ_LEN_OUTSIDE),
             (AR_SPEC, b"        seq_len = tl.minimum(seq_len + 1, max_model_len)\n"
                       b"    tl.store(seq_lens_ptr + req_idx, seq_len)\n")),
        fix_rewritten=((TD_AR_SPEC, SEQ_LEN_OUTSIDE),)),
    # PR #44297 part 1 on the pre-0.24 loop: the window inherits the step-start mask.
    "structured-draft-window": SourceFacts(
        bug=((SO_INIT, b"for token in itertools.chain(req_tokens, (-1,)):\n"),),
        fix=((SO_INIT, b"bonus_apply = self.should_fill_bitmask(request) or apply_bitmask\n"),
             (SO_INIT, b"if reasoner.is_reasoning_end_streaming(simulated, [token]):\n"))),
    # The same on 0.24.0's loop (with the diffusion-LLM branch).
    "structured-draft-window-0.24": SourceFacts(
        bug=((SO_INIT, b"for token in token_iter:\n"),),
        fix=((SO_INIT, b"bonus_apply = self.should_fill_bitmask(request) or apply_bitmask\n"),
             (SO_INIT, b"if reasoner.is_reasoning_end_streaming(simulated, [token]):\n"),
             # two of the PR's lines that 0.29.0 reworked
             (SO_INIT, b"                reasoner = self._get_reasoner(request)\n"
                       b"                detect_reasoning_end = (\n"),
             (SO_INIT, b"                        accepted = grammar.accept_tokens(req_id, [token])\n"
                       b"                        if accepted:\n")),
        # 0.29.0-0.33.0 keep the PR's bonus_apply; 0.34.0 bounds each draft row's mask by where
        # the constraint starts within the window (_get_constraint_bounds)
        fix_rewritten=((SO_INIT, b"bonus_apply"),
                       (SO_INIT, b"# Rows before constraint_start are still reasoning.\n"))),
    # PR #44297 part 2: the same-step structural-tag advance feeds reasoning to the grammar.
    "structured-reasoning-trim": SourceFacts(
        bug=((SO_INIT, b"== StructuredOutputOptions.STRUCTURAL_TAG\n"),
             (SCHEDULER, b"if not struct_output_request.grammar.accept_tokens(")),
        fix=((SCHEDULER, b"                assert grammar is not None\n"
                         b"                # new_token_ids can be a mixed block of reasoning"),
             (SCHEDULER, b"self.structured_output_manager.trim_reasoning_for_advance(\n"),
             (SO_INIT, b"structured_req.reasoning_end_token_index = (\n")),
        fix_rewritten=((SCHEDULER, b"trim_reasoning_for_advance("),
                       (SO_INIT, b"constraint_start"))),
}

# The matrix the facts above give (re-derived from the sources by the test below): written out
# so that a change in any release's reading is a visible diff here.
A, U, N = "applies", "already-upstream", "not-needed"
EXPECTED = {
    "gemma4-mtp-block-table-slice": {
        "0.21.0": A, "0.22.0": A, "0.22.1": A, **dict.fromkeys(
            ("0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0",
             "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"), U), "0.34.0": N},
    "gemma4-mtp-draft-seq-lens": {
        **dict.fromkeys(("0.21.0", "0.22.0", "0.22.1"), N),
        **dict.fromkeys(("0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0"), A),
        **dict.fromkeys(("0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"), U),
        "0.32.0": N, "0.33.0": N, "0.34.0": N},
    "structured-draft-window": {
        "0.21.0": A, "0.22.0": A, "0.22.1": A, "0.23.0": A, **dict.fromkeys(
            ("0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
             "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"), N)},
    "structured-draft-window-0.24": {
        **dict.fromkeys(("0.21.0", "0.22.0", "0.22.1", "0.23.0"), N), "0.24.0": A,
        **dict.fromkeys(("0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0"), U),
        **dict.fromkeys(("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"), N)},
    "structured-reasoning-trim": {
        "0.21.0": N, "0.22.0": A, "0.22.1": A, "0.23.0": A, "0.24.0": A, "0.25.0": U,
        "0.25.1": U, **dict.fromkeys(("0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0",
                                      "0.31.0", "0.32.0", "0.33.0", "0.34.0"), N)},
}



def _expected_from_source(patch, tree: Path, version: Version) -> str:
    """The status the release's own files call for, derived without the diff engine."""
    facts = FACTS[patch.id]
    fixed_in = Version(patch.upstream["fixed_in"])
    if not patch.in_range(version):
        # Outside the range: the release lacks the buggy code this diff was written for (the
        # bug is absent there, or a sibling entry carries its other shape).
        assert not facts.has(tree, facts.bug), (patch.id, str(version), "buggy, out of range")
        return N
    if facts.has(tree, facts.bug):
        assert version < fixed_in, (patch.id, str(version), "bug present after fixed_in")
        return A
    assert version >= fixed_in, (patch.id, str(version), "no bug before fixed_in")
    if facts.has(tree, facts.fix):
        return U
    if not any((tree / rel).is_file() for rel, _ in facts.bug):
        # Upstream removed the code altogether (0.34.0 dropped the V1 runner, and
        # vllm/v1/spec_decode/gemma4.py with it): nothing left to patch.
        return N
    # Upstream rewrote the fixed code: the fix lives on in another form, the diff cannot show it.
    assert facts.has_any(tree, facts.fix_rewritten), (patch.id, str(version), "fix not found")
    return N


def _backports(series):
    return [p for p in series.patches if p.id in FACTS]


def test_manifest_carries_every_pr_across_the_whole_matrix():
    series = load_series()
    backports = _backports(series)
    assert {p.id for p in backports} == set(FACTS)
    assert {p.upstream["pr"] for p in backports} == {43982, 44297, 47920}
    assert set(checked_releases(series)) == set(EXPECTED[backports[0].id])
    for patch in backports:
        assert patch.kind == "source" and patch.why.strip()
        # Retired in the release that fixed it, where that release is in range: the upstream
        # watch must not retire it later, and no later rewrite can make it a conflict.
        if patch.in_range(Version(patch.upstream["fixed_in"])):
            assert patch.retired_in == patch.upstream["fixed_in"], patch.id
        assert set(EXPECTED[patch.id]) == set(EXPECTED[backports[0].id]), patch.id
        assert f"#{patch.upstream['pr']}" in patch.why and patch.files[0].absolute.read_text()\
            .startswith(f"# vllm-forge patch: {patch.id}\n")


@pytest.mark.slow
def test_every_release_status_is_what_its_source_says():
    series = load_series()
    for version in checked_releases(series):
        tree, parsed = releases.release_tree(version), Version(version)
        carried = set()
        for patch in _backports(series):
            computed = status_of(patch, tree, parsed)
            if computed.status == A:
                carried.add(patch.upstream["pr"])
            from_source = _expected_from_source(patch, tree, parsed)
            assert computed.status == from_source == EXPECTED[patch.id][version], \
                (patch.id, version, computed, from_source)
            if computed.status == A:
                _assert_patched_files_compile(patch, tree)
            if computed.status == N and patch.in_range(parsed):
                # Only where upstream rewrote the fixed code, after the release that fixed it.
                assert computed.detail == f"retired in {patch.retired_in}", computed
        # No release that has a bug before its PR's fix is left without it: some entry of that
        # PR applies (0.21.0-0.22.1 have no V2 autoregressive speculator, so no #47920 bug).
        unfixed = {p.upstream["pr"] for p in _backports(series)
                   if parsed < Version(p.upstream["fixed_in"])
                   and FACTS[p.id].has(tree, FACTS[p.id].bug)}
        assert unfixed == carried, (version, unfixed, carried)


def _assert_patched_files_compile(patch, tree: Path) -> None:
    for rel, new in diffs.plan_diff(tree, patch.diffs).items():
        assert new != (tree / rel).read_bytes(), rel
        compile(new, rel, "exec", dont_inherit=True)
    # Upstream's lines are what went in: the fixed lines are there once patched.
    assert all(line in diffs.plan_diff(tree, patch.diffs)[rel]
               for rel, line in FACTS[patch.id].fix if rel in diffs.target_paths(patch.diffs))


@pytest.mark.slow
def test_engine_agrees_with_git_apply_on_every_release():
    series = load_series()
    for version in checked_releases(series):
        tree = releases.release_tree(version)
        for patch in _backports(series):
            for reverse in (False, True):
                ours = _engine_fits(tree, patch, reverse)
                git = subprocess.run(["git", "apply", "--check", *(["-R"] if reverse else []),
                                      str(patch.files[0].absolute)],
                                     cwd=tree, capture_output=True).returncode == 0
                assert ours == git, (version, patch.id, "reverse" if reverse else "forward")


def _engine_fits(tree: Path, patch, reverse: bool) -> bool:
    try:
        diffs.plan_diff(tree, patch.diffs, reverse=reverse)
        return True
    except diffs.HunkError:
        return False


@pytest.mark.parametrize("version", ["0.22.1", "0.23.0", "0.24.0", "0.26.0"])
def test_apply_patches_a_real_install_and_revert_restores_it(vllm_site, version):
    series = load_series()
    wanted = [p.id for p in _backports(series) if EXPECTED[p.id][version] == A]
    site = vllm_site(version)
    original = snapshot(site)
    applied = run_build("apply", "--site-packages", str(site), "--vllm", version)
    assert applied.returncode == 0, applied.stderr
    for patch_id in wanted:
        assert patch_id in applied.stdout.splitlines()[0], (patch_id, applied.stdout)
    # Two entries edit structured_output/__init__.py on 0.22.1-0.24.0: both changes are in.
    patched = {rel: (site / rel).read_bytes() for patch_id in wanted
               for rel, _ in FACTS[patch_id].fix + FACTS[patch_id].bug}
    for patch_id in wanted:
        for rel, line in FACTS[patch_id].fix:
            assert line in patched[rel], (patch_id, rel)
        for rel, line in FACTS[patch_id].bug[-1:]:
            assert line not in patched[rel], (patch_id, rel)
    for rel, data in patched.items():
        compile(data, rel, "exec", dont_inherit=True)
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original
