"""Upstream watch: what the vLLM releases newer than the manifest's `checked_through` change.

For every final release on PyPI newer than `checked_through` it computes each patch's status
against the release's real source (forge.patching.status), then proposes the manifest edits:

  - `checked_through` moves to the newest release;
  - a patch that became `already-upstream` in release R (and is not retired yet) gets
    `retired_in: R` (and `upstream.fixed_in: R` when the manifest did not know it);
  - a `conflict` proposes nothing: the watch fails loudly (exit 3) so the daily workflow opens an
    issue instead of a pull request, and the manifest stays where it was.

It also watches the dependencies Gemma 4 serving touches (patches/dependency-watch.yaml, next to
the series; forge.watch.drift_watch): every final release on PyPI newer than a package's
`checked_through` goes through the dependency drift check (forge.watch.drift) against every
supported vLLM release, the new ones included. A version that breaks a release no `kind:
dependency` entry covers is a finding: like a conflict, the watch fails (exit 3), the workflow
opens an issue and nothing is written. Otherwise the pull request also moves the package's
`checked_through`, never past a version the index cannot install (not checked, not a finding).

`build.py upstream-watch --write` applies the edits with forge.patching.series.save_series (which
keeps the manifest's comment block and re-validates the result) and
forge.watch.dependencies.save_watch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from forge.errors import ConflictError
from forge.patching.vocabulary import Status
from forge.watch import drift_watch
from forge.watch.drift_watch import DependencyProposal


@dataclass
class Proposal:
    series_path: Path
    checked_through: str                       # the manifest's value before the watch
    new_releases: list[str]                    # newer than checked_through, oldest first
    statuses: dict[str, list] = field(default_factory=dict)        # release -> [PatchStatus]
    retire: dict[str, str] = field(default_factory=dict)           # patch id -> release
    set_fixed_in: dict[str, str] = field(default_factory=dict)     # patch id -> release
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)  # (release, id, detail)
    # Recipes (model/target) whose `vllm` range stops short of the newest release: not edited here,
    # since their flags must first be checked against that release (`build.py serve`).
    recipes_behind: list[str] = field(default_factory=list)
    dependencies: list[DependencyProposal] = field(default_factory=list)

    @property
    def newest(self) -> str | None:
        return self.new_releases[-1] if self.new_releases else None

    @property
    def drift_findings(self) -> list[tuple[str, str, str]]:
        """(package, version, vLLM release) for each dependency break no constraint covers."""
        return [(d.package, v, r) for d in self.dependencies for v, r in d.findings]

    @property
    def blocked(self) -> bool:
        """A conflict or a drift finding: an issue, not a pull request; nothing is written."""
        return bool(self.conflicts or self.drift_findings)

    @property
    def changes_manifest(self) -> bool:
        return bool(self.new_releases) and not self.blocked

    @property
    def changes_watch_list(self) -> bool:
        return any(d.moves_to for d in self.dependencies) and not self.blocked

    @property
    def branch(self) -> str:
        """The pull request's branch: what it moves, e.g. upstream-watch/vllm-0.34.0."""
        moved = ([f"vllm-{self.newest}"] if self.newest else []) + [
            f"{d.package}-{d.moves_to}" for d in self.dependencies if d.moves_to]
        return "upstream-watch/" + ("_".join(moved) or "nothing")

    def to_dict(self) -> dict:
        return {
            "series": str(self.series_path), "checked_through": self.checked_through,
            "new_releases": self.new_releases, "newest": self.newest,
            "retire": self.retire, "set_fixed_in": self.set_fixed_in,
            "conflicts": [{"vllm": v, "patch": p, "detail": d} for v, p, d in self.conflicts],
            "recipes_behind": self.recipes_behind,
            "statuses": {v: [s.to_dict() for s in ss] for v, ss in self.statuses.items()},
            "dependencies": [d.to_dict() for d in self.dependencies],
        }


