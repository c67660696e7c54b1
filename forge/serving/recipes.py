"""Recipes: what a user serves on a target, and what verify checks against.

A model's recipes are one file, recipes/<model>.yaml: `defaults` and thin per-target overrides
(`targets.<target>`), deep-merged and validated on load (errors name the file and the field,
e.g. `recipes/gemma-4-26b-a4b-it.yaml: targets.h200.serve.max_num_seqs: ...`). What the code
derives is never stated: the name and target, the drafter, the expected quantization, the MoE
config file names, the acceptance gates and the cap of the vLLM range (the series' coverage).
`Recipe.engine_kwargs()` (for vllm.LLM) and `Recipe.cli_args()` (for `vllm serve`) are both
derived from one table, ENGINE_SETTINGS, so the verify scripts start vLLM exactly as serve does.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from packaging.version import Version

from forge import files
from forge.errors import ForgeError
from forge.models import Family, Model, MoeShape, model_for_id
from forge.schema import Field, ListOf, load_yaml, pep440_specifier, pep440_version, validate
from forge.serving.serve_flags import cli_value, extra_args_as_kwargs, flag_groups
from forge.targets import KNOWN_FAILURES_FILE, RECIPES_DIR

RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# vLLM's CacheDType values; FP8 ones need FP8 hardware support for the KV cache.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# Targets whose GPU has no FP8 tensor cores: FP8 weights still work there (vLLM runs them as
# W8A16 through Marlin), an FP8 KV cache does not pay and is refused.
NO_FP8_KV_TARGETS = ("a100",)
# Variables a recipe may never set: vLLM 0.24.0 removed them (vllm/envs.py of 0.23.0 has both,
# 0.24.0 neither), so a recipe that sets them gets nothing. The flags that replaced them:
REMOVED_ENV_VARS = {
    "VLLM_USE_FLASHINFER_MOE_FP4": ("0.24.0", "--moe-backend"),
    "VLLM_NVFP4_GEMM_BACKEND": ("0.24.0", "--linear-backend"),
}
# Quantization methods vLLM detects from a pre-quantized checkpoint's config.json (the names
# its engine config line prints as quantization=...).
CHECKPOINT_FORMATS = ("modelopt_fp4", "compressed-tensors")


def _positive(value) -> str | None:
    return None if value > 0 else f"must be positive (got {value})"


def _fraction(value) -> str | None:
    return None if 0 < value <= 1 else f"must be in (0, 1] (got {value})"


def _at_least_one(value) -> str | None:
    return None if value >= 1 else f"must be at least 1 (got {value})"


def _hf_id(value) -> str | None:
    return None if value.count("/") == 1 and " " not in value else \
        f"must be a Hugging Face id like org/name (got {value!r})"


def _attention_backend_name(value) -> str | None:
    # AttentionBackendEnum member names (vllm/v1/attention/backends/registry.py); each release's
    # own members are checked by `build.py serve` (forge.serving.vllm_args).
    return None if value.isidentifier() and value.isupper() else \
        f"must be an AttentionBackendEnum name like TRITON_ATTN (got {value!r})"


def _env_names(value) -> str | None:
    for name, setting in value.items():
        if not (isinstance(name, str) and name.isidentifier() and name.isupper()):
            return f"{name!r} is not an environment variable name"
        if not isinstance(setting, str):
            return f"{name}: value must be a string (got {type(setting).__name__})"
        if not setting.isprintable():
            return f"{name}: {_unprintable(setting)}"
        if name in REMOVED_ENV_VARS:
            removed_in, flag = REMOVED_ENV_VARS[name]
            return (f"{name} was removed in vLLM {removed_in} (it would be ignored): "
                    f"use {flag} instead")
    return None


def _notes(value) -> str | None:
    for name, text in value.items():
        if not (isinstance(name, str) and re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name)):
            return f"{name!r} is not a note name (lowercase words joined by -)"
        if not isinstance(text, str) or not text.strip():
            return f"{name}: must be the note's text (got {type(text).__name__})"
    return None


def _cli_tokens(value) -> str | None:
    # A flag first (`--x` or an alias such as `-q`): a leading value would be read as the model.
    if value and not flag_groups(value)[0].flag:
        return f"must start with a --flag (got {value[0]!r})"
    for position, token in enumerate(value):
        if not token.isprintable():
            return f"[{position}]: {_unprintable(token)}"
    return None


def _unprintable(value: str) -> str:
    # The value goes onto the command line `serve` prints for pasting: shlex would quote a control
    # character but leave it raw, for the terminal to act on.
    return f"holds a control character ({value!r}), which no command line can show"


REFERENCE_ITEM = {
    "figure": Field(str),
    "value": Field((int, float, str)),
    "unit": Field(str),
    "source": Field(str),
}

CHECKPOINT = {
    "base_model": Field(str, check=_hf_id),
    "format": Field(str, choices=CHECKPOINT_FORMATS),
    "weights": Field(str, choices=("nvfp4",)),
    "source": Field(str),
}

# The file name is derived from the model's experts, the target's device and the weights
# (moe_config_name): a recipe says only whether vLLM reads one and who supplies it.
MOE_CONFIG = {
    # whether vLLM is expected to read this file (else it logs "Config file not found")
    "expected": Field(bool),
    # who supplies it: forge (patches/moe-configs, shipped for the releases series.yaml names)
    # or vllm (bundled in the release's fused_moe/configs/)
    "provider": Field(str, required=False, choices=("forge", "vllm")),
}

LAYOUT = {
    "nodes": Field(int, check=_at_least_one),
    # empty: every GPU of the layout in one tensor parallel group (nodes x gpus_per_node / PP)
    "tensor_parallel_size": Field(int, required=False, check=_at_least_one),
    "pipeline_parallel_size": Field(int, required=False, default=1, check=_at_least_one),
    "gpus_per_node": Field(int, required=False, default=1, check=_at_least_one),
    # MoE model only; empty: the recipe's own moe_config (expected, provider) at this size
    "moe_config": Field(MOE_CONFIG, required=False),
    "source": Field(str),
}

# What one target's recipe states: a model file's `defaults`, deep-merged with its
# `targets.<target>` (a mapping merges key by key, anything else replaces; null removes).
RECIPE = {
    # The releases the recipe is for, lower bound: capped at the series' checked_through on load;
    # empty: the family's range, else the series' checked_from.
    "vllm": Field(str, required=False, check=pep440_specifier),
    "serve": Field({
        "quantization": Field(str, required=False, choices=("fp8",)),
        "kv_cache_dtype": Field(str, required=False, default="auto", choices=KV_CACHE_DTYPES),
        "max_model_len": Field(int, check=_positive),
        "gpu_memory_utilization": Field(float, check=_fraction),
        "max_num_seqs": Field(int, check=_positive),
        "model_runner": Field(str, choices=("v1", "v2")),
        "moe_backend": Field(str, required=False, choices=("triton",)),
        "attention_backend": Field(str, required=False, check=_attention_backend_name),
        # A fixed KV cache size: on GB10's unified memory vLLM's profiling does not respect
        # gpu_memory_utilization (vLLM #46307, #44740, #56830).
        "kv_cache_memory_bytes": Field(int, required=False, check=_positive),
        "env": Field(dict, required=False, default={}, check=_env_names),
        "extra_args": Field(ListOf(str), required=False, default=[], check=_cli_tokens),
    }),
    # What verify reads back from the engine log: each value is what vLLM prints. The
    # quantization is what the weights make vLLM report (derived), the attention backend
    # serve.attention_backend's unless stated.
    "expect": Field({
        "moe_backend": Field(str, required=False),         # e.g. "TRITON Fp8", "FLASHINFER_CUTLASS NvFp4"
        "attention_backend": Field(str, required=False, check=_attention_backend_name),
        "flash_attn_version": Field(int, required=False),  # FLASH_ATTN only: 4 for FA4
        "source": Field(str),                              # measured or assumed, and where from
        # a note of the file (notes.<name>) the expectation also rests on, stated once there for
        # every target it holds for (the H100 and H200 entries share the H200's attention runs)
        "note": Field(str, required=False),
    }),
    "speculative": Field({
        # empty: the family's method where it names one (models/<family>.yaml)
        "method": Field(str, required=False),
        "num_speculative_tokens": Field(int, check=_positive),
    }),
    # Empty: the family's sampling defaults (models/<family>.yaml).
    "sampling": Field({
        "temperature": Field(float),
        "top_p": Field(float, check=_fraction),
        "top_k": Field(int),
        "source": Field(str),
    }, required=False),
    "moe_config": Field(MOE_CONFIG, required=False),
    "multi_node": Field(ListOf(LAYOUT), required=False, default=[]),
    # The acceptance gates are derived from these (acceptance_gates, recipes/README.md).
    # Result records (benchmarks/results/<id>/) behind the recipe's choices, checked on load:
    # each exists and measured this recipe (its target, k and quantization where it names them).
    "evidence": Field(ListOf(str), required=False, default=[]),
    "thresholds": Field({
        "min_speedup": Field(float, check=_positive),
        # The cost of one speculative step over one plain step: the break-even mean
        # acceptance length.
        "step_cost_ratio": Field(float, check=_at_least_one),
        "step_cost_source": Field(str),
    }),
}


def _partial(schema: dict) -> dict:
    """The schema with every field optional and no defaults: what `defaults` or one target's
    overrides may hold on their own (the merged recipe is checked against the full schema)."""
    return {name: replace(f, required=False, default=None,
                          kind=_partial(f.kind) if isinstance(f.kind, dict) else f.kind)
            for name, f in schema.items()}


PARTIAL_RECIPE = _partial(RECIPE)     # declared once: forge.schema compiles a schema once


# recipes/<model>.yaml
MODEL_FILE = {
    "model": Field(str, check=_hf_id),
    # A pre-quantized checkpoint of another model (NVFP4): vLLM detects `format` from its
    # config.json; the drafter is base_model's own (BF16).
    "checkpoint": Field(CHECKPOINT, required=False),
    # Figures users compare against, for the model on any target.
    "reference": Field(ListOf(REFERENCE_ITEM), required=False, default=[]),
    "defaults": Field(PARTIAL_RECIPE, required=False, default={}),
    "targets": Field(dict),
    # Prose that more than one target's `expect.note` cites, each stated once: name -> text.
    "notes": Field(dict, required=False, default={}, check=_notes),
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
    drafter: str | None
    vllm: str
    serve: Section
    speculative: Section
    sampling: Section
    moe_config: Section | None
    thresholds: Section
    expect: Section
    checkpoint: Section | None = None
    multi_node: tuple = ()
    reference: list = field(default_factory=list)
    path: Path | None = None
    stated_vllm: str | None = None     # the range the file states, before the series' cap
    # The backend the speculative config pins for the drafter: serve.attention_backend where the
    # family's drafter takes its backend from there (models/<family>.yaml drafter.attention_backend),
    # derived on load with the rest of the family's facts; None: the drafter runs the target's.
    drafter_attention_backend: str | None = None
    evidence: tuple = ()               # result record ids (forge/evidence), checked on load

    @property
    def base_model(self) -> str:
        """The model whose drafter this is: the checkpoint's base for a pre-quantized one."""
        return self.checkpoint.base_model if self.checkpoint else self.model

    @property
    def family_model(self) -> tuple[Family, Model]:
        """The model family (models/<family>.yaml) and model that list the base model's id."""
        return model_for_id(self.base_model)

    @property
    def moe_shape(self) -> MoeShape | None:
        return self.family_model[1].moe

    @property
    def weights(self) -> str:
        """nvfp4 (a pre-quantized checkpoint), fp8 (quantized on load) or bf16."""
        if self.checkpoint:
            return self.checkpoint.weights
        return self.serve.quantization or "bf16"

    def moe_config_for(self, tensor_parallel: int) -> Section | None:
        """The MoE config expectation at this tensor parallel size: the recipe's own at 1, a
        multi-node layout's at its size (None where the recipe states none)."""
        if tensor_parallel == 1:
            return self.moe_config
        return next((layout.moe_config for layout in self.multi_node
                     if layout.tensor_parallel_size == tensor_parallel), None)

    def layout(self, nodes: int) -> Section | None:
        """The multi-node layout this recipe states for `nodes` nodes, if any."""
        return next((layout for layout in self.multi_node if layout.nodes == nodes), None)

    def admits(self, vllm_version: str) -> bool:
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.vllm).contains(str(vllm_version), prereleases=True)

    def reaches(self, vllm_version: str) -> bool:
        """Whether the range the file states takes `vllm_version` once the series covers it
        (the cap at the series' checked_through moves with the series on its own)."""
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(self.stated_vllm or self.vllm).contains(str(vllm_version), prereleases=True)

    @property
    def where(self) -> str:
        """Where messages about this recipe point: its model file and target entry."""
        if self.path is None:
            return f"{self.name}: targets.{self.target}"
        return f"{display_path(self.path)}: targets.{self.target}"

    def speculative_config(self) -> dict:
        """The drafter is the family's separate checkpoint where it has one (else the head
        inside the target's checkpoint: no model key). Where the family's drafter takes its
        attention backend from the speculative config (models/<family>.yaml,
        drafter.attention_backend), the recipe's pin is stated there too, or the drafter would
        run whatever vLLM selects."""
        config = {"model": self.drafter} if self.drafter else {}
        config.update(method=self.speculative.method,
                      num_speculative_tokens=self.speculative.num_speculative_tokens)
        if self.drafter_attention_backend:
            config["attention_backend"] = self.drafter_attention_backend
        return config

    def env(self) -> dict[str, str]:
        """Environment the engine needs. The runner is always explicit: the default changes
        between releases (V1 up to 0.28 for the MoE, V2 from 0.29)."""
        return {**self.serve.env, RUNNER_ENV: "1" if self.serve.model_runner == "v2" else "0"}

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
                args += [setting.flag, cli_value(value)]
        return args + list(self.serve.extra_args)


