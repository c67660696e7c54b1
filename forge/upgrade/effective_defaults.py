"""Effective values a recipe leaves to vLLM and the new release sets differently, read from the two
releases' sources with `ast` (never imported or run): what the recipe gets on each side, where the
release says so (file:line), and how to pin the old value.

Read per release:
- KV cache sizing (vllm/config/cache.py, CacheConfig): the `gpu_memory_utilization` field's
  default, the `enable_extensible_kv_cache` field (0.34.0: on by default on CUDA unless
  kv_cache_memory_bytes or num_gpu_blocks_override is set, vllm/config/vllm.py
  VllmConfig._resolve_extensible_kv_cache) and the utilization
  `resolved_gpu_memory_utilization` returns with it (1.0) and without it (the class default).
- The KV block size default (CacheConfig.DEFAULT_BLOCK_SIZE).
- The model-runner environment check (platforms/interface.py Platform.validate_environ: a
  VLLM_USE_V2_MODEL_RUNNER other than 1 is a ValueError once V1 is gone).
- The Humming-before-Marlin capabilities (quantization/utils/humming/priority.py,
  _HUMMING_PREFERRED_CAPABILITIES): which GPUs get Humming ahead of Marlin.
- CompilationConfig's field defaults (vllm/config/compilation.py): those that changed, and new
  fields on by default (0.34.0: cudagraph_decoder_replay).
- The CUDA candidate order of each linear-kernel family a recipe's weights use
  (model_executor/kernels/linear/__init__.py, _POSSIBLE_*_KERNELS[PlatformEnum.CUDA]): the
  first kernel that can implement a layer on the device wins.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from forge import files
from forge.serving.recipes import Recipe
from forge.upstream import releases

CACHE = "vllm/config/cache.py"
VLLM_CONFIG = "vllm/config/vllm.py"
INTERFACE = "vllm/platforms/interface.py"
PRIORITY = "vllm/model_executor/layers/quantization/utils/humming/priority.py"
LINEAR = "vllm/model_executor/kernels/linear/__init__.py"
COMPILATION = "vllm/config/compilation.py"
COMPILATION_FLAGS = ("--compilation-config", "-cc", "-O")
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# The linear-kernel candidate list each weight format's layers are chosen from.
LINEAR_LISTS = {"nvfp4": "_POSSIBLE_NVFP4_KERNELS", "fp8": "_POSSIBLE_FP8_KERNELS"}


@dataclass(frozen=True)
class Where:
    path: str
    line: int

    def __str__(self) -> str:
        """The file by its last part (a package's __init__.py by its folder too) and the line."""
        parts = self.path.split("/")
        name = "/".join(parts[-2:]) if parts[-1] == "__init__.py" else parts[-1]
        return f"{name}:{self.line}"


@dataclass
class ReleaseDefaults:
    """What one release's sources say, each with where (None: not in this release)."""
    version: str
    block_size: tuple[int, Where] | None = None
    utilization: tuple[float, Where] | None = None          # without the extensible KV cache
    extensible: Where | None = None                          # the field, where it exists
    extensible_utilization: float | None = None              # its default utilization (1.0)
    extensible_off_when: list[str] = field(default_factory=list)   # settings that turn it off
    runner_refusal: Where | None = None                      # VLLM_USE_V2_MODEL_RUNNER != 1 raises
    humming_first: tuple[list[int], Where] | None = None     # capabilities as ints: [90]
    linear_order: dict[str, tuple[list[str], Where]] = field(default_factory=dict)
    compilation: dict[str, tuple[str, Where]] = field(default_factory=dict)   # field -> default


@dataclass(frozen=True)
class DefaultChange:
    """One effective value that differs for a set of recipes."""
    setting: str
    before: str
    after: str
    where: str                      # file:line in the new release
    pin: str | None                 # how a recipe keeps the old value; None: nothing to pin
    recipes: tuple[str, ...] = ()   # empty: every recipe of the target
    detail: str = ""                # what the brief report leaves out

    def to_dict(self) -> dict:
        return {"setting": self.setting, "from": self.before, "to": self.after,
                "where": self.where, "pin": self.pin, "recipes": list(self.recipes),
                "detail": self.detail}


def _parse(tree: Path, path: str) -> ast.Module | None:
    file = tree / path
    if not file.is_file():
        return None
    return ast.parse(files.read_text(file, files.SOURCE))


def _class(module: ast.Module | None, name: str) -> ast.ClassDef | None:
    if module is None:
        return None
    return next((n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == name), None)


def _default_of(value: ast.expr | None):
    """A field's default: a constant, or Field(default=constant)."""
    if isinstance(value, ast.Constant):
        return value.value
    if isinstance(value, ast.Call):
        for keyword in value.keywords:
            if keyword.arg == "default" and isinstance(keyword.value, ast.Constant):
                return keyword.value.value
    return None


def read_defaults(version: str) -> ReleaseDefaults:
    tree = releases.release_tree(version)
    found = ReleaseDefaults(str(version))
    _read_cache(found, _class(_parse(tree, CACHE), "CacheConfig"))
    _read_extensible_resolver(found, _parse(tree, VLLM_CONFIG))
    _read_runner_check(found, _parse(tree, INTERFACE))
    _read_priority(found, _parse(tree, PRIORITY))
    _read_linear(found, _parse(tree, LINEAR))
    _read_compilation(found, _class(_parse(tree, COMPILATION), "CompilationConfig"))
    return found


def _read_compilation(found: ReleaseDefaults, config: ast.ClassDef | None) -> None:
    """CompilationConfig's field defaults, as their source spells them."""
    for node in config.body if config else []:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None and not node.target.id.startswith("_"):
            found.compilation[node.target.id] = (ast.unparse(node.value),
                                                 Where(COMPILATION, node.lineno))


def _read_cache(found: ReleaseDefaults, cache: ast.ClassDef | None) -> None:
    if cache is None:
        return
    fields = {n.target.id: n for n in cache.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    block = fields.get("DEFAULT_BLOCK_SIZE")
    if block is not None and isinstance(_default_of(block.value), int):
        found.block_size = (_default_of(block.value), Where(CACHE, block.lineno))
    utilization = fields.get("gpu_memory_utilization")
    class_default = fields.get("DEFAULT_GPU_MEMORY_UTILIZATION")
    if utilization is not None:
        value = _default_of(utilization.value)
        if value is None and class_default is not None:
            # None in the field: resolved_gpu_memory_utilization falls back to the class default.
            value, line = _default_of(class_default.value), class_default.lineno
        else:
            line = utilization.lineno
        if isinstance(value, float):
            found.utilization = (value, Where(CACHE, line))
    extensible = fields.get("enable_extensible_kv_cache")
    if extensible is not None:
        found.extensible = Where(CACHE, extensible.lineno)
    for node in cache.body:
        if isinstance(node, ast.FunctionDef) and node.name == "resolved_gpu_memory_utilization":
            for test in (n for n in ast.walk(node) if isinstance(n, ast.If)):
                if "enable_extensible_kv_cache" in ast.unparse(test.test):
                    returned = next((s.value for s in test.body if isinstance(s, ast.Return)), None)
                    if isinstance(returned, ast.Constant) and isinstance(returned.value, float):
                        found.extensible_utilization = returned.value


def _read_extensible_resolver(found: ReleaseDefaults, module: ast.Module | None) -> None:
    """The settings whose presence makes the resolver leave the extensible KV cache off
    (`elif cache_config.X is not None: unsupported = ...`)."""
    if module is None or found.extensible is None:
        return
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == "_resolve_extensible_kv_cache":
            for test in (n.test for n in ast.walk(node) if isinstance(n, ast.If)):
                if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.IsNot) \
                        and isinstance(test.left, ast.Attribute) \
                        and "cache_config" in ast.unparse(test.left.value):
                    found.extensible_off_when.append(test.left.attr)


def _read_runner_check(found: ReleaseDefaults, module: ast.Module | None) -> None:
    """Where validate_environ raises ValueError for VLLM_USE_V2_MODEL_RUNNER (not "1")."""
    if module is None:
        return
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == "validate_environ":
            for test in (n for n in ast.walk(node) if isinstance(n, ast.If)):
                mentions = any(isinstance(c, ast.Constant) and c.value == RUNNER_ENV
                               for c in ast.walk(test.test))
                raises = next((r for r in ast.walk(test) if isinstance(r, ast.Raise) and
                               "ValueError" in ast.unparse(r.exc or ast.Constant(None))), None)
                if mentions and raises is not None:
                    found.runner_refusal = Where(INTERFACE, raises.lineno)
                    return


def _read_priority(found: ReleaseDefaults, module: ast.Module | None) -> None:
    if module is None:
        return
    for node in module.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") ==
                                                "_HUMMING_PREFERRED_CAPABILITIES" for t in node.targets):
            values = [c.value for c in ast.walk(node.value)
                      if isinstance(c, ast.Constant) and isinstance(c.value, int)]
            found.humming_first = (sorted(values), Where(PRIORITY, node.lineno))


