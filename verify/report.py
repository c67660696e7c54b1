"""Verify's reports: the table of checks a run prints, the JSON report it writes, and the versions
of the software a report ran on.

The checks and the verdict over them are forge.verify_report's (`build.py publish` re-derives a
report's verdict by the same rule, and forge never imports verify); they are re-exported here, so
verify's scripts name one module for everything about a report.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from forge.files import write_text_atomically
from forge.verify_report import (  # noqa: F401 (re-exported for verify's scripts and tests)
    FAIL,
    INFO,
    NOT_CHECKED,
    PASS,
    REPORT_NAME,
    REQUIRED_GATES,
    STATUSES,
    Check,
    checks_from_report,
    failed,
    not_checked,
    passed,
    unmet_gates,
    verdict,
)

# Every report (mtp_smoke.json, bench.json) names the versions of these packages it ran on, as the
# environment of the process that ran vLLM has them installed: engine_worker.py reads them with
# installed_versions() before it starts the engine, so a failed start names them too. A package
# absent there is NOT_INSTALLED; where verify cannot read that environment (--endpoint: the
# server is another process, which names only its vLLM release), the value says why it is unknown.
RAN_ON = ("vllm", "torch", "transformers")
NOT_INSTALLED = "not installed"
UNKNOWN = "unknown"


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
    # atomic: a full disk or a kill leaves the old report or none, never a 0-byte one
    return write_text_atomically(path, json.dumps(payload, indent=1, default=str) + "\n")
