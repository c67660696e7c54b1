"""The resolved plan of one image build: base and digest, patch statuses, MoE configs, tags, labels,
build record and context. Everything that can be wrong is found here, before the engine is touched:
unknown target, a release with no base, a patch that conflicts, an unlocked base.

Resolving a plan reads only local files (targets, lock, patch series, the cached release tree), so
`--plan` of a locked release runs without network once the vLLM release cache is warm (a base not
locked yet is pinned first through the registry: forge/commands/images.py).
"""
from __future__ import annotations

import hashlib
import re
import textwrap
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from forge.errors import ForgeError
from forge.files import SOURCE, read_text
from forge.image_names import default_repository, immutable_tag, moving_tag
from forge.images import context
from forge.images.lock import lock_file, read_lock
from forge.json_text import dump_json
from forge.patching.vocabulary import Kind, Status
from forge.targets import BaseImage, Target, get_target
from forge.untrusted import visible, visible_lines
from forge.versions import Release

LABEL_PREFIX = "io.vllm-forge."
RECORD_PATH = "/opt/vllm-forge/build-record.json"
WIDTH = 100      # the widest line a plan prints (a terminal of 100 columns shows it whole)


@dataclass
class Plan:
    target: Target
    vllm: str
    base: BaseImage
    base_digest: str | None          # None: unlocked (allowed), resolved from the registry at build time
    base_locked: bool
    patches: list[dict]
    patch_set_hash: str
    moe_configs: list[str]
    repository: str
    source: context.Source
    record: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    context_bytes: bytes = field(default=b"", repr=False)
    context_sha256: str = ""
    skipped_recipes: list[str] = field(default_factory=list)   # carried, not meant for this release
    content_digest: str = ""         # sha256 hex of everything the image is made of (see finish)

    @property
    def immutable_tag(self) -> str | None:
        """None until the base digest is known (an unlocked base in a plan): it names content."""
        if not self.content_digest:
            return None
        return immutable_tag(self.target.name, self.vllm, self.content_digest)

    @property
    def moving_tag(self) -> str:
        return moving_tag(self.target.name, self.vllm)

    @property
    def immutable_ref(self) -> str | None:
        tag = self.immutable_tag
        return f"{self.repository}:{tag}" if tag else None

    @property
    def moving_ref(self) -> str:
        return f"{self.repository}:{self.moving_tag}"

    @property
    def tags(self) -> list[str]:
        """Immutable then moving reference; only the moving one while the base digest is unknown."""
        return [ref for ref in (self.immutable_ref, self.moving_ref) if ref]

    @property
    def from_image(self) -> str:
        """The base by its locked digest (a multi-platform index): BuildKit picks the target's
        platform inside it, the same way for `build.py` and for `docker buildx bake`."""
        return f"{self.base.repo}@{self.base_digest}"

    def build_args(self) -> dict[str, str]:
        return {"BASE_IMAGE": self.from_image, "VLLM_VERSION": self.vllm,
                "VLLM_FORGE_MOE_DEVICE": self.target.moe_device_name,
                "VLLM_FORGE_PINS": " ".join(dependency_pins(self.patches)), **self.target.env}

    def to_dict(self) -> dict:
        return {
            "target": self.target.name, "vllm": self.vllm, "platform": self.target.platform,
            "base": {"image": self.base.ref, "digest": self.base_digest, "locked": self.base_locked},
            "patches": self.patches, "patch_set_hash": self.patch_set_hash,
            "moe_configs": self.moe_configs, "tags": self.tags,
            "immutable_tag": self.immutable_tag, "content_digest": self.content_digest or None,
            "labels": self.labels,
            "build_args": self.build_args() if self.base_digest else None,
            "context": {"sha256": self.context_sha256, "revision": self.source.revision,
                        "source_date_epoch": self.source.epoch},
            "recipes_not_for_this_release": self.skipped_recipes,
            "record": self.record,
        }


def _patch_statuses(vllm: str, moe_device: str, series):
    """Statuses as this target's image sees them (MoE configs tuned for other GPUs are not-needed),
    on the cached release tree first (no network); fetch the release only when needed."""
    from forge.patching import status as patches

    try:
        statuses = patches.release_status(vllm, offline=True, series=series, moe_device=moe_device)
    except ForgeError:
        statuses = patches.release_status(vllm, series=series, moe_device=moe_device)
    # Images ship no candidate: they run `build.py apply` without --with-candidate.
    statuses = patches.applied_statuses(statuses, series)
    patches.raise_on_conflict(statuses, f"vLLM {vllm}")
    return statuses


