"""One recipe across an upgrade: what the new release's own parser and env list refuse (the
checks `build.py serve` makes), spellings it renames, the kernels its weights route through that
the new build files no longer compile for the target, the known upstream failures of its model and
weights, and whether its evidence covers each release."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from packaging.version import Version

from forge.errors import ForgeError
from forge.serving.recipes import RUNNER_ENV, Recipe, load_known_failures
from forge.serving.serve import check_for_release, release_env
from forge.serving.vllm_args import ReleaseArgs
from forge.upgrade import evidence
from forge.upgrade.kernels import STATE_WORDS, KernelBuild, family_states
from forge.upgrade.release_defaults import moe_oracle_backends
from forge.upstream import releases

MARLIN_UTILS = "vllm/model_executor/layers/quantization/utils/marlin_utils_{kind}.py"


@dataclass(frozen=True)
class KernelRole:
    """A kernel family on a weight format's path: what it does there, whether only MoE models
    take it, and below which capability (None: any) vLLM routes the weights through it."""
    family: str
    role: str
    moe_only: bool = False
    below_capability: str | None = None


# What each weight format runs on, in vLLM's own terms: NVFP4 on the FP4 kernels, with Marlin as the
# W4A16 fallback (marlin_utils_fp4.py) and a Marlin backend in its MoE oracle; FP8 through Marlin
# (W8A16) only on GPUs without FP8 tensor cores (below sm_89: the A100's "MARLIN Fp8").
QUANT_PATHS = {
    "nvfp4": (KernelRole("FP4", "its FP4 GEMM and MoE kernels"),
              KernelRole("Marlin", "the W4A16 fallback of its linear layers, marlin_utils_fp4.py"),
              KernelRole("Marlin MoE", "the MARLIN backend of its MoE oracle, oracle/nvfp4.py",
                         moe_only=True)),
    "fp8": (KernelRole("Marlin", "W8A16 linear layers without FP8 tensor cores, "
                                 "marlin_utils_fp8.py", below_capability="8.9"),
            KernelRole("Marlin MoE", "the MARLIN backend of its MoE oracle, oracle/fp8.py",
                       moe_only=True, below_capability="8.9")),
}


@dataclass
class RecipeChange:
    recipe: str
    target: str
    served_from: bool
    served_to: bool
    runner: str                                          # the recipe's model runner
    refused: list[str] = field(default_factory=list)     # blocking: the new release rejects it
    renamed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    kernel_states: list[dict] = field(default_factory=list)   # family, role, from, to
    known_failures: list[str] = field(default_factory=list)
    evidence: list[evidence.Coverage] = field(default_factory=list)
    missing_evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"recipe": self.recipe, "target": self.target, "served_from": self.served_from,
                "served_to": self.served_to, "runner": self.runner, "refused": self.refused, "renamed": self.renamed,
                "notes": self.notes, "kernels": self.kernels, "kernel_states": self.kernel_states,
                "known_failures": self.known_failures,
                "evidence": [c.to_dict() for c in self.evidence],
                "missing_evidence": self.missing_evidence}


def check_recipe(recipe: Recipe, before: ReleaseArgs, after: ReleaseArgs,
                 builds: list[KernelBuild], capability: str,
                 record_releases: Mapping[str, str | None]) -> RecipeChange:
    """`record_releases`: evidence.record_releases(), read once for every recipe of the report."""
    change = RecipeChange(recipe.name, recipe.target, recipe.admits(before.version),
                          recipe.admits(after.version), recipe.serve.model_runner)
    ids = evidence.cited_ids(recipe)
    change.evidence = [evidence.coverage_in(ids, v, record_releases)
                       for v in (before.version, after.version)]
    change.missing_evidence = evidence.missing_in(ids, record_releases)
    change.known_failures = known_failures_of(recipe)
    if not change.served_to:
        change.notes.append(f"not served on {after.version}: the recipe is for vLLM {recipe.vllm}")
        return change
    if not change.served_from:
        change.notes.append(f"new on {after.version}: not served on {before.version} (the recipe "
                            f"is for vLLM {recipe.vllm})")
    change.refused = refusals(recipe, before, after)
    change.renamed = renames(recipe, before, after)
    change.kernels = kernel_changes(recipe, builds, capability, before.version, after.version)
    change.kernel_states = kernel_states(recipe, builds, capability, after.version)
    if not change.refused:
        change.notes += release_env(recipe, after)[1]
    return change


def refusals(recipe: Recipe, before: ReleaseArgs, after: ReleaseArgs) -> list[str]:
    """Each check `serve` makes, its one-line refusal (each check stops at its first problem),
    and every vLLM variable of serve.env the new release does not read."""
    found = []
    for check in (release_env, check_for_release):
        try:
            check(recipe, after)
        except ForgeError as refusal:
            found.append(str(refusal))
    for name in recipe.serve.env:
        if name.startswith("VLLM_") and name != RUNNER_ENV and name not in after.env_vars:
            read_before = " (read by " + before.version + ")" if name in before.env_vars else ""
            found.append(f"{recipe.where}.serve.env.{name}: vLLM {after.version} does not read "
                         f"it{read_before}")
    return found


def renames(recipe: Recipe, before: ReleaseArgs, after: ReleaseArgs) -> list[str]:
    """Flags of the recipe whose long name moved, or that gained a new spelling."""
    found = []
    for flag in sorted({t.split("=", 1)[0] for t in recipe.cli_args() if t.startswith("--")}):
        if not after.has_flag(flag):
            continue                                   # refused above, by serve's own check
        old, new = before.canonical(flag), after.canonical(flag)
        if old != new:
            found.append(f"{flag}: vLLM {after.version} reads it as {new} (in {before.version}: {old})")
        spellings = sorted(alias for alias, canonical in after.aliases.items()
                           if canonical == new and alias.startswith("--")
                           and before.aliases.get(alias) != canonical)
        if spellings:
            found.append(f"{flag}: vLLM {after.version} also spells it {', '.join(spellings)} "
                         f"(the recipe's spelling still parses)")
    return found


def kernel_changes(recipe: Recipe, builds: list[KernelBuild], capability: str, before: str,
                   after: str) -> list[str]:
    """One line per kernel family on the recipe's quantization path whose code for the target's
    capability the upgrade changes (native, PTX-JIT only or absent, as vLLM's CMake builds it)."""
    lines = []
    for role in roles_for(recipe, capability, after):
        state_before, state_after = family_states(builds, role.family)
        if state_before == state_after:
            continue
        variables = "; ".join(_variable_change(b) for b in builds
                              if b.family == role.family and (b.lost or b.gained))
        lines.append(f"{recipe.weights} weights: {role.family} ({role.role}) on sm_"
                     f"{capability.replace('.', '')}: {STATE_WORDS[state_before]} -> "
                     f"{STATE_WORDS[state_after]} ({after}'s CMakeLists.txt: {variables})")
    return lines


def kernel_states(recipe: Recipe, builds: list[KernelBuild], capability: str, after: str
                  ) -> list[dict]:
    """Every kernel family the recipe's weights rely on on this GPU, and its state on each side."""
    return [{"family": role.family, "role": role.role,
             **dict(zip(("from", "to"), family_states(builds, role.family)))}
            for role in roles_for(recipe, capability, after)]


def roles_for(recipe: Recipe, capability: str, after: str) -> list[KernelRole]:
    """The kernel roles of the recipe's weights on this GPU and model (a Marlin MoE backend only
    where the release's oracle for the weights has one)."""
    roles = []
    for role in QUANT_PATHS.get(recipe.weights, ()):
        if role.moe_only and (recipe.moe_shape is None or "MARLIN" not in
                              moe_oracle_backends(after, recipe.weights)):
            continue
        if role.below_capability and Version(capability) >= Version(role.below_capability):
            continue
        if role.family == "Marlin" and not _marlin_utils_present(after, recipe.weights):
            continue
        roles.append(role)
    return roles


def _marlin_utils_present(version: str, weights: str) -> bool:
    kind = {"nvfp4": "fp4", "fp8": "fp8"}.get(weights)
    return bool(kind) and (releases.release_tree(version) / MARLIN_UTILS.format(kind=kind)).is_file()


def _variable_change(build: KernelBuild) -> str:
    def side(request):
        return "not built" if request is None else f'"{request.text}" (line {request.line})'
    return (f"{build.variable} {side(build.before)} -> {side(build.after)}, "
            f"{STATE_WORDS[build.state_after]}")


def known_failures_of(recipe: Recipe) -> list[str]:
    root = recipe.path.parent if recipe.path else None
    return [f"{f['base_model']} {f['weights']} at tensor parallel {f['tensor_parallel_size']}: "
            f"{f['why']} ({f['issue']})" for f in load_known_failures(root)
            if (f["base_model"], f["weights"]) == (recipe.base_model, recipe.weights)]