@dataclass(frozen=True)
class EngineSetting:
    flag: str                            # the `vllm serve` flag
    kwarg: str                           # the vllm.LLM / EngineArgs keyword
    value: Callable[[Recipe], Any]       # None: leave vLLM's default (flag not emitted)


# The one table both engine_kwargs() and cli_args() read. CUDA graphs are always on:
# there is deliberately no enforce_eager here (eager was 13.5 vs 127.4 tok/s, docs/reference.md §6).
ENGINE_SETTINGS = (
    EngineSetting("--quantization", "quantization", lambda r: r.serve.quantization),
    EngineSetting("--kv-cache-dtype", "kv_cache_dtype",
                  lambda r: None if r.serve.kv_cache_dtype == "auto" else r.serve.kv_cache_dtype),
    EngineSetting("--max-model-len", "max_model_len", lambda r: r.serve.max_model_len),
    EngineSetting("--gpu-memory-utilization", "gpu_memory_utilization",
                  lambda r: r.serve.gpu_memory_utilization),
    EngineSetting("--max-num-seqs", "max_num_seqs", lambda r: r.serve.max_num_seqs),
    EngineSetting("--moe-backend", "moe_backend", lambda r: r.serve.moe_backend),
    EngineSetting("--attention-backend", "attention_backend",
                  lambda r: r.serve.attention_backend),
    EngineSetting("--kv-cache-memory-bytes", "kv_cache_memory_bytes",
                  lambda r: r.serve.kv_cache_memory_bytes),
    EngineSetting("--speculative-config", "speculative_config",
                  lambda r: r.speculative_config()),
)


