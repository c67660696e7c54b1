"""The byte budget of one decode token: what a batch-1 decode step must read from memory, per
weight group, and the speed floor and speculative ceiling that follow from the card's bandwidth.

    shape = model_shape(family, model, "0.25.0")
    groups = decode_bytes(shape, group_dtypes("fp8"), context_len=1024)
    floor_ms(sum(groups.values()), 4800)   # GB/s

The counts follow how the release's model code lays the weights out, not the checkpoint's file;
the family's weight_layout names the decoder (models/*.yaml, each fact with its vLLM file and line).

gemma4 (vllm/model_executor/models/gemma4.py): a fused qkv_proj carries a V slice on
attention_k_eq_v layers too (K is loaded into it), the tied lm_head is the embedding matrix read once
per token (the embedding lookup itself reads one row), the router stays BF16 (GateLinear takes no
quant_config), and only the top-k routed experts of an MoE layer are read.

gated_deltanet (qwen3_5.py, qwen3_next.py, layers/mamba/gdn/qwen_gdn_linear_attn.py): every 4th layer gated
full attention (qkv_proj with q twice as wide for the output gate), the others Gated DeltaNet
(in_proj_qkvz, in_proj_ba, out_proj; conv1d, dt_bias, A_log unquantized), whose conv and SSM states
are read and written once a token; every layer MoE: top-k routed experts, a shared expert, and the
BF16 router and shared_expert_gate (ReplicatedLinear, quant_config=None); the lm_head is untied.

Quantization scales are left out (per-tensor FP8: one float per matrix; NVFP4's per-16 scales are in
its bytes per weight).
"""
from __future__ import annotations

from forge.errors import ForgeError
from forge.models import Family, Model

# The groups of each decoder layout, in report order; GROUPS: all of them.
LAYOUT_GROUPS = {
    "gemma4": ("experts", "attention", "lm_head", "dense_mlp", "router", "embedding", "per_layer_input",
               "norms", "kv_cache"),
    "gated_deltanet": ("experts", "shared_expert", "attention", "linear_attention", "lm_head", "router",
                "embedding", "norms", "kv_cache", "recurrent_state", "conv_state"),
}
GROUPS = tuple(dict.fromkeys(g for groups in LAYOUT_GROUPS.values() for g in groups))
# NVFP4: 4-bit values plus one FP8 (E4M3) scale per 16 of them.
WEIGHT_FORMATS = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1 / 16}
BYTES_PER_VALUE = {**WEIGHT_FORMATS, "fp32": 4.0}
# What each weight format quantizes (vLLM's quant methods: Fp8Config.get_quant_method and ModelOpt's
# quantize LinearBase layers and the routed experts; the ParallelLMHead, the embeddings, the router's
# GateLinear / ReplicatedLinear(quant_config=None), the norms and the GDN layers' conv1d, dt_bias and
# A_log stay BF16). The NVFP4 checkpoints keep their lm_head in BF16.
QUANTIZED_GROUPS = ("experts", "attention", "dense_mlp", "per_layer_input", "shared_expert", "linear_attention")
KV_CACHE_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
# The GDN SSM state: the model dtype (BF16 here) unless config.json's mamba_ssm_dtype says otherwise
# (vllm/model_executor/models/config.py Qwen3_5ForConditionalGenerationConfig; mamba_utils.py).
SSM_STATE_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "float32": "fp32"}


def group_dtypes(weights: str, kv_cache_dtype: str = "auto", ssm_state_dtype: str = "auto") -> dict[str, str]:
    """The storage format of every group for a recipe's weights (bf16, fp8, nvfp4); the recurrent
    state's is config.json's mamba_ssm_dtype (auto: the model's BF16), the conv state BF16."""
    if weights not in WEIGHT_FORMATS:
        raise ForgeError(f"roofline: weights {weights!r} not known (known: {', '.join(WEIGHT_FORMATS)})")
    if ssm_state_dtype not in SSM_STATE_DTYPES:
        raise ForgeError(f"roofline: mamba_ssm_dtype {ssm_state_dtype!r} not known "
                         f"(known: {', '.join(SSM_STATE_DTYPES)})")
    dtypes = {group: weights if group in QUANTIZED_GROUPS else "bf16" for group in GROUPS}
    dtypes["kv_cache"] = KV_CACHE_DTYPES[kv_cache_dtype]
    dtypes["recurrent_state"] = SSM_STATE_DTYPES[ssm_state_dtype]
    return dtypes


