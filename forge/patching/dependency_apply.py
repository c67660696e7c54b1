"""Bringing a dependency inside its constraint on an install (`build.py apply`), as plain file
writes that forge.patching.apply commits in the same all-or-nothing transaction as the source
patches.

pip does what pip is good at: choosing nothing (the version is chosen here and pinned with
`==`), downloading and unpacking the wheel, into a private staging directory
(`pip install --no-deps --no-compile --target STAGING pkg==V`, with `--no-index --find-links DIR`
for a local wheelhouse). The files it produced become writes into the directory that holds the
installed version's dist-info; the installed version's files (its RECORD, plus anything else
under its top-level packages, such as __pycache__) that the new version lacks become removals.
The transaction keeps the original bytes of every file it touches, so a failure anywhere puts
everything back and `--revert` restores the previous version byte for byte without a network,
and no directory is ever renamed (overlayfs refuses to rename directories of a lower layer).
"""
from __future__ import annotations

import csv
import os
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.errors import ForgeError
from forge.files import PACKAGE_FILE, files_under, mode_of, read_bytes
from forge.patching import dependencies
from forge.patching.vocabulary import Kind, Status
from forge.upstream import pypi

STAGING_DIR = ".vllm-forge-staging"      # inside vllm/: cleaned by every later run


@dataclass
class DependencyPlan:
    patch_id: str
    package: str
    specifier: str
    previous: str                 # the installed version that violates the constraint
    version: str                  # the version chosen (pinned with ==)
    base: Path                    # the directory holding the installed version's dist-info
    declared: str                 # what vLLM itself requires, for the report
    command: list[str] = field(default_factory=list)   # the pip command run into staging

    def to_record(self) -> dict:
        return {"id": self.patch_id, "package": self.package, "specifier": self.specifier,
                "previous": self.previous, "installed": self.version, "base": str(self.base),
                "vllm_requires": self.declared, "pip": shlex.join(self.command)}


def parse_pins(pins: list[str] | None) -> dict[str, Version]:
    """`--pin transformers==5.14.1` (repeatable): the exact version to install wherever a
    constraint on that package is in range and the installed version differs, violating or not
    (an image build pins what its plan chose, so the image holds what its labels say)."""
    from packaging.requirements import InvalidRequirement, Requirement

    parsed: dict[str, Version] = {}
    for text in pins or []:
        try:
            requirement = Requirement(text)
            [spec] = list(requirement.specifier)
            if spec.operator != "==" or "*" in spec.version:
                raise ValueError
            parsed[canonicalize_name(requirement.name)] = Version(spec.version)
        except (InvalidRequirement, ValueError) as exc:
            raise ForgeError(f"--pin {text}: must be PACKAGE==VERSION") from exc
    return parsed


def check_pins(series, pins: dict[str, Version]) -> None:
    """Every --pin names a package a dependency constraint of the series names: a pin for any
    other package would be ignored without a word (a typo, or a package forge never installs)."""
    named = sorted({canonicalize_name(p.package) for p in series.patches
                    if p.kind == Kind.DEPENDENCY and p.package})
    for package, version in pins.items():
        if package not in named:
            raise ForgeError(f"--pin {package}=={version}: no dependency constraint in "
                             f"{series.path} names {package} (they name: "
                             f"{', '.join(named) or 'none'}); nothing changed")


def plan(series, statuses, installed, offline: bool, find_links: str | None,
         pins: dict[str, Version] | None = None) -> list[DependencyPlan]:
    """A version for every violated constraint; refuses (nothing changed) when it cannot get one."""
    plans = []
    for status in statuses:
        if status.kind != Kind.DEPENDENCY or status.status not in (Status.APPLIES, Status.SATISFIED):
            continue
        patch = series.get(status.id)
        dist = dependencies.find_distribution(patch.package, installed.search_path)
        pin = (pins or {}).get(canonicalize_name(patch.package))   # pins are keyed canonically
        if status.status == Status.SATISFIED and (pin is None or Version(dist.version) == pin):
            continue    # a pin makes an image hold exactly the version its plan and labels name
        declared = dependencies.installed_vllm_declares(installed.site_dir, patch.package,
                                                        installed.distribution)
        wanted = patch.specifier & (declared.specifier or "")
        version = _choose(patch.package, wanted, installed, offline, find_links, pin)
        plans.append(DependencyPlan(patch.id, patch.package, str(patch.specifier), dist.version,
                                    str(version), Path(dist.locate_file("")).resolve(),
                                    declared.text(patch.package)))
    return plans


def _choose(package: str, wanted, installed, offline: bool, find_links: str | None,
            pin: Version | None = None) -> Version:
    if pin is not None and not wanted.contains(pin, prereleases=True):
        raise ForgeError(f"--pin {package}=={pin}: outside {wanted} (the constraint and what the "
                         "installed vLLM requires); nothing changed")
    if find_links:
        where = Path(find_links)
        if not where.is_dir():
            raise ForgeError(f"--find-links {find_links}: no such directory")
        available, source = pypi.wheelhouse_versions(where, package), f"--find-links {find_links}"
    else:
        available = None if offline else pypi.live_versions(package)  # type: ignore[assignment]
        if available is None:
            raise ForgeError(_offline_refusal(package, wanted, installed, offline, pin))
        source = f"the package index {pypi.simple_url()}"
    chosen = [v for v in wanted.filter(available) if pin is None or v == pin]
    if not chosen:
        wanted_text = f"=={pin}" if pin is not None else str(wanted)
        raise ForgeError(f"no version of {package} in {source} satisfies {wanted_text}; "
                         "nothing changed")
    return max(chosen)