def propose(series, offline: bool = False, recipes_root: Path | None = None, watch=None,
            through: dict[str, str] | None = None) -> Proposal:
    """Check every release newer than `series.checked_through` and work out the edits; with a
    watch list (forge.watch.dependencies), also every new version of each watched dependency
    (`through`: package -> the last version to check this time)."""
    from forge.patching import status as patches
    from forge.serving import recipes
    from forge.upstream import releases

    newer = [str(v) for v in releases.list_releases(offline=offline)
             if v > Version(series.checked_through)]
    proposal = Proposal(series.path, series.checked_through, newer)
    for version in newer:
        statuses = patches.release_status(version, offline=offline, series=series)
        proposal.statuses[version] = statuses
        for status in statuses:
            if status.status == Status.CONFLICT:
                proposal.conflicts.append((version, status.id, status.detail))
            elif status.status == Status.ALREADY_UPSTREAM:
                _propose_retirement(proposal, series.get(status.id), version)
    if proposal.newest:
        proposal.recipes_behind = [f"{r.name}/{r.target}" for r in recipes.load_all(recipes_root)
                                   if not r.reaches(proposal.newest)]
    if watch is not None:
        proposal.dependencies = drift_watch.propose_dependencies(series, watch, newer, offline,
                                                                 through or {})
    return proposal


def _propose_retirement(proposal: Proposal, patch, version: str) -> None:
    if patch.retired_in is not None or patch.id in proposal.retire:
        return  # retired already, or at an earlier new release
    proposal.retire[patch.id] = version
    if not (patch.upstream or {}).get("fixed_in"):
        proposal.set_fixed_in[patch.id] = version


def apply(proposal: Proposal, series, watch=None) -> None:
    """Write the proposed edits into the manifest and the watch list. Refuses while a conflict or
    a drift finding is open."""
    refuse_if_blocked(proposal)
    if watch is not None and proposal.changes_watch_list:
        drift_watch.move_watch_list(proposal.dependencies, watch)
    if proposal.new_releases:
        _write_series(proposal, series)


def _write_series(proposal: Proposal, series) -> None:
    from forge.patching.series import save_series

    series.checked_through = proposal.newest
    for patch_id, version in proposal.retire.items():
        series.get(patch_id).retired_in = version
    for patch_id, version in proposal.set_fixed_in.items():
        patch = series.get(patch_id)
        patch.upstream = {**(patch.upstream or {}), "fixed_in": version}
    save_series(series)


def refuse_if_blocked(proposal: Proposal) -> None:
    """ConflictError (exit 3) while a patch conflicts or a drift finding is open."""
    if proposal.blocked:
        raise ConflictError(_blocked_line(proposal))


def _blocked_line(proposal: Proposal) -> str:
    if proposal.conflicts:
        version, patch_id, detail = proposal.conflicts[0]
        more = len(proposal.conflicts) - 1 + len(proposal.drift_findings)
        return (f"vLLM {version}: patch {patch_id} conflicts: {detail}"
                + (f" (and {more} more)" if more else ""))
    return "; ".join(drift_watch.finding_phrases(proposal.dependencies)) + \
        " and no dependency constraint covers it"


# --- pull request / issue text ----------------------------------------------------------------

def title(proposal: Proposal) -> str:
    if proposal.conflicts:
        ids = sorted({patch_id for _, patch_id, _ in proposal.conflicts})
        return (f"upstream-watch: patch {', '.join(ids)} conflicts with vLLM "
                f"{_span(proposal.new_releases)}")
    if proposal.drift_findings:
        return "upstream-watch: " + "; ".join(drift_watch.finding_phrases(proposal.dependencies))
    moved = [f"{d.package} through {d.moves_to}" for d in proposal.dependencies if d.moves_to]
    if not proposal.new_releases:
        if moved:
            return f"upstream-watch: check {', '.join(moved)}"
        return f"upstream-watch: nothing new after vLLM {proposal.checked_through}"
    retired = "".join(f"; retire {pid} (upstream in {v})" for pid, v in proposal.retire.items())
    also = "".join(f"; check {m}" for m in moved)
    return f"upstream-watch: check patches through vLLM {proposal.newest}{retired}{also}"


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}–{versions[-1]}"


