"""Cached Python environments that each hold one version of one PyPI package (with its
dependencies), for running a dependency's real code on the host without installing it there.

    <cache>/envs/transformers-5.15.0-py311/     a venv (python3 -m venv), made once
        forge-env.json                          written last: what pip installed (marks it done)

An environment is built in a private staging directory and renamed into place only once pip has
installed the package and the package imports at the asked version, so an interrupted or failed
build leaves nothing that a later run would mistake for a finished one. Wheels only
(`--only-binary :all:`): nothing is compiled on the host.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError
from forge.upstream.releases import cache_dir

MARKER = "forge-env.json"
PIP_TIMEOUT_S = 900


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


def install_command(package: str, version: str, env: Path) -> str:
    """The commands that make the environment by hand (printed when offline)."""
    return (f"python3 -m venv {env} && {python_of(env)} -m pip install --only-binary :all: "
            f"{package}=={version}")


def package_env(package: str, version: str, offline: bool = False) -> Path:
    """The python executable of the cached environment holding package==version; built if missing."""
    env = env_dir(package, version)
    if (env / MARKER).exists():
        return python_of(env)
    if offline:
        raise ForgeError(f"offline and no cached environment for {package}=={version} at {env}; "
                         f"where PyPI answers run: {install_command(package, version, env)}")
    env.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{env.name}-", dir=env.parent))
    try:
        _build(staging, package, version)
        shutil.rmtree(env, ignore_errors=True)  # a marker-less leftover of an interrupted build
        try:
            os.replace(staging, env)
        except OSError:
            if not (env / MARKER).exists():  # another process finished the same env meanwhile
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return python_of(env)


def _build(env: Path, package: str, version: str) -> None:
    _run([sys.executable, "-m", "venv", str(env)], f"cannot make a venv at {env}")
    python = str(python_of(env))
    _run([python, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check",
          "--only-binary", ":all:", f"{package}=={version}"],
         f"pip cannot install {package}=={version} into {env}")
    installed = _run([python, "-c", "import importlib.metadata as m, sys; "
                      "print(m.version(sys.argv[1]))", package],
                     f"{package}=={version} installed into {env} does not load").strip()
    if Version(installed) != Version(version):
        raise ForgeError(f"{env}: pip installed {package} {installed}, not {version}")
    frozen = _run([python, "-m", "pip", "freeze", "--all"], f"pip freeze failed in {env}")
    (env / MARKER).write_text(json.dumps(
        {"package": package, "version": version, "python": sys.version.split()[0],
         "installed": frozen.split()}, indent=1) + "\n")


def _run(command: list[str], failure: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ForgeError(f"{failure}: no answer in {PIP_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ForgeError(f"{failure}: {last}")
    return done.stdout


def installed_set(python: Path) -> list[str]:
    """What pip put into the environment (name==version lines), as recorded when it was made."""
    return json.loads((python.parent.parent / MARKER).read_text())["installed"]
