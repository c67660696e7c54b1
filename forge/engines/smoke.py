"""`build.py smoke --device cpu`: verify's gate on a real vLLM engine, on the CPU.

One run: the release's cached CPU environment (forge.engines.cpu_env), cloned for this run by hard
links (the cache stays as it was made; what the run changes is written to new files, as pip and
`build.py apply` replace files rather than write into them); `--drift` pins installed into the
clone as a `pip install` would (a dependency that moved under the engine); the patch series applied
to the clone's vllm/ by `build.py apply`'s own code (forge.patching.apply), unless --no-patches;
then verify/mtp_smoke.py run by the clone's interpreter on the family's tiny model with dummy
weights, both controls in one engine and --lossless, writing OUT/mtp_smoke.json. vLLM's own cache
is one per release under the project's cache (vllm_cache); Inductor's cache (the engine compiles
nothing: verify/device.py) and the engine's temporary files go inside the run's folder, which is
removed at the end: nothing is written to ~/.cache/vllm or /tmp/torchinductor_*.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from forge import REPO_ROOT
from forge.engines.cpu_builds import CpuBuild, cpu_build
from forge.engines.cpu_env import cpu_env, python_of, run_pip, site_packages
from forge.errors import ForgeError
from forge.patching.series import Kind, load_series
from forge.untrusted import visible
from forge.upstream.releases import cache_dir

SMOKE = REPO_ROOT / "verify" / "mtp_smoke.py"
# The shape every CPU smoke loads (models/<family>.yaml `tiny`).
SHAPE = "tiny"
# Two engines side by side (--lossless) start in 20-60 s each on 2 cores and run three windows.
DEFAULT_TIMEOUT_S = 900
# Tokens per prompt: 8 prompts of 32 give 64 verify steps on the agreeing model and about 250 on the
# random one, enough to tell 100% from 0%, in a quarter of mtp_smoke's GPU default (128).
DEFAULT_MAX_TOKENS = 32


@dataclass(frozen=True)
class SmokeRun:
    version: str
    recipe: str
    target: str | None
    out: Path
    patches: bool = True
    drift: tuple[str, ...] = ()
    timeout_s: int = DEFAULT_TIMEOUT_S
    offline: bool = False
    max_tokens: int = DEFAULT_MAX_TOKENS
    lossless: bool = True


def series_constraints(version: str, series_path: Path | str | None = None) -> list[str]:
    """The series' dependency constraints in force on vLLM `version`, as pip constraint lines."""
    release = Version(version)
    series = load_series(series_path, offline=True)
    return [f"{p.package}{p.specifier}" for p in series.patches
            if p.kind == Kind.DEPENDENCY and p.in_range(release)]


def run_smoke(run: SmokeRun, say=print) -> int:
    """mtp_smoke's exit code for one CPU smoke run (0 PASS, 1 FAIL, 3 verify broken)."""
    build = cpu_build(run.version)
    env = cpu_env(build, series_constraints(run.version), offline=run.offline, say=say)
    runs = cache_dir() / "cpu-engines" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"smoke-{run.version}-", dir=runs))
    try:
        clone = work / "env"
        _clone(env, clone)
        for pin in run.drift:
            say(f"drift: installing {pin} into the engine's environment, as a pip upgrade would")
            _pip_into(clone, pin)
        if run.patches:
            _apply_series(clone, build, say)
        return _run_mtp_smoke(run, clone, work, say)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _clone(env: Path, clone: Path) -> None:
    """A copy of the environment whose files are hard links to the cached ones."""
    try:
        subprocess.run(["cp", "-a", "-l", str(env), str(clone)], check=True, capture_output=True,
                       text=True, timeout=300)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise ForgeError(f"cannot clone {env} for the run: {getattr(exc, 'stderr', '') or exc}") from None


def _pip_into(clone: Path, pin: str) -> None:
    # --no-compile, as the environment itself (forge.engines.cpu_env.ENGINE_MODULES says why): the
    # engine compiles the few modules of the upgrade it imports, not all of transformers' thousands.
    run_pip(str(python_of(clone)), ["install", "--no-compile", "--only-binary", ":all:", pin],
            f"--drift {pin}: pip cannot install it")


def _apply_series(clone: Path, build: CpuBuild, say) -> None:
    from forge.patching.apply import apply_series

    report = apply_series(site_packages=str(site_packages(clone)), expected_version=build.version)
    for line in report.lines():
        say(visible(f"apply: {line}"))     # git's and pip's output, the install's paths


def _run_mtp_smoke(run: SmokeRun, clone: Path, work: Path, say) -> int:
    run.out.mkdir(parents=True, exist_ok=True)
    command = [str(python_of(clone)), str(SMOKE), "--device", "cpu", "--recipe", run.recipe, "--dummy",
               "--shape", SHAPE, *(["--lossless"] if run.lossless else []), "--out", str(run.out.resolve()),
               "--timeout", str(run.timeout_s), "--max-tokens", str(run.max_tokens)]
    if run.target:
        command += ["--target", run.target]
    scratch = work / "scratch"
    scratch.mkdir()
    env = {**_inherited_env(), "VLLM_CACHE_ROOT": str(vllm_cache(run.version)),
           "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"), "TMPDIR": str(scratch),
           "PYTHONPATH": "", "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(command, env=env, timeout=run.timeout_s + 120)
    except subprocess.TimeoutExpired:
        raise ForgeError(f"verify/mtp_smoke.py did not end within {run.timeout_s + 120} s") from None
    return done.returncode


def vllm_cache(version: str) -> Path:
    """vLLM's own cache for the release's CPU engines, kept under the project's cache: what it keeps
    there on a CPU is the model classes' inspection (modelinfos/, keyed by a hash of the model's
    source file, so a patched file gets an entry of its own), which otherwise costs each engine a
    subprocess that imports vLLM again per architecture (about 9 s each on the 2-core machine)."""
    return cache_dir() / "cpu-engines" / f"vllm-cache-{version}"


def _inherited_env() -> dict:
    """This process's environment less what would point the engine's Python elsewhere."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
