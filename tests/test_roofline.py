"""forge.serving.roofline: the bytes one decode token reads, against hand counts from the published
shapes (models/gemma4.yaml, models/qwen3_5_moe.yaml) and the layout of vLLM's gemma4.py, qwen3_5.py,
qwen3_next.py and qwen_gdn_linear_attn.py."""
import json
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.models import load_family
from forge.serving.recipes import capped_range, load_all, load_recipe
from forge.serving.roofline import (
    GROUPS,
    LAYOUT_GROUPS,
    decode_bytes,
    floor_ms,
    group_dtypes,
    model_shape,
    recipe_report,
    speculative_ceiling,
)
from forge.targets import load_targets
from tests.build_cli import run_build
from verify.bench_report import FP8_DTYPES

REPO = Path(__file__).resolve().parents[1]

FAMILY = load_family("gemma4")
GB = 1e9

# Gemma-4-26B-A4B (google/gemma-4-26B-A4B-it config.json): hidden 2816, 30 layers of which 5 full
# (every 6th), 16 heads; sliding layers head_dim 256 with 8 KV heads, full layers 512 with 2
# (attention_k_eq_v); dense MLP 2112; 128 experts of 704, top-8; vocab 262144, tied.
H, LAYERS, FULL, SLIDING = 2816, 30, 5, 25
Q_O_SLIDING = 2 * H * 16 * 256            # q_proj + o_proj
Q_O_FULL = 2 * H * 16 * 512
K_SLIDING, K_FULL = H * 8 * 256, H * 2 * 512
EXPERTS = LAYERS * 8 * 3 * H * 704         # top-8 experts, gate + up + down
DENSE = LAYERS * 3 * H * 2112
LM_HEAD = 262144 * H
ROUTER = LAYERS * H * 128


def shape_26b(vllm="0.25.0", layers=None):
    return model_shape(FAMILY, FAMILY.model("26b-a4b"), vllm, layers)


def test_26b_bf16_matches_the_hand_count():
    groups = decode_bytes(shape_26b(), group_dtypes("bf16"), 0)
    assert tuple(groups) == LAYOUT_GROUPS["gemma4"] and set(groups) < set(GROUPS)
    assert groups["experts"] == 2 * EXPERTS            # 2.855 GB
    assert groups["dense_mlp"] == 2 * DENSE            # 1.071 GB
    assert groups["lm_head"] == 2 * LM_HEAD            # 1.476 GB: the tied matrix once
    assert groups["router"] == 2 * ROUTER              # BF16 whatever the weights
    # vLLM's fused qkv_proj: q, k, a V slice and o on every layer (K loaded into the V slot of the
    # k_eq_v full layers), so V is read on all 30 layers.
    attention = SLIDING * (Q_O_SLIDING + 2 * K_SLIDING) + FULL * (Q_O_FULL + 2 * K_FULL)
    assert groups["attention"] == 2 * attention       # 2.249 GB
    assert groups["kv_cache"] == 0 and groups["embedding"] == 2 * H
    assert 0 < groups["norms"] < 2e6                  # countable, negligible
    assert sum(groups.values()) / GB == pytest.approx(7.674, abs=0.001)


def test_the_published_q_k_o_count_is_the_attention_without_its_v_slices():
    """The reference count (~7.36 GB: experts 2.86, attention 1.93, lm_head 1.48, dense 1.07) left
    out the V projections; the rest of it is what decode_bytes counts."""
    groups = decode_bytes(shape_26b(), group_dtypes("bf16"), 0)
    q_k_o = SLIDING * (Q_O_SLIDING + K_SLIDING) + FULL * (Q_O_FULL + K_FULL)
    assert round(2 * q_k_o / GB, 2) == 1.93
    v_slices = SLIDING * K_SLIDING + FULL * K_FULL
    assert groups["attention"] - 2 * q_k_o == 2 * v_slices
    assert (round(groups["experts"] / GB, 2), round(groups["lm_head"] / GB, 2),
            round(groups["dense_mlp"] / GB, 2)) == (2.85, 1.48, 1.07)  # 2.855: the reference rounds up
    assert round((sum(groups.values()) - 2 * v_slices) / GB, 2) == 7.36