def model_shape(family: Family, model: Model, vllm_version: str, layers: int | None = None) -> dict:
    """decode_bytes' input: the target's text config (config.json keys) and the release's layout."""
    rule = family.weight_layout(vllm_version)
    return {**family.text_config(model, layers), "decoder": rule["decoder"],
            "kv_shared_layers_read_kv_weights": rule["kv_shared_layers_read_kv_weights"]}


def decode_bytes(model_shape: dict, dtypes: dict[str, str], context_len: int) -> dict[str, int]:
    """Bytes one decode token reads per group (GROUPS), at batch 1 with `context_len` tokens of
    context. `model_shape`: a text config as model_shape() gives; `dtypes`: group -> format."""
    if context_len < 0:
        raise ForgeError(f"roofline: context length must not be negative (got {context_len})")
    decoder = model_shape.get("decoder", "gemma4")
    values = DECODER_VALUES[decoder](model_shape, context_len)
    # gemma4: the tied embedding matrix; gated_deltanet (Qwen 3.5): its own ParallelLMHead (tie_word_embeddings false)
    values["lm_head"] += model_shape["vocab_size"] * model_shape["hidden_size"]
    values["embedding"] += model_shape["hidden_size"]  # the lookup reads one row
    values["norms"] += model_shape["hidden_size"]      # the final norm
    return {group: round(values[group] * BYTES_PER_VALUE[dtypes[group]]) for group in LAYOUT_GROUPS[decoder]}


def _gated_deltanet_values(shape: dict, context_len: int) -> dict[str, float]:
    """Values read (the GDN states: read and written) per group over Qwen3_5DecoderLayer's layers
    (models/qwen3_5_moe.yaml weight_layout gives each vLLM file and line)."""
    values = dict.fromkeys(LAYOUT_GROUPS["gated_deltanet"], 0.0)
    hidden, heads, kv_heads, head_dim = (shape[k] for k in ("hidden_size", "num_attention_heads",
                                                            "num_key_value_heads", "head_dim"))
    key_dim = shape["linear_num_key_heads"] * shape["linear_key_head_dim"]
    v_heads = shape["linear_num_value_heads"]
    value_dim = v_heads * shape["linear_value_head_dim"]
    conv_dim, kernel = 2 * key_dim + value_dim, shape["linear_conv_kernel_dim"]
    gate = 1 if shape.get("attn_output_gate", True) else 0
    for layer_type in shape["layer_types"]:
        if layer_type == "full_attention":
            # qkv_proj: q (x2 with the output gate), k, v; o_proj; q_norm and k_norm
            values["attention"] += hidden * (heads * head_dim * (1 + gate) + 2 * kv_heads * head_dim) \
                + heads * head_dim * hidden
            values["kv_cache"] += 2 * context_len * kv_heads * head_dim
            values["norms"] += 2 * head_dim
        else:
            # in_proj_qkvz, in_proj_ba, out_proj (quantized); conv1d, dt_bias, A_log (float32: two
            # BF16 values each) and the gated norm (unquantized)
            values["linear_attention"] += hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * v_heads \
                + value_dim * hidden
            values["norms"] += conv_dim * kernel + v_heads + 2 * v_heads + shape["linear_value_head_dim"]
            ssm = v_heads * shape["linear_value_head_dim"] * shape["linear_key_head_dim"]
            values["recurrent_state"] += 2 * ssm                       # read, then written in place
            values["conv_state"] += 2 * conv_dim * (kernel - 1)        # read, then written
        values["experts"] += shape["num_experts_per_tok"] * 3 * hidden * shape["moe_intermediate_size"]
        values["shared_expert"] += 3 * hidden * shape["shared_expert_intermediate_size"]
        values["router"] += hidden * shape["num_experts"] + hidden   # gate and shared_expert_gate
        values["norms"] += 2 * hidden                                # input and post-attention norms
    return values