def _offline_refusal(package: str, wanted, installed, offline: bool, pin: Version | None) -> str:
    try:   # the pin, or what the cached index says is newest; else pip picks within the range
        newest = pin or max(wanted.filter(pypi.published_versions(package, offline=True)))
        requirement = f"{package}=={newest}"
    except (ForgeError, ValueError):
        requirement = f"{package}{wanted}"
    why = "--offline" if offline else f"the package index {pypi.simple_url()} does not answer"
    return (f"{package} must be brought inside {wanted} but {why}; nothing changed. Run "
            f"`{shlex.join(user_command(requirement, installed))}` where the index answers, or "
            "pass --find-links DIR (a wheelhouse holding it), then `build.py apply` again")


def user_command(requirement: str, installed) -> list[str]:
    """The pip command a user runs by hand for `requirement` on this install."""
    command = [sys.executable, "-m", "pip", "install", "--no-deps"]
    if not installed.on_sys_path:
        command += ["--target", str(installed.site_dir), "--upgrade"]
    return command + [requirement]


# --- staging: pip into a private directory ----------------------------------------------------

def staging_dir(installed) -> Path:
    return installed.package_dir / STAGING_DIR


def stage(dependency: DependencyPlan, installed, find_links: str | None) -> Path:
    """Run pip into a fresh staging directory; return the directory holding what it installed."""
    root = staging_dir(installed) / dependency.package
    shutil.rmtree(root, ignore_errors=True)
    (root / "tmp").mkdir(parents=True)
    target = root / "lib"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--no-input", "--target", str(target)]
    if find_links:
        command += ["--no-index", "--find-links", str(Path(find_links).resolve())]
    command.append(f"{dependency.package}=={dependency.version}")
    dependency.command = command
    # pip's own temp files go under our staging dir too, so a kill leaves nothing elsewhere.
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "TMPDIR": str(root / "tmp")})
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        raise ForgeError(f"pip could not fetch {dependency.package}=={dependency.version} "
                         f"(`{shlex.join(command)}`): {last}; nothing changed")
    staged = dependencies.find_distribution(dependency.package, [str(target)])
    if staged is None or Version(staged.version) != Version(dependency.version):
        raise ForgeError(f"pip installed no {dependency.package} {dependency.version} into "
                         f"{target}; nothing changed")
    return target


def file_changes(dependency: DependencyPlan, staged: Path, installed
                 ) -> dict[str, tuple[bytes, int] | None]:
    """Absolute path (as text) -> (new bytes, mode) (None: remove) that replace the installed
    version by the staged one, the staged files first, each part in path order. Scripts pip put in
    bin/ are installed only for a --site-packages target (as `pip --target` does); in an
    environment the previous version's scripts stay."""
    base = str(dependency.base)
    new: dict[str, tuple[bytes, int] | None] = {}
    for relative in files_under(staged):
        if installed.on_sys_path and relative.split("/")[0] == "bin":
            continue
        path = os.path.join(staged, relative)
        new[os.path.join(base, relative)] = (read_bytes(path, PACKAGE_FILE), os.stat(path).st_mode & 0o777)
    for path in previous_files(dependency):
        new.setdefault(path, None)
    return new


def previous_files(dependency: DependencyPlan) -> list[str]:
    """Every file of the installed version inside its base directory (absolute, as text, in path
    order): its RECORD, plus the bytecode Python wrote next to those files later (__pycache__),
    which pip would remove too. Nothing else: a top-level directory may be a namespace shared
    with other distributions. Text, not Path: RECORD lists thousands of files."""
    dist = dependencies.find_distribution(dependency.package, [str(dependency.base)])
    base = str(dependency.base)
    inside = os.path.join(base, "")
    files = set()
    for entry in _listed_files(dist):
        path = os.path.normpath(os.path.join(base, entry))
        if path.startswith(inside) and stat.S_ISREG(mode_of(path)):
            files.add(path)
    for parent in {os.path.dirname(path) for path in files}:
        cache = os.path.join(parent, "__pycache__")
        if stat.S_ISDIR(mode_of(cache)):
            with os.scandir(cache) as listing:
                files.update(p.path for p in listing if p.is_file(follow_symlinks=False))
    return sorted(files, key=lambda path: path.split("/"))


def _listed_files(dist) -> list[str]:
    """The paths a distribution lists, as dist.files gives them: its RECORD's first column
    (read here, without a PackagePath per row: a RECORD lists thousands), else what dist.files
    finds for an egg-info."""
    record = dist.read_text("RECORD")
    if record:
        return [row[0] for row in csv.reader(record.splitlines()) if row]
    return [str(path) for path in dist.files or []]


def discard_staging(installed) -> None:
    shutil.rmtree(staging_dir(installed), ignore_errors=True)
