"""Positive and negative controls for the acceptance gate, as a vLLM general plugin.

Dummy weights make the target and the drafter disagree: a gate run on them has only ever been
seen failing. This plugin makes them agree, without changing any vLLM code path under test:

- It wraps `DummyModelLoader.load_weights` (vLLM's `load_format="dummy"`): after vLLM's own
  dummy init it records every final RMSNorm of the model just loaded (the family's
  `control_norms` in models/<family>.yaml; Gemma 4: `model.norm` of Gemma4ForCausalLM and
  Gemma4MTP) and, for the agreeing model, sets them to the family's `control_norm_zero_weight`,
  the weight that makes the norm's output zero: 0 for Gemma 4's RMSNorm (w * x), -1 for the
  GemmaRMSNorm of Qwen3.5 ((1 + w) * x). The final hidden state is then zero, the logits zero
  (Gemma's final soft-capping keeps 0 at 0) and greedy decoding picks token 0 in target and
  drafter alike: every draft is accepted. The family comes from $VLLM_FORGE_CONTROL_FAMILY
  (verify sets it from the recipe).
- Centroid-masked drafters (`use_ordered_embeddings: true`, gemma4_mtp.py's
  Gemma4MTPMaskedEmbedder): the drafter scores only the tokens of its top-32 centroids, listed
  by the integer buffer `token_ordering`. vLLM's dummy init fills floating-point tensors only
  (weight_utils.initialize_single_dummy_weight returns early for integer ones on CUDA), so that
  buffer is left as `torch.empty` garbage: indices out of range. The plugin sets it to a valid
  ordering (arange: centroid c owns tokens c*128 .. c*128+127). With a zero hidden state every
  centroid scores 0, and which centroids torch.topk returns first among ties is not specified,
  so the drafter's pick would be the first token of an arbitrary centroid, not token 0. For
  the agreeing control the plugin therefore puts token 0 at the head of every centroid's list
  (the draft's argmax over equal scores is the first listed token: token 0, as the target's);
  the random control restores the arange ordering. A real checkpoint's ordering is never
  touched (only the dummy loader is wrapped).
- Agreement is a switch, not a load-time choice: `set_agreement(True/False)` zeroes or restores
  the recorded weights in place (CUDA graphs replay the same storage), so one engine serves the
  agreeing and the random model. The plugin adds the method `forge_set_agreement` to vLLM's
  worker base class, called through `LLM.collective_rpc("forge_set_agreement", args=(on,))`;
  V1 and V2 runners run in that worker. The initial state is $VLLM_FORGE_CONTROL ("agree" or
  "random", default "random").

vLLM loads general plugins (entry point group `vllm.general_plugins`) in every process it starts.
`install_plugin(dir)` writes the dist-info that declares the entry point; put that dir and the
repository root on PYTHONPATH of the engine process (verify does this for --dummy runs).
"""
from __future__ import annotations

import os
from pathlib import Path

ENTRY_POINT_GROUP = "vllm.general_plugins"
PLUGIN_NAME = "vllm_forge_controls"
DIST_NAME = "vllm_forge_controls-1.0"
ENV_INITIAL = "VLLM_FORGE_CONTROL"
# Its values, in the order verify runs them on one engine: the agreeing model, then the random one.
CONTROLS = ("agree", "random")
ENV_FAMILY = "VLLM_FORGE_CONTROL_FAMILY"
RPC_METHOD = "forge_set_agreement"
# (module, original weight clone) for every final norm; (buffer, valid ordering) per drafter.
_NORMS: list = []
_ORDERINGS: list = []
_STATE: dict = {"agree": False, "zero_weight": 0.0}


def install_plugin(directory: Path | str) -> Path:
    """Write the dist-info that makes importlib.metadata (and so vLLM) find this plugin."""
    dist_info = Path(directory) / f"{DIST_NAME}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PLUGIN_NAME}\nVersion: 1.0\n"
        "Summary: vllm-forge verify controls (agreeing / random dummy models)\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{PLUGIN_NAME} = verify.controls:register\n")
    (dist_info / "top_level.txt").write_text("verify\n")
    return dist_info


