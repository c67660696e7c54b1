"""The candidate `triton-attn-head512-launch`: the launch half of vLLM PR #43257 (open), 8 warps
and 2 pipeline stages for Triton's unified attention at head size 512 and above (Gemma 4's
full-attention layers), through the launch_num_warps/launch_num_stages that unified_attention
already passes for its tuned large-head shape.

Read on the real release trees (PyPI sdists, cached): every release the entry covers launches one
kernel (the 2D and the split-KV grid alike) with those launch kwargs and has no head-512 rule; the
status is `applies` exactly where the entry's `releases` say; the patched function sets 8 and 2
only when the head size is 512 or more and nothing chose them before, ahead of the launch; and
on 0.27.1 `build.py apply --with-candidate` writes it on top of the shipped split-KV patch, alone or
with the other candidate (a plain apply leaves candidates out: tests/test_candidate_patches.py).
"""
from __future__ import annotations

import ast

from forge.patching import diffs
from forge.patching.series import load_series
from forge.upstream import releases
from tests.fixtures_patches import applied_record, snapshot, statuses_on_checked_releases
from tests.test_candidate_patches import in_series_order, patches_row, shipped_sources
from tests.test_patch_series import run_build

PATCH = "triton-attn-head512-launch"
SPLIT_KV = "triton-spec-decode-split-kv"     # shipped on 0.27.1-0.31.x, applied before it
GROUP_KV = "triton-attn-group-kv-heads"      # the other candidate
LAUNCHER = "vllm/v1/attention/ops/triton_unified_attention.py"
A, N = "applies", "not-needed"
APPLIES_ON = ("0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0",
              "0.31.0", "0.32.0", "0.33.0")


def unified_attention(source: bytes) -> ast.FunctionDef:
    tree = ast.parse(source)
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "unified_attention")


def head512_rule(function: ast.FunctionDef) -> ast.If | None:
    """The top-level `if head_size >= 512 ...:` of unified_attention, if any."""
    return next((n for n in function.body if isinstance(n, ast.If)
                 and ast.unparse(n.test).startswith("head_size >= 512")), None)


def body_line(function: ast.FunctionDef, text: str) -> int:
    return next(n.lineno for n in function.body if text in ast.unparse(n))


def test_the_entry_is_a_candidate_for_the_releases_the_recipes_serve():
    series = load_series()
    patch = series.get(PATCH)
    assert patch.candidate and patch.kind == "source"
    assert [p.id for p in series.patches if p.candidate] == [GROUP_KV, PATCH]
    assert {k: v for k, v in patch.upstream.items() if v} == {"pr": 43257}
    # 0.34.0 rewrote the launcher's tuning: the hunk fits nowhere, and the candidate lost
    assert patch.touches == [LAUNCHER] and patch.releases == ">=0.25.0,<0.34.0"
    assert "h200-0.27.1-profile-26b-a4b-l30-k4" in patch.why


def test_every_covered_release_launches_one_kernel_with_the_launch_kwargs_and_no_head512_rule():
    for version in APPLIES_ON:
        source = (releases.release_tree(version) / LAUNCHER).read_bytes()
        function = unified_attention(source)
        text = ast.unparse(function)
        assert text.count("kernel_unified_attention[grid](") == 1, version  # 2D and 3D: one launch
        assert "**launch_kwargs" in text and "launch_num_warps: int | None = None" in text, version
        assert head512_rule(function) is None, version


def test_status_on_every_release_is_what_its_source_says():
    patch = load_series().get(PATCH)
    for version, tree, computed in statuses_on_checked_releases(PATCH):
        assert computed.status == (A if version in APPLIES_ON else N), (version, computed)
        if computed.status != A:
            continue
        new = diffs.plan_diff(tree, patch.diffs)[LAUNCHER]
        compile(new, LAUNCHER, "exec", dont_inherit=True)
        function = unified_attention(new)
        rule = head512_rule(function)
        assert ast.unparse(rule.test) == "head_size >= 512 and launch_num_warps is None", version
        assert [ast.unparse(s) for s in rule.body] == ["launch_num_warps = 8", "launch_num_stages = 2"]
        # after the tuned large-head block, before the launch kwargs are built
        tuned = body_line(function, "if tuned_large_head:\n    BLOCK_M = 32")
        kwargs = body_line(function, "launch_kwargs: dict[str, int] = {}")
        assert tuned < rule.lineno < kwargs, version
        # nothing else of the function changed
        old = unified_attention((tree / LAUNCHER).read_bytes())
        assert [ast.dump(n) for n in function.body if n is not rule] == [ast.dump(n) for n in old.body]


def test_build_patches_shows_it_as_a_candidate():
    for version, expected in (("0.25.0", A), ("0.33.0", A), ("0.24.0", N)):
        assert patches_row(PATCH, version) == [f"{PATCH}*", "source", expected], version


def test_it_applies_on_top_of_the_shipped_split_kv_patch_alone_or_with_the_other_candidate(vllm_site):
    """0.27.1 is in every range: both diffs change triton_unified_attention.py, in different places,
    so asking for it writes the split-KV patch and then it (series order); a revert restores every byte."""
    site = vllm_site("0.27.1")
    original = snapshot(site)
    shipped = shipped_sources("0.27.1")
    assert SPLIT_KV in shipped
    for asked in ([PATCH], [GROUP_KV, PATCH]):
        applied = in_series_order([*shipped, *asked])
        flags = [f for p in asked for f in ("--with-candidate", p)]
        result = run_build("apply", "--site-packages", str(site), "--vllm", "0.27.1", *flags)
        assert result.returncode == 0, result.stderr
        record = applied_record(site)
        assert record["applied"] == applied
        launcher = (site / LAUNCHER).read_bytes()
        compile(launcher, LAUNCHER, "exec", dont_inherit=True)
        assert head512_rule(unified_attention(launcher)) is not None
        assert b"or max_seqlen_q > max_q_len_3D\n" in launcher  # the split-KV patch's gate too
        reverted = run_build("apply", "--site-packages", str(site), "--revert")
        assert reverted.returncode == 0, reverted.stderr
        assert snapshot(site) == original