def _gemma4_values(shape: dict, context_len: int) -> dict[str, float]:
    """Values (weights, or cached K/V entries) read per group, summed over the decoder layers."""
    values = dict.fromkeys(LAYOUT_GROUPS["gemma4"], 0.0)
    layers = shape["num_hidden_layers"]
    shared_from = layers - (shape.get("num_kv_shared_layers") or 0)
    for index, layer_type in enumerate(shape["layer_types"]):
        kv_shared = index >= shared_from
        for group, count in _layer(shape, layer_type, kv_shared, context_len).items():
            values[group] += count
    ple = shape.get("hidden_size_per_layer_input") or 0
    if ple:
        # per_layer_model_projection (hidden -> layers x ple) and the per-layer embedding row
        values["per_layer_input"] += shape["hidden_size"] * layers * ple
        values["embedding"] += layers * ple
        values["norms"] += ple
    return values


# Each decoder layout's count of the values a token reads (models/*.yaml weight_layout names it)
DECODER_VALUES = {"gemma4": _gemma4_values, "gated_deltanet": _gated_deltanet_values}


def _layer(shape: dict, layer_type: str, kv_shared: bool, context_len: int) -> dict[str, float]:
    hidden = shape["hidden_size"]
    full = layer_type != "sliding_attention"
    head_dim = (shape.get("global_head_dim") or shape["head_dim"]) if full else shape["head_dim"]
    # gemma4.py Gemma4DecoderLayer: k_eq_v full layers take num_global_key_value_heads
    k_eq_v = full and shape.get("attention_k_eq_v", False)
    kv_heads = (shape.get("num_global_key_value_heads") or shape["num_key_value_heads"]) if k_eq_v \
        else shape["num_key_value_heads"]
    heads = shape["num_attention_heads"]
    projects_kv = not kv_shared or shape.get("kv_shared_layers_read_kv_weights", True)
    # q and o, plus K and the V slot of the fused qkv_proj (K copied into it on k_eq_v layers)
    attention = 2 * hidden * heads * head_dim + (2 * hidden * kv_heads * head_dim if projects_kv else 0)
    window = context_len if full else min(context_len, shape["sliding_window"])
    counts = {"attention": attention, "kv_cache": 2 * window * kv_heads * head_dim,
              "norms": 4 * hidden + head_dim * (2 if projects_kv else 1) + 1}  # 4 norms, q/k norm, layer_scalar
    double_wide = kv_shared and shape.get("use_double_wide_mlp", False)
    counts["dense_mlp"] = 3 * hidden * shape["intermediate_size"] * (2 if double_wide else 1)
    if shape.get("enable_moe_block"):
        experts = shape["num_experts"]
        counts["router"] = hidden * experts
        counts["experts"] = shape["top_k_experts"] * 3 * hidden * shape["moe_intermediate_size"]
        counts["norms"] += 4 * hidden + experts  # 3 more norms, the router's scale, per-expert scales
    ple = shape.get("hidden_size_per_layer_input") or 0
    if ple:
        counts["per_layer_input"] = 2 * hidden * ple  # per_layer_input_gate and per_layer_projection
        counts["norms"] += hidden
    return counts


def floor_ms(bytes_per_token: int, bandwidth_gb_s: float) -> float:
    """The least time one decode token can take: its bytes at the card's full memory bandwidth."""
    return bytes_per_token / (bandwidth_gb_s * 1e9) * 1e3


def speculative_ceiling(floor_tok_s: float, mean_length: float, step_cost_ratio: float) -> float:
    """Tokens per second if each step costs step_cost_ratio plain steps and accepts mean_length."""
    return floor_tok_s * mean_length / step_cost_ratio


