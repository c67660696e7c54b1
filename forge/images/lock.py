"""images/lock.yaml: every base image tag pinned to the digest the registry gave it when locked.

    bases:
      vllm/vllm-openai:v0.27.1: sha256:...
    platforms:
      vllm/vllm-openai:v0.27.1: [linux/amd64, linux/arm64]

`python3 build.py lock --vllm V` resolves the bases of every target for release V through the
registry's HTTP API, refuses a base that lacks a platform one of its targets needs, and writes the
digests and the platforms each digest offers (all or nothing). Builds, plans and bake files read the
pins. The first of them to meet a base that is not pinned yet pins it the same way (registry_pin,
then write_pin once the plans passed their local checks; one line saying so), as uv, cargo and npm
write their lock on the first run; with `--locked` (CI, releases) a missing pin is refused instead
and the file is never changed. Whether a base can be pinned is settled before any release is
downloaded: a registry out of reach is said first (out_of_reach). A base that lacks the
target's platform, or whose tag now points elsewhere, is refused unless the user says otherwise.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.files import LOCK, write_text_atomically
from forge.schema import load_yaml

DEFAULT_LOCK_FILE = REPO_ROOT / "images" / "lock.yaml"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
HEADER = """\
# Base image pins: tag -> digest, written by `python3 build.py lock --vllm V` (or by the first build or
# --plan of a release not pinned yet) from the registry's HTTP API, with the platforms each pinned
# digest offers (`--plan` checks the target's platform against them). A build uses
# FROM <repo>@<digest> from here and refuses a base whose tag moved (unless --allow-base-change);
# with --locked also one that is missing. Edit by running the commands, not by hand.
"""
PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9.]+)?")


def lock_file(path: Path | str | None = None) -> Path:
    return Path(path or os.environ.get("VLLM_FORGE_LOCK") or DEFAULT_LOCK_FILE)


def load_lock(path: Path | str | None = None) -> dict[str, str]:
    """tag reference -> digest. A missing file is an empty lock; a malformed one is an error."""
    return read_lock(path)[0]


def locked_platforms(path: Path | str | None = None) -> dict[str, list[str]]:
    """tag reference -> the platforms its pinned digest offers (as `lock` found them)."""
    return read_lock(path)[1]


def read_lock(path: Path | str | None = None) -> tuple[dict[str, str], dict[str, list[str]]]:
    path = lock_file(path)
    if not path.exists():
        return {}, {}
    data = load_yaml(path, LOCK) or {}
    if not isinstance(data, dict) or set(data) - {"bases", "platforms"}:
        raise ForgeError(f"{path}: (top level): must be a mapping with only `bases` and `platforms`")
    bases = data.get("bases") or {}
    if not isinstance(bases, dict):
        raise ForgeError(f"{path}: bases: must be a mapping of image tag -> digest")
    for ref, digest in bases.items():
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise ForgeError(f"{path}: bases.{ref}: must be a digest sha256:<64 hex> (got {digest!r})")
    platforms = data.get("platforms") or {}
    if not isinstance(platforms, dict):
        raise ForgeError(f"{path}: platforms: must be a mapping of image tag -> list of platforms")
    for ref, offered in platforms.items():
        if ref not in bases:
            raise ForgeError(f"{path}: platforms.{ref}: not a pinned base (not under `bases`)")
        if not isinstance(offered, list) or not all(isinstance(p, str) and PLATFORM.fullmatch(p)
                                                    for p in offered):
            raise ForgeError(f"{path}: platforms.{ref}: must be a list of os/arch platforms "
                             f"(got {offered!r})")
    return dict(bases), {ref: list(offered) for ref, offered in platforms.items()}


def save_lock(pins: dict[str, str], path: Path | str | None = None,
              platforms: dict[str, list[str]] | None = None) -> Path:
    path = lock_file(path)
    data: dict[str, dict] = {"bases": dict(sorted(pins.items()))}
    offered = {ref: sorted(platforms[ref]) for ref in sorted(pins) if platforms and ref in platforms}
    if offered:
        data["platforms"] = offered
    body = yaml.safe_dump(data, default_flow_style=False, sort_keys=False, width=200)
    return write_text_atomically(path, HEADER + body)


def resolve_bases(vllm: str, names: list[str] | None = None
                  ) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The bases of `names` (default: every target) for release `vllm`, resolved through the
    registry: (tag reference -> digest, tag reference -> the platforms that digest offers).
    Refuses a missing tag or a base without a platform one of its targets needs, having
    resolved and checked every base (so a caller writes all or nothing)."""
    from forge.images.registry import manifest_digest, manifest_platforms
    from forge.targets import get_target, load_targets

    names = names or sorted(load_targets())
    targets = {name: get_target(name) for name in names}   # an unknown name: get_target's one line
    users: dict[str, list[str]] = {}
    for name in names:
        users.setdefault(targets[name].base_for(vllm).ref, []).append(name)
    resolved, offered = {}, {}
    for ref in sorted(users):
        digest = manifest_digest(ref)
        if digest is None:
            raise ForgeError(f"registry has no tag {ref} (targets: {', '.join(names)})")
        offered[ref] = manifest_platforms(ref, digest)
        for name in users[ref]:
            _check_offers(ref, digest, offered[ref], targets[name])
        resolved[ref] = digest
    return resolved, offered


