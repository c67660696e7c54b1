"""images/cpu-engines.yaml: vLLM's CPU build pinned per release (wheel and sha256, the torch its
wheel needs), the requirements an environment leaves out, the CPU backend's defects a report names
and the fixes an environment carries. Validated on load; errors name the file and the field."""
from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.schema import Field, ListOf, load_yaml, pep440_specifier, pep440_version, sha256_hex, validate

CPU_ENGINES = REPO_ROOT / "images" / "cpu-engines.yaml"
# The platform the pinned wheels are built for (their tag: manylinux_2_28_x86_64).
WHEEL_MACHINE = "x86_64"
# What a defect may skip, by the window's name in verify/mtp_smoke.py.
SKIPPABLE = ("recipe-sampling",)


def _wheel_name(value: str) -> str | None:
    if "/" in value or not value.endswith(".whl") or value.count("-") < 4:
        return f"not a wheel file name: {value!r}"
    return None


def _diff_path(value: str) -> str | None:
    if value.startswith("/") or ".." in Path(value).parts or not value.endswith(".diff"):
        return f"not a .diff path inside images/: {value!r}"
    return None


RELEASE = {"wheel": Field(str, check=_wheel_name), "sha256": Field(str, check=sha256_hex),
           "torch": Field(str, check=pep440_version)}
DEFECT = {"id": Field(str), "releases": Field(str, check=pep440_specifier),
          "skips": Field(str, choices=SKIPPABLE), "why": Field(str)}
FIX = {"id": Field(str), "diff": Field(str, check=_diff_path),
       "releases": Field(str, check=pep440_specifier), "why": Field(str)}
SCHEMA = {"package": Field(str), "leave_out": Field(dict), "families": Field(dict), "releases": Field(dict),
          "defects": Field(ListOf(DEFECT), required=False, default=[]),
          "fixes": Field(ListOf(FIX), required=False, default=[])}


@dataclass(frozen=True)
class Defect:
    id: str
    releases: SpecifierSet
    skips: str
    why: str


@dataclass(frozen=True)
class Fix:
    id: str
    diff: Path
    releases: SpecifierSet
    why: str


@dataclass(frozen=True)
class CpuBuild:
    """One release's CPU build: what the environment installs, leaves out, names and fixes."""
    package: str
    version: str
    wheel: str
    sha256: str
    torch: str
    leave_out: dict[str, str]
    defects: tuple[Defect, ...]
    fixes: tuple[Fix, ...]
    families: tuple[str, ...] = ()     # the model families whose tiny model it runs

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    def left_out(self, name: str) -> bool:
        return canonicalize_name(name) in self.leave_out


def load_cpu_engines(path: Path | str = CPU_ENGINES) -> dict:
    source = str(path)
    values = validate(load_yaml(path), SCHEMA, source)
    for name, why in values["leave_out"].items():
        if not isinstance(name, str) or not isinstance(why, str) or not why.strip():
            raise ForgeError(f"{source}: leave_out.{name}: must map a project name to why it is left out")
    for family, specifier in values["families"].items():
        if not isinstance(family, str) or not isinstance(specifier, str) or pep440_specifier(specifier):
            raise ForgeError(f"{source}: families.{family}: must map a model family to a PEP 440 "
                             f"specifier of the releases it runs on")
    releases = {}
    for version, body in values["releases"].items():
        where = f"releases.{version}"
        if not isinstance(version, str) or pep440_version(version):
            raise ForgeError(f"{source}: {where}: must be a quoted PEP 440 version")
        releases[version] = validate(body, RELEASE, source, where)
        if not releases[version]["wheel"].startswith(f"{values['package'].replace('-', '_')}-{version}-"):
            raise ForgeError(f"{source}: {where}.wheel: not a {values['package']} {version} wheel "
                             f"({releases[version]['wheel']})")
    return {**values, "releases": releases, "source": source}


def cpu_releases(path: Path | str = CPU_ENGINES) -> list[str]:
    """The releases that have a pinned CPU build, oldest first."""
    return sorted(load_cpu_engines(path)["releases"], key=Version)


def cpu_build(version: str, path: Path | str = CPU_ENGINES) -> CpuBuild:
    """The CPU build of vLLM `version`; one ForgeError naming what is missing where there is none."""
    data = load_cpu_engines(path)
    source = data["source"]
    if platform.machine() != WHEEL_MACHINE:
        raise ForgeError(f"{source}: the pinned {data['package']} wheels are for {WHEEL_MACHINE}; this "
                         f"machine is {platform.machine() or 'unknown'}: no CPU engine here")
    if version not in data["releases"]:
        known = ", ".join(sorted(data["releases"], key=Version))
        raise ForgeError(f"{source}: releases: no CPU build of vLLM {version} is pinned (pinned: {known}); "
                         f"{data['package']} on PyPI may have one: pin its wheel and sha256 there")
    pinned = data["releases"][version]
    release = Version(version)
    folder = Path(source).parent
    return CpuBuild(
        package=data["package"], version=version, wheel=pinned["wheel"], sha256=pinned["sha256"],
        torch=pinned["torch"],
        leave_out={canonicalize_name(k): v for k, v in data["leave_out"].items()},
        defects=tuple(Defect(d["id"], SpecifierSet(d["releases"]), d["skips"], " ".join(d["why"].split()))
                      for d in data["defects"] if release in SpecifierSet(d["releases"])),
        fixes=tuple(Fix(f["id"], folder / f["diff"], SpecifierSet(f["releases"]), " ".join(f["why"].split()))
                    for f in data["fixes"] if release in SpecifierSet(f["releases"])),
        families=tuple(f for f, releases in data["families"].items() if release in SpecifierSet(releases)))
