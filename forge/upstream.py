"""Upstream watch: what the vLLM releases newer than the manifest's `checked_through` change.

For every final release on PyPI newer than `checked_through` it computes each patch's status
against the release's real source (forge.patches), then proposes the manifest edits:

  - `checked_through` moves to the newest release;
  - a patch that became `already-upstream` in release R (and is not retired yet) gets
    `retired_in: R` (and `upstream.fixed_in: R` when the manifest did not know it);
  - a `conflict` proposes nothing: the watch fails loudly (exit 3) so the daily workflow opens an
    issue instead of a pull request, and the manifest stays where it was.

`build.py upstream-watch --write` applies the edits with forge.patch_series.save_series (which
keeps the manifest's comment block and re-validates the result).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from forge.errors import ConflictError


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

    @property
    def newest(self) -> str | None:
        return self.new_releases[-1] if self.new_releases else None

    @property
    def changes_manifest(self) -> bool:
        return bool(self.new_releases) and not self.conflicts

    def to_dict(self) -> dict:
        return {
            "series": str(self.series_path), "checked_through": self.checked_through,
            "new_releases": self.new_releases, "newest": self.newest,
            "retire": self.retire, "set_fixed_in": self.set_fixed_in,
            "conflicts": [{"vllm": v, "patch": p, "detail": d} for v, p, d in self.conflicts],
            "recipes_behind": self.recipes_behind,
            "statuses": {v: [s.to_dict() for s in ss] for v, ss in self.statuses.items()},
        }


def propose(series, offline: bool = False, recipes_root: Path | None = None) -> Proposal:
    """Check every release newer than `series.checked_through` and work out the edits."""
    from forge import patches, recipes, releases

    newer = [str(v) for v in releases.list_releases(offline=offline)
             if v > Version(series.checked_through)]
    proposal = Proposal(series.path, series.checked_through, newer)
    for version in newer:
        statuses = patches.release_status(version, offline=offline, series=series)
        proposal.statuses[version] = statuses
        for status in statuses:
            if status.status == "conflict":
                proposal.conflicts.append((version, status.id, status.detail))
            elif status.status == "already-upstream":
                _propose_retirement(proposal, series.get(status.id), version)
    if proposal.newest:
        proposal.recipes_behind = [f"{r.name}/{r.target}" for r in recipes.load_all(recipes_root)
                                   if not r.admits(proposal.newest)]
    return proposal


def _propose_retirement(proposal: Proposal, patch, version: str) -> None:
    if patch.retired_in is not None or patch.id in proposal.retire:
        return  # retired already, or at an earlier new release
    proposal.retire[patch.id] = version
    if not (patch.upstream or {}).get("fixed_in"):
        proposal.set_fixed_in[patch.id] = version


def apply(proposal: Proposal, series) -> None:
    """Write the proposed edits into the manifest. Refuses while a conflict is open."""
    from forge.patch_series import save_series

    if proposal.conflicts:
        raise ConflictError(_conflict_line(proposal))
    if not proposal.new_releases:
        return
    series.checked_through = proposal.newest
    for patch_id, version in proposal.retire.items():
        series.get(patch_id).retired_in = version
    for patch_id, version in proposal.set_fixed_in.items():
        patch = series.get(patch_id)
        patch.upstream = {**(patch.upstream or {}), "fixed_in": version}
    save_series(series)


def _conflict_line(proposal: Proposal) -> str:
    version, patch_id, detail = proposal.conflicts[0]
    more = len(proposal.conflicts) - 1
    return (f"vLLM {version}: patch {patch_id} conflicts: {detail}"
            + (f" (and {more} more)" if more else ""))


# --- pull request / issue text ----------------------------------------------------------------

def title(proposal: Proposal) -> str:
    if not proposal.new_releases:
        return f"upstream-watch: nothing new after vLLM {proposal.checked_through}"
    span = _span(proposal.new_releases)
    if proposal.conflicts:
        ids = sorted({patch_id for _, patch_id, _ in proposal.conflicts})
        return f"upstream-watch: patch {', '.join(ids)} conflicts with vLLM {span}"
    retired = "".join(f"; retire {pid} (upstream in {v})" for pid, v in proposal.retire.items())
    return f"upstream-watch: check patches through vLLM {proposal.newest}{retired}"


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}–{versions[-1]}"


def body(proposal: Proposal) -> str:
    if not proposal.new_releases:
        return f"No vLLM release newer than {proposal.checked_through} on PyPI.\n"
    ids = sorted({s.id for ss in proposal.statuses.values() for s in ss})
    lines = [f"New vLLM releases since `checked_through: {proposal.checked_through}`: "
             f"{', '.join(proposal.new_releases)}.", "",
             "| release | " + " | ".join(f"`{i}`" for i in ids) + " |",
             "|---|" + "---|" * len(ids)]
    for version, statuses in proposal.statuses.items():
        by_id = {s.id: s.status for s in statuses}
        lines.append(f"| {version} | " + " | ".join(_cell(by_id.get(i, "?")) for i in ids) + " |")
    lines.append("")
    if proposal.conflicts:
        lines += ["**Conflicts: the manifest was not changed.** Refresh these patches against the "
                  "release's source, then re-run `python build.py upstream-watch`:", ""]
        lines += [f"- vLLM {v}, `{pid}`: {detail}" for v, pid, detail in proposal.conflicts]
        return "\n".join(lines) + "\n"
    lines += ["Edits to `patches/series.yaml`:", "",
              f"- `checked_through: {proposal.checked_through}` → `{proposal.newest}`"]
    lines += [f"- `{pid}`: `retired_in: {v}` (already upstream from {v})"
              for pid, v in proposal.retire.items()]
    lines += [f"- `{pid}`: `upstream.fixed_in: {v}`" for pid, v in proposal.set_fixed_in.items()]
    if proposal.recipes_behind:
        lines += ["", f"Recipes whose `vllm` range does not reach {proposal.newest} yet (check each with "
                      f"`python build.py serve --recipe R --target T --vllm {proposal.newest}`, then "
                      "extend the range in a follow-up):", ""]
        lines += [f"- `recipes/{name}.yaml`" for name in proposal.recipes_behind]
    lines += ["", f"`images/lock.yaml` re-pinned with `python build.py lock --vllm {proposal.newest}`.",
              "", "Opened by `.github/workflows/upstream-watch.yml` "
              "(`python build.py upstream-watch --write`)."]
    return "\n".join(lines) + "\n"


def _cell(status: str) -> str:
    return "**CONFLICT**" if status == "conflict" else status


# --- build.py upstream-watch ------------------------------------------------------------------

def cmd_upstream_watch(args) -> int:
    """Exit 0: nothing new, or edits proposed (written with --write); 3: a patch conflicts."""
    from forge.patch_series import load_series

    series = load_series(args.series)
    proposal = propose(series, offline=args.offline)
    if args.json:
        print(json.dumps(proposal.to_dict(), indent=1))
    else:
        print(title(proposal))
        print(body(proposal), end="")
    if args.pr_body:
        Path(args.pr_body).write_text(body(proposal))
    if args.github_output:
        with open(args.github_output, "a") as out:
            out.write(f"newest={proposal.newest or ''}\n"
                      f"changed={'true' if proposal.changes_manifest else 'false'}\n"
                      f"conflicts={'true' if proposal.conflicts else 'false'}\n"
                      f"title={title(proposal)}\n")
    if proposal.conflicts:
        raise ConflictError(_conflict_line(proposal))
    if args.write:
        apply(proposal, series)
    return 0
