"""Recipes: what a user serves on a target, and what verify checks against.

A recipe is recipes/<model>/<target>.yaml, validated on load (errors name the file and field).
`Recipe.engine_kwargs()` (for vllm.LLM) and `Recipe.cli_args()` (for `vllm serve`) are both
derived from one table, ENGINE_SETTINGS, so the verify scripts start vLLM exactly as serve does.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.schema import Field, ListOf, load_yaml, pep440_specifier, validate

RECIPES_DIR = REPO_ROOT / "recipes"
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# vLLM's CacheDType values; FP8 ones need FP8 hardware support for the KV cache.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# Targets whose GPU has no FP8 tensor cores: FP8 weights still work there (vLLM runs them as
# W8A16 through Marlin), an FP8 KV cache does not pay and is refused.
NO_FP8_KV_TARGETS = ("a100",)


def _positive(value) -> str | None:
    return None if value > 0 else f"must be positive (got {value})"


def _fraction(value) -> str | None:
    return None if 0 < value <= 1 else f"must be in (0, 1] (got {value})"


def _at_least_one(value) -> str | None:
    return None if value >= 1 else f"must be at least 1 (got {value})"


def _hf_id(value) -> str | None:
    return None if value.count("/") == 1 and " " not in value else \
        f"must be a Hugging Face id like org/name (got {value!r})"


def _cli_tokens(value) -> str | None:
    if value and not value[0].startswith("--"):
        return f"must start with a --flag (got {value[0]!r})"
    return None


REFERENCE_ITEM = {
    "figure": Field(str),
    "value": Field((int, float, str)),
    "unit": Field(str),
    "source": Field(str),
}

SCHEMA = {
    "name": Field(str),
    "target": Field(str),
    "model": Field(str, check=_hf_id),
    "drafter": Field(str, check=_hf_id),
    "vllm": Field(str, check=pep440_specifier),
    "serve": Field({
        "quantization": Field(str, required=False, choices=("fp8",)),
        "kv_cache_dtype": Field(str, required=False, default="auto", choices=KV_CACHE_DTYPES),
        "max_model_len": Field(int, check=_positive),
        "gpu_memory_utilization": Field(float, check=_fraction),
        "max_num_seqs": Field(int, check=_positive),
        "model_runner": Field(str, choices=("v1", "v2")),
        "moe_backend": Field(str, required=False, choices=("triton",)),
        "extra_args": Field(ListOf(str), required=False, default=[], check=_cli_tokens),
    }),
    "speculative": Field({
        "method": Field(str, choices=("mtp",)),
        "num_speculative_tokens": Field(int, check=_positive),
    }),
    "sampling": Field({
        "temperature": Field(float),
        "top_p": Field(float, check=_fraction),
        "top_k": Field(int),
        "source": Field(str),
    }),
    "moe_config": Field({
        "name": Field(str),
        "expected": Field(bool),
    }, required=False),
    "thresholds": Field({
        "min_acceptance_rate": Field(float, check=_fraction),
        "min_mean_acceptance_length": Field(float, check=_at_least_one),
        "min_speedup": Field(float, check=_positive),
        # The cost of one speculative step over one plain step: the break-even mean
        # acceptance length. The acceptance thresholds are derived from it (recipes/README.md).
        "step_cost_ratio": Field(float, check=_at_least_one),
        "step_cost_source": Field(str),
    }),
    "reference": Field(ListOf(REFERENCE_ITEM), required=False, default=[]),
}


@dataclass(frozen=True)
class Section:
    """A validated mapping whose keys read as attributes (recipe.serve.max_model_len)."""
    values: dict

    def __getattr__(self, name: str):
        # Only called for names that are not real attributes; "values" itself may be missing
        # while pickle/copy rebuild the object, so never look it up through here.
        if name.startswith("__") or name == "values":
            raise AttributeError(name)
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class Recipe:
    name: str
    target: str
    model: str
    drafter: str
    vllm: str
    serve: Section
    speculative: Section
    sampling: Section
    moe_config: Section | None
    thresholds: Section
    reference: list = field(default_factory=list)
    path: Path | None = None

    def admits(self, vllm_version: str) -> bool:
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.vllm).contains(str(vllm_version), prereleases=True)

    def speculative_config(self) -> dict:
        return {"model": self.drafter, "method": self.speculative.method,
                "num_speculative_tokens": self.speculative.num_speculative_tokens}

    def env(self) -> dict[str, str]:
        """Environment the engine needs. The runner is always explicit: the default changes
        between releases (V1 up to 0.28 for the MoE, V2 from 0.29)."""
        return {RUNNER_ENV: "1" if self.serve.model_runner == "v2" else "0"}

    def engine_kwargs(self, speculative: bool = True) -> dict[str, Any]:
        """Keyword arguments for vllm.LLM, the same settings `vllm serve` gets.

        speculative=False gives the same engine without the drafter (the speedup baseline).
        """
        kwargs: dict[str, Any] = {"model": self.model}
        for setting in ENGINE_SETTINGS:
            if setting.kwarg == "speculative_config" and not speculative:
                continue
            value = setting.value(self)
            if value is not None:
                kwargs[setting.kwarg] = value
        kwargs.update(extra_args_as_kwargs(self.serve.extra_args))
        return kwargs

    def cli_args(self, speculative: bool = True) -> list[str]:
        """`vllm serve` arguments after the model, from the same table as engine_kwargs."""
        args: list[str] = []
        for setting in ENGINE_SETTINGS:
            if setting.kwarg == "speculative_config" and not speculative:
                continue
            value = setting.value(self)
            if value is not None:
                args += [setting.flag, _cli_value(value)]
        return args + list(self.serve.extra_args)


@dataclass(frozen=True)
class EngineSetting:
    flag: str                            # the `vllm serve` flag
    kwarg: str                           # the vllm.LLM / EngineArgs keyword
    value: Callable[[Recipe], Any]       # None: leave vLLM's default (flag not emitted)


# The one table both engine_kwargs() and cli_args() read. CUDA graphs are always on:
# there is deliberately no enforce_eager here (eager was 13.5 vs 127.4 tok/s, REFERENCE.md §6).
ENGINE_SETTINGS = (
    EngineSetting("--quantization", "quantization", lambda r: r.serve.quantization),
    EngineSetting("--kv-cache-dtype", "kv_cache_dtype",
                  lambda r: None if r.serve.kv_cache_dtype == "auto" else r.serve.kv_cache_dtype),
    EngineSetting("--max-model-len", "max_model_len", lambda r: r.serve.max_model_len),
    EngineSetting("--gpu-memory-utilization", "gpu_memory_utilization",
                  lambda r: r.serve.gpu_memory_utilization),
    EngineSetting("--max-num-seqs", "max_num_seqs", lambda r: r.serve.max_num_seqs),
    EngineSetting("--moe-backend", "moe_backend", lambda r: r.serve.moe_backend),
    EngineSetting("--speculative-config", "speculative_config",
                  lambda r: r.speculative_config()),
)


def _cli_value(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def extra_args_as_kwargs(tokens: list[str]) -> dict[str, Any]:
    """['--limit-mm-per-prompt', '{"image":0}', '--no-x'] -> {limit_mm_per_prompt: {...}, x: False}."""
    kwargs: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        has_value = i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
        name = flag[2:].replace("-", "_")
        if has_value:
            kwargs[name] = _parse_value(tokens[i + 1])
            i += 2
        elif name.startswith("no_"):
            kwargs[name[3:]] = False
            i += 1
        else:
            kwargs[name] = True
            i += 1
    return kwargs


def _parse_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


# ---------------------------------------------------------------------------------------------
# Loading


def recipe_path(model: str, target: str, root: Path | None = None) -> Path:
    return (root or RECIPES_DIR) / model / f"{target}.yaml"


def recipe_names(root: Path | None = None) -> list[str]:
    root = root or RECIPES_DIR
    if not root.is_dir():
        raise ForgeError(f"{root}: no such recipes directory")
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def load_recipe(model: str, target: str, root: Path | None = None) -> Recipe:
    path = recipe_path(model, target, root)
    if not path.exists():
        known = recipe_names(root)
        if model not in known:
            raise ForgeError(f"unknown recipe {model!r} "
                             f"(recipes: {', '.join(known) or f'none in {root or RECIPES_DIR}'})")
        targets = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ForgeError(f"recipe {model!r} has no file for target {target!r} "
                         f"(targets: {', '.join(targets)}; {path} does not exist)")
    return parse_recipe(load_yaml(path), path)


def load_all(root: Path | None = None) -> list[Recipe]:
    root = root or RECIPES_DIR
    return [parse_recipe(load_yaml(path), path) for path in sorted(root.glob("*/*.yaml"))]


def parse_recipe(data, path: Path) -> Recipe:
    source = display_path(path)
    values = validate(data, SCHEMA, source)
    _check_consistency(values, path, source)
    sections = {key: Section(values[key]) for key in ("serve", "speculative", "sampling",
                                                      "thresholds")}
    moe = Section(values["moe_config"]) if values["moe_config"] else None
    return Recipe(name=values["name"], target=values["target"], model=values["model"],
                  drafter=values["drafter"], vllm=values["vllm"], moe_config=moe,
                  reference=values["reference"], path=path, **sections)


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(RECIPES_DIR.parent))
    except ValueError:
        return str(path)


def _check_consistency(values: dict, path: Path, source: str) -> None:
    """Rules across fields: where the file lives, the target, FP8 KV, and honest thresholds."""
    def fail(where, problem):
        raise ForgeError(f"{source}: {where}: {problem}")

    if values["name"] != path.parent.name:
        fail("name", f"must match its directory {path.parent.name!r} (got {values['name']!r})")
    if values["target"] != path.stem:
        fail("target", f"must match the file name {path.stem!r} (got {values['target']!r})")
    targets = known_targets()
    if values["target"] not in targets:
        fail("target", f"unknown target {values['target']!r} (targets: {', '.join(targets)})")
    if values["target"] in NO_FP8_KV_TARGETS and values["serve"]["kv_cache_dtype"].startswith("fp8"):
        fail("serve.kv_cache_dtype", f"no FP8 KV cache on {values['target']} (no FP8 hardware)")
    if not values["drafter"].startswith(values["model"]):
        fail("drafter", f"must be the model's own drafter {values['model']}-assistant "
                        f"(got {values['drafter']!r})")
    _check_thresholds(values, fail)
    _check_moe_config(values, fail)


def _check_thresholds(values: dict, fail) -> None:
    """The acceptance gate must imply the speedup gate: a recipe that passes acceptance at
    temperature 0 is expected to be min_speedup faster (speedup ~= mean length / step cost)."""
    t, k = values["thresholds"], values["speculative"]["num_speculative_tokens"]
    needed_length = t["min_speedup"] * t["step_cost_ratio"]
    if t["min_mean_acceptance_length"] + 1e-9 < needed_length:
        fail("thresholds.min_mean_acceptance_length",
             f"must be at least min_speedup x step_cost_ratio = {needed_length:.2f} "
             f"(got {t['min_mean_acceptance_length']})")
    if t["min_mean_acceptance_length"] > k + 1:
        fail("thresholds.min_mean_acceptance_length",
             f"cannot exceed 1 + num_speculative_tokens = {k + 1}")
    # mean length = 1 + k * acceptance rate, so the two gates must say the same thing.
    implied_rate = (t["min_mean_acceptance_length"] - 1) / k
    if not math.isclose(t["min_acceptance_rate"], implied_rate, abs_tol=0.011):
        fail("thresholds.min_acceptance_rate",
             f"must be (min_mean_acceptance_length - 1) / num_speculative_tokens = "
             f"{implied_rate:.2f} (got {t['min_acceptance_rate']})")


def _check_moe_config(values: dict, fail) -> None:
    moe = values["moe_config"]
    if moe is None:
        return
    expected_name = moe_config_name(values["target"], values["serve"]["quantization"])
    if expected_name and moe["name"] != expected_name:
        fail("moe_config.name", f"vLLM looks for {expected_name!r} on this target "
                                f"(got {moe['name']!r})")


def moe_config_name(target: str, quantization: str | None) -> str | None:
    """vLLM's fused-MoE config file name for the MoE model on `target`; None if unknown.
    Named by the same rule the tuner writes files under (Gemma-4-26B-A4B: E=128, N=704)."""
    from forge.patching.moe_config_names import config_file_name

    device = _moe_device_name(target)
    if device is None:
        return None
    return config_file_name(device, "fp8_w8a8" if quantization == "fp8" else "bf16")


def known_targets() -> list[str]:
    return sorted(_load_targets())


def _moe_device_name(target: str) -> str | None:
    found = _load_targets().get(target)
    return found.moe_device_name if found is not None else None


def _load_targets() -> dict:
    """images/targets.yaml's targets (built images carry the file at the same place)."""
    from forge.targets import load_targets

    return load_targets()
