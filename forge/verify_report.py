"""A verify report's checks and the verdict over them: the one rule verify/mtp_smoke.py applies
when it writes a report (its exit code and `passed`) and `build.py publish` applies when it reads
one back (re-deriving the verdict from the checks, whatever `passed` says).

A report passes only when every gating check ran and passed. A check that could not run is
NOT CHECKED and never counts as a pass; INFO is reported only. The rule lives in forge, not in
verify/, because publish needs it and nothing in forge imports verify (verify/report.py, which
writes reports, imports it from here).
"""
from __future__ import annotations

from dataclasses import dataclass

# The file verify/mtp_smoke.py writes its report to in its --out directory (beside the engines'
# spec and result JSON); publish finds reports in a directory by this name.
REPORT_NAME = "mtp_smoke.json"

PASS, FAIL, INFO, NOT_CHECKED = "PASS", "FAIL", "INFO", "NOT CHECKED"
# A check that cannot hold on the device the engine ran on (a CPU engine has no CUDA graphs): never
# a pass, and accepted in place of one only in a report of that device (a CPU report, which publish
# refuses whatever it says).
NOT_APPLICABLE = "NOT APPLICABLE"
STATUSES = (PASS, FAIL, INFO, NOT_CHECKED, NOT_APPLICABLE)

# What the gate proves, in every mode (in-process or --endpoint): the drafter resolved, shares the
# target's embedding, runs under CUDA graphs, and its drafts are accepted at the recipe's
# thresholds. A report missing any of them, or carrying one that did not PASS, does not pass, even
# when the check says it does not gate. Other checks gate by their own `gating` field (the tuned
# MoE config where the recipe expects one, the start or answer of the server, --lossless).
REQUIRED_GATES = ("architectures", "draft shares target embedding", "CUDA graphs",
                  "acceptance (temperature 0)")
# The checks that only a GPU engine can pass, and why a CPU engine cannot (verify/device.py): on a
# CPU report each is NOT APPLICABLE, which that report's verdict accepts in place of a PASS.
GPU_ONLY_CHECKS = {
    "CUDA graphs": "vLLM's CPU build captures no CUDA graphs (the engine runs eager)",
    "tuned MoE config": "the tuned configs are for the GPU's fused-MoE Triton kernel",
    "quantization": "the CPU build has no fp8 kernels: the engine ran in the checkpoint's dtype",
    "MoE backend": "the recipe's MoE backend is a GPU kernel",
    "attention backend": "the recipe's attention backend is a GPU kernel; the CPU runs CPU_ATTN",
}
CPU = "cpu"


@dataclass
class Check:
    name: str
    status: str      # PASS / FAIL / INFO (reported only) / NOT CHECKED (could not run; says why)
    detail: str
    gating: bool = True  # the verdict needs this check to PASS; INFO never gates

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status: {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.status == INFO:
            self.gating = False

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    @property
    def gates(self) -> bool:
        return self.gating or self.name in REQUIRED_GATES


def passed(name: str, detail: str) -> Check:
    return Check(name, PASS, detail)


def failed(name: str, detail: str) -> Check:
    return Check(name, FAIL, detail)


def not_checked(name: str, why: str, gating: bool = True) -> Check:
    return Check(name, NOT_CHECKED, why, gating)


def unmet_gates(checks: list[Check], device: str | None = None) -> list[str]:
    """Why the checks do not pass, one entry per failed, unchecked or missing gate; [] = passed.
    On a CPU report (`device` "cpu") a GPU-only check that is NOT APPLICABLE is not unmet."""
    unmet = [f"{c.name}: {c.status}" for c in checks
             if not _not_applicable_here(c, device)
             and (c.failed or c.status == NOT_APPLICABLE or (c.gates and c.status != PASS))]
    present = {c.name for c in checks}
    unmet += [f"{name}: missing" for name in REQUIRED_GATES if name not in present]
    return unmet


def _not_applicable_here(check: Check, device: str | None) -> bool:
    return device == CPU and check.status == NOT_APPLICABLE and check.name in GPU_ONLY_CHECKS


def verdict(checks: list[Check], device: str | None = None) -> bool:
    """True only if every gating check ran and passed, the required ones included, and none failed
    (on a CPU report, a GPU-only check may be NOT APPLICABLE instead)."""
    return not unmet_gates(checks, device)


def not_applicable(name: str, why: str) -> Check:
    return Check(name, NOT_APPLICABLE, why, gating=False)
