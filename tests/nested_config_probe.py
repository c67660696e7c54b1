"""Run inside a cached transformers environment (forge.upstream.pyenvs): load a --dummy config.json
the way a vLLM release does, with that release's own code, and print what it made of it.

Request (stdin JSON): {"model": DIR, "tree": RELEASE_TREE, "model_type": "<config.json model_type>",
"manifest": {FILE: SHA256}} (the tree's files as its sdist held them: releases.tree_manifest).
  1. the config class: the release's own (vllm/transformers_utils/configs/<model_type>.py, the
     class its _CONFIG_REGISTRY names) where it has one, else transformers' AutoConfig;
  2. the drafter's config: the release's `if hf_config.model_type ...` block of
     vllm/config/speculative.py naming that type (SpeculativeConfig.hf_config_override), run on it.
Nothing is imported from vLLM or forge: the release's files are read and executed by name
(forge/watch/drift_probe.py's ReleaseCode, loaded by path).
"""
import ast
import builtins
import importlib.util
import json
import runpy
import sys
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "forge" / "watch" / "drift_probe.py"


def _drift_probe():
    spec = importlib.util.spec_from_file_location("drift_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def registry_class(tree: Path, model_type: str) -> str | None:
    """The class name vllm/transformers_utils/config.py's _CONFIG_REGISTRY gives model_type."""
    for node in ast.walk(ast.parse((tree / "vllm/transformers_utils/config.py").read_text())):
        if isinstance(node, ast.keyword) and node.arg == model_type and isinstance(node.value, ast.Constant):
            return node.value.value
    return None


def draft_override(probe, code, hf_config, model_type: str) -> int:
    """Run the release's own `if hf_config.model_type ...` block naming model_type (in
    SpeculativeConfig.hf_config_override), with the helpers it calls taken from the release; its line."""
    speculative = "vllm/config/speculative.py"
    for node in ast.walk(code.module(speculative)):
        if isinstance(node, ast.If) and any(isinstance(n, ast.Constant) and n.value == model_type
                                            for n in ast.walk(node.test)):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            helpers = {name: code.load("vllm/transformers_utils/config.py", name)
                       for name in used & {"get_hf_text_config"}}
            block = compile(ast.Module(body=[node], type_ignores=[]), str(code.tree / speculative), "exec")
            exec(block, {"__builtins__": builtins, "hf_config": hf_config, **helpers})  # noqa: S102
            return node.lineno
    raise probe.ProbeError(f"{speculative}: no `if hf_config.model_type ...` block for {model_type}")


def main() -> int:
    request = json.loads(sys.stdin.read())
    tree, model_type = Path(request["tree"]), request["model_type"]
    raw = json.loads((Path(request["model"]) / "config.json").read_text())
    probe = _drift_probe()
    code = probe.ReleaseCode(tree, request["manifest"])
    own = registry_class(tree, model_type)
    relative = f"vllm/transformers_utils/configs/{model_type}.py"
    if own and (tree / relative).exists():
        # the whole file: it imports transformers only
        config = runpy.run_path(str(tree / relative))[own](**{k: v for k, v in raw.items() if k != "model_type"})
        loaded_by = f"{relative}:{own}"
    else:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(request["model"])
        loaded_by = f"transformers {type(config).__name__}"
    text, loaded_type = config.text_config, config.model_type
    line = draft_override(probe, code, config, model_type)
    print(json.dumps({
        "loaded_by": loaded_by, "model_type": loaded_type,
        "text_type": text.model_type,
        "text": {k: getattr(text, k, None) for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "shared_expert_intermediate_size", "mtp_num_hidden_layers", "layer_types",
            "linear_num_key_heads", "linear_num_value_heads", "tie_word_embeddings")},
        "rope": dict(getattr(text, "rope_parameters", None) or {}),
        "draft": {"line": line, "model_type": config.model_type, "architectures": config.architectures,
                  "n_predict": getattr(config, "n_predict", None)},
    }, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
