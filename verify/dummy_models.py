"""Gemma-4-26B-A4B and Gemma-4-26B-A4B-it-assistant configs with the published shapes, for
loading with dummy weights (vLLM `load_format="dummy"`) where no checkpoint is at hand.

Shapes: ../shared/REFERENCE.md §4 (google/gemma-4-26B-A4B-it and its -assistant config.json).
`layers` may be cut below 30 to fit several engines on one GPU; every figure states it.
"""
from __future__ import annotations

import json
from pathlib import Path

SLIDING, FULL = "sliding_attention", "full_attention"
FULL_LAYERS = 30
HIDDEN = 2816
VOCAB = 262144
BOS_ID, EOS_ID, PAD_ID = 2, 1, 0


def layer_types(layers: int) -> list[str]:
    """Five sliding layers to one full one, and the last layer always full (as in the checkpoint)."""
    types = [FULL if (i + 1) % 6 == 0 else SLIDING for i in range(layers)]
    types[-1] = FULL
    return types


def target_config(layers: int = FULL_LAYERS) -> dict:
    if not 1 <= layers <= FULL_LAYERS:
        raise ValueError(f"layers must be 1..{FULL_LAYERS} (got {layers})")
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 2112,
        "num_hidden_layers": layers, "num_attention_heads": 16, "num_key_value_heads": 8,
        "num_global_key_value_heads": 2, "head_dim": 256, "global_head_dim": 512,
        "sliding_window": 1024, "attention_k_eq_v": True, "layer_types": layer_types(layers),
        "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0,
        "enable_moe_block": True, "num_experts": 128, "top_k_experts": 8,
        "moe_intermediate_size": 704, "max_position_embeddings": 262144,
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "dtype": "bfloat16",
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID,
    }


def assistant_config() -> dict:
    text = {
        "model_type": "gemma4_text", "vocab_size": VOCAB, "hidden_size": 1024,
        "intermediate_size": 8192, "num_hidden_layers": 4, "num_attention_heads": 16,
        "num_key_value_heads": 8, "num_global_key_value_heads": 2, "head_dim": 256,
        "global_head_dim": 512, "sliding_window": 1024, "attention_k_eq_v": True,
        "layer_types": [SLIDING, SLIDING, SLIDING, FULL], "num_kv_shared_layers": 4,
        "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0,
        "enable_moe_block": False, "max_position_embeddings": 262144,
        "final_logit_softcapping": 30.0, "tie_word_embeddings": True,
    }
    return {
        "architectures": ["Gemma4AssistantForCausalLM"],
        "model_type": "gemma4_assistant", "text_config": text,
        "backbone_hidden_size": HIDDEN, "use_ordered_embeddings": False,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "dtype": "bfloat16",
    }


def write_dummy_models(root: Path | str, layers: int = FULL_LAYERS) -> tuple[Path, Path]:
    """Write target and assistant config.json under root; return (target_dir, assistant_dir)."""
    root = Path(root)
    target_dir, assistant_dir = root / f"gemma-4-26b-a4b-L{layers}", root / "gemma-4-26b-a4b-assistant"
    for directory, config in ((target_dir, target_config(layers)), (assistant_dir, assistant_config())):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return target_dir, assistant_dir


def encode_without_tokenizer(text: str) -> list[int]:
    """Token ids for a prompt when the dummy model has no tokenizer: BOS then one id per UTF-8
    byte, offset past the special ids. Prompt lengths stay realistic (a byte is a short token);
    the ids mean nothing to dummy weights, which is all a dummy run can promise."""
    return [BOS_ID] + [1000 + byte for byte in text.encode("utf-8")]