def recipe_field(kwarg: str) -> str:
    """The recipe field behind an ENGINE_SETTINGS keyword, as messages name it."""
    return "speculative" if kwarg == "speculative_config" else f"serve.{kwarg}"


def structured_flags(recipe: Recipe) -> dict[str, str]:
    """`vllm serve` flag -> the recipe field that sets it: extra_args must not set it again
    (vLLM takes the last of two, so one of them would be silently lost)."""
    flags = {setting.flag: recipe_field(setting.kwarg) for setting in ENGINE_SETTINGS
             if setting.value(recipe) is not None}
    if recipe.multi_node:
        flags["--tensor-parallel-size"] = "multi_node[].tensor_parallel_size"
        flags["--pipeline-parallel-size"] = "multi_node[].pipeline_parallel_size"
    return flags


def check_extra_args_repeat_nothing(recipe: Recipe, where: str,
                                    canonical: Callable[[str], str] | None = None) -> None:
    """Refuse an extra_args flag a structured field already sets. `canonical` spells a flag's
    long name (a release's parser knows its aliases, `-q` for `--quantization`)."""
    set_by = structured_flags(recipe)
    for group in flag_groups(list(recipe.serve.extra_args)):
        name = canonical(group.flag) if canonical else group.name
        if name in set_by:
            raise ForgeError(f"{where}.serve.extra_args[{group.index}]: {group.flag} is already "
                             f"set by {set_by[name]}; set it there only")


