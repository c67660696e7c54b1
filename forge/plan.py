"""The resolved plan of one image build: base and digest, patch statuses, MoE configs, tags, labels,
build record and context. Everything that can be wrong is found here, before the engine is touched:
unknown target, a release with no base, a patch that conflicts, an unlocked base.

Resolving a plan reads only local files (targets, lock, patch series, the cached release tree), so
`--plan` runs without network once the vLLM release cache is warm.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from forge import context
from forge.errors import ForgeError
from forge.images import default_repository, immutable_tag, moving_tag
from forge.lock import load_lock, lock_file
from forge.targets import BaseImage, Target, get_target

LABEL_PREFIX = "io.vllm-forge."
RECORD_PATH = "/opt/vllm-forge/build-record.json"


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
    # The platform's own manifest inside the locked index, found at build time: the classic builder
    # would otherwise reuse whichever platform it pulled first for the index digest.
    platform_digest: str | None = None
    record: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    context_bytes: bytes = field(default=b"", repr=False)
    context_sha256: str = ""

    @property
    def immutable_tag(self) -> str:
        return immutable_tag(self.target.name, self.vllm, self.patch_set_hash)

    @property
    def moving_tag(self) -> str:
        return moving_tag(self.target.name, self.vllm)

    @property
    def tags(self) -> list[str]:
        return [f"{self.repository}:{self.immutable_tag}", f"{self.repository}:{self.moving_tag}"]

    @property
    def from_image(self) -> str:
        return f"{self.base.repo}@{self.platform_digest or self.base_digest}"

    def build_args(self) -> dict[str, str]:
        return {"BASE_IMAGE": self.from_image, "VLLM_VERSION": self.vllm,
                "VLLM_FORGE_MOE_DEVICE": self.target.moe_device_name,
                "VLLM_FORGE_PINS": " ".join(dependency_pins(self.patches)), **self.target.env}

    def to_dict(self) -> dict:
        return {
            "target": self.target.name, "vllm": self.vllm, "platform": self.target.platform,
            "base": {"image": self.base.ref, "digest": self.base_digest, "locked": self.base_locked},
            "patches": self.patches, "patch_set_hash": self.patch_set_hash,
            "moe_configs": self.moe_configs, "tags": self.tags, "labels": self.labels,
            "build_args": self.build_args() if self.base_digest else None,
            "context": {"sha256": self.context_sha256, "revision": self.source.revision,
                        "source_date_epoch": self.source.epoch},
            "record": self.record,
        }


def _patch_statuses(vllm: str, moe_device: str):
    """Statuses as this target's image sees them (MoE configs tuned for other GPUs are not-needed),
    on the cached release tree first (no network); fetch the release only when needed."""
    from forge import patches

    series = patches.load_series()
    try:
        statuses = patches.release_status(vllm, offline=True, series=series, moe_device=moe_device)
    except ForgeError:
        statuses = patches.release_status(vllm, series=series, moe_device=moe_device)
    patches.raise_on_conflict(statuses, f"vLLM {vllm}")
    return series, statuses


def _patch_entries(series, statuses, vllm: str) -> list[dict]:
    from forge.dependencies import plan_entry

    entries = []
    for status in statuses:
        files = [{"path": f.path, "sha256": f.sha256} for f in series.get(status.id).files]
        entries.append({"id": status.id, "kind": status.kind, "status": status.status,
                        "detail": status.detail, "files": files})
        if status.kind == "dependency":   # package, specifier, the version the build pins
            entries[-1].update(plan_entry(series.get(status.id), status.status, vllm))
    return entries


def dependency_pins(entries: list[dict]) -> list[str]:
    """PACKAGE==VERSION for each constraint the image build brings in (`apply --pin`)."""
    return [f"{e['package']}=={e['pin']}" for e in entries
            if e["kind"] == "dependency" and e["status"] == "applies" and e.get("pin")]


def _check_env_declared(target: Target) -> None:
    """Each target env key must be a build arg the Dockerfile turns into ENV, or it would be lost."""
    text = (context.REPO_ROOT / context.DOCKERFILE).read_text()
    declared = set(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", text, re.MULTILINE))
    missing = sorted(set(target.env) - declared)
    if missing:
        raise ForgeError(f"{target.source}: targets.{target.name}.env.{missing[0]}: not a build arg "
                         f"of {context.DOCKERFILE} (add `ARG {missing[0]}` and an ENV line there)")


def resolve_plan(target_name: str, vllm: str, repository: str | None = None,
                 base_image: str | None = None, allow_unlocked: bool = False,
                 lock_path: str | None = None) -> Plan:
    target = get_target(target_name)
    base = _override(base_image) if base_image else target.base_for(vllm)
    _check_env_declared(target)
    series, statuses = _patch_statuses(vllm, target.moe_device_name)
    digest = load_lock(lock_path).get(base.ref)
    if digest is None and not allow_unlocked:
        raise ForgeError(f"{lock_file(lock_path)}: bases: {base.ref} is not locked; run "
                         f"`python build.py lock --vllm {vllm}` (or pass --allow-unlocked)")
    from forge.patches import patch_set_hash

    plan = Plan(target=target, vllm=str(vllm), base=base, base_digest=digest,
                base_locked=digest is not None, patches=_patch_entries(series, statuses, vllm),
                patch_set_hash=patch_set_hash(statuses, series),
                moe_configs=sorted(f.name for s in statuses if s.kind == "moe-config"
                                   and s.status == "applies" for f in series.get(s.id).files),
                repository=repository or default_repository(), source=context.source_info())
    if digest:
        finish(plan)
    return plan


def _override(ref: str) -> BaseImage:
    if "@" in ref or ":" not in ref.rsplit("/", 1)[-1]:
        raise ForgeError(f"--base-image: must be repo:tag (got {ref!r})")
    repo, tag = ref.rsplit(":", 1)
    return BaseImage(repo, tag)


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
    plan.labels = labels_for(plan)
    return plan


def labels_for(plan: Plan) -> dict[str, str]:
    created = datetime.fromtimestamp(plan.source.epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch_summary = ",".join(f"{p['id']}={p['status']}" for p in plan.patches)
    source = {"org.opencontainers.image.source": _source_url()} if _source_url() else {}
    return {**source,
        "org.opencontainers.image.title": f"vllm-forge {plan.target.name}",
        "org.opencontainers.image.description":
            f"vLLM {plan.vllm} for {plan.target.description}, with the vllm-forge patch series",
        "org.opencontainers.image.version": plan.immutable_tag,
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
            if p["kind"] == "dependency" and p["status"] == "applies" and p.get("pin")),
        LABEL_PREFIX + "context-sha256": plan.context_sha256,
        LABEL_PREFIX + "build-record": RECORD_PATH,
    }


def _source_url() -> str:
    from forge.images import _remote_owner

    owner = _remote_owner()
    return f"https://github.com/{owner}/vllm-forge" if owner else ""


def format_plan(plan: Plan) -> str:
    t = plan.target
    digest = plan.base_digest or (f"not locked: a build refuses it unless --allow-unlocked "
                                  f"(then it takes the registry's digest); `python build.py lock "
                                  f"--vllm {plan.vllm}` pins it")
    lines = [f"plan: vLLM {plan.vllm} for {t.name} ({t.platform}, CUDA {t.cuda}, sm {t.cuda_arch})",
             f"  base        {plan.base.ref}",
             f"  digest      {digest}"]
    if plan.platform_digest and plan.platform_digest != plan.base_digest:
        lines.append(f"  {t.platform:<11} {plan.platform_digest}")
    lines += ["  patches"]
    lines += [f"    {p['id']:<36} {p['kind']:<10} {p['status']:<16} {p['detail']}" for p in plan.patches]
    pins = [p for p in plan.patches if p["kind"] == "dependency" and p["status"] == "applies"]
    lines += ["  dependency pins" + ("" if pins else ": none")]
    lines += [f"    {p['package']}=={p['pin']}  (constraint {p['specifier']}, {p['id']}; installed "
              "by `build.py apply --pin` where the base's version violates it)" for p in pins]
    lines += [f"  moe configs (for {t.moe_device_name})" + ("" if plan.moe_configs else ": none")]
    lines += [f"    {name}" for name in plan.moe_configs]
    lines += [f"  patch set   {plan.patch_set_hash}",
              f"  source      {plan.source.revision} (SOURCE_DATE_EPOCH {plan.source.epoch})"]
    if plan.context_sha256:
        lines.append(f"  context     sha256:{plan.context_sha256} ({len(plan.context_bytes)} bytes)")
    lines += ["  tags"] + [f"    {tag}" for tag in plan.tags]
    lines += ["  labels"] + [f"    {k}={v}" for k, v in plan.labels.items()]
    return "\n".join(lines)

