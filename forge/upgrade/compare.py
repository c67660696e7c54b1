"""`build.py upgrade --from V1 --to V2 --target T`: everything that changes for the target's
image and recipes between two releases, from their real sources and the project's data. The
parts live beside this module; this one checks the input, puts them together and says whether
the upgrade is ready (nothing blocks it) or needs work (a conflicting patch, a refused recipe,
a release the series has not checked, an image with no plan)."""
from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import Version

from forge.errors import ForgeError
from forge.models import Family
from forge.patching.series import Series, load_series
from forge.serving.recipes import Recipe, load_recipe
from forge.serving.vllm_args import release_args
from forge.targets import Target, get_target
from forge.upgrade import (
    effective_defaults,
    evidence,
    family_lines,
    image,
    kernels,
    patch_changes,
    release_defaults,
    requirements,
)
from forge.upgrade.effective_defaults import DefaultChange
from forge.upgrade.family_lines import LineCheck
from forge.upgrade.image import ImageSide
from forge.upgrade.kernels import KernelBuild
from forge.upgrade.patch_changes import PatchChange
from forge.upgrade.recipe_changes import RecipeChange, check_recipe
from forge.upgrade.release_defaults import Choices, SourceFunction
from forge.upgrade.requirements import DriftNote, IndexChange, RequirementChange
from forge.upstream import releases
from forge.versions import Release
from forge.watch.dependencies import load_watch

ATTENTION_FLAG, MOE_FLAG = "--attention-backend", "--moe-backend"


@dataclass
class Upgrade:
    before: str
    after: str
    target: Target
    downgrade: bool
    unchecked: bool                                   # `after` is newer than checked_through
    patches: list[PatchChange]
    requirements: list[RequirementChange]
    drift: list[DriftNote]
    runners: tuple[list[str], list[str]]
    choices: list[Choices]
    gemma4_attention: tuple[SourceFunction, SourceFunction]
    moe_backends: list[dict]
    kernels: list[KernelBuild]
    recipes: list[RecipeChange]
    images: tuple[ImageSide, ImageSide]
    series_path: str = ""
    next: list[str] = field(default_factory=list)
    effective: list[DefaultChange] = field(default_factory=list)   # values the recipes leave to vLLM
    family_lines: list[LineCheck] = field(default_factory=list)    # cited log lines per release
    attention_pinned: bool = False      # every recipe sets serve.attention_backend
    indexes: list[IndexChange] = field(default_factory=list)   # package-index options that move

    def unseen_lines(self) -> dict[tuple[str, str], list[LineCheck]]:
        """The family files' verify checks none of whose log lines is in the new release."""
        return family_lines.unseen(self.family_lines, self.after)

    @property
    def removed_runners(self) -> list[str]:
        return sorted(set(self.runners[0]) - set(self.runners[1]))

    def runner_recipes(self) -> list[str]:
        """The recipes on a runner the new release removes."""
        return [c.recipe for c in self.recipes
                if c.served_to and c.runner in self.removed_runners]

    @property
    def blocking(self) -> list[str]:
        verbs = {patch_changes.CONFLICT: "conflicts on",
                 patch_changes.NOT_CARRIED: "is needed but not carried on"}
        lines = [f"patch {c.id} {verbs[c.change]} {self.after} ({c.detail}): refresh it with "
                 f"`{patch_changes.REFRESH_COMMAND.format(id=c.id, version=self.after)}`"
                 for c in self.patches if c.change in patch_changes.BLOCKING]
        if self.unchecked:
            lines.append(f"{self.series_path}: vLLM {self.after} is newer than checked_through: "
                         "run `python3 build.py upstream-watch --write` first")
        lines += [refusal for c in self.recipes for refusal in c.refused]
        if self.images[1].problem:
            lines.append(f"the {self.after} image has no plan: {self.images[1].problem}")
        return lines

    @property
    def verdict(self) -> str:
        return "needs-work" if self.blocking else "ready"