# ---------------------------------------------------------------------------------------------
# Loading


def recipe_path(model: str, target: str | None = None, root: Path | None = None) -> Path:
    """The model's file, recipes/<model>.yaml: every target's recipe of that model is in it."""
    return (root or RECIPES_DIR) / f"{model}.yaml"


def _model_files(root: Path | None = None) -> list[Path]:
    root = root or RECIPES_DIR
    if not root.is_dir():
        raise ForgeError(f"{root}: no such recipes directory")
    return sorted((p for p in root.glob("*.yaml") if p.name != KNOWN_FAILURES_FILE), key=lambda p: p.stem)


def recipe_names(root: Path | None = None) -> list[str]:
    return [path.stem for path in _model_files(root)]


def _is_recipe_file(path: Path) -> bool:
    """Whether a recipe of that name exists: a name the OS refuses (longer than NAME_MAX, a NUL)
    names no recipe either, instead of an OSError traceback; a dangling link is one, for its
    read to refuse by name."""
    return files.is_present(path)


def load_recipe(model: str, target: str, root: Path | None = None) -> Recipe:
    path = recipe_path(model, target, root)
    if not _is_recipe_file(path):
        known = recipe_names(root)
        raise ForgeError(f"unknown recipe {model!r} "
                         f"(recipes: {', '.join(known) or f'none in {root or RECIPES_DIR}'})")
    source = display_path(path)
    values = _model_file(load_yaml(path), source)
    if target not in values["targets"]:
        raise ForgeError(f"{source}: targets: recipe {model!r} has no target {target!r} "
                         f"(targets: {', '.join(sorted(values['targets']))})")
    return _recipe(values, target, path)


