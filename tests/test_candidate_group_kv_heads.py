"""The candidate `triton-attn-group-kv-heads`: vLLM PR #56996's change (PR #54191 makes its
num_kv_heads half), which has TritonAttentionMetadataBuilder size its split-KV threshold and its
softmax_segm_* scratch from the KV-cache spec it serves instead of the model-wide KV-head count
and head size.

Read on the real release trees (PyPI sdists, cached): every checked release carries the two
model-wide lines and none carries the fix, the status is `applies` exactly where the entry's
`releases` say, the diff changes those two lines and nothing else, and on 0.27.1 `build.py apply
--with-candidate` writes it on top of the shipped split-KV patch (the two touch different lines;
a plain apply leaves candidates out: tests/test_candidate_patches.py).
"""
from __future__ import annotations

import ast
import subprocess

from forge.patching import diffs
from forge.patching.readme_table import checked_releases
from forge.patching.series import load_series
from forge.upstream import releases
from tests.fixtures_patches import applied_record, snapshot, statuses_on_checked_releases
from tests.test_candidate_patches import patches_row
from tests.test_patch_series import run_build

PATCH = "triton-attn-group-kv-heads"
SPLIT_KV = "triton-spec-decode-split-kv"     # shipped on 0.27.1-0.31.x, applied before it
FLAG = "--with-candidate"
BACKEND = "vllm/v1/attention/backends/triton_attn.py"
LAUNCHER = "vllm/v1/attention/ops/triton_unified_attention.py"
A, N, U = "applies", "not-needed", "already-upstream"
APPLIES_ON = ("0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0",
              "0.31.0", "0.32.0", "0.33.0")
# 0.34.0 makes the change itself (the builder reads kv_cache_spec): retired there
UPSTREAM_IN = ("0.34.0",)
EXPECTED = {**{v: (A if v in APPLIES_ON else N) for v in (
    "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", *APPLIES_ON)}, **dict.fromkeys(UPSTREAM_IN, U)}
# The builder's model-wide lines (the bug), as every checked release writes them.
OLD = (b"        self.num_heads_kv = model_config.get_num_kv_heads(vllm_config.parallel_config)\n"
       b"        self.headdim = model_config.get_head_size()\n")
# Before 0.25.0 the diff's leading context (the num_heads_q lines) differs in these: in range they
# would read conflict; 0.22.x happen to fit but are outside the range like the rest.
OTHER_CONTEXT = ("0.21.0", "0.23.0", "0.24.0")