def engine_env(plugin_dir: Path | str, repo_root: Path | str, initial: str = "random",
               family: str | None = None) -> dict:
    """Environment for an engine process that loads the plugin; `family`: the models/<family>.yaml
    whose norms it switches (the recipe's)."""
    path = [str(plugin_dir), str(repo_root)] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    return {"PYTHONPATH": ":".join(path), ENV_INITIAL: initial, **({ENV_FAMILY: family} if family else {})}


def control_norms(family: str | None = None) -> tuple[list[str], float]:
    """(the final norms' module names, the weight that zeroes them) of `family`; without one, every
    family's norms, which must then agree on the weight."""
    from forge.errors import ForgeError
    from forge.models import family_names, load_family

    families = [load_family(family)] if family else [load_family(name) for name in family_names()]
    weights = {f.control_norm_zero_weight for f in families}
    if len(weights) != 1:
        raise ForgeError(f"${ENV_FAMILY} unset and the families zero their norms differently "
                         f"({', '.join(f'{f.name}: {f.control_norm_zero_weight}' for f in families)}): "
                         f"name the family")
    return sorted({norm for f in families for norm in f.control_norms}), weights.pop()


def final_norm_names(module_names: list[str], norms: list[str] | None = None) -> list[str]:
    """The final RMSNorm(s) among a model's submodule names: a family's `control_norms`
    (models/<family>.yaml; Gemma 4: model.norm) at any nesting depth (multimodal:
    language_model.model.norm), never a decoder layer's own norms. Without `norms`, those of
    every family (the plugin does not know which model the engine loads)."""
    wanted = norms if norms is not None else _every_control_norm()
    return [n for n in module_names
            if any(n == norm or n.endswith(f".{norm}") for norm in wanted) and ".layers." not in f".{n}."]


def _every_control_norm() -> list[str]:
    from forge.models import family_names, load_family

    return sorted({norm for name in family_names() for norm in load_family(name).control_norms})


def agreeing_weight(original, zero_weight: float):
    """The agreeing model's norm weight: `zero_weight` everywhere, in the original's dtype."""
    import torch

    return torch.full_like(original, zero_weight)


def register() -> None:
    """vLLM's general-plugin hook: runs once per process, before any model is loaded."""
    from vllm.model_executor.model_loader.dummy_loader import DummyModelLoader

    if not getattr(DummyModelLoader.load_weights, "_forge_controls", False):
        original = DummyModelLoader.load_weights

        def load_weights(self, model, model_config):
            original(self, model, model_config)
            _record(model)

        load_weights._forge_controls = True  # type: ignore[attr-defined]  # marks the patch as ours
        DummyModelLoader.load_weights = load_weights
    try:
        from vllm.v1.worker.worker_base import WorkerBase
    except ImportError:  # pragma: no cover (older layout)
        return
    if not hasattr(WorkerBase, RPC_METHOD):
        setattr(WorkerBase, RPC_METHOD, lambda self, on: set_agreement(bool(on)))


def _record(model) -> None:
    import torch

    modules = dict(model.named_modules())
    norms, _STATE["zero_weight"] = control_norms(os.environ.get(ENV_FAMILY) or None)
    for name in final_norm_names(list(modules), norms):
        weight = getattr(modules[name], "weight", None)
        if weight is not None:
            _NORMS.append((weight, weight.detach().clone()))
    for module in modules.values():
        ordering = getattr(module, "token_ordering", None)
        if isinstance(ordering, torch.Tensor) and not ordering.is_floating_point():
            valid = torch.arange(ordering.numel(), dtype=ordering.dtype, device=ordering.device)
            with torch.no_grad():
                ordering.copy_(valid)
            per_centroid = ordering.numel() // module.num_centroids
            _ORDERINGS.append((ordering, valid, per_centroid))
    set_agreement(os.environ.get(ENV_INITIAL, "random") == "agree")


def set_agreement(on: bool) -> dict:
    """Zero (on) or restore (off) every recorded final norm; return what was switched."""
    import torch

    with torch.no_grad():
        for weight, original in _NORMS:
            weight.copy_(agreeing_weight(original, _STATE["zero_weight"]) if on else original)
        for ordering, valid, per_centroid in _ORDERINGS:
            ordering.copy_(valid)
            if on:
                ordering[::per_centroid] = 0  # token 0 heads every centroid's list
    _STATE["agree"] = on
    return {"agree": on, "norms": len(_NORMS), "orderings": len(_ORDERINGS)}