def _read_linear(found: ReleaseDefaults, module: ast.Module | None) -> None:
    if module is None:
        return
    wanted = set(LINEAR_LISTS.values())
    for node in module.body:
        if not isinstance(node, (ast.AnnAssign, ast.Assign)):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        name = getattr(target, "id", None)
        if name in wanted and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if key is not None and ast.unparse(key) == "PlatformEnum.CUDA" \
                        and isinstance(value, ast.List):
                    found.linear_order[name] = ([ast.unparse(e) for e in value.elts],
                                                Where(LINEAR, value.lineno))


# --- per recipe --------------------------------------------------------------------------------

def _sets(recipe: Recipe, *flags: str) -> bool:
    tokens = recipe.cli_args()
    return any(t == f or t.startswith(f + "=") for t in tokens for f in flags)


def _kv_sizing(recipe: Recipe, old: ReleaseDefaults, new: ReleaseDefaults
               ) -> tuple[str, str] | None:
    """(before, after) of how the recipe's KV cache is sized, or None where nothing changes."""
    if new.extensible is None or old.extensible is not None:
        return None
    if recipe.serve.kv_cache_memory_bytes is not None or \
            _sets(recipe, "--enable-extensible-kv-cache", "--no-enable-extensible-kv-cache"):
        return None            # a fixed size, or the recipe chose the mode itself
    def share(side: ReleaseDefaults, extensible: bool) -> str:
        if recipe.serve.gpu_memory_utilization is not None:
            return f"gpu_memory_utilization {recipe.serve.gpu_memory_utilization} (the recipe's)"
        value = side.extensible_utilization if extensible else (side.utilization or (None,))[0]
        return f"gpu_memory_utilization {value} (default)"
    return (f"estimated by profiling, {share(old, False)}",
            f"extensible (measured after CUDA graph capture), {share(new, True)}")


