"""`python3 build.py bake --vllm V`: a `docker buildx bake` file for every target, so one BuildKit
builder with native amd64 and arm64 nodes builds them all in parallel, with SBOM and provenance
attestations.

Each target gets the reproducible context of forge/images/context.py, unpacked under
build-context/<target>/ (git-ignored), and the plan's build args, tags and labels. Run the bake
from the directory the file is in: `docker buildx bake -f docker-bake.json [--push]`.

This is the one build definition: `python3 build.py --target T --vllm V` writes the same file (for
its one target, in a temporary directory) and runs `docker buildx bake` on it (forge/images/build.py), so
a local build and a release build are the same BuildKit build of the same inputs.

Attestations need a builder that can store them: BuildKit's docker-container driver, or Docker
Engine 26+ with the containerd image store. The plain docker driver (Debian 12's docker.io 20.10,
the engine the README installs) refuses them ("Attestation is not supported for the docker
driver"): `--no-attest` writes a file without them for such an engine.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

from forge.files import write_text_atomically
from forge.images.lock import read_lock
from forge.images.plan import Plan, planned_base, resolve_plan
from forge.json_text import dump_json
from forge.targets import load_targets
from forge.upstream.archives import extract_safely

CONTEXT_ROOT = "build-context"
# A builder that cannot pull docker/buildkit-syft-scanner (air-gapped, or a private mirror) names
# another SBOM generator image implementing BuildKit's SBOM protocol.
SBOM_GENERATOR_ENV = "VLLM_FORGE_SBOM_GENERATOR"
ATTEST_NEEDS = ("attestations need a docker-container builder (`docker buildx create --use "
                "--driver docker-container`) or Docker Engine 26+ with the containerd image store; "
                "on the plain docker driver (e.g. Debian 12's docker.io 20.10) write the file with "
                "`python3 build.py bake --no-attest`")


def attestations() -> list[str]:
    generator = os.environ.get(SBOM_GENERATOR_ENV, "").strip()
    sbom = f"type=sbom,generator={generator}" if generator else "type=sbom"
    return ["type=provenance,mode=max", sbom]


def bake_target(plan: Plan, context_dir: str, attest: bool = True) -> dict:
    target = {
        "context": context_dir,
        "dockerfile": "Dockerfile",
        "platforms": [plan.target.platform],
        # SOURCE_DATE_EPOCH is read by BuildKit itself (timestamps in the image and attestations).
        "args": {**plan.build_args(), "SOURCE_DATE_EPOCH": str(plan.source.epoch)},
        # The immutable tag only: a `docker buildx bake --push` of this file must not move the
        # moving tag before verify (`build.py publish --move-tag` does, once it passed).
        "tags": [plan.immutable_ref],
        "labels": plan.labels,
    }
    if attest:
        target["attest"] = attestations()
    return target


def bake_file(plans: list[Plan], context_dirs: dict[str, str], attest: bool = True) -> dict:
    names = [plan.target.name for plan in plans]
    return {
        "group": {"default": {"targets": names}},
        "target": {plan.target.name: bake_target(plan, context_dirs[plan.target.name], attest)
                   for plan in plans},
    }


def _unpack(plan: Plan, directory: Path) -> None:
    # Fresh each time: a stale file left from an older bake would leak into the image.
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(plan.context_bytes)) as archive:
        extract_safely(archive, directory)


def write_bake(plans: list[Plan], output: Path, attest: bool = True) -> Path:
    """Unpack each plan's context under build-context/<target>/ beside `output` and write the bake
    file there (context paths relative to that directory); returns `output`."""
    root = output.parent
    context_dirs = {}
    for plan in plans:
        directory = root / CONTEXT_ROOT / plan.target.name
        _unpack(plan, directory)
        context_dirs[plan.target.name] = str(directory.relative_to(root))
    write_text_atomically(output, dump_json(bake_file(plans, context_dirs, attest), indent=2) + "\n")
    return output


def unlocked_bases(vllm: str, names: list[str] | None = None, lock_path: str | None = None
                   ) -> list[tuple[str, object]]:
    """(base reference, the first target on it) of each base the lock does not pin yet, from
    local files alone (targets, the series' bounds, the lock): known before any release is
    downloaded, so a base that cannot be pinned is said first."""
    pins = read_lock(lock_path)[0]
    unlocked: dict[str, object] = {}
    for name in names or sorted(load_targets()):
        target, base = planned_base(name, vllm)
        if base.ref not in pins:
            unlocked.setdefault(base.ref, target)
    return list(unlocked.items())


def check_plans(vllm: str, names: list[str] | None = None, repository: str | None = None,
                lock_path: str | None = None) -> None:
    """Every plan's local checks, an unlocked base allowed: a bad recipe or patch is refused
    before anything is locked."""
    for name in names or sorted(load_targets()):
        resolve_plan(name, vllm, repository=repository, lock_path=lock_path, allow_unlocked=True)


def plan_all(vllm: str, names: list[str] | None = None, repository: str | None = None,
             lock_path: str | None = None) -> list[Plan]:
    """The plans of `names` (default: every target), resolved (and so refused) before anything is
    written. A bake file pins each base by digest, so an unlocked base has no way around the lock."""
    return [resolve_plan(name, vllm, repository=repository, lock_path=lock_path, unlocked_flag=None)
            for name in names or sorted(load_targets())]
