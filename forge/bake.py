"""`python build.py bake --vllm V`: a `docker buildx bake` file for every target, so one BuildKit
builder with native amd64 and arm64 nodes builds them all in parallel, with SBOM and provenance
attestations.

Each target gets the same reproducible context `build.py` would send (forge/context.py), unpacked
under build-context/<target>/ (git-ignored), and the same build args, tags and labels. Run the bake
from the repository root: `docker buildx bake -f docker-bake.json [--push]`.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

from forge.archives import extract_safely
from forge.errors import ForgeError
from forge.plan import Plan, resolve_plan
from forge.targets import load_targets

CONTEXT_ROOT = "build-context"
# A builder that cannot pull docker/buildkit-syft-scanner (air-gapped, or a private mirror) names
# another SBOM generator image implementing BuildKit's SBOM protocol.
SBOM_GENERATOR_ENV = "VLLM_FORGE_SBOM_GENERATOR"


def attestations() -> list[str]:
    generator = os.environ.get(SBOM_GENERATOR_ENV, "").strip()
    sbom = f"type=sbom,generator={generator}" if generator else "type=sbom"
    return ["type=provenance,mode=max", sbom]


def bake_target(plan: Plan, context_dir: str) -> dict:
    return {
        "context": context_dir,
        "dockerfile": "Dockerfile",
        "platforms": [plan.target.platform],
        # SOURCE_DATE_EPOCH is read by BuildKit itself (timestamps in the image and attestations).
        "args": {**plan.build_args(), "SOURCE_DATE_EPOCH": str(plan.source.epoch)},
        "tags": plan.tags,
        "labels": plan.labels,
        "attest": attestations(),
    }


def bake_file(plans: list[Plan], context_dirs: dict[str, str]) -> dict:
    names = [plan.target.name for plan in plans]
    return {
        "group": {"default": {"targets": names}},
        "target": {plan.target.name: bake_target(plan, context_dirs[plan.target.name]) for plan in plans},
    }


def _unpack(plan: Plan, directory: Path) -> None:
    # Fresh each time: a stale file left from an older bake would leak into the image.
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(plan.context_bytes)) as archive:
        extract_safely(archive, directory)


def cmd_bake(args) -> int:
    targets = load_targets()
    names = args.target or sorted(targets)
    plans = [resolve_plan(name, args.vllm, repository=args.repository, lock_path=args.lock)
             for name in names]  # resolves (and so refuses) everything before writing anything
    output = Path(args.output).resolve()
    root = output.parent
    context_dirs = {}
    for plan in plans:
        directory = root / CONTEXT_ROOT / plan.target.name
        _unpack(plan, directory)
        context_dirs[plan.target.name] = str(directory.relative_to(root))
    try:
        output.write_text(json.dumps(bake_file(plans, context_dirs), indent=2) + "\n")
    except OSError as exc:
        raise ForgeError(f"{output}: cannot write: {exc.strerror}") from exc
    for plan in plans:
        print(f"{plan.target.name:<6} {plan.target.platform:<12} {plan.tags[0]}")
    print(f"wrote {output} (run from {root}: docker buildx bake -f {output.name} --push)")
    return 0