def _check_offers(ref: str, digest: str, offered: list[str], target) -> None:
    if target.platform not in offered:
        raise ForgeError(f"base {ref} ({digest}) has no {target.platform} image (it offers "
                         f"{', '.join(offered) or 'none'}), which target {target.name} needs; "
                         f"nothing locked (fix {target.source}: targets.{target.name}.bases, or "
                         f"lock the other targets with --target)")


class BaseOutOfReach(ForgeError):
    """A base to pin whose registry cannot be reached: `registry` is its name as a user knows it."""

    def __init__(self, message: str, registry: str):
        super().__init__(message)
        self.registry = registry


def registry_pin(ref: str, target) -> tuple[str, list[str]]:
    """The digest the registry names for `ref` now and the platforms it offers, checked against
    `target`; nothing written. BaseOutOfReach when the registry cannot be reached."""
    from forge.images.registry import (
        RegistryUnreachable,
        manifest_digest,
        manifest_platforms,
        parse_reference,
        registry_name,
    )

    try:
        digest = manifest_digest(ref)
        if digest is None:
            raise ForgeError(f"registry has no tag {ref} (target {target.name}); nothing locked")
        offered = manifest_platforms(ref, digest)
    except RegistryUnreachable as exc:
        raise BaseOutOfReach(str(exc), registry_name(parse_reference(ref).registry)) from exc
    _check_offers(ref, digest, offered, target)
    return digest, offered


def refuse_added_pin(ref: str, vllm: str, path: Path | str | None = None) -> ForgeError:
    """--locked: the lock may not change, so a missing pin is refused, naming what pins it."""
    where = lock_file(path)
    return ForgeError(f"{where}: bases: {ref} is not locked and --locked forbids adding it; run "
                      f"`python3 build.py lock --vllm {vllm}` and commit {where.name}")


def out_of_reach(ref: str, vllm: str, exc: BaseOutOfReach, path: Path | str | None = None,
                 unlocked_flag: str | None = "--allow-unlocked") -> ForgeError:
    """The one line of a build that must pin its base and cannot reach the registry: said before
    anything is downloaded, naming both ways on (`lock` elsewhere, or the unlocked flag)."""
    where, command = lock_file(path), f"python3 build.py lock --vllm {vllm}"
    unlocked = (f" ({unlocked_flag} builds without pinning it, from the digest the registry names "
                f"when it answers)") if unlocked_flag else ""
    return ForgeError(f"{where}: bases: {ref} is not locked and {exc.registry} cannot be reached to "
                      f"lock it ({exc}); nothing downloaded or written. On a machine that reaches "
                      f"it, run `{command}` and bring {where.name} here{unlocked}")


def write_pin(ref: str, digest: str, offered: list[str], path: Path | str | None = None) -> str:
    """Add one pin to the lock file (the other pins untouched); returns the line that says so."""
    pins, platforms = read_lock(path)
    saved = save_lock({**pins, ref: digest}, path, {**platforms, ref: offered})
    return f"locked {ref} -> {digest} ({', '.join(offered)}) in {saved}"
