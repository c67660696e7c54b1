"""Gemma 4 target and assistant configs with the published shapes, for loading with dummy weights
(vLLM `load_format="dummy"`) where no checkpoint is at hand.

Shapes:
- 26b-a4b: google/gemma-4-26B-A4B-it and its -assistant config.json (docs/reference.md §4).
- 31b: google/gemma-4-31B-it, dense. Values as quoted from the published config.json in public
  test fixtures: a Rust inference engine's `test_detect_gemma4_31b` ("Real Gemma 4 31B config —
  matches actual HuggingFace config.json": hidden 5376, intermediate 21504, 60 layers, 32 heads,
  16 KV heads, 4 global KV heads, head_dim 256, global_head_dim 512, sliding window 1024,
  attention_k_eq_v, vocab 262144, final softcap 30, five sliding layers to one full) and its
  assistant from mlx-swift-lm `Gemma4AssistantTests` (backbone_hidden_size 5376, text hidden
  1024, 4 layers 3 sliding + 1 full, 32 heads, 16 KV heads, head_dim 256, global 512,
  intermediate 8192, 2048 centroids, top-32). The assistant's layers are KV-shared here as in
  the 26B-A4B assistant: vLLM's Gemma4MTP has only Q projections (gemma4_mtp.py, 0.25.0).
`layers` may be cut below the real depth to fit several engines on one GPU; every figure states it.
`centroids=True` sets `use_ordered_embeddings` (centroid-masked drafter logits, gemma4_mtp.py's
Gemma4MTPMaskedEmbedder) to exercise that path.
"""
from __future__ import annotations

import json
from pathlib import Path

SLIDING, FULL = "sliding_attention", "full_attention"
VOCAB = 262144
BOS_ID, EOS_ID, PAD_ID = 2, 1, 0

SHAPES: dict[str, dict] = {
    "26b-a4b": {
        "label": "Gemma-4-26B-A4B", "layers": 30,
        "target": {"hidden_size": 2816, "intermediate_size": 2112, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "num_global_key_value_heads": 2,
                   "enable_moe_block": True, "num_experts": 128, "top_k_experts": 8,
                   "moe_intermediate_size": 704},
        "assistant_heads": {"num_attention_heads": 16, "num_key_value_heads": 8,
                            "num_global_key_value_heads": 2},
    },
    "31b": {
        "label": "Gemma-4-31B", "layers": 60,
        "target": {"hidden_size": 5376, "intermediate_size": 21504, "num_attention_heads": 32,
                   "num_key_value_heads": 16, "num_global_key_value_heads": 4,
                   "enable_moe_block": False},
        "assistant_heads": {"num_attention_heads": 32, "num_key_value_heads": 16,
                            "num_global_key_value_heads": 4},
    },
}
DEFAULT_SHAPE = "26b-a4b"
FULL_LAYERS = SHAPES[DEFAULT_SHAPE]["layers"]
HIDDEN = SHAPES[DEFAULT_SHAPE]["target"]["hidden_size"]


def shape_spec(shape: str) -> dict:
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")
    return SHAPES[shape]


def layer_types(layers: int) -> list[str]:
    """Five sliding layers to one full one, and the last layer always full (as in the checkpoint)."""
    types = [FULL if (i + 1) % 6 == 0 else SLIDING for i in range(layers)]
    types[-1] = FULL
    return types


def target_config(layers: int | None = None, shape: str = DEFAULT_SHAPE) -> dict:
    spec = shape_spec(shape)
    layers = spec["layers"] if layers is None else layers
    if not 1 <= layers <= spec["layers"]:
        raise ValueError(f"layers must be 1..{spec['layers']} for {spec['label']} (got {layers})")
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "vocab_size": VOCAB, **spec["target"],
        "num_hidden_layers": layers, "head_dim": 256, "global_head_dim": 512,
        "sliding_window": 1024, "attention_k_eq_v": True, "layer_types": layer_types(layers),
        "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0,
        "max_position_embeddings": 262144,
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "dtype": "bfloat16",
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID,
    }


def assistant_config(shape: str = DEFAULT_SHAPE, centroids: bool = False) -> dict:
    spec = shape_spec(shape)
    text = {
        "model_type": "gemma4_text", "vocab_size": VOCAB, "hidden_size": 1024,
        "intermediate_size": 8192, "num_hidden_layers": 4, **spec["assistant_heads"],
        "head_dim": 256, "global_head_dim": 512, "sliding_window": 1024, "attention_k_eq_v": True,
        "layer_types": [SLIDING, SLIDING, SLIDING, FULL], "num_kv_shared_layers": 4,
        "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0,
        "enable_moe_block": False, "max_position_embeddings": 262144,
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True,
    }
    config = {
        "architectures": ["Gemma4AssistantForCausalLM"],
        "model_type": "gemma4_assistant", "text_config": text,
        "backbone_hidden_size": spec["target"]["hidden_size"], "use_ordered_embeddings": centroids,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "dtype": "bfloat16",
    }
    if centroids:
        config.update(num_centroids=2048, centroid_intermediate_top_k=32)
    return config


def write_dummy_models(root: Path | str, layers: int | None = None, shape: str = DEFAULT_SHAPE,
                       centroids: bool = False) -> tuple[Path, Path]:
    """Write target and assistant config.json under root; return (target_dir, assistant_dir)."""
    root = Path(root)
    target = target_config(layers, shape)
    suffix = "-centroids" if centroids else ""
    target_dir = root / f"gemma-4-{shape}-L{target['num_hidden_layers']}"
    assistant_dir = root / f"gemma-4-{shape}-assistant{suffix}"
    for directory, config in ((target_dir, target), (assistant_dir, assistant_config(shape, centroids))):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return target_dir, assistant_dir


def encode_without_tokenizer(text: str) -> list[int]:
    """Token ids for a prompt when the dummy model has no tokenizer: BOS then one id per UTF-8
    byte, offset past the special ids. Prompt lengths stay realistic (a byte is a short token);
    the ids mean nothing to dummy weights, which is all a dummy run can promise."""
    return [BOS_ID] + [1000 + byte for byte in text.encode("utf-8")]
