"""Named pass/fail checks, and their rendering as a short table and a JSON report."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

PASS, FAIL, INFO, NOT_CHECKED = "PASS", "FAIL", "INFO", "NOT CHECKED"


@dataclass
class Check:
    name: str
    status: str      # PASS / FAIL gate the exit code; INFO is reported only; NOT CHECKED says why
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def passed(name: str, detail: str) -> Check:
    return Check(name, PASS, detail)


def failed(name: str, detail: str) -> Check:
    return Check(name, FAIL, detail)


def verdict(checks: list[Check]) -> bool:
    """True only if at least one check ran and none failed."""
    return any(c.status == PASS for c in checks) and not any(c.failed for c in checks)


def render_table(checks: list[Check], width: int = 100) -> str:
    name_width = max([len(c.name) for c in checks] + [5])
    status_width = max(len(s) for s in (PASS, FAIL, INFO, NOT_CHECKED))
    lines = [f"{'check':<{name_width}}  {'result':<{status_width}}  detail",
             f"{'-' * name_width}  {'-' * status_width}  {'-' * 6}"]
    for check in checks:
        # A failure is shown whole: its detail is the root cause the user needs.
        short = check.failed or len(check.detail) <= width
        detail = check.detail if short else check.detail[: width - 3] + "..."
        lines.append(f"{check.name:<{name_width}}  {check.status:<{status_width}}  {detail}")
    lines.append("")
    lines.append("RESULT: " + ("PASS" if verdict(checks) else "FAIL") +
                 f" ({sum(c.status == PASS for c in checks)} passed, "
                 f"{sum(c.failed for c in checks)} failed)")
    return "\n".join(lines)


def write_report(path: Path | str, checks: list[Check], **context) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"passed": verdict(checks), "checks": [asdict(c) for c in checks], **context}
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path