def test_26b_fp8_keeps_lm_head_router_and_norms_in_bf16():
    bf16 = decode_bytes(shape_26b(), group_dtypes("bf16"), 0)
    fp8 = decode_bytes(shape_26b(), group_dtypes("fp8"), 0)
    for group in ("experts", "attention", "dense_mlp"):
        assert fp8[group] * 2 == bf16[group]
    for group in ("lm_head", "router", "norms", "embedding"):
        assert fp8[group] == bf16[group]
    # ~4.4 GB with the V slices left out, as the H200 profile's count; 4.59 with them
    assert sum(fp8.values()) / GB == pytest.approx(4.587, abs=0.001)
    v_slices = SLIDING * K_SLIDING + FULL * K_FULL
    assert round((sum(fp8.values()) - v_slices) / GB, 1) == 4.4


def test_kv_cache_reads_cap_sliding_layers_at_the_window():
    dtypes = group_dtypes("bf16")
    per_token_full = FULL * 2 * 2 * 512 * 2          # layers x (K, V) x heads x dim x bytes
    per_token_sliding = SLIDING * 2 * 8 * 256 * 2
    assert decode_bytes(shape_26b(), dtypes, 512)["kv_cache"] == 512 * (per_token_full + per_token_sliding)
    at_32k = decode_bytes(shape_26b(), dtypes, 32768)["kv_cache"]
    assert at_32k == 32768 * per_token_full + 1024 * per_token_sliding
    assert decode_bytes(shape_26b(), group_dtypes("bf16", "fp8"), 32768)["kv_cache"] * 2 == at_32k
    with pytest.raises(ForgeError, match="context length"):
        decode_bytes(shape_26b(), dtypes, -1)


def test_fewer_layers_read_fewer_bytes_but_the_same_lm_head():
    full, ten = (decode_bytes(shape_26b(layers=n), group_dtypes("fp8"), 0) for n in (None, 10))
    assert ten["lm_head"] == full["lm_head"]
    assert ten["experts"] * 3 == full["experts"]
    # 10 layers hold 1 full layer (the 6th) and the last, which is always full
    assert ten["attention"] == 8 * (Q_O_SLIDING + 2 * K_SLIDING) + 2 * (Q_O_FULL + 2 * K_FULL)


def test_31b_dense_hand_count():
    """google/gemma-4-31B-it: hidden 5376, 60 layers (10 full), 32 heads, 16 KV heads (4 on full
    layers), intermediate 21504, no experts."""
    h = 5376
    groups = decode_bytes(model_shape(FAMILY, FAMILY.model("31b"), "0.27.1"), group_dtypes("fp8"), 0)
    attention = 50 * (2 * h * 32 * 256 + 2 * h * 16 * 256) + 10 * (2 * h * 32 * 512 + 2 * h * 4 * 512)
    assert groups["attention"] == attention
    assert groups["dense_mlp"] == 60 * 3 * h * 21504
    assert groups["experts"] == groups["router"] == 0
    assert groups["lm_head"] == 2 * 262144 * h
    assert sum(groups.values()) / GB == pytest.approx(32.22, abs=0.01)


def test_kv_shared_layers_drop_their_kv_projections_from_vllm_0_30():
    """E4B's last 18 layers share KV: up to 0.29 each still builds a full qkv_proj, from 0.30
    q_proj only (models/gemma4.yaml weight_layout)."""
    e4b = FAMILY.model("e4b")
    old, new = (decode_bytes(model_shape(FAMILY, e4b, v), group_dtypes("bf16"), 0) for v in ("0.29.0", "0.30.0"))
    shared_types = FAMILY.layer_types(42)[24:]
    kv = sum(2 * 2560 * 2 * (512 if t == "full_attention" else 256) for t in shared_types)
    assert old["attention"] - new["attention"] == 2 * kv
    assert new["per_layer_input"] == 2 * (2560 * 42 * 256 + 42 * 2 * 2560 * 256)


def test_group_dtypes_name_every_group_and_refuse_unknown_weights():
    assert group_dtypes("nvfp4")["experts"] == "nvfp4" and group_dtypes("nvfp4")["lm_head"] == "bf16"
    with pytest.raises(ForgeError, match="int4"):
        group_dtypes("int4")



