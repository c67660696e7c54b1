"""images/lock.yaml: every base image tag pinned to the digest the registry gave it when locked.

    bases:
      vllm/vllm-openai:v0.27.1: sha256:...

`python build.py lock --vllm V` resolves the bases of every target for release V through the registry's
HTTP API and writes them (all or nothing). Builds read the pins: a base that is not pinned, or whose tag
now points elsewhere, is refused unless the user says otherwise.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from forge.errors import ForgeError
from forge.files import write_text_atomically
from forge.schema import load_yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOCK_FILE = REPO_ROOT / "images" / "lock.yaml"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
HEADER = """\
# Base image pins: tag -> digest, written by `python build.py lock --vllm V` from the registry's HTTP API.
# A build uses FROM <repo>@<digest> from here and refuses a base that is missing or whose tag moved
# (unless --allow-unlocked / --allow-base-change). Edit by running the command, not by hand.
"""


def lock_file(path: Path | str | None = None) -> Path:
    return Path(path or os.environ.get("VLLM_FORGE_LOCK") or DEFAULT_LOCK_FILE)


def load_lock(path: Path | str | None = None) -> dict[str, str]:
    """tag reference -> digest. A missing file is an empty lock; a malformed one is an error."""
    path = lock_file(path)
    if not path.exists():
        return {}
    data = load_yaml(path) or {}
    if not isinstance(data, dict) or set(data) - {"bases"}:
        raise ForgeError(f"{path}: (top level): must be a mapping with only `bases`")
    bases = data.get("bases") or {}
    if not isinstance(bases, dict):
        raise ForgeError(f"{path}: bases: must be a mapping of image tag -> digest")
    for ref, digest in bases.items():
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise ForgeError(f"{path}: bases.{ref}: must be a digest sha256:<64 hex> (got {digest!r})")
    return dict(bases)


def save_lock(pins: dict[str, str], path: Path | str | None = None) -> Path:
    path = lock_file(path)
    body = yaml.safe_dump({"bases": dict(sorted(pins.items()))}, default_flow_style=False,
                          sort_keys=False, width=200)
    return write_text_atomically(path, HEADER + body)


def cmd_lock(args) -> int:
    from forge.registry import manifest_digest
    from forge.targets import load_targets

    targets = load_targets()
    names = args.target or sorted(targets)
    unknown = [n for n in names if n not in targets]
    if unknown:
        raise ForgeError(f"unknown target {unknown[0]!r} (known: {', '.join(sorted(targets))})")
    refs = sorted({targets[name].base_for(args.vllm).ref for name in names})
    pins = load_lock(args.lock)
    resolved = {}
    for ref in refs:  # resolve every base before writing anything: all or nothing
        digest = manifest_digest(ref)
        if digest is None:
            raise ForgeError(f"registry has no tag {ref} (targets: {', '.join(names)})")
        resolved[ref] = digest
    for ref, digest in resolved.items():
        before = pins.get(ref)
        change = "unchanged" if before == digest else ("moved from " + before if before else "new")
        print(f"{ref} -> {digest} ({change})")
    path = save_lock({**pins, **resolved}, args.lock)
    print(f"wrote {path}")
    return 0