def recipe_targets(model: str, root: Path | None = None) -> list[str]:
    """The targets a recipe names, in its file's order."""
    path = recipe_path(model, root=root)
    if not _is_recipe_file(path):
        raise ForgeError(f"unknown recipe {model!r} (recipes: {', '.join(recipe_names(root)) or 'none'})")
    return list(_model_file(load_yaml(path), display_path(path))["targets"])


def load_all(root: Path | None = None) -> list[Recipe]:
    found = []
    for path in _model_files(root):
        values = _model_file(load_yaml(path), display_path(path))
        found += [_recipe(values, target, path) for target in sorted(values["targets"])]
    return found


def _model_file(data, source: str) -> dict:
    values = validate(data, MODEL_FILE, source)
    if not values["targets"]:
        fail_at(source, "targets", "must name at least one target")
    targets = known_targets()
    for target, body in values["targets"].items():
        if target not in targets:
            fail_at(source, f"targets.{target}", f"unknown target (targets: {', '.join(targets)})")
        validate({} if body is None else body, PARTIAL_RECIPE, source, f"targets.{target}")
    _check_notes(values, source)
    return values


def _check_notes(values: dict, source: str) -> None:
    """Every `expect.note` names a note of the file, and every note is cited by one."""
    cited = {}
    for where, body in [("defaults", values["defaults"]),
                        *((f"targets.{t}", b) for t, b in values["targets"].items())]:
        note = ((body or {}).get("expect") or {}).get("note")
        if note is None:
            continue
        if note not in values["notes"]:
            fail_at(source, f"{where}.expect.note", f"no note {note!r} under notes (notes: "
                                                    f"{', '.join(values['notes']) or 'none'})")
        cited[note] = where
    for name in values["notes"]:
        if name not in cited:
            fail_at(source, f"notes.{name}", "no expect.note cites it; remove it or cite it")


def fail_at(source: str, where: str, problem: str) -> NoReturn:
    raise ForgeError(f"{source}: {where}: {problem}")


def load_model_file(data, source: str) -> dict:
    """A model file's data (recipes/<model>.yaml as parsed) validated as load_recipe does."""
    return _model_file(data, source)


def recipe_of(file: dict, target: str, path: Path) -> Recipe:
    """One target's merged, validated recipe from a validated model file (load_model_file)."""
    return _recipe(file, target, path)


def merged(defaults, overrides):
    """`overrides` on top of `defaults`: mappings merge key by key, anything else replaces
    (a list too), and null removes the default."""
    if not (isinstance(defaults, dict) and isinstance(overrides, dict)):
        return overrides
    result = dict(defaults)
    for key, value in overrides.items():
        result[key] = merged(defaults[key], value) if key in defaults else value
    return result


def _recipe(file: dict, target: str, path: Path) -> Recipe:
    source, where = display_path(path), f"targets.{target}"

    def fail(field_name, problem):
        fail_at(source, f"{where}.{field_name}", problem)

    raw = merged(file["defaults"], file["targets"][target] or {})
    values = {**validate(raw, RECIPE, source, where), "name": path.stem, "target": target,
              "model": file["model"], "checkpoint": file["checkpoint"]}
    family, model = _family_model(values, lambda field_name, problem:
                                  fail_at(source, field_name, problem))
    _derive(values, family, model, fail)
    _check_consistency(values, family, path, fail)
    sections = {key: Section(values[key]) for key in ("serve", "speculative", "sampling",
                                                      "thresholds", "expect")}
    moe = Section(values["moe_config"]) if values["moe_config"] else None
    checkpoint = Section(values["checkpoint"]) if values["checkpoint"] else None
    layouts = tuple(Section({**layout, "moe_config": Section(layout["moe_config"])
                             if layout["moe_config"] else None})
                    for layout in values["multi_node"])
    recipe = Recipe(name=values["name"], target=target, model=values["model"],
                    drafter=values["drafter"], vllm=values["vllm"], moe_config=moe,
                    checkpoint=checkpoint, multi_node=layouts,
                    reference=file["reference"], path=path, stated_vllm=values["stated_vllm"],
                    drafter_attention_backend=values["drafter_attention_backend"],
                    evidence=tuple(values["evidence"]), **sections)
    check_extra_args_repeat_nothing(recipe, f"{source}: {where}")
    own = (file["targets"][target] or {}).get("evidence")
    check_evidence(recipe, source, "defaults.evidence" if own is None else f"{where}.evidence",
                   same_target=own is not None, root=path.parent.parent)
    return recipe


