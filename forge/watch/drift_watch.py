"""The dependency half of the upstream watch (forge.watch.upstream): every final release on PyPI
of a watched package (patches/dependency-watch.yaml, forge.watch.dependencies) newer than its
`checked_through` goes through the dependency drift check (forge.watch.drift) against every
supported vLLM release, the new ones included.

Per new version, one of:

  - a finding: it breaks a release no `kind: dependency` entry covers; the watch fails (exit 3),
    the workflow opens an issue and nothing is written;
  - checked: no finding;
  - not checked: the index cannot install it (one of its requirements is met by no published
    release, forge.upstream.pyenvs.UninstallableError). Not a finding, so it blocks nothing; never
    counted as checked either: the package's `checked_through` moves only to the newest version
    below the first one not checked, and the next run tries that one again.

A probe error (the check could not run) fails the watch (exit 2) and moves nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.errors import ForgeError
from forge.watch import drift


@dataclass
class DependencyProposal:
    package: str
    checked_through: str                  # the watch list's value before the watch
    new_versions: list[str]               # final releases on PyPI after it, oldest first
    reports: list = field(default_factory=list)   # one forge.watch.drift.DriftReport per new version

    @property
    def findings(self) -> list[tuple[str, str]]:
        """(version, vLLM release) for each break no constraint covers."""
        return [(r.version, f.release) for r in self.reports for f in r.findings]

    @property
    def unchecked(self) -> list[tuple[str, str]]:
        """(version, why) for each new version the index cannot install: not checked."""
        return [(r.version, r.uninstallable) for r in self.reports if r.uninstallable]

    @property
    def moves_to(self) -> str | None:
        """The package's new `checked_through`: the newest new version below the first one not
        checked; None when the watch list does not move for the package."""
        unchecked = {version for version, _ in self.unchecked}
        checked = []
        for version in self.new_versions:
            if version in unchecked:
                break
            checked.append(version)
        return checked[-1] if checked else None

    def to_dict(self) -> dict:
        return {"package": self.package, "checked_through": self.checked_through,
                "new_versions": self.new_versions, "moves_to": self.moves_to,
                "findings": [{"version": v, "vllm": r} for v, r in self.findings],
                "unchecked": [{"version": v, "reason": why} for v, why in self.unchecked],
                "reports": [r.to_dict() for r in self.reports]}


def propose_dependencies(series, watch, new_vllm: list[str], offline: bool,
                         through: dict[str, str]) -> list[DependencyProposal]:
    """Run the drift check on every new version of every watched dependency (`through`: package ->
    the last version to check this time), against the supported vLLM releases and the new ones."""
    supported = drift.supported_releases(series, offline=offline, extra=new_vllm)
    limits = {canonicalize_name(k): Version(v) for k, v in through.items()}
    proposals = []
    for dependency in watch.dependencies:
        limit = limits.get(canonicalize_name(dependency.package))
        new = [str(v) for v in drift.final_versions(
            dependency.package, newer_than=dependency.checked_through, offline=offline)
            if limit is None or v <= limit]
        reports = [drift.check(dependency.package, v, series, supported, offline=offline) for v in new]
        for report in reports:
            _refuse_probe_errors(report)
        proposals.append(DependencyProposal(dependency.package, dependency.checked_through, new, reports))
    return proposals


def _refuse_probe_errors(report) -> None:
    """A check that could not run is a failure of the watch, never a version passed."""
    for result in report.probe_errors:
        error = next(m["error"] for m in result.models.values() if m.get("error"))
        raise ForgeError(f"{report.package} {report.version}: drift probe error on vLLM "
                         f"{result.release}: {error['message']}")


def move_watch_list(dependencies: list[DependencyProposal], watch) -> None:
    from forge.watch.dependencies import save_watch

    moves = {d.package: d.moves_to for d in dependencies if d.moves_to}
    for dependency in watch.dependencies:
        dependency.checked_through = moves.get(dependency.package, dependency.checked_through)
    save_watch(watch)


def finding_phrases(dependencies: list[DependencyProposal]) -> list[str]:
    """'transformers 5.15.0 breaks Gemma 4 on vLLM 0.21.0–0.27.1', one per package version."""
    return [f"{report.package} {report.version} breaks Gemma 4 on vLLM {drift.runs(report, 'breaks')}"
            for dependency in dependencies for report in dependency.reports if report.findings]


# --- pull request / issue text ----------------------------------------------------------------

def dependency_lines(dependencies: list[DependencyProposal]) -> list[str]:
    """Per watched dependency: its new versions and, per version, what the drift check found."""
    lines = []
    for dependency in dependencies:
        if not dependency.new_versions:
            lines += [f"No {dependency.package} release newer than {dependency.checked_through} "
                      "on PyPI.", ""]
            continue
        lines += [f"New {dependency.package} releases since `checked_through: "
                  f"{dependency.checked_through}` (dependency drift check, Gemma 4 configs "
                  "through each vLLM release's own code; `python3 build.py drift --package "
                  f"{dependency.package} --version V`):", ""]
        for report in dependency.reports:
            if report.uninstallable:
                lines.append(f"- {report.version}: not checked: {report.uninstallable}; the watch "
                             "tries it again on its next run")
            else:
                lines.append(f"- {report.version}: " + "; ".join(_verdict_groups(report)))
        lines.append("")
        for report in dependency.reports:
            if report.findings:
                lines += [f"<details><summary>{report.package} {report.version}</summary>", "",
                          drift.render(report), "</details>", ""]
    return lines


def _verdict_groups(report) -> list[str]:
    """'breaks on vLLM 0.21.0–0.27.1 (AmbiguousGlobalPerLayerAttributeError ...)', per verdict."""
    groups: dict[str, list] = {}
    for result in report.results:
        groups.setdefault(result.verdict, []).append(result)
    phrases = []
    for verdict, results in groups.items():
        phrase = f"{verdict} on vLLM {drift.runs(report, verdict)}"
        if verdict in ("breaks", "covered-by-constraint"):
            phrase += f" ({drift.model_cell(next(iter(results[0].models.values())))})"
        phrases.append(phrase)
    return phrases


def edit_lines(dependencies: list[DependencyProposal]) -> list[str]:
    """The watch list's edits, one line per package that moves."""
    moved = [d for d in dependencies if d.moves_to]
    if not moved:
        return []
    lines = ["Edits to `patches/dependency-watch.yaml`:", ""]
    for dependency in moved:
        line = (f"- `{dependency.package}`: `checked_through: {dependency.checked_through}` → "
                f"`{dependency.moves_to}`")
        if dependency.unchecked:
            line += f" (not past {dependency.unchecked[0][0]}, which was not checked)"
        lines.append(line)
    return lines