# Qwen3.6-35B-A3B (models/qwen3_5_moe.yaml): hidden 2048, 40 layers of which 10 gated full attention
# (every 4th) and 30 Gated DeltaNet; 16 heads and 2 KV heads of 256; GDN 16 key heads and 32 value
# heads of 128, conv kernel 4; 256 experts of 512, top-8; shared expert 512; vocab 248320, untied.
QWEN = load_family("qwen3_5_moe")
QH, Q_FULL, Q_GDN = 2048, 10, 30
# qkv_proj: q 2 x 16 x 256 wide (the output gate), k and v 2 x 256 each; o_proj 16 x 256 -> 2048
Q_ATTENTION = Q_FULL * (QH * (2 * 16 * 256 + 2 * 2 * 256) + 16 * 256 * QH)          # 272,629,760
# in_proj_qkvz 2048 -> 2 x 2048 + 2 x 4096, in_proj_ba 2048 -> 2 x 32, out_proj 4096 -> 2048
Q_LINEAR = Q_GDN * (QH * (2 * 2048 + 2 * 4096) + QH * 2 * 32 + 4096 * QH)          # 1,010,565,120
Q_EXPERTS = 40 * 8 * 3 * QH * 512                                                   # 1,006,632,960
Q_SHARED = 40 * 3 * QH * 512                                                        # 125,829,120
Q_ROUTER = 40 * (QH * 256 + QH)                      # gate + shared_expert_gate:     21,053,440
Q_LM_HEAD = 248320 * QH                                                             # 508,559,360
# SSM state 32 x 128 x 128 and conv state (2 x 2048 + 4096) x 3 per GDN layer, each read and written
Q_SSM, Q_CONV = Q_GDN * 2 * 32 * 128 * 128, Q_GDN * 2 * 8192 * 3                   # 31,457,280; 1,474,560
# 2 layer norms a layer, q/k norms (2 x 256) on full layers; on GDN layers conv1d (8192 x 4),
# dt_bias (32), A_log (32 float32 = 64 BF16 values) and the gated norm (128); the final norm
Q_NORMS = 40 * 2 * QH + Q_FULL * 2 * 256 + Q_GDN * (8192 * 4 + 32 + 64 + 128) + QH  # 1,160,768


def shape_qwen(layers=None, vllm="0.27.1"):
    return model_shape(QWEN, QWEN.model("35b-a3b"), vllm, layers)


def test_qwen_35b_a3b_bf16_matches_the_hand_count():
    groups = decode_bytes(shape_qwen(), group_dtypes("bf16"), 0)
    assert tuple(groups) == LAYOUT_GROUPS["gated_deltanet"]
    assert groups["attention"] == 2 * Q_ATTENTION              # 0.545 GB
    assert groups["linear_attention"] == 2 * Q_LINEAR          # 2.021 GB
    assert groups["experts"] == 2 * Q_EXPERTS                  # 2.013 GB
    assert groups["shared_expert"] == 2 * Q_SHARED             # 0.252 GB
    assert groups["router"] == 2 * Q_ROUTER                    # 0.042 GB
    assert groups["lm_head"] == 2 * Q_LM_HEAD                  # 1.017 GB: untied, its own matrix
    assert groups["embedding"] == 2 * QH                       # one row of embed_tokens
    assert groups["norms"] == 2 * Q_NORMS
    assert groups["recurrent_state"] == 2 * Q_SSM and groups["conv_state"] == 2 * Q_CONV
    assert groups["kv_cache"] == 0
    assert sum(groups.values()) == 2 * 2_979_364_416 == 5_958_728_832  # the ten counts above, summed