def check_evidence(recipe: Recipe, source: str, where: str, same_target: bool, root: Path) -> None:
    """Each cited record exists and measured this recipe: its name, and where the record states
    them its k and quantization (and its target, for a target's own list; `defaults.evidence`
    holds for every target)."""
    from forge.evidence.records import load_records

    results = root / "benchmarks" / "results"
    if not recipe.evidence or not results.is_dir():
        return  # an image's or an install's data home ships recipes without the records
    records = load_records(results)
    k = recipe.speculative.num_speculative_tokens
    expected = {"recipe": recipe.name, "target": recipe.target if same_target else None}
    for i, record_id in enumerate(recipe.evidence):
        record = records.get(record_id)
        if record is None:
            fail_at(source, f"{where}[{i}]", f"no result record {record_id!r} "
                                             f"(benchmarks/results/<id>/result.json)")
        stated = {"recipe": record.recipe, "target": record.target,
                  "num_speculative_tokens": record.settings.get("num_speculative_tokens"),
                  "quantization": record.settings.get("quantization")}
        wanted = {**expected, "num_speculative_tokens": k, "quantization": recipe.serve.quantization}
        for name, value in wanted.items():
            if value is not None and stated[name] is not None and stated[name] != value:
                fail_at(source, f"{where}[{i}]", f"record {record_id!r} measured {name} "
                                                 f"{stated[name]!r}, the recipe has {value!r}")


def _derive(values: dict, family: Family, model: Model, fail) -> None:
    """Fill in what the code knows from the model family, the target and the series."""
    values["stated_vllm"] = (values["vllm"] or family.values["vllm"]
                             or f">={series_coverage()[0]}")
    values["vllm"] = capped_range(values["stated_vllm"])
    values["drafter"] = family.drafter_id(_base_model(values))
    pins_drafter = family.drafter_attention_backend == "speculative-config"
    values["drafter_attention_backend"] = values["serve"]["attention_backend"] if pins_drafter else None
    values["sampling"] = values["sampling"] or family.sampling
    speculative = values["speculative"]
    if speculative["method"] is None:
        methods = family.speculative_methods()
        if len(methods) != 1:
            fail("speculative.method", f"required: the {family.name} family names "
                                       f"{len(methods)} methods ({', '.join(methods)})")
        speculative["method"] = methods[0]
    expect, serve = values["expect"], values["serve"]
    expect["quantization"] = (values["checkpoint"]["format"] if values["checkpoint"]
                              else serve["quantization"])
    if expect["attention_backend"] is None:
        if serve["attention_backend"] is None:
            fail("expect.attention_backend", "required where serve.attention_backend is "
                                             "empty (the backend vLLM will log)")
        expect["attention_backend"] = serve["attention_backend"]
    values["thresholds"].update(acceptance_gates(values["thresholds"]["min_speedup"],
                                                 values["thresholds"]["step_cost_ratio"],
                                                 speculative["num_speculative_tokens"]))
    shape = model.moe
    values["moe_config"] = _named_moe_config(values["moe_config"], values, 1, shape,
                                             "moe_config", fail)
    for index, layout in enumerate(values["multi_node"]):
        at = f"multi_node[{index}]"
        ranks = layout["nodes"] * layout["gpus_per_node"]
        if layout["tensor_parallel_size"] is None:
            if ranks % layout["pipeline_parallel_size"]:
                fail(f"{at}.pipeline_parallel_size", f"does not divide the layout's {ranks} GPUs")
            layout["tensor_parallel_size"] = ranks // layout["pipeline_parallel_size"]
        stated = layout["moe_config"] or (
            {k: v for k, v in values["moe_config"].items() if k != "name"}
            if values["moe_config"] else None)
        layout["moe_config"] = _named_moe_config(stated, values, layout["tensor_parallel_size"],
                                                 shape, f"{at}.moe_config", fail)


def acceptance_gates(min_speedup: float, step_cost_ratio: float, k: int) -> dict[str, float]:
    """The acceptance gates that imply the speedup gate (recipes/README.md): speedup ~= mean
    acceptance length / step cost, so the length must reach min_speedup x step_cost_ratio
    (rounded up to 0.01), and mean length = 1 + k x acceptance rate (rounded to 0.01)."""
    length = math.ceil(min_speedup * step_cost_ratio * 100 - 1e-6) / 100
    rate = math.floor((length - 1) / k * 100 + 0.5 + 1e-6) / 100
    return {"min_mean_acceptance_length": length, "min_acceptance_rate": rate}