def check_releases(before: str, after: str, allow_downgrade: bool, series: Series
                   ) -> tuple[Release, Release]:
    """Both published, inside the series' range from below, and in order (a downgrade only when
    allowed): else one line naming the flag."""
    old, new = Release(before, "--from"), Release(after, "--to")
    for flag, release in (("--from", old), ("--to", new)):
        try:
            releases.sdist_info(release)
        except ForgeError as exc:
            raise ForgeError(f"{flag} {release}: not a published vLLM release ({exc})") from None
        if release.version < Version(series.checked_from):
            raise ForgeError(f"{flag} {release}: before the series' checked_from "
                             f"{series.checked_from} ({series.path}): nothing to compare there")
    if new.version == old.version:
        raise ForgeError(f"--to {new}: the same release as --from: nothing changes")
    if new.version < old.version and not allow_downgrade:
        raise ForgeError(f"--to {new}: older than --from {old}; pass --allow-downgrade to compare "
                         "a downgrade")
    return old, new


def chosen_recipes(target: Target, names: list[str] | None, after: str) -> list[Recipe]:
    """The named recipes (each must exist for the target and admit --to), else every recipe of
    the target."""
    if not names:
        return [load_recipe(name, target.name) for name in target.recipes]
    chosen = []
    for name in names:
        try:
            recipe = load_recipe(name, target.name)
        except ForgeError as exc:
            raise ForgeError(f"--recipe {name}: {exc}") from None
        if not recipe.admits(after):
            raise ForgeError(f"--recipe {name}: {recipe.where}.vllm: the recipe is for vLLM "
                             f"{recipe.vllm}, not --to {after}")
        chosen.append(recipe)
    return chosen


def compare(before: str, after: str, target_name: str, recipe_names: list[str] | None = None,
            allow_downgrade: bool = False, repository: str | None = None) -> Upgrade:
    series = load_series()
    old, new = check_releases(before, after, allow_downgrade, series)
    target = get_target(target_name)
    recipes = chosen_recipes(target, recipe_names, new)
    old_args, new_args = release_args(old), release_args(new)
    builds = kernels.compare_builds(old, new, target.cuda, target.cuda_arch, target.platform)
    weights = sorted({r.weights for r in recipes if r.moe_shape is not None})
    measured_on = evidence.record_releases()
    upgrade = Upgrade(
        before=old, after=new, target=target, downgrade=new.version < old.version,
        unchecked=new.version > Version(series.checked_through),
        patches=patch_changes.patch_changes(old, new, series, target.moe_device_name),
        requirements=requirements.changed_requirements(old, new),
        drift=requirements.drift_notes(old, new, series, load_watch()),
        runners=(sorted(old_args.runners), sorted(new_args.runners)),
        choices=[release_defaults.choice_changes(old_args, new_args, flag)
                 for flag in (ATTENTION_FLAG, MOE_FLAG)],
        gemma4_attention=(release_defaults.gemma4_attention(old),
                          release_defaults.gemma4_attention(new)),
        moe_backends=[_backend_change(old, new, w) for w in weights],
        kernels=builds,
        recipes=[check_recipe(r, old_args, new_args, builds, target.cuda_arch, measured_on)
                 for r in recipes],
        images=(image.image_side(target.name, old, repository),
                image.image_side(target.name, new, repository)),
        series_path=str(series.path),
        family_lines=[line for family in _families(recipes)
                      for line in family_lines.check_family(family, [old, new])])
    upgrade.attention_pinned = all(r.serve.attention_backend for r in recipes)
    upgrade.indexes = requirements.index_changes(old, new)
    # A recipe the new release refuses has no effective values there: only the others are compared.
    starting = {c.recipe for c in upgrade.recipes if c.served_to and not c.refused}
    upgrade.effective = effective_defaults.recipe_default_changes(
        [r for r in recipes if r.name in starting], old, new, target.cuda_arch)[0]
    smoked = [c.recipe for c in upgrade.recipes if c.served_to and not c.refused]
    upgrade.next = image.next_commands(target.name, upgrade.images[1], smoked,
                                       patch_changes.refresh_commands(upgrade.patches, new),
                                       upgrade.unchecked, repository)
    return upgrade


def _families(recipes: list[Recipe]) -> list[Family]:
    """The model families (models/<family>.yaml) of the recipes, once each, in name order."""
    found: dict[str, Family] = {}
    for recipe in recipes:
        family = recipe.family_model[0]
        found.setdefault(family.name, family)
    return [found[name] for name in sorted(found)]


def _backend_change(before: str, after: str, weights: str) -> dict:
    old = release_defaults.moe_oracle_backends(before, weights)
    new = release_defaults.moe_oracle_backends(after, weights)
    return {"weights": weights, "oracle": release_defaults.MOE_ORACLES.get(weights),
            "removed": sorted(set(old) - set(new)), "added": sorted(set(new) - set(old))}