def _patch_entries(series, statuses, vllm: str) -> list[dict]:
    from forge.patching.dependencies import plan_entry

    entries = []
    for status in statuses:
        files = [{"path": f.path, "sha256": f.sha256} for f in series.get(status.id).files]
        entries.append({"id": status.id, "kind": status.kind, "status": status.status,
                        "detail": status.detail, "files": files})
        if status.kind == Kind.DEPENDENCY:   # package, specifier, the version the build pins
            entries[-1].update(plan_entry(series.get(status.id), status.status, vllm))
    return entries


def dependency_pins(entries: list[dict]) -> list[str]:
    """PACKAGE==VERSION for each constraint the image build brings in (`apply --pin`)."""
    return [f"{e['package']}=={e['pin']}" for e in entries
            if e["kind"] == Kind.DEPENDENCY and e["status"] == Status.APPLIES and e.get("pin")]


def _check_env_declared(target: Target) -> None:
    """Each target env key must be a build arg the Dockerfile turns into ENV, or it would be lost."""
    text = read_text(context.REPO_ROOT / context.DOCKERFILE, SOURCE)
    declared = set(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", text, re.MULTILINE))
    missing = sorted(set(target.env) - declared)
    if missing:
        raise ForgeError(f"{target.source}: targets.{target.name}.env.{missing[0]}: not a build arg "
                         f"of {context.DOCKERFILE} (add `ARG {missing[0]}` and an ENV line there)")


def resolve_plan(target_name: str, vllm: str, repository: str | None = None,
                 base_image: str | None = None, allow_unlocked: bool = False,
                 lock_path: str | None = None,
                 unlocked_flag: str | None = "--allow-unlocked") -> Plan:
    """Everything the build will check, checked here: a plan that resolves builds, and a build
    refuses whatever a plan refuses. `unlocked_flag` is the flag the calling command offers for an
    unlocked base (None: it offers none, so the error names none)."""
    from forge.patching.series import load_series
    from forge.patching.status import patch_set_hash

    series = load_series()
    target, base = planned_base(target_name, vllm, base_image, series)
    _check_env_declared(target)
    skipped_recipes = check_recipes(target, vllm)
    statuses = _patch_statuses(vllm, target.moe_device_name, series)
    pins, platforms = read_lock(lock_path)
    digest = pins.get(base.ref)
    if digest is None and not allow_unlocked:
        or_flag = f" (or pass {unlocked_flag})" if unlocked_flag else ""
        raise ForgeError(f"{lock_file(lock_path)}: bases: {base.ref} is not locked; run "
                         f"`python3 build.py lock --vllm {vllm}`{or_flag}")
    if digest is not None:
        check_locked_platform(base.ref, platforms.get(base.ref), target, vllm, lock_path)
    plan = Plan(target=target, vllm=str(vllm), base=base, base_digest=digest,
                base_locked=digest is not None, patches=_patch_entries(series, statuses, vllm),
                patch_set_hash=patch_set_hash(statuses, series),
                moe_configs=sorted(f.name for s in statuses if s.kind == Kind.MOE_CONFIG
                                   and s.status == Status.APPLIES for f in series.get(s.id).files),
                repository=repository or default_repository(), source=context.source_info(),
                skipped_recipes=skipped_recipes)
    if digest:
        finish(plan)
    return plan


def planned_base(target_name: str, vllm: str, base_image: str | None = None, series=None
                 ) -> tuple[Target, BaseImage]:
    """The target and the base its build of `vllm` starts from, from local files alone (targets,
    the series' bounds): what a build must pin is known before any release is downloaded."""
    from forge.patching.series import load_series

    target = get_target(target_name)
    check_covered(vllm, series or load_series(check_index=False), target)
    return target, (_override(base_image) if base_image else target.base_for(vllm))


def check_covered(vllm: Release | str, series, target: Target) -> None:
    """The image runs `build.py apply`, which refuses a release outside the manifest's bounds; and
    a target must not offer a base for releases the manifest does not vouch for."""
    from packaging.version import Version

    low = Version(series.checked_from)
    for index, rule in enumerate(target.bases):
        for probe in _range_probes(rule):
            if probe < low and rule.releases.contains(probe, prereleases=True):
                raise ForgeError(f"{target.source}: targets.{target.name}.bases[{index}].releases: "
                                 f"{rule.releases} offers vLLM {probe}, before the manifest's "
                                 f"checked_from {series.checked_from} ({series.path})")
    release = Version(Release(vllm).version.base_version)
    if release < low:
        raise ForgeError(f"{series.path}: vLLM {vllm} is before checked_from {series.checked_from}: "
                         f"the manifest does not cover it and the image's `build.py apply` would "
                         f"refuse it")
    if release > Version(series.checked_through):
        raise ForgeError(f"{series.path}: vLLM {vllm} is newer than checked_through "
                         f"{series.checked_through}: run `python3 build.py upstream-watch --write` "
                         f"to check the patches against it first")


def _range_probes(rule) -> list:
    """Versions at and just around each bound of a specifier set (enough to find a range that
    reaches below a bound)."""
    from packaging.version import InvalidVersion, Version

    probes = [Version("0")]
    for spec in rule.releases:
        try:
            version = Version(spec.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        probes += [version, Version(f"{version.base_version}.post1"),
                   Version(f"{version.base_version}.dev0")]
    return probes


def check_recipes(target: Target, vllm: str) -> list[str]:
    """Every recipe of the target (the recipe files that name it), when meant for this release, must pass the
    release's own parser (flags, choices, speculative keys, EngineArgs fields) as `serve` checks
    it. Returns the recipes that are not meant for this release (carried, not served on it)."""
    from forge.serving.recipes import load_recipe
    from forge.serving.serve import check_for_release
    from forge.serving.vllm_args import release_args

    skipped, release = [], None
    for name in target.recipes:  # the recipe files that name the target
        recipe = load_recipe(name, target.name)  # its own errors name the recipe file and field
        if not recipe.admits(vllm):
            skipped.append(f"{name} (for vLLM {recipe.vllm})")
            continue
        release = release or release_args(str(vllm))
        check_for_release(recipe, release)
    return skipped


def check_locked_platform(ref: str, offered: list[str] | None, target: Target, vllm: str,
                          lock_path: str | None) -> None:
    where = f"{lock_file(lock_path)}: platforms.{ref}"
    if offered is None:
        raise ForgeError(f"{where}: not recorded, so the target's platform cannot be checked; "
                         f"run `python3 build.py lock --vllm {vllm}` to record it")
    if target.platform not in offered:
        raise ForgeError(f"{where}: the locked base offers {', '.join(offered) or 'no platform'}, "
                         f"not {target.platform}, which target {target.name} needs")


def _override(ref: str) -> BaseImage:
    if "@" in ref or ":" not in ref.rsplit("/", 1)[-1]:
        raise ForgeError(f"--base-image: must be repo:tag (got {ref!r})")
    repo, tag = ref.rsplit(":", 1)
    return BaseImage(repo, tag)


def pin_base(plan: Plan, digest: str) -> Plan:
    """A new, finished plan of an unlocked base (`--allow-unlocked`) pinned to `digest`, the one
    the registry names now; the plan it came from stays as it was."""
    return finish(replace(plan, base_digest=digest))


def finish(plan: Plan) -> Plan:
    """Record, context and labels: needs the base digest (locked, or resolved at build time)."""
    target = plan.target
    plan.record = {
        "vllm_version": plan.vllm, "target": target.name, "platform": target.platform,
        "cuda": target.cuda, "cuda_arch": target.cuda_arch, "device_names": target.device_names,
        "base": {"image": plan.base.ref, "digest": plan.base_digest, "locked": plan.base_locked},
        "patches": plan.patches, "patch_set_hash": plan.patch_set_hash,
        "moe_configs": plan.moe_configs,
        "env": target.env, "recipes": target.recipes,
        "source": {"revision": plan.source.revision, "source_date_epoch": plan.source.epoch},
    }
    plan.context_bytes, plan.context_sha256 = context.build_context(plan.record, plan.source.epoch)
    labels = content_labels(plan)
    plan.content_digest = content_digest(plan, labels)
    # The two labels that follow from the digest itself come last, outside what it covers.
    plan.labels = {**labels, "org.opencontainers.image.version": plan.immutable_tag,
                   LABEL_PREFIX + "content-digest": f"sha256:{plan.content_digest}"}
    return plan


def content_digest(plan: Plan, labels: dict[str, str]) -> str:
    """sha256 hex over every input of the image: the context tar (Dockerfile, tools, patches,
    recipes, verify scripts, targets and the build record, which holds the source revision), the
    build args, the labels and the base image digest with the platform taken from it."""
    build_args = {k: v for k, v in plan.build_args().items() if k != "BASE_IMAGE"}
    inputs = {"context_sha256": plan.context_sha256, "base_digest": plan.base_digest,
              "platform": plan.target.platform, "build_args": build_args, "labels": labels}
    return hashlib.sha256(dump_json(inputs, sort_keys=True).encode()).hexdigest()


def content_labels(plan: Plan) -> dict[str, str]:
    """The image's labels except the two derived from its content digest."""
    created = datetime.fromtimestamp(plan.source.epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch_summary = ",".join(f"{p['id']}={p['status']}" for p in plan.patches)
    source = {"org.opencontainers.image.source": _source_url()} if _source_url() else {}
    return {**source,
        "org.opencontainers.image.title": f"vllm-forge {plan.target.name}",
        "org.opencontainers.image.description":
            f"vLLM {plan.vllm} for {plan.target.description}, with the vllm-forge patch series",
        "org.opencontainers.image.revision": plan.source.revision,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.base.name": plan.base.ref,
        "org.opencontainers.image.base.digest": plan.base_digest or "",
        LABEL_PREFIX + "target": plan.target.name,
        LABEL_PREFIX + "vllm-version": plan.vllm,
        LABEL_PREFIX + "platform": plan.target.platform,
        LABEL_PREFIX + "cuda-arch": plan.target.cuda_arch,
        LABEL_PREFIX + "patch-set-hash": plan.patch_set_hash,
        LABEL_PREFIX + "patches": patch_summary,
        # Config file names hold commas: ";" separates them.
        LABEL_PREFIX + "moe-configs": ";".join(plan.moe_configs),
        # Each dependency constraint the build brings in: package, specifier, pinned version.
        LABEL_PREFIX + "dependencies": ";".join(
            f"{p['package']}{p['specifier']}=={p['pin']}" for p in plan.patches
            if p["kind"] == Kind.DEPENDENCY and p["status"] == Status.APPLIES and p.get("pin")),
        LABEL_PREFIX + "context-sha256": plan.context_sha256,
        LABEL_PREFIX + "build-record": RECORD_PATH,
    }


def _source_url() -> str:
    from forge.image_names import _remote_owner

    owner = _remote_owner()
    return f"https://github.com/{owner}/vllm-forge" if owner else ""


def _fit(line: str, indent: str) -> list[str]:
    """`line` in lines of at most WIDTH characters, continued under `indent` (a digest or a label
    value without spaces is cut where it must be: `--json` prints every value whole). Escaped
    first (forge.untrusted.visible): an escape is four characters on the screen, and is counted so."""
    return textwrap.wrap(visible(line), WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [""]


def format_plan(plan: Plan) -> str:
    t = plan.target
    digest = plan.base_digest or (f"unknown: not locked. A build pins it first (with --locked it "
                                  f"refuses; with --allow-unlocked it takes the registry's digest "
                                  f"unpinned); `python3 build.py lock --vllm {plan.vllm}` pins it")
    lines = [f"plan: vLLM {plan.vllm} for {t.name} ({t.platform}, CUDA {t.cuda}, sm {t.cuda_arch})",
             # the base may name $VLLM_FORGE_BASE_MIRROR, which is the environment's, not ours
             f"  base        {visible(plan.base.ref)}",
             *_fit(f"  digest      {digest}", " " * 14)]
    lines += ["  patches"]
    id_width = max([len(p["id"]) for p in plan.patches] + [10])
    for p in plan.patches:
        head = f"    {p['id']:<{id_width}} {p['kind']:<10} {p['status']:<16}"
        lines += _fit(f"{head} {p['detail']}", " " * 6) if p["detail"] else [head.rstrip()]
    pins = [p for p in plan.patches if p["kind"] == Kind.DEPENDENCY and p["status"] == Status.APPLIES]
    lines += ["  dependency pins" + ("" if pins else ": none")]
    for p in pins:
        lines += _fit(f"    {p['package']}=={p['pin']}  (constraint {p['specifier']}, {p['id']}; "
                      "installed by `build.py apply --pin` where the base holds another version)",
                      " " * 6)
    lines += [f"  moe configs (for {t.moe_device_name})" + ("" if plan.moe_configs else ": none")]
    lines += [f"    {name}" for name in plan.moe_configs]
    lines += _fit(f"  recipes     {', '.join(t.recipes) or 'none'} (checked against vLLM "
                  f"{plan.vllm})", " " * 14)
    lines += [f"    not for this release: {name}" for name in plan.skipped_recipes]
    lines += [f"  patch set   {plan.patch_set_hash}",
              "  content     " + (f"sha256:{plan.content_digest}" if plan.content_digest else
                                   "unknown until the base digest is (the immutable tag names it)"),
              f"  source      {plan.source.revision} (SOURCE_DATE_EPOCH {plan.source.epoch})"]
    if plan.context_sha256:
        lines += _fit(f"  context     sha256:{plan.context_sha256} ({len(plan.context_bytes)} bytes)",
                      " " * 14)
    lines += ["  tags"] + [f"    {tag}" for tag in plan.tags]
    if plan.labels:
        lines += ["  labels (--json prints each whole)"]
        for key, value in plan.labels.items():
            lines += _fit(f"    {key}={value}", " " * 6)
    else:
        lines += ["  labels      unknown until the base digest is (they name it)"]
    # Labels, patch details and recipe names quote the data files (a target's description):
    # each line shown, not acted on.
    return visible_lines("\n".join(lines))