def _named_moe_config(moe: dict | None, values: dict, tensor_parallel: int, shape: MoeShape | None,
                      where: str, fail) -> dict | None:
    """The recipe's MoE config expectation with the file name vLLM looks for."""
    if moe is None:
        return None
    if shape is None:
        fail(where, f"{_base_model(values)} has no MoE block (models/ says so): no MoE config to name")
    assert shape is not None  # fail() raised
    if shape.intermediate % tensor_parallel:
        fail(where, f"tensor parallel {tensor_parallel} does not divide the MoE intermediate "
                    f"size {shape.intermediate}")
    if moe["expected"] and not moe["provider"]:
        fail(f"{where}.provider", "say who supplies the expected file: forge or vllm")
    if not moe["expected"] and moe["provider"]:
        fail(f"{where}.provider", "only for an expected file")
    name = moe_config_name(values["target"], values["serve"]["quantization"], tensor_parallel,
                           shape)
    if name is None:
        fail(where, f"no moe_device_name for target {values['target']!r}")
    return {"name": name, **moe}


def series_coverage() -> tuple[str, str]:
    """(checked_from, checked_through) of the patch series (patches/series.yaml, or the
    manifest VLLM_FORGE_SERIES names): the releases a recipe is served on by default."""
    from forge.patching.series import DEFAULT_SERIES

    path = Path(os.environ.get("VLLM_FORGE_SERIES") or DEFAULT_SERIES)
    data = load_yaml(path)
    found = []
    for key in ("checked_from", "checked_through"):
        value = str(data.get(key, "")) if isinstance(data, dict) else ""
        problem = pep440_version(value) if value else "required field is missing"
        if problem:
            fail_at(str(path), key, problem)
        found.append(value)
    return found[0], found[1]


def capped_range(specifier: str) -> str:
    """A recipe's range capped at the series' newest checked minor release: `>=0.25.0` with
    checked_through 0.33.0 is `>=0.25.0,<0.34` (its patch releases included)."""
    through = Version(series_coverage()[1])
    return f"{specifier},<{through.major}.{through.minor + 1}"


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(RECIPES_DIR.parent))
    except ValueError:
        return str(path)


def fp8_kv_refusal(target: str, kv_cache_dtype: str) -> str | None:
    """Why `target` may not run this KV cache dtype (an FP8 one on a GPU without FP8 hardware),
    or None: the one rule a recipe's serve.kv_cache_dtype and bench's kv= both answer to."""
    if target in NO_FP8_KV_TARGETS and kv_cache_dtype.startswith("fp8"):
        return f"no FP8 KV cache on {target} (no FP8 hardware)"
    return None


def _check_consistency(values: dict, family: Family, path: Path, fail) -> None:
    """Rules across fields: the target, FP8 KV, the family's methods, the layouts."""
    refusal = fp8_kv_refusal(values["target"], values["serve"]["kv_cache_dtype"])
    if refusal:
        fail("serve.kv_cache_dtype", refusal)
    methods = family.speculative_methods()
    if values["speculative"]["method"] not in methods:
        fail("speculative.method", f"must be one of {', '.join(methods)} (got "
                                   f"{values['speculative']['method']!r}): the {family.name} family's methods")
    if values["checkpoint"] and values["serve"]["quantization"]:
        fail("serve.quantization", f"must be empty for a pre-quantized checkpoint: vLLM detects "
                                   f"{values['checkpoint']['format']} from it")
    expect, serve = values["expect"], values["serve"]
    if serve["attention_backend"] and expect["attention_backend"] != serve["attention_backend"]:
        fail("expect.attention_backend", f"must be serve.attention_backend "
                                         f"{serve['attention_backend']!r} (got "
                                         f"{expect['attention_backend']!r})")
    if expect["flash_attn_version"] and expect["attention_backend"] != "FLASH_ATTN":
        fail("expect.flash_attn_version", "only applies to the FLASH_ATTN backend")
    k = values["speculative"]["num_speculative_tokens"]
    if values["thresholds"]["min_mean_acceptance_length"] > k + 1:
        fail("thresholds.min_speedup", f"min_speedup x step_cost_ratio = "
                                       f"{values['thresholds']['min_mean_acceptance_length']} "
                                       f"exceeds 1 + num_speculative_tokens = {k + 1}: "
                                       f"unreachable")
    _check_layouts(values, path, fail)


def _check_layouts(values: dict, path: Path, fail) -> None:
    seen = set()
    for index, layout in enumerate(values["multi_node"]):
        where = f"multi_node[{index}]"
        if layout["nodes"] < 2:
            fail(f"{where}.nodes", f"a multi-node layout spans 2 or more nodes "
                                   f"(got {layout['nodes']})")
        if layout["nodes"] in seen:
            fail(f"{where}.nodes", f"a second layout for {layout['nodes']} nodes")
        seen.add(layout["nodes"])
        gpus = layout["nodes"] * layout["gpus_per_node"]
        ranks = layout["tensor_parallel_size"] * layout["pipeline_parallel_size"]
        if ranks != gpus:
            fail(f"{where}.tensor_parallel_size", f"tensor x pipeline parallel = {ranks} must "
                                                  f"equal nodes x gpus_per_node = {gpus}")
        failure = known_failure(_base_model(values), _weights(values),
                                layout["tensor_parallel_size"], path.parent)
        if failure:
            fail(f"{where}.tensor_parallel_size", failure)