def body(proposal: Proposal) -> str:
    lines = _vllm_lines(proposal) + drift_watch.dependency_lines(proposal.dependencies)
    lines += _blocked_lines(proposal) if proposal.blocked else _edit_lines(proposal)
    return "\n".join(lines) + "\n"


def _vllm_lines(proposal: Proposal) -> list[str]:
    if not proposal.new_releases:
        return [f"No vLLM release newer than {proposal.checked_through} on PyPI.", ""]
    ids = sorted({s.id for ss in proposal.statuses.values() for s in ss})
    lines = [f"New vLLM releases since `checked_through: {proposal.checked_through}`: "
             f"{', '.join(proposal.new_releases)}.", "",
             "| release | " + " | ".join(f"`{i}`" for i in ids) + " |",
             "|---|" + "---|" * len(ids)]
    for version, statuses in proposal.statuses.items():
        by_id = {s.id: s.status for s in statuses}
        lines.append(f"| {version} | " + " | ".join(_cell(by_id.get(i, "?")) for i in ids) + " |")
    return lines + [""]


def _blocked_lines(proposal: Proposal) -> list[str]:
    lines = []
    if proposal.conflicts:
        lines += ["**Conflicts: the manifest was not changed.** Refresh these patches against the "
                  "release's source, then re-run `python3 build.py upstream-watch`:", ""]
        lines += [f"- vLLM {v}, `{pid}`: {detail}" for v, pid, detail in proposal.conflicts]
        lines.append("")
    if proposal.drift_findings:
        lines += ["**Dependency drift: nothing was changed.** These versions break Gemma 4 on "
                  "supported vLLM releases and no `kind: dependency` entry of "
                  "`patches/series.yaml` keeps them out. Add one (or a fix), then re-run "
                  "`python3 build.py upstream-watch`:", ""]
        lines += [f"- {phrase}" for phrase in drift_watch.finding_phrases(proposal.dependencies)]
    return lines


def _edit_lines(proposal: Proposal) -> list[str]:
    lines = []
    if proposal.new_releases:
        lines += ["Edits to `patches/series.yaml`:", "",
                  f"- `checked_through: {proposal.checked_through}` → `{proposal.newest}`"]
        lines += [f"- `{pid}`: `retired_in: {v}` (already upstream from {v})"
                  for pid, v in proposal.retire.items()]
        lines += [f"- `{pid}`: `upstream.fixed_in: {v}`" for pid, v in proposal.set_fixed_in.items()]
    if proposal.recipes_behind:
        lines += ["", f"Recipes whose `vllm` range does not reach {proposal.newest} yet (check each with "
                      f"`python3 build.py serve --recipe R --target T --vllm {proposal.newest}`, then "
                      "extend the range in a follow-up):", ""]
        lines += [f"- `recipes/{name.split('/')[0]}.yaml` targets.{name.split('/')[1]}"
                  for name in proposal.recipes_behind]
    watch_edits = drift_watch.edit_lines(proposal.dependencies)
    if watch_edits:
        lines += [""] + watch_edits
    if proposal.new_releases:
        lines += ["", f"`images/lock.yaml` re-pinned with `python3 build.py lock --vllm {proposal.newest}`."]
    if proposal.new_releases or watch_edits:
        lines += ["", "Opened by `.github/workflows/upstream-watch.yml` "
                      "(`python3 build.py upstream-watch --write`)."]
    return lines


def _cell(status: str) -> str:
    return "**CONFLICT**" if status == Status.CONFLICT else status
