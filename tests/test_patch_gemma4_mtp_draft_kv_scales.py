"""`gemma4-mtp-draft-kv-scales`: the backport of vLLM PR #48666 (reported in #49262), which gives
Gemma 4's MTP draft layers on the V2 runner the target layer's KV-cache scales along with its KV
cache. Read on the real release trees (PyPI sdists, cached): the status on every release is what
its source says, the patched file is upstream's 0.31.0 code in the two places it changes, and what
the copy reads exists on every release it applies to."""
from __future__ import annotations

import ast

from packaging.version import Version

from forge.patching import diffs
from forge.patching.series import load_series
from forge.upstream import releases
from tests.fixtures_patches import statuses_on_checked_releases

PATCH = "gemma4-mtp-draft-kv-scales"
SPECULATOR = "vllm/v1/worker/gpu/spec_decode/gemma4/speculator.py"
ATTENTION = "vllm/model_executor/layers/attention/attention.py"
V1_PROPOSER = "vllm/v1/spec_decode/gemma4.py"
A, U, N = "applies", "already-upstream", "not-needed"
EXPECTED = {
    "0.21.0": N, "0.22.0": N, "0.22.1": N, "0.23.0": N, "0.24.0": N, "0.25.0": N, "0.25.1": N,
    "0.26.0": A, "0.27.0": A, "0.27.1": A, "0.28.0": A, "0.29.0": A, "0.30.0": A,
    "0.31.0": N, "0.32.0": N, "0.33.0": N, "0.34.0": N}
COPY = "_copy_target_kv_scales"


def function(source: str, name: str) -> str:
    """The definition of `name` in `source`, as ast.dump (formatting and comments aside)."""
    found = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, name
    return ast.dump(found[0])


def patched(version: str) -> str:
    planned = diffs.plan_diff(releases.release_tree(version), load_series().get(PATCH).diffs)
    text = planned[SPECULATOR]
    assert text is not None
    return text.decode()


def test_the_entry_names_its_upstream_and_its_range():
    patch = load_series().get(PATCH)
    assert patch.kind == "source" and not patch.candidate
    assert {k: v for k, v in patch.upstream.items() if v} == {"issue": 49262, "pr": 48666, "fixed_in": "0.31.0"}
    assert patch.releases == ">=0.26.0,<0.31.0"
    assert patch.touches == [SPECULATOR]


def test_status_on_every_release_is_what_its_source_says():
    seen = {}
    for version, tree, computed in statuses_on_checked_releases(PATCH):
        seen[version] = computed.status
        speculator = tree / SPECULATOR
        fixed = speculator.is_file() and COPY in speculator.read_text()
        # upstream's copy is in the V2 speculator from 0.31.0 on, in no release before
        assert fixed == (Version(version) >= Version("0.31.0")), version
    assert seen == EXPECTED


def test_the_patched_speculator_is_upstreams_0_31_0_code_where_it_changes():
    upstream = (releases.release_tree("0.31.0") / SPECULATOR).read_text()
    for version in ("0.26.0", "0.27.1", "0.30.0"):
        text = patched(version)
        assert function(text, COPY) == function(upstream, COPY), version
        assert function(text, "_setup_gemma4_kv_sharing").count(COPY) == 1
        # the scales are taken once the draft layer is wired to its target layer, as upstream does
        wire = text.index("attn.kv_sharing_target_layer_name = target_layer_name")
        assert wire < text.index(f"{COPY}(attn, target_attn)") < text.index('"Gemma4 MTP: draft layer %d')
        compile(text, SPECULATOR, "exec")


def test_every_scale_the_copy_reads_exists_where_it_applies_and_not_before():
    """Upstream's copy reads _k_scale, _k_scale_float and _k_scale_cpu (and the v ones) off the
    Attention layer: every release the patch applies to defines all three; 0.23.0-0.25.x, which
    have the V2 speculator but no _k_scale_cpu, are left out of the range rather than patched
    with code that would raise there."""
    for version, status in EXPECTED.items():
        attention = releases.release_tree(version) / ATTENTION
        has_cpu = attention.is_file() and "_k_scale_cpu" in attention.read_text()
        if status == A:
            text = attention.read_text()
            assert all(name in text for name in ("_k_scale", "_k_scale_float", "_k_scale_cpu", "_v_scale_cpu"))
        if version in ("0.23.0", "0.24.0", "0.25.0", "0.25.1"):
            assert (releases.release_tree(version) / SPECULATOR).is_file() and not has_cpu, version


def test_the_v1_proposer_never_copies_the_scales_and_later_v2_releases_keep_the_fix():
    """What the patch leaves: vLLM #49262's V1 fix is in no release; 0.32.0-0.34.0 hold upstream's
    copy though the speculator's base class changed (the range stops at 0.31.0, where upstream carries the fix)."""
    for version in ("0.21.0", "0.27.1", "0.33.0"):
        proposer = releases.release_tree(version) / V1_PROPOSER
        assert proposer.is_file() and "_k_scale" not in proposer.read_text(), version
    assert not (releases.release_tree("0.34.0") / V1_PROPOSER).is_file()
    upstream = function((releases.release_tree("0.31.0") / SPECULATOR).read_text(), COPY)
    for version in ("0.32.0", "0.33.0", "0.34.0"):
        text = (releases.release_tree(version) / SPECULATOR).read_text()
        assert function(text, COPY) == upstream and "TargetDependentARSpeculator" in text, version
