"""`build.py new-recipe`: a model's recipe on a target, written from flags.

    new-recipe MODEL --target T                  recipes/MODEL.yaml exists: adds targets.T
    new-recipe MODEL --model HF_ID --target T    a new recipes/MODEL.yaml with defaults and T

What the command cannot know is written as an assumption that says so (`expect.source`,
`thresholds.step_cost_source`), for a GPU run to replace. The file gains exactly the new text or
stays as it was: the result is loaded as every command loads it (each target's merged recipe
validated) before the atomic rename.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from forge.data_formats import parse_yaml
from forge.errors import ForgeError
from forge.files import DATA_YAML, read_text, write_text_atomically
from forge.json_text import dump_json
from forge.models import model_for_id
from forge.schema import load_yaml
from forge.serving import recipes


@dataclass(frozen=True)
class NewDefaults:
    """A new model file's defaults (recipes/README.md says what each means)."""
    model: str                          # the Hugging Face id
    num_speculative_tokens: int = 3
    quantization: str | None = None     # fp8, or the checkpoint's own weights
    model_runner: str = "v2"
    attention_backend: str = "TRITON_ATTN"
    max_model_len: int = 32768
    max_num_seqs: int = 64
    gpu_memory_utilization: float = 0.9
    min_speedup: float = 1.0
    step_cost_ratio: float = 2.0


def _name_problem(name: str) -> str | None:
    if re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", name) and not name.endswith(".yaml"):
        return None
    return f"lowercase letters, digits, '.' and '-', the model's file name (got {name!r})"


def target_override(target: str, moe_provider: str | None = None) -> str:
    """The smallest override a target needs: what only a run on it can say, marked as an
    assumption; with `moe_provider`, the MoE config file vLLM is expected to read there."""
    expect = f"assumption, unmeasured on {target}: what verify reads from the engine log there"
    cost = (f"assumption, unmeasured on {target}: the defaults' step_cost_ratio carried over "
            f"until verify/bench.py measures it there")
    lines = [f"  {target}:", f"    expect: {{source: {dump_json(expect)}}}"]
    if moe_provider:
        lines.append(f"    moe_config: {{expected: true, provider: {moe_provider}}}")
    lines.append(f"    thresholds: {{step_cost_source: {dump_json(cost)}}}")
    return "\n".join(lines) + "\n"


def new_file_text(defaults: NewDefaults, targets: list[str], moe_provider: str | None,
                  has_experts: bool) -> str:
    serve = {"max_model_len": defaults.max_model_len,
             "gpu_memory_utilization": defaults.gpu_memory_utilization,
             "max_num_seqs": defaults.max_num_seqs, "model_runner": defaults.model_runner,
             "attention_backend": defaults.attention_backend}
    if defaults.quantization:
        serve = {"quantization": defaults.quantization, **serve}
    lines = [
        f"# {defaults.model}: its recipes, the fields as recipes/README.md states them. The",
        "# sources say `assumption` until a GPU run measures them (verify/mtp_smoke.py, verify/bench.py).",
        f"model: {dump_json(defaults.model)}",
        "defaults:",
        f"  serve: {_flow(serve)}",
        f"  speculative: {_flow({'num_speculative_tokens': defaults.num_speculative_tokens})}",
        f"  thresholds: {_flow({'min_speedup': defaults.min_speedup, 'step_cost_ratio': defaults.step_cost_ratio})}",
    ]
    if has_experts:     # whether vLLM reads a tuned config is stated; none is, until shown
        lines.append("  moe_config: {expected: false}")
    lines.append("targets:")
    return "\n".join(lines) + "\n" + "".join(target_override(t, moe_provider) for t in targets)


def _flow(mapping: dict) -> str:
    return "{" + ", ".join(f"{k}: {dump_json(v)}" for k, v in mapping.items()) + "}"


def add_recipe(name: str, targets: list[str], defaults: NewDefaults | None = None,
               moe_provider: str | None = None, root: Path | None = None) -> Path:
    """Write recipes/NAME.yaml anew (with `defaults`) or add `targets` to it (without);
    `moe_provider` (forge or vllm): the targets' MoE config file is expected, from there."""
    problem = _name_problem(name)
    if problem:
        raise ForgeError(f"new-recipe NAME: {problem}")
    if not targets:
        raise ForgeError("--target: name at least one target")
    known = recipes.known_targets()
    for target in targets:
        if target not in known:
            raise ForgeError(f"--target: unknown target {target!r} (targets: {', '.join(known)})")
    if len(set(targets)) != len(targets):
        raise ForgeError("--target: each target once")
    path = recipes.recipe_path(name, root=root)
    if path.exists():
        if defaults is not None:
            raise ForgeError(f"--model: {recipes.display_path(path)} exists; add a target to it "
                             f"without --model and the defaults' flags")
        return _add_targets(path, targets, moe_provider)
    if defaults is None:
        raise ForgeError(f"new-recipe NAME: {recipes.display_path(path)} does not exist; give "
                         f"--model HF_ID to start it")
    try:
        _, model = model_for_id(defaults.model)
    except ForgeError as exc:
        raise ForgeError(f"--model: {str(exc).split(': ', 1)[-1]}") from None
    text = new_file_text(defaults, targets, moe_provider, model.moe is not None)
    return write_text_atomically(path, text,
                                 lambda candidate: _check_loads(candidate, path, targets))


def _add_targets(path: Path, targets: list[str], moe_provider: str | None) -> Path:
    before = load_yaml(path)
    source = recipes.display_path(path)
    taken = [t for t in targets if t in (before.get("targets") or {})]
    if taken:
        raise ForgeError(f"--target: {source}: targets.{taken[0]} exists; edit it there")
    text = read_text(path, DATA_YAML).rstrip("\n") + "\n\n" + "".join(
        target_override(t, moe_provider) for t in targets)

    def check(candidate: Path) -> None:
        after = load_yaml(candidate)
        added = {t: _parsed_override(t, moe_provider) for t in targets}
        if after != {**before, "targets": {**before["targets"], **added}}:
            raise ForgeError(f"{source}: targets: must be the file's last section (new-recipe "
                             f"appends the target to it)")
        _check_loads(candidate, path, targets)

    return write_text_atomically(path, text, check)


def _parsed_override(target: str, moe_provider: str | None) -> dict:
    return parse_yaml("targets:\n" + target_override(target, moe_provider), "new-recipe")["targets"][target]


def _check_loads(candidate: Path, path: Path, targets: list[str]) -> None:
    """The new file as every command reads it, each new target's merged recipe validated; errors
    name the real file."""
    source = recipes.display_path(path)
    values = recipes.load_model_file(load_yaml(candidate), source)
    for target in targets:
        recipes.recipe_of(values, target, path)
