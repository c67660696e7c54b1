"""How verify's scripts build an engine: the recipe's vllm.LLM keywords and environment, then each
override a run asks for, one function each, then the device's adaptation (verify/device.py). As
vLLM's EngineArgs feeds both its CLI and LLM(...), these pieces feed both mtp_smoke.engine_setup
and bench.engine_spec (which profile.py uses too): an override means the same in every script.
"""
from __future__ import annotations

from pathlib import Path

from forge.serving.recipes import pin_attention_backend
from verify import controls
from verify import device as devices
from verify.dummy_models import write_dummy_models

ROOT = Path(__file__).resolve().parents[1]


def recipe_engine(recipe, speculative: bool = True) -> tuple[dict, dict]:
    """(engine kwargs, environment) as the recipe serves: fresh copies, safe to change."""
    return recipe.engine_kwargs(speculative=speculative), dict(recipe.env())


def use_dummy_models(kwargs: dict, env: dict, recipe, root: Path, plugin_dir: Path, layers: int | None,
                     shape: str | None, drafter: bool, centroids: bool = False,
                     checkpoint: str | None = None) -> None:
    """The family's configs with dummy weights in place of the recipe's checkpoints, and the controls
    plugin (verify/controls.py) loaded by the engine's processes."""
    target_dir, draft_dir = write_dummy_models(root, layers, shape, centroids, fp8_checkpoint=checkpoint,
                                               drafter=drafter, family=recipe.family_model[0].name)
    kwargs.update(model=str(target_dir), load_format="dummy", skip_tokenizer_init=True)
    if drafter and draft_dir is not None:   # None: the drafter is inside the target's checkpoint
        kwargs["speculative_config"] = {**kwargs["speculative_config"], "model": str(draft_dir)}
    controls.install_plugin(plugin_dir)
    env.update(controls.engine_env(plugin_dir.resolve(), ROOT, family=recipe.family_model[0].name))


def use_given_models(kwargs: dict, model: str | None, drafter: str | None, speculative: bool) -> None:
    """--model and --drafter: local paths in place of the recipe's."""
    if model:
        kwargs["model"] = model
    if drafter and speculative:
        kwargs["speculative_config"] = {**kwargs["speculative_config"], "model": drafter}


def with_attention(kwargs: dict, backend: str | None) -> dict:
    """The attention backend pinned (target and drafter alike); "default": vLLM's own choice;
    None: as the recipe has it."""
    if backend is None:
        return kwargs
    return pin_attention_backend(kwargs, None if backend == "default" else backend)


def with_sizes(kwargs: dict, gpu_memory_utilization: float | None = None, max_model_len: int | None = None,
               kv_cache_gib: float | None = None, max_num_seqs: int | None = None) -> None:
    """The run's memory and batch sizes over the recipe's, where given."""
    given = {"gpu_memory_utilization": gpu_memory_utilization, "max_model_len": max_model_len,
             "max_num_seqs": max_num_seqs,
             "kv_cache_memory_bytes": int(kv_cache_gib * 2**30) if kv_cache_gib else None}
    kwargs.update({key: value for key, value in given.items() if value is not None})


def with_compile_backend(kwargs: dict, backend: str | None) -> None:
    """eager: skip Inductor's code generation, keeping the recipe's other compilation settings (CUDA
    graphs are still captured); inductor or None: as the recipe has it."""
    if backend == "eager":
        kwargs["compilation_config"] = {**kwargs.get("compilation_config", {}), "backend": "eager"}


def with_moe_configs(env: dict, folder: Path | str | None) -> None:
    """The tuned fused-MoE configs vLLM reads first ($VLLM_TUNED_CONFIG_FOLDER)."""
    if folder:
        env["VLLM_TUNED_CONFIG_FOLDER"] = str(Path(folder).resolve())


def finished(kwargs: dict, env: dict, device: str = "cuda") -> tuple[dict, dict, list]:
    """Stats on (every figure comes from the engine's own counters), then the device's adaptation:
    (kwargs, env, the recipe settings the device does not honour)."""
    kwargs["disable_log_stats"] = False
    return devices.adapt(device, kwargs, env)
