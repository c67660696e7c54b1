"""Cached Python environments that each hold one version of one PyPI package (with its
dependencies), for running a dependency's real code on the host without installing it there.

    <cache>/envs/transformers-5.15.0-py311/     a venv (python3 -m venv --without-pip), made once
        forge-env.json                          written last: what pip installed (marks it done)

An environment is built in a private staging directory and renamed into place only once pip has
installed the package and the package imports at the asked version, so an interrupted or failed
build leaves nothing that a later run would mistake for a finished one. Wheels only
(`--only-binary :all:`): nothing is compiled on the host. Nor byte-compiled (`--no-compile`): pip
would otherwise write .pyc files for all of transformers (about 100 MB of source, half of pip's time
making an environment) when a check imports a few dozen of its modules, which Python caches itself
on first import. The venv holds no pip of its own: this interpreter's pip installs into it
(`pip --python ENV/bin/python`), which spares seeding pip and setuptools into every environment
(5 s of the 6 s `python3 -m venv` takes). pip reads the index forge.upstream.pypi reads
($VLLM_FORGE_PYPI, else pip's own configuration).

When pip fails because one of the version's requirements names no release the index publishes
(`No matching distribution found for kernels<0.20,>=0.19.1`), and the index, asked again, confirms
that no published release of that project satisfies it, the failure is a fact about the version
(UninstallableError: nobody can install it from that index), not about this machine; any other
failure, a wheel missing for this interpreter included, stays a plain ForgeError.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from forge import files
from forge.data_formats import load_json_entry
from forge.errors import ForgeError
from forge.files import one_maker, write_entry
from forge.json_text import dump_json
from forge.upstream import pypi
from forge.upstream.releases import cache_dir, locks_dir

if TYPE_CHECKING:
    from forge.upstream.entries import EnvMarker

MARKER = "forge-env.json"
PIP_TIMEOUT_S = 900
# What pip prints for a requirement no candidate satisfies; the parent is named `(from transformers)`
# by pip 23.2 and may carry its version, `(from transformers==5.25.0)`; pip 26 names it at the end of
# the last line too, which is not part of the requirement.
NO_DISTRIBUTION = re.compile(r"^ERROR: No matching distribution found for (?P<requirement>.+?)"
                             r"(?: \(from [^()]+\))?\s*$", re.M)
NOT_SATISFIED = (r"Could not find a version that satisfies the requirement {} "
                 r"\(from (?!versions:)(?P<parent>[^()]+)\)")


class UninstallableError(ForgeError):
    """package==version cannot be installed from the index: `requirement` (one of its own
    requirements, or of a dependency's: `required_by`) is met by no release the index publishes
    (newest final release: `newest_published`; None when the index publishes none)."""

    def __init__(self, package: str, version: str, requirement: str, newest_published: str | None,
                 required_by: str | None = None):
        self.package, self.version, self.requirement = package, version, requirement
        self.newest_published, self.required_by = newest_published, required_by
        super().__init__(f"{package} {version} {self.reason}")

    @property
    def reason(self) -> str:
        """'cannot be installed from the index: it requires ...' (the message without the name)."""
        project = Requirement(self.requirement).name
        through = f" (through {self.required_by})" if self.required_by else ""
        fact = (f"the index publishes no {project} release" if self.newest_published is None else
                f"no published {project} release satisfies it (newest {self.newest_published})")
        return f"cannot be installed from the index: it requires {self.requirement}{through} and {fact}"


def env_dir(package: str, version: str) -> Path:
    """Where the environment for package==version lives (keyed by this Python's version too)."""
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache_dir() / "envs" / f"{canonicalize_name(package)}-{_checked(package, version)}-{python}"


def _checked(package: str, version: str) -> str:
    try:
        return str(Version(version))
    except InvalidVersion as exc:
        raise ForgeError(f"not a version of {package}: {version!r}") from exc


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def _index_args() -> list[str]:
    """pip's --index-url when forge reads another index than PyPI ($VLLM_FORGE_PYPI)."""
    return ["--index-url", pypi.simple_url()] if os.environ.get("VLLM_FORGE_PYPI") else []


def install_command(package: str, version: str, env: Path) -> str:
    """The commands that make the environment by hand (printed when offline)."""
    return (f"python3 -m venv {env} && {python_of(env)} -m pip install --only-binary :all: "
            + "".join(f"{arg} " for arg in _index_args()) + f"{package}=={version}")


def package_env(package: str, version: str, offline: bool = False) -> Path:
    """The python executable of the cached environment holding package==version; built if missing."""
    env = env_dir(package, version)
    if _marked(env):
        return python_of(env)
    if offline:
        raise ForgeError(f"offline and no cached environment for {package}=={version} at {env}; "
                         f"where PyPI answers run: {install_command(package, version, env)}")
    with one_maker(env, locks_dir()):   # a run building the same environment: wait for it
        if not _marked(env):
            _build_into_place(env, package, version)
    return python_of(env)


def _build_into_place(env: Path, package: str, version: str) -> None:
    env.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{env.name}-", dir=env.parent))
    try:
        _build(staging, package, version)
        shutil.rmtree(env, ignore_errors=True)  # a marker-less leftover of an interrupted build
        try:
            os.replace(staging, env)
        except OSError:
            if not _marked(env):  # another process finished the same env meanwhile
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _build(env: Path, package: str, version: str) -> None:
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], f"cannot make a venv at {env}")
    python = str(python_of(env))
    _pip_install(python, package, version, f"pip cannot install {package}=={version} into {env}")
    installed = _run([python, "-c", "import importlib.metadata as m, sys; "
                      "print(m.version(sys.argv[1]))", package],
                     f"{package}=={version} installed into {env} does not load").strip()
    if Version(installed) != Version(version):
        raise ForgeError(f"{env}: pip installed {package} {installed}, not {version}")
    frozen = _run([*_pip(python), "freeze", "--all"], f"pip freeze failed in {env}")
    write_entry(env / MARKER, marker_text(package, version, frozen.split()))