def pin_attention_backend(kwargs: dict[str, Any], backend: str | None) -> dict[str, Any]:
    """Engine kwargs with the attention backend set to `backend` (None: vLLM's own choice); a
    drafter pin in the speculative config (where the recipe states one, Recipe.speculative_config)
    follows it, so an override never leaves the target and its drafter on different backends."""
    kwargs = dict(kwargs)
    _set_or_drop(kwargs, "attention_backend", backend)
    spec = kwargs.get("speculative_config")
    if spec and "attention_backend" in spec:
        kwargs["speculative_config"] = _set_or_drop(dict(spec), "attention_backend", backend)
    return kwargs


def _set_or_drop(mapping: dict, key: str, value) -> dict:
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value
    return mapping


def _family_model(values: dict, fail) -> tuple[Family, Model]:
    try:
        return model_for_id(_base_model(values))
    except ForgeError as exc:
        where = "checkpoint.base_model" if values["checkpoint"] else "model"
        fail(where, str(exc))
        raise  # fail() raised already


def moe_config_name(target: str, quantization: str | None, tensor_parallel: int,
                    shape: MoeShape) -> str | None:
    """vLLM's fused-MoE config file name for an MoE model of this shape on `target`; None if
    unknown. Named by the same rule the tuner writes files under: each TP rank holds N/TP of
    every expert's intermediate size (Gemma-4-26B-A4B: N=704 at TP=1, 352 at TP=2)."""
    from forge.patching.moe_config_names import config_file_name

    device = _moe_device_name(target)
    if device is None:
        return None
    if shape.intermediate % tensor_parallel:
        raise ForgeError(f"tensor parallel {tensor_parallel} does not divide the MoE "
                         f"intermediate size {shape.intermediate}")
    return config_file_name(device, "fp8_w8a8" if quantization == "fp8" else "bf16",
                            experts=shape.experts, n=shape.intermediate // tensor_parallel)


# ---------------------------------------------------------------------------------------------
# Combinations known to fail upstream (recipes/known-failures.yaml)

KNOWN_FAILURE = {
    "base_model": Field(str, check=_hf_id),
    "weights": Field(str, choices=("bf16", "fp8", "nvfp4")),
    "tensor_parallel_size": Field(int, check=_at_least_one),
    "issue": Field(str),
    "why": Field(str),
}
KNOWN_FAILURES_FILE_SCHEMA = {"failures": Field(ListOf(KNOWN_FAILURE))}


def known_failures_path(root: Path | None = None) -> Path:
    """The known failures are facts about vLLM, not about one recipes directory: a directory
    given with --recipes-dir may carry its own file, else the repository's applies."""
    for directory in (root, RECIPES_DIR):
        if directory is not None and (directory / KNOWN_FAILURES_FILE).is_file():
            return directory / KNOWN_FAILURES_FILE
    raise ForgeError(f"{RECIPES_DIR / KNOWN_FAILURES_FILE}: missing (the upstream failures "
                     f"recipes are checked against)")


def load_known_failures(root: Path | None = None) -> list[dict]:
    path = known_failures_path(root)
    return validate(load_yaml(path), KNOWN_FAILURES_FILE_SCHEMA, display_path(path))["failures"]


def known_failure(base_model: str, weights: str, tensor_parallel: int,
                  root: Path | None = None) -> str | None:
    """Why `base_model` with these weights fails at this tensor parallel size upstream, or
    None. `root`: the recipes directory the recipe was read from."""
    for failure in load_known_failures(root):
        if (failure["base_model"], failure["weights"], failure["tensor_parallel_size"]) == \
                (base_model, weights, tensor_parallel):
            return (f"{base_model} {weights} at tensor parallel {tensor_parallel} fails "
                    f"upstream, {failure['issue']}: {failure['why']}")
    return None


def _base_model(values: dict) -> str:
    return values["checkpoint"]["base_model"] if values["checkpoint"] else values["model"]


def _weights(values: dict) -> str:
    if values["checkpoint"]:
        return values["checkpoint"]["weights"]
    return values["serve"]["quantization"] or "bf16"


def known_targets() -> list[str]:
    return sorted(_load_targets())


def _moe_device_name(target: str) -> str | None:
    found = _load_targets().get(target)
    return found.moe_device_name if found is not None else None


def _load_targets() -> dict:
    """images/targets.yaml's targets (built images carry the file at the same place)."""
    from forge.targets import load_targets

    return load_targets()