def test_qwen_35b_a3b_fp8_quantizes_the_projections_and_experts_only():
    dtypes = group_dtypes("fp8")
    groups = decode_bytes(shape_qwen(), dtypes, 0)
    quantized = ("experts", "shared_expert", "attention", "linear_attention")
    assert {g: dtypes[g] for g in quantized} == dict.fromkeys(quantized, "fp8")
    # ParallelLMHead, embeddings, ReplicatedLinear(quant_config=None) router and shared_expert_gate,
    # conv1d / dt_bias / A_log / norms and both GDN states stay in their own dtypes
    assert {g: dtypes[g] for g in groups if g not in quantized} == dict.fromkeys(
        [g for g in groups if g not in quantized], "bf16")
    assert (groups["experts"], groups["shared_expert"]) == (Q_EXPERTS, Q_SHARED)
    assert (groups["attention"], groups["linear_attention"]) == (Q_ATTENTION, Q_LINEAR)
    assert (groups["lm_head"], groups["router"], groups["norms"]) == (2 * Q_LM_HEAD, 2 * Q_ROUTER, 2 * Q_NORMS)
    assert sum(groups.values()) == (Q_ATTENTION + Q_LINEAR + Q_EXPERTS + Q_SHARED
                                    + 2 * (Q_LM_HEAD + Q_ROUTER + QH + Q_NORMS + Q_SSM + Q_CONV))
    assert sum(groups.values()) == 3_543_071_872                # 0.738 ms on an H200
    # config.json's mamba_ssm_dtype float32 doubles the SSM state, and only it
    fp32 = decode_bytes(shape_qwen(), group_dtypes("fp8", ssm_state_dtype="float32"), 0)
    assert fp32["recurrent_state"] == 2 * groups["recurrent_state"] == 4 * Q_SSM
    assert fp32["conv_state"] == groups["conv_state"]
    with pytest.raises(ForgeError, match="mamba_ssm_dtype 'int8' not known"):
        group_dtypes("fp8", ssm_state_dtype="int8")


def test_qwen_kv_cache_grows_with_context_on_the_full_layers_only():
    at_0, at_4k = (decode_bytes(shape_qwen(), group_dtypes("fp8"), n) for n in (0, 4096))
    assert at_4k["kv_cache"] == 4096 * Q_FULL * 2 * 2 * 256 * 2    # tokens x layers x (K, V) x heads x dim x BF16
    assert {g: v for g, v in at_4k.items() if g != "kv_cache"} == {g: v for g, v in at_0.items() if g != "kv_cache"}


def test_qwen_fewer_layers_read_fewer_bytes_but_the_same_lm_head():
    full, eight = (decode_bytes(shape_qwen(n), group_dtypes("fp8"), 0) for n in (None, 8))
    assert eight["lm_head"] == full["lm_head"] and eight["embedding"] == full["embedding"]
    assert eight["experts"] * 5 == full["experts"] and eight["router"] * 5 == full["router"]
    # 8 layers: 2 full (the 4th and the 8th), 6 Gated DeltaNet
    assert eight["attention"] * 5 == full["attention"]
    assert eight["linear_attention"] * 5 == full["linear_attention"]
    assert eight["recurrent_state"] * 5 == full["recurrent_state"]
    # 7 layers: the last is full, so 2 full and 5 GDN
    seven = decode_bytes(shape_qwen(7), group_dtypes("fp8"), 0)
    assert seven["attention"] == eight["attention"] and seven["linear_attention"] * 6 == eight["linear_attention"] * 5
    assert sum(seven.values()) < sum(eight.values()) < sum(full.values())


def test_weight_layout_rules_are_checked_on_load():
    assert QWEN.weight_layout("0.27.1")["decoder"] == "gated_deltanet"
    with pytest.raises(ForgeError, match="decoder gated_deltanet has no KV-shared layers"):
        QWEN.kv_shared_layers_read_kv_weights("0.27.1")
    with pytest.raises(ForgeError, match="weight_layout: no entry covers vLLM 0.20.2"):
        shape_qwen(vllm="0.20.2")