def _builder_init_assignments(source: bytes) -> dict[str, str]:
    """`self.X = expr` in TritonAttentionMetadataBuilder.__init__, as source text."""
    tree = ast.parse(source)
    builder = next(n for n in tree.body if isinstance(n, ast.ClassDef)
                   and n.name == "TritonAttentionMetadataBuilder")
    init = next(n for n in builder.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    found = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id == "self" and target.attr not in found:
                found[target.attr] = ast.unparse(node.value)
    return found


def test_the_entry_is_a_candidate_for_the_releases_the_recipes_serve():
    series = load_series()
    patch = series.get(PATCH)
    assert patch.candidate and patch.kind == "source"
    assert {k: v for k, v in patch.upstream.items() if v} == {"pr": 56996, "fixed_in": "0.34.0"}
    assert patch.touches == [BACKEND]
    assert patch.releases == ">=0.25.0" and patch.retired_in == "0.34.0"
    assert set(checked_releases(series)) == set(EXPECTED)
    for pr in ("#56996", "#54191"):
        assert pr in patch.why
    assert "h200-0.27.1-profile-26b-a4b-l30-k4" in patch.why


def test_every_checked_release_has_the_bug_and_none_the_fix_until_upstream_makes_it():
    for version in UPSTREAM_IN:
        assigned = _builder_init_assignments((releases.release_tree(version) / BACKEND).read_bytes())
        assert (assigned["num_heads_kv"], assigned["headdim"]) == \
            ("kv_cache_spec.num_kv_heads", "kv_cache_spec.head_size"), version
    for version in (v for v in EXPECTED if v not in UPSTREAM_IN):
        builder = (releases.release_tree(version) / BACKEND).read_bytes()
        assert builder.count(OLD) == 1, version
        assert b"kv_cache_spec.num_kv_heads" not in builder, version
        assigned = _builder_init_assignments(builder)
        assert assigned["seq_threshold_3D"] == "MIN_LAUNCH_GRID_SIZE_2D // self.num_heads_kv"
        # the launcher's 2D grid takes the KV-head count from the group's own cache
        assert b"    num_kv_heads = k.shape[2]\n" in \
            (releases.release_tree(version) / LAUNCHER).read_bytes(), version


def test_status_on_every_release_is_what_its_source_says():
    patch = load_series().get(PATCH)
    for version, tree, computed in statuses_on_checked_releases(PATCH):
        assert computed.status == EXPECTED[version], (version, computed)
        if computed.status == U:  # the diff is upstream's two lines: its reverse fits exactly
            diffs.plan_diff(tree, patch.diffs, reverse=True)
        if version in OTHER_CONTEXT:
            try:
                diffs.plan_diff(tree, patch.diffs)
            except diffs.HunkError as error:
                assert error.path == BACKEND
            else:
                raise AssertionError(f"{version}: the diff fits, but the entry says it does not")
        if computed.status != A:
            continue
        planned = diffs.plan_diff(tree, patch.diffs)
        assert list(planned) == [BACKEND]
        new = planned[BACKEND]
        compile(new, BACKEND, "exec", dont_inherit=True)
        before, after = _builder_init_assignments((tree / BACKEND).read_bytes()), \
            _builder_init_assignments(new)
        assert after["num_heads_kv"] == "kv_cache_spec.num_kv_heads", version
        assert after["headdim"] == "kv_cache_spec.head_size", version
        assert before["num_heads_kv"] == "model_config.get_num_kv_heads(vllm_config.parallel_config)"
        assert before["headdim"] == "model_config.get_head_size()"
        # every other assignment of the builder's __init__ is untouched
        assert {k: v for k, v in before.items() if k not in ("num_heads_kv", "headdim")} == \
            {k: v for k, v in after.items() if k not in ("num_heads_kv", "headdim")}, version
        assert OLD not in new


def test_gemma4_full_attention_layers_have_their_own_kv_heads_and_head_size():
    """What the why says about 0.25.0: the full-attention layers of a k_eq_v Gemma 4 take
    num_global_key_value_heads and global_head_dim, and the model-wide head size is the larger."""
    tree = releases.release_tree("0.25.0")
    model = (tree / "vllm/model_executor/models/gemma4.py").read_text()
    assert 'head_dim = getattr(config, "global_head_dim", config.head_dim)' in model
    assert 'config, "num_global_key_value_heads", config.num_key_value_heads' in model
    convertor = (tree / "vllm/transformers_utils/model_arch_config_convertor.py").read_text()
    assert "return max(head_dim, global_head_dim) or super().get_head_size()" in convertor
    lines = (tree / BACKEND).read_text().splitlines()
    assert lines[119:121] == [line.decode() for line in OLD.splitlines()]  # lines 120-121


def test_git_apply_agrees_with_the_strict_engine():
    patch = load_series().get(PATCH)
    for version in (*APPLIES_ON, *OTHER_CONTEXT):
        result = subprocess.run(["git", "apply", "--check", str(patch.files[0].absolute)],
                                cwd=releases.release_tree(version), capture_output=True)
        assert (result.returncode == 0) == (version in APPLIES_ON), (version, result.stderr)


def test_build_patches_shows_it_as_a_candidate():
    for version, expected in (("0.25.0", A), ("0.33.0", A), ("0.24.0", N)):
        assert patches_row(PATCH, version) == [f"{PATCH}*", "source", expected], version


def test_it_applies_on_top_of_the_shipped_split_kv_patch_and_reverts(vllm_site):
    """0.27.1 is in both ranges: the two diffs change different lines of triton_attn.py, so asking
    for it writes the split-KV patch and then it (series order), and a revert restores every byte."""
    site = vllm_site("0.27.1")
    original = snapshot(site)
    applied = run_build("apply", "--site-packages", str(site), "--vllm", "0.27.1", FLAG, PATCH)
    assert applied.returncode == 0, applied.stderr
    # gemma4-mtp-draft-kv-scales (another file, after it in the series) is shipped on 0.27.1 too
    kv_scales = "gemma4-mtp-draft-kv-scales"
    assert applied.stdout.splitlines()[0].endswith(f": {SPLIT_KV}, {PATCH}, {kv_scales}"), applied.stdout
    record = applied_record(site)
    assert record["applied"] == [SPLIT_KV, PATCH, kv_scales]
    builder = (site / BACKEND).read_bytes()
    compile(builder, BACKEND, "exec", dont_inherit=True)
    assigned = _builder_init_assignments(builder)
    assert assigned["num_heads_kv"] == "kv_cache_spec.num_kv_heads"
    assert assigned["headdim"] == "kv_cache_spec.head_size"
    # the split-KV patch's scratch sizing, on top of the group's own threshold
    assert assigned["max_q_len_3D"] == "min(1 + num_spec_tokens, MAX_Q_LEN_3D)"
    assert b"or max_seqlen_q > max_q_len_3D\n" in (site / LAUNCHER).read_bytes()
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original