def marker_text(package: str, version: str, installed: list[str]) -> str:
    """The marker (forge.upstream.entries.EnvMarker): what the environment holds, written last."""
    return dump_json({"package": package, "version": version, "python": sys.version.split()[0],
                      "installed": installed}, indent=1) + "\n"


def _pip(python: str) -> list[str]:
    """This interpreter's pip, acting on the environment of `python`."""
    return [sys.executable, "-m", "pip", "--python", python]


def _pip_install(python: str, package: str, version: str, failure: str) -> None:
    command = [*_pip(python), "install", "--quiet", "--no-input", "--disable-pip-version-check",
               "--only-binary", ":all:", "--no-compile", *_index_args(), f"{package}=={version}"]
    done = _completed(command, failure)
    if done.returncode != 0:
        uninstallable = unmet_requirement(package, version, done.stderr)
        if uninstallable is not None:
            raise uninstallable
        raise ForgeError(f"{failure}: {_last_line(done.stderr)}")


def unmet_requirement(package: str, version: str, pip_stderr: str) -> UninstallableError | None:
    """The UninstallableError pip's output shows, once the index confirms it: the requirement pip
    found no distribution for is the version's own (or a dependency's, never the package itself)
    and no release the index publishes satisfies it (pre-releases as pip counts them: only where
    no final release does). None for anything else, and when the index does not answer."""
    found = NO_DISTRIBUTION.findall(pip_stderr)
    if len(found) != 1:
        return None
    text = found[0]
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return None
    if canonicalize_name(requirement.name) == canonicalize_name(package):
        return None  # the version itself is not there: not a requirement of it
    try:
        published = pypi.live_versions(requirement.name)
    except pypi.UnknownProject:
        published = []
    if published is None or list(requirement.specifier.filter(published)):
        return None  # the index does not answer, or it has a release pip could not take here
    finals = [v for v in published if not (v.is_prerelease or v.is_devrelease)] or published
    return UninstallableError(package, version, text, str(max(finals)) if finals else None,
                              _required_by(pip_stderr, text, package))


def _required_by(pip_stderr: str, requirement: str, package: str) -> str | None:
    """The project pip names as the requirement's parent, when that is not the package itself."""
    named = re.search(NOT_SATISFIED.format(re.escape(requirement)), pip_stderr)
    if named is None:
        return None
    try:
        parent = canonicalize_name(Requirement(named["parent"]).name)
    except InvalidRequirement:
        return None
    return None if parent == canonicalize_name(package) else str(parent)


def _completed(command: list[str], failure: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ForgeError(f"{failure}: no answer in {PIP_TIMEOUT_S} s") from exc


def _last_line(stderr: str) -> str:
    return (stderr.strip().splitlines() or ["(no output)"])[-1]


def _run(command: list[str], failure: str) -> str:
    done = _completed(command, failure)
    if done.returncode != 0:
        raise ForgeError(f"{failure}: {_last_line(done.stderr)}")
    return done.stdout


def _marker(env: Path) -> EnvMarker | None:
    """The environment's marker as _build writes it (a regular file, no link followed), or None."""
    from forge.typed import entry_or_none
    from forge.upstream.entries import EnvMarker

    return entry_or_none(EnvMarker, load_json_entry(env / MARKER, files.CACHE))


def _marked(env: Path) -> bool:
    return _marker(env) is not None


def installed_set(python: Path) -> list[str]:
    """What pip put into the environment (name==version lines), as recorded when it was made."""
    marker = _marker(python.parent.parent)
    if marker is None:
        raise ForgeError(f"{python.parent.parent / MARKER}: missing or damaged; remove "
                         f"{python.parent.parent} to make the environment again")
    return list(marker.installed)