def recipe_default_changes(recipes: list[Recipe], before: str, after: str, capability: str
                           ) -> tuple[list[DefaultChange], ReleaseDefaults, ReleaseDefaults]:
    """Every effective value that moves for the served recipes, recipes sharing a change on one
    entry; and the two releases' readings."""
    old, new = read_defaults(before), read_defaults(after)
    served = [r for r in recipes if r.admits(after)]
    changes: list[DefaultChange] = []

    sizing: dict[tuple[str, str], list[str]] = {}
    for recipe in served:
        pair = _kv_sizing(recipe, old, new)
        if pair:
            sizing.setdefault(pair, []).append(recipe.name)
    off_when = " or ".join(new.extensible_off_when) or "kv_cache_memory_bytes"
    for (was, becomes), names in sizing.items():
        changes.append(DefaultChange(
            "KV cache sizing", "profiling estimate", "extensible",
            str(new.extensible), "--no-enable-extensible-kv-cache (or kv_cache_memory_bytes)",
            tuple(names), f"{was} -> {becomes}; on by default on CUDA unless {off_when} is set"))

    if old.block_size and new.block_size and old.block_size[0] != new.block_size[0]:
        unset = tuple(r.name for r in served if not _sets(r, "--block-size"))
        if unset:
            changes.append(DefaultChange(
                "KV block size", f"{old.block_size[0]}", f"{new.block_size[0]} tokens",
                str(new.block_size[1]), f"--block-size {old.block_size[0]}", unset,
                f"CacheConfig.DEFAULT_BLOCK_SIZE, where the recipe sets none ({old.block_size[1]} "
                f"in {before}); an attention backend may still choose its own"))

    if new.runner_refusal and not old.runner_refusal:
        changes.append(DefaultChange(
            "model runner", "V1 or V2", f"V2 only; {RUNNER_ENV}=0 a ValueError",
            str(new.runner_refusal), None, (),
            f"Platform.validate_environ raises for any {RUNNER_ENV} other than 1"))

    cc = int(capability.replace(".", ""))
    if new.humming_first and old.humming_first != new.humming_first:
        first = cc in new.humming_first[0]
        listed = ", ".join(f"sm_{c}" for c in new.humming_first[0]) or "no GPU"
        was = "list order" if old.humming_first is None else \
            ("Humming first" if cc in old.humming_first[0] else "list order")
        changes.append(DefaultChange(
            f"Humming/Marlin on sm_{cc}", was,
            "Humming moved ahead of Marlin" if first else f"list order (Humming first on {listed})",
            str(new.humming_first[1]),
            "--linear-backend / --moe-backend naming the kernel" if first else None, (),
            f"_HUMMING_PREFERRED_CAPABILITIES = {new.humming_first[0]}: prioritize_humming moves "
            "Humming directly ahead of Marlin in the linear-kernel and MoE-oracle lists there"))

    compiled = tuple(r.name for r in served if not _sets(r, *COMPILATION_FLAGS))
    moved = {k: v for k, v in new.compilation.items()
             if k in old.compilation and old.compilation[k][0] != v[0]}
    switched_on = {k: v for k, v in new.compilation.items()
                   if k not in old.compilation and v[0] == "True"}
    if compiled and (moved or switched_on):
        parts = [f"{k} {old.compilation[k][0]} -> {v[0]}" for k, v in moved.items()]
        parts += [f"+{k}=True" for k in switched_on]
        at = next(iter({**moved, **switched_on}.values()))[1]
        changes.append(DefaultChange(
            "compilation", "changed defaults" if moved else "same defaults",
            "; ".join(parts), str(at), "--compilation-config naming the old values"
            if moved else f"--compilation-config with {next(iter(switched_on))}=false"
            if switched_on else None, compiled,
            "CompilationConfig fields whose default changed, and new ones on by default: " +
            ", ".join(f"{k} ({v[1]})" for k, v in {**moved, **switched_on}.items())))

    for weights, name in LINEAR_LISTS.items():
        users = tuple(r.name for r in served if r.weights == weights)
        if not users or name not in new.linear_order:
            continue
        earlier = old.linear_order[name][0] if name in old.linear_order else []
        now, where = new.linear_order[name]
        if earlier == now:
            continue
        changes.append(DefaultChange(
            f"{weights} linear order", _order_text(earlier, now, before=True),
            _order_text(earlier, now, before=False), str(where), None, users,
            f"CUDA candidates in order (the first that can implement the layer wins): "
            f"{', '.join(map(_short, earlier))} -> {', '.join(map(_short, now))}"))
    return changes, old, new


def _short(kernel: str) -> str:
    return kernel.removesuffix("LinearKernel").removesuffix("ScaledMM")


def _order_text(was: list[str], now: list[str], before: bool) -> str:
    """Marlin's place among the candidates (1-based, `#4/9`) and, after, the first kernel new to
    the list with how many more are new."""
    side = was if before else now
    found = [i + 1 for i, k in enumerate(side) if k.startswith("Marlin")]
    place = f"#{found[0]}/{len(side)}" if found else f"none of {len(side)}"
    if before:
        return f"Marlin {place}"
    fresh = [f"{_short(k)} #{now.index(k) + 1}" for k in now if k not in was]
    return place + (f"; new {fresh[0]}" + (f" +{len(fresh) - 1}" if len(fresh) > 1 else "")
                    if fresh else "")