def recipe_report(recipe, target, vllm_version: str, dtype: str | None = None, context_len: int = 0,
                  rates=None, step_cost_ratio: float | None = None, device: str | None = None,
                  layers: int | None = None) -> dict:
    """The roofline of a recipe on a target's card: bytes per group, floor, speculative ceiling.
    `rates`: per-position acceptance (forge.serving.acceptance); None: every draft accepted.
    `layers`: the target's first N decoder layers (a dummy-weight run's depth); None: all."""
    from forge.serving.acceptance import profile_length

    if not recipe.admits(vllm_version):
        raise ForgeError(f"{recipe.where}.vllm: {recipe.vllm} does not admit vLLM {vllm_version}")
    family, model = recipe.family_model
    if layers is not None and not 1 <= layers <= model.layers:
        raise ForgeError(f"--layers {layers}: {model.label} has 1 to {model.layers} decoder layers")
    shape = model_shape(family, model, vllm_version, layers)
    all_dtypes = group_dtypes(dtype or recipe.weights, recipe.serve.kv_cache_dtype,
                              shape.get("mamba_ssm_dtype") or "auto")
    groups = decode_bytes(shape, all_dtypes, context_len)
    dtypes = {group: all_dtypes[group] for group in groups}
    total = sum(groups.values())
    device = device or target.device_names[0]
    bandwidth = target.bandwidth_gb_s(device)
    floor = floor_ms(total, bandwidth)
    k = recipe.speculative.num_speculative_tokens
    length = profile_length(rates if rates is not None else 1.0, k)
    if length is None:
        raise ForgeError(f"--profile: {len(rates)} per-position rates, the recipe drafts k={k}: give {k}")
    ratio = step_cost_ratio or recipe.thresholds.step_cost_ratio
    return {"recipe": recipe.name, "target": target.name, "vllm": vllm_version, "model": model.label,
            "device": device, "bandwidth_gb_s": bandwidth, "bandwidth_source": target.memory_bandwidth_source,
            "layers": shape["num_hidden_layers"], "context_len": context_len, "dtypes": dtypes,
            "bytes_per_token": total, "groups": groups,
            "floor_ms": floor, "floor_tok_s": round(1e3 / floor, 1),
            "speculative": {"k": k, "profile": rates if rates is not None else "every draft accepted",
                            "mean_length": round(length, 4), "step_cost_ratio": ratio,
                            "step_cost_source": None if step_cost_ratio else recipe.thresholds.step_cost_source,
                            "ceiling_tok_s": round(speculative_ceiling(1e3 / floor, length, ratio), 1)}}


def render_text(report: dict) -> str:
    """The report as a table a person reads: bytes, share and bandwidth time per group."""
    total, bandwidth = report["bytes_per_token"], report["bandwidth_gb_s"]
    width = max(16, 1 + max(map(len, report["groups"])))  # linear_attention: 16 letters
    lines = [f"{report['recipe']} on {report['target']} ({report['device']}, {bandwidth:g} GB/s), "
             f"vLLM {report['vllm']}, {report['model']} ({report['layers']} layers), context "
             f"{report['context_len']} tokens",
             f"{'group':<{width}}{'format':<8}{'GB/token':>10}{'share':>8}{'ms':>9}"]
    for group, count in report["groups"].items():
        if count:
            lines.append(f"{group:<{width}}{report['dtypes'][group]:<8}{count / 1e9:>10.3f}"
                         f"{count / total:>8.1%}{floor_ms(count, bandwidth):>9.3f}")
    spec = report["speculative"]
    lines += [f"{'total':<{width + 8}}{total / 1e9:>10.3f}{'':>8}{report['floor_ms']:>9.3f}",
              f"floor: {report['floor_ms']:.3f} ms/token, {report['floor_tok_s']:.1f} tok/s (batch 1, "
              f"every byte once at full bandwidth: no batch-1 decode goes faster)",
              f"speculative ceiling: {spec['ceiling_tok_s']:.1f} tok/s = floor x mean length "
              f"{spec['mean_length']:.2f} (k={spec['k']}, profile {spec['profile']}) / step cost "
              f"{spec['step_cost_ratio']:g}x plain"]
    return "\n".join(lines)