@pytest.mark.parametrize("rule, error", [
    ('{vllm: ">=0.21.0", decoder: gated_deltanet, kv_shared_layers_read_kv_weights: true}',
     r"weight_layout: \[0\]: kv_shared_layers_read_kv_weights is not allowed for decoder gated_deltanet"),
    ('{vllm: ">=0.21.0"}', r"weight_layout: \[0\]: kv_shared_layers_read_kv_weights is required for decoder gemma4"),
    ('{vllm: ">=0.21.0", decoder: mamba2}', r"weight_layout\[0\].decoder: must be one of gemma4, gated_deltanet"),
])
def test_a_wrong_weight_layout_is_refused_on_load(tmp_path, rule, error):
    text = (REPO / "models" / "qwen3_5_moe.yaml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("weight_layout:"))
    (tmp_path / "qwen3_5_moe.yaml").write_text(text.replace(line, f"weight_layout: [{rule}]"))
    with pytest.raises(ForgeError, match=error):
        load_family("qwen3_5_moe", tmp_path)


def test_floor_and_ceiling_arithmetic():
    assert floor_ms(4_800_000_000, 4800) == pytest.approx(1.0)
    # 1000 tok/s floor, mean length 1 + 0.84 + 0.60 + 0.39 + 0.27 = 3.10, step 1.81x plain
    assert speculative_ceiling(1000.0, 3.10, 1.81) == pytest.approx(1712.7, abs=0.1)


# --- the command, over every recipe and target ------------------------------------------------

def test_every_recipe_and_target_has_a_roofline():
    families = set()
    for recipe in load_all():
        target = load_targets()[recipe.target]
        families.add(recipe.family_model[0].name)
        for device in target.device_names:
            report = recipe_report(recipe, target, "0.27.1", device=device)
            assert report["bytes_per_token"] == sum(report["groups"].values()) > 1e9, recipe.path
            assert report["floor_tok_s"] == pytest.approx(1e3 / report["floor_ms"], abs=0.06)
            spec = report["speculative"]
            assert spec["mean_length"] == recipe.speculative.num_speculative_tokens + 1
            assert spec["ceiling_tok_s"] == pytest.approx(
                1e3 / report["floor_ms"] * spec["mean_length"] / recipe.thresholds.step_cost_ratio, abs=0.06)
    assert families >= {"gemma4", "qwen3_5_moe"}      # and any family added since


def test_a_family_without_a_weight_layout_is_refused_in_one_line(tmp_path):
    text = (REPO / "models" / "qwen3_5_moe.yaml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("weight_layout:"))
    (tmp_path / "qwen3_5_moe.yaml").write_text(text.replace(line, ""))
    family = load_family("qwen3_5_moe", tmp_path)
    assert family.values["weight_layout"] == []
    with pytest.raises(ForgeError, match=r"qwen3_5_moe.yaml: weight_layout: none stated: the roofline .* "
                                         r"does not model the qwen3_5_moe family's layers"):
        model_shape(family, family.model("35b-a3b"), "0.27.1")


def test_the_nvfp4_checkpoints_read_fewer_bytes_than_fp8():
    gb10 = load_targets()["gb10"]
    nvfp4 = recipe_report(load_recipe("gemma-4-31b-it-nvfp4", "gb10"), gb10, "0.27.1")
    fp8 = recipe_report(load_recipe("gemma-4-31b-it-nvfp4", "gb10"), gb10, "0.27.1", dtype="fp8")
    assert nvfp4["dtypes"]["dense_mlp"] == "nvfp4" and fp8["dtypes"]["dense_mlp"] == "fp8"
    assert nvfp4["groups"]["dense_mlp"] * 16 == fp8["groups"]["dense_mlp"] * 9  # 4.5 of 8 bits
    assert nvfp4["groups"]["lm_head"] == fp8["groups"]["lm_head"]


def test_json_output_and_the_profile_ceiling(tmp_path):
    done = run_build("roofline", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", "0.25.0",
                     "--profile", "0.84/0.60/0.39/0.27", "--step-cost-ratio", "1.79", "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert tuple(report["groups"]) == tuple(report["dtypes"]) == LAYOUT_GROUPS["gemma4"]
    assert report["bytes_per_token"] == sum(report["groups"].values())
    assert report["groups"]["experts"] == EXPERTS  # FP8: one byte per weight
    assert report["floor_ms"] == pytest.approx(report["bytes_per_token"] / 4.8e12 * 1e3, abs=1e-4)
    spec = report["speculative"]
    assert spec["mean_length"] == pytest.approx(3.10) and spec["step_cost_ratio"] == 1.79
    assert spec["ceiling_tok_s"] == pytest.approx(1e3 / report["floor_ms"] * 3.10 / 1.79, abs=0.06)


@pytest.mark.parametrize("args, error", [
    (["--profile", "0.8/0.6"], "--profile: 2 per-position rates, the recipe drafts k=4: give 4"),
    (["--profile", "0.8/lots"], "--profile '0.8/lots': rates must be numbers"),
    (["--vllm", "0.24.0"], f"gemma-4-26b-a4b-it.yaml: targets.h200.vllm: {capped_range('>=0.25.0')} "
                           "does not admit vLLM 0.24.0"),
    (["--device", "NVIDIA H100 PCIe"], "targets.h200.memory_bandwidth_gb_s: no figure for 'NVIDIA H100 PCIe'"),
    (["--layers", "0"], "--layers 0: Gemma-4-26B-A4B has 1 to 30 decoder layers"),
    (["--layers", "31"], "--layers 31: Gemma-4-26B-A4B has 1 to 30 decoder layers"),
])
def test_bad_input_is_one_line(args, error):
    base = ["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", "0.25.0"]
    done = run_build("roofline", *base, *args, timeout=120)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.startswith("error: ") and error in done.stderr and done.stderr.count("\n") == 1


def test_layers_counts_the_first_layers_only():
    """26B-A4B repeats five sliding layers and one full one: its first 6 layers are a fifth of its
    30, so every per-layer group is a fifth of the whole model's, KV reads included; the lm_head,
    the embedding row and the final norm (one hidden-size vector, BF16) are read once either way."""
    def groups(*extra: str) -> dict:
        done = run_build("roofline", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", "0.27.1",
                         "--context", "4096", "--json", *extra, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)
    full, six = groups(), groups("--layers", "6")
    assert (full["layers"], six["layers"]) == (30, 6)
    for group in ("experts", "attention", "dense_mlp", "router", "kv_cache"):
        assert full["groups"][group] == 5 * six["groups"][group] > 0, group
    for group in ("lm_head", "embedding"):
        assert full["groups"][group] == six["groups"][group] > 0, group
    final_norm = 2 * 2816
    assert full["groups"]["norms"] - final_norm == 5 * (six["groups"]["norms"] - final_norm)


# --- the floor is never above a speed measured anywhere ----------------------------------------

def _floor_ms(shape: str, layers: int, weights: str, target: str, vllm: str, family=FAMILY) -> float:
    groups = decode_bytes(model_shape(family, family.model(shape), vllm, layers), group_dtypes(weights), 0)
    return floor_ms(sum(groups.values()), load_targets()[target].bandwidth_gb_s())


def test_no_measured_step_beats_its_floor():
    """Every step the H200 runs measured (the bench records under benchmarks/results), plain or
    speculative, batch 1 or 8: a step reads the target's weights at least once, so it cannot take
    less than the floor of the layers and weights it ran."""
    checked, plain_qwen, families = 0, 0, set()
    for path in sorted((REPO / "benchmarks" / "results").glob("*-bench-*/bench.json")):
        run = json.loads(path.read_text())
        family = load_recipe(run["recipe"], run["target"]).family_model[0]
        shape = run["shape"] or family.dummy_shapes()[0]
        families.add(family.name)
        for engine in run["engines"].values():
            dtype = engine["dtype"]  # stock: the checkpoint's; every FP8 variant stores a byte a weight
            weights = "bf16" if dtype == "auto" else "fp8" if dtype in FP8_DTYPES else dtype
            floor = _floor_ms(shape, run["layers"], weights, run["target"], run["machine"]["vllm"], family)
            for window, figures in (engine.get("figures") or {}).items():
                if "step_ms" not in figures:
                    continue  # the 6-layer run of 2026-11-29 recorded no per-window step yet
                assert figures["step_ms"] >= floor, (path.name, engine["name"], window, floor)
                checked += 1
                if family.name == "qwen3_5_moe" and not engine["k"] and window.startswith("sustained"):
                    # and a real bound: the plain batch-1 step (~2.7 ms at 8 layers) within 10x of it
                    assert figures["step_ms"] < 10 * floor, (path.name, engine["name"], window, floor)
                    plain_qwen += 1
    # the windows of the Gemma 4 H200 bench records (the long-context one alone: 60) and the two
    # Qwen ones
    assert checked >= 490 + 22
    assert families == {"gemma4", "qwen3_5_moe"} and plain_qwen == 4


# Public field reports (batch 1, real checkpoints, all layers), cited in docs/roofline.md.
PLAIN_FIELD_REPORTS = [
    # A100-80GB, vLLM 0.25.0, Gemma-4-26B-A4B: BF16 127.4 tok/s, FP8 149.5 (docs/reference.md §6)
    ("26b-a4b", "bf16", "a100", "0.25.0", 127.4),
    ("26b-a4b", "fp8", "a100", "0.25.0", 149.5),
    # DGX Spark GB10, vLLM 0.27.1, Gemma 4 31B FP8, no drafter: 6.4 tok/s
    ("31b", "fp8", "gb10", "0.27.1", 6.4),
    # H200, vLLM 0.25.0, 26B-A4B shapes, 30 layers, online FP8 (issue 19's profile): 275 tok/s
    ("26b-a4b", "fp8", "h200", "0.25.0", 275.0),
    # GB10, Gemma-4-26B-A4B FP8-Dynamic without a drafter: about 35 tok/s
    # (https://tgmerritt.com/posts/gb10-gemma4-mtp-benchmarks.html)
    ("26b-a4b", "fp8", "gb10", "0.27.1", 35.0),
]


@pytest.mark.parametrize("shape, weights, target, vllm, measured", PLAIN_FIELD_REPORTS)
def test_no_published_speed_beats_the_floor(shape, weights, target, vllm, measured):
    floor_tok_s = 1e3 / _floor_ms(shape, None, weights, target, vllm)
    assert floor_tok_s >= measured
    # and the floor is a real bound, not a loose one: within 10x of what was measured
    assert floor_tok_s < 10 * measured


def test_no_published_speculative_speed_beats_k_plus_1_floors():
    """A speculative step reads the target at least once and yields at most k + 1 tokens."""
    reports = [("26b-a4b", "fp8", "a100", "0.25.0", 3, 297.2),   # A100-80GB FP8 + MTP k=3
               ("31b", "fp8", "gb10", "0.27.1", 3, 13.7),        # GB10 31B FP8 + drafter k=3
               ("26b-a4b", "fp8", "gb10", "0.27.1", 4, 75.7),    # GB10 FP8-Dynamic + gemma4_mtp k=4
               ("26b-a4b", "nvfp4", "gb10", "0.27.1", 2, 54.9)]  # GB10 NVFP4 + k=2 (eugr#343)
    for shape, weights, target, vllm, k, measured in reports:
        assert (k + 1) * 1e3 / _floor_ms(shape, None, weights, target, vllm) >= measured


def test_the_worked_example_in_the_docs_is_what_the_command_prints():
    doc = (REPO / "docs" / "roofline.md").read_text()
    done = run_build("roofline", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", "0.25.0",
                     "--profile", "0.84/0.60/0.39/0.27", timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"```\n{done.stdout}```" in doc
    for figure in ("| 1,427,374,080 | 2.855 |", "| 865,075,200 | 1.730 |", "| 259,522,560 | 0.519 |",
                   "| 738,197,504 | 1.476 |", "| 535,265,280 | 1.071 |", "| 10,813,440 | 0.022 |",
                   "**7.674**"):
        assert figure in doc
    bf16 = decode_bytes(shape_26b(), group_dtypes("bf16"), 0)
    assert f"**{sum(bf16.values()) / GB:.3f}**" in doc
    assert f"| {(bf16['norms'] + bf16['embedding']) // 2:,} |" in doc


def test_the_qwen_worked_example_in_the_docs_is_what_the_command_prints():
    doc = (REPO / "docs" / "roofline.md").read_text()
    done = run_build("roofline", "--recipe", "qwen3.6-35b-a3b", "--target", "h200", "--vllm", "0.27.1",
                     timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"```\n{done.stdout}```" in doc
    for weights in (Q_EXPERTS, Q_SHARED, Q_ATTENTION, Q_LINEAR, Q_LM_HEAD, Q_ROUTER, Q_SSM, Q_CONV, Q_NORMS + QH):
        assert f"| {weights:,} |" in doc
    bf16, fp8 = (decode_bytes(shape_qwen(), group_dtypes(w), 0) for w in ("bf16", "fp8"))
    assert f"| **{sum(bf16.values()) / GB:.3f}** | **{sum(fp8.values()) / GB:.3f}** |" in doc
    eight = decode_bytes(shape_qwen(8), group_dtypes("fp8"), 0)
    assert f"their floor is {sum(eight.values()) / GB:.3f} GB, {floor_ms(sum(eight.values()), 4800):.3f} ms" in doc


def test_every_decoder_the_family_schema_admits_has_a_count_and_its_groups():
    """models/*.yaml weight_layout names a decoder from forge.models.DECODERS (the core layer, which
    cannot import the roofline): each one must have its count and its report groups here."""
    from forge.models import DECODERS
    from forge.serving.roofline import DECODER_VALUES, LAYOUT_GROUPS

    assert set(DECODERS) == set(DECODER_VALUES) == set(LAYOUT_GROUPS)
