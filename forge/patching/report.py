"""Printing patch statuses: a table for one release, a matrix for many, or JSON for machines."""
from __future__ import annotations

import json

from packaging.version import Version

from forge.patching.vocabulary import Status
from forge.versions import Release

# Short cells keep the matrix readable at 80 columns.
SHORT = {**{s: s.value for s in Status},
         Status.ALREADY_UPSTREAM: "upstream", Status.NOT_NEEDED: "-", Status.CONFLICT: "CONFLICT"}


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _unchecked(version: Release | str, series) -> bool:
    return Release(version).version > Version(series.checked_through)


def print_release(version: str, statuses, series, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"vllm": version, "series": series.digest[:12],
                          "checked_through": series.checked_through,
                          "unchecked": _unchecked(version, series),
                          "patches": [s.to_dict() for s in statuses]}, indent=1))
        return
    print(f"vLLM {version}" + ("  (newer than checked_through "
                               f"{series.checked_through}: unchecked)"
                               if _unchecked(version, series) else ""))
    rows = [["id", "kind", "status", "detail"]]
    rows += [[s.id, s.kind, s.status, s.detail] for s in statuses]
    print(_table(rows))


def print_matrix(results: dict, series, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"series": series.digest[:12], "checked_through": series.checked_through,
                          "releases": {v: {"unchecked": _unchecked(v, series),
                                           "patches": [s.to_dict() for s in statuses]}
                                       for v, statuses in results.items()}}, indent=1))
        return
    ids = [p.id for p in series.patches]
    rows = [["release", *ids]]
    for version, statuses in results.items():
        by_id = {s.id: SHORT[s.status] for s in statuses}
        label = version + (" (unchecked)" if _unchecked(version, series) else "")
        rows.append([label, *(by_id.get(i, "?") for i in ids)])
    print(_table(rows))
    print("applies: patch needed and fits (dependency: vLLM's own requirement admits a version "
          "outside the constraint); upstream: already in vLLM; -: not needed; "
          "CONFLICT: fits neither way")
