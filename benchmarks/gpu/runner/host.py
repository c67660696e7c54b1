"""What the host runs the jobs with: their environment, the installed versions (the vLLM release
checked against the plan before any job) and the GPUs."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.gpu.runner.plan import Plan, fill

PACKAGES = ("vllm", "torch", "transformers", "triton")
VERSIONS = f"""
import importlib.metadata as m
for name in {PACKAGES!r}:
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "-")
"""
# nvidia-cutlass-dsl (FlashAttention 4 and Qwen3.5's linear attention import its `cutlass`) puts
# its package folder on sys.path from an import line in a .pth file. Python runs .pth files in
# site directories only, never for PYTHONPATH entries, so a release installed into a folder on
# PYTHONPATH cannot import cutlass until that folder is named on the path itself.
CUTLASS_DSL_FOLDERS = ("nvidia_cutlass_dsl/python_packages", "nvidia_cutlass_dsl/dsl_packages")


class HostError(RuntimeError):
    """The host cannot run the plan (one line)."""


def job_env(plan: Plan, env: dict[str, str], fields: dict[str, str], base: dict[str, str]) -> dict[str, str]:
    """The host's environment, then the plan's and the job's settings (PYTHONPATH entries go
    before the host's), with cutlass-dsl's package folder on the path where it is installed."""
    merged = dict(base)
    merged["PYTHONUNBUFFERED"] = "1"    # a cut job's log ends where it stopped
    for name, value in {**plan.env, **env}.items():
        value = fill(value, fields)
        if name == "PYTHONPATH" and merged.get("PYTHONPATH"):
            value = f"{value}:{merged['PYTHONPATH']}"
        merged[name] = value
    path = [entry for entry in merged.get("PYTHONPATH", "").split(":") if entry]
    extra = cutlass_dsl_paths(path)
    if extra:
        merged["PYTHONPATH"] = ":".join(path + extra)
    return merged


def cutlass_dsl_paths(path: list[str]) -> list[str]:
    found = []
    for entry in path:
        for folder in CUTLASS_DSL_FOLDERS:
            candidate = str(Path(entry) / folder)
            if Path(candidate).is_dir() and candidate not in path and candidate not in found:
                found.append(candidate)
    return found


def installed_versions(python: str, env: dict[str, str]) -> dict[str, str | None]:
    """The versions the jobs' interpreter sees, read from the distributions' metadata."""
    try:
        result = subprocess.run([python, "-c", VERSIONS], env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HostError(f"{python}: cannot read the installed versions: {error}") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise HostError(f"{python}: cannot read the installed versions: {last}")
    found = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    return {name: None if found.get(name, "-") == "-" else found[name] for name in PACKAGES}


def check_release(plan: Plan, versions: dict[str, str | None], python: str) -> None:
    installed = versions.get("vllm")
    # a build's local label (0.27.1+cu130) is that release
    if installed is None or installed.split("+", 1)[0] != plan.vllm:
        where = f"{python} with PYTHONPATH={os.environ.get('PYTHONPATH', '')!r}"
        has = f"has vLLM {installed}" if installed else "has no vLLM installed"
        raise HostError(f"{plan.path}: vllm: the plan expects vLLM {plan.vllm}; {where} {has}")


def gpus() -> list[dict[str, str]] | None:
    """Each GPU's name, driver and memory as nvidia-smi says them; None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                 "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):     # a hung driver: the record says none
        return None
    if result.returncode != 0:
        return None
    rows = [line.split(", ") for line in result.stdout.strip().splitlines() if line.strip()]
    return [{"name": row[0], "driver": row[1], "memory": row[2]} for row in rows if len(row) == 3]
