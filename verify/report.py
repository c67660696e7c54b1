"""Named pass/fail checks, the verdict over them, and their rendering as a table and a JSON report;
the versions of the software a report ran on.

The verdict is the one rule both mtp_smoke.py (its exit code and the report's `passed`) and
`build.py publish` (which re-derives it from the report's checks) apply: a report passes only when
every gating check ran and passed. A check that could not run is NOT CHECKED and never counts as
a pass; INFO is reported only.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

PASS, FAIL, INFO, NOT_CHECKED = "PASS", "FAIL", "INFO", "NOT CHECKED"
STATUSES = (PASS, FAIL, INFO, NOT_CHECKED)

# What the gate proves, in every mode (in-process or --endpoint): the drafter resolved, shares the
# target's embedding, runs under CUDA graphs, and its drafts are accepted at the recipe's
# thresholds. A report missing any of them, or carrying one that did not PASS, does not pass, even
# when the check says it does not gate. Other checks gate by their own `gating` field (the tuned
# MoE config where the recipe expects one, the start or answer of the server, --lossless).
REQUIRED_GATES = ("architectures", "draft shares target embedding", "CUDA graphs",
                  "acceptance (temperature 0)")

# Every report (mtp_smoke.json, bench.json) names the versions of these packages it ran on, as the
# environment of the process that ran vLLM has them installed: engine_worker.py reads them with
# installed_versions() before it starts the engine, so a failed start names them too. A package
# absent there is NOT_INSTALLED; where verify cannot read that environment (--endpoint: the
# server is another process, which names only its vLLM release), the value says why it is unknown.
RAN_ON = ("vllm", "torch", "transformers")
NOT_INSTALLED = "not installed"
UNKNOWN = "unknown"


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


def unmet_gates(checks: list[Check]) -> list[str]:
    """Why the checks do not pass, one entry per failed, unchecked or missing gate; [] = passed."""
    unmet = [f"{c.name}: {c.status}" for c in checks
             if c.failed or (c.gates and c.status != PASS)]
    present = {c.name for c in checks}
    unmet += [f"{name}: missing" for name in REQUIRED_GATES if name not in present]
    return unmet


def verdict(checks: list[Check]) -> bool:
    """True only if every gating check ran and passed, the required ones included, and none failed."""
    return not unmet_gates(checks)


# What each field of a check holds in a report: anything else (a list for a name) is refused by
# name before the verdict is derived.
FIELD_TYPES = {"name": str, "status": str, "detail": str, "gating": bool}


def checks_from_report(report: dict) -> list[Check]:
    """The checks of a JSON report as write_report wrote them; ValueError names the bad field."""
    entries = report.get("checks")
    if not isinstance(entries, list) or not entries:
        raise ValueError("checks: the verify report lists no checks")
    names = {f.name for f in fields(Check)}
    checks = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not {"name", "status", "detail"} <= entry.keys():
            raise ValueError(f"checks[{i}]: not a check (needs name, status and detail)")
        for key, kind in FIELD_TYPES.items():
            if key in entry and not isinstance(entry[key], kind):
                raise ValueError(f"checks[{i}].{key}: must be {kind.__name__} "
                                 f"(got {type(entry[key]).__name__})")
        try:
            checks.append(Check(**{k: v for k, v in entry.items() if k in names}))
        except ValueError as exc:
            raise ValueError(f"checks[{i}].{exc}") from exc
    return checks


def render_table(checks: list[Check], width: int = 100) -> str:
    name_width = max([len(c.name) for c in checks] + [5])
    status_width = max(len(s) for s in STATUSES)
    lines = [f"{'check':<{name_width}}  {'result':<{status_width}}  detail",
             f"{'-' * name_width}  {'-' * status_width}  {'-' * 6}"]
    for check in checks:
        # A failure is shown whole: its detail is the root cause the user needs.
        short = check.failed or len(check.detail) <= width
        detail = check.detail if short else check.detail[: width - 3] + "..."
        lines.append(f"{check.name:<{name_width}}  {check.status:<{status_width}}  {detail}")
    lines.append("")
    unchecked = [c.name for c in checks if c.gates and c.status == NOT_CHECKED]
    lines.append("RESULT: " + ("PASS" if verdict(checks) else "FAIL") +
                 f" ({sum(c.status == PASS for c in checks)} passed, "
                 f"{sum(c.failed for c in checks)} failed"
                 + (f", {len(unchecked)} not checked" if unchecked else "") + ")")
    # Say why a run without a FAIL line is still not a pass.
    quiet = [u for u in unmet_gates(checks) if not u.endswith(f": {FAIL}")]
    if quiet:
        lines.append("not a pass: " + "; ".join(quiet))
    return "\n".join(lines)


def installed_versions(packages: tuple[str, ...] = RAN_ON) -> dict[str, str]:
    """{package: version} as each installed distribution's own metadata says it (importlib.metadata
    reads the dist-info pip wrote; nothing is imported), NOT_INSTALLED where this process's
    environment holds no such distribution."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in packages:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = NOT_INSTALLED
    return found


def unknown_versions(why: str, **known: str | None) -> dict[str, str]:
    """RAN_ON's versions where they cannot be read here: the `known` ones as given, every other one
    'unknown: <why>'."""
    return {package: known.get(package) or f"{UNKNOWN}: {why}" for package in RAN_ON}


def release_in(versions: dict[str, str], package: str = "vllm") -> str | None:
    """The package's version when `versions` names one (not NOT_INSTALLED, not unknown)."""
    value = versions.get(package)
    if not value or value == NOT_INSTALLED or value.startswith(f"{UNKNOWN}:"):
        return None
    return value


def checked_versions(versions: object) -> dict[str, str]:
    """`versions` if it names every RAN_ON package by a non-empty string; else ValueError."""
    if not isinstance(versions, dict):
        raise ValueError(f"versions: expected a mapping of {', '.join(RAN_ON)} (got {versions!r})")
    missing = [p for p in RAN_ON if not isinstance(versions.get(p), str) or not versions[p]]
    if missing:
        raise ValueError(f"versions: names no version for {', '.join(missing)} (got {versions!r})")
    return versions


def versions_line(versions: dict[str, str]) -> str:
    """'vllm 0.25.0, torch 2.11.0, transformers 5.14.1' (a missing one as its value says)."""
    return ", ".join(f"{package} {versions.get(package, 'not recorded')}" for package in RAN_ON)


def write_report(path: Path | str, checks: list[Check], versions: dict[str, str], **context) -> Path:
    """The JSON report: the verdict, the checks, the versions it ran on (RAN_ON), the context."""
    path = Path(path)
    payload = {"passed": verdict(checks), "checks": [asdict(c) for c in checks],
               "versions": checked_versions(versions), **context}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path
