"""Printing patch statuses: a table for one release, a matrix for many, or JSON for machines."""
from __future__ import annotations

import textwrap

from packaging.version import Version

from forge.json_text import dump_json
from forge.patching.vocabulary import Status
from forge.untrusted import visible
from forge.versions import Release

# Short cells keep the matrix readable at 80 columns.
SHORT = {**{s: s.value for s in Status},
         Status.ALREADY_UPSTREAM: "upstream", Status.NOT_NEEDED: "-", Status.CONFLICT: "CONFLICT",
         Status.NEEDED_NOT_CARRIED: "NOT-CARRIED"}


# A table's lines fit a terminal of this many columns (`patches --wide`: each row on one line).
WIDTH = 100


def _table(rows: list[list[str]], width: int | None = None) -> str:
    """Columns padded to their widest cell. With `width`, the last column (free text) is wrapped:
    a row longer than `width` goes on under a 4-space indent, and its rule stops at `width`.
    Every cell is shown through `visible`: a detail quotes a cache entry or git's output."""
    rows = [[visible(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    if width is not None:
        widths[-1] = max(1, min(widths[-1], width - sum(widths[:-1]) - 2 * (len(widths) - 1)))
    lines = []
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
        lines += textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False) \
            if width is not None and len(line) > width else [line]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _unchecked(version: Release | str, series) -> bool:
    return Release(version).version > Version(series.checked_through)


def _label(patch_id: str, series) -> str:
    """A candidate (series.yaml `candidate: true`) is marked wherever its status is shown."""
    return f"{patch_id}*" if series.get(patch_id).candidate else patch_id


def _as_dict(status, series) -> dict:
    return {**status.to_dict(), **({"candidate": True} if series.get(status.id).candidate else {})}


CANDIDATE_NOTE = ("*: a candidate: `build.py apply` and image builds leave it out unless asked "
                  "(`--with-candidate ID`)")


def print_release(version: str, statuses, series, as_json: bool = False,
                  wide: bool = False) -> None:
    if as_json:
        print(dump_json({"vllm": version, "series": series.digest[:12],
                          "checked_through": series.checked_through,
                          "unchecked": _unchecked(version, series),
                          "patches": [_as_dict(s, series) for s in statuses]}, indent=1))
        return
    print(f"vLLM {version}" + ("  (newer than checked_through "
                               f"{series.checked_through}: unchecked)"
                               if _unchecked(version, series) else ""))
    rows = [["id", "kind", "status", "detail"]]
    rows += [[_label(s.id, series), s.kind, s.status, s.detail] for s in statuses]
    print(_table(rows, None if wide else WIDTH))
    if any(series.get(s.id).candidate for s in statuses):
        print(CANDIDATE_NOTE)


MATRIX_LEGEND = ("applies: patch needed and fits (dependency: vLLM's own requirement admits a "
                 "version outside the constraint); upstream: already in vLLM; -: not needed; "
                 "CONFLICT: fits neither way; NOT-CARRIED: needed (the code it fixes is there, no "
                 "upstream fix) but past the patch's releases")


def print_matrix(results: dict, series, as_json: bool = False, wide: bool = False) -> None:
    if as_json:
        print(dump_json({"series": series.digest[:12], "checked_through": series.checked_through,
                          "releases": {v: {"unchecked": _unchecked(v, series),
                                           "patches": [_as_dict(s, series) for s in statuses]}
                                       for v, statuses in results.items()}}, indent=1))
        return
    ids = [p.id for p in series.patches]
    cells = {version: {s.id: SHORT[s.status] for s in statuses} for version, statuses in results.items()}
    if wide:        # a release a row, a patch a column: as wide as the series makes it
        rows = [["release", *(_label(i, series) for i in ids)]]
        rows += [[version + (" (unchecked)" if _unchecked(version, series) else ""),
                  *(cells[version].get(i, "?") for i in ids)] for version in cells]
        print(_table(rows))
        print(MATRIX_LEGEND)
    else:           # a patch a row, the releases in blocks of columns that fit WIDTH
        print("\n\n".join(_table(block) for block in _matrix_blocks(cells, ids, series)))
        print("\n".join(textwrap.wrap(MATRIX_LEGEND, WIDTH)))
        if any(_unchecked(v, series) for v in cells):
            print(f"?: newer than the series' checked_through {series.checked_through}: unchecked")
    if any(p.candidate for p in series.patches):
        print(CANDIDATE_NOTE)


def _matrix_blocks(cells: dict, ids: list[str], series) -> list[list[list[str]]]:
    """The transposed matrix (patches down, releases across) cut into tables of at most WIDTH
    columns, each starting with the patch column."""
    labels = {v: v + ("?" if _unchecked(v, series) else "") for v in cells}
    first = max(len("patch"), *(len(_label(i, series)) for i in ids))
    blocks: list[list[str]] = []
    current: list[str] = []
    used = first
    for version in cells:
        column = max(len(labels[version]), *(len(c) for c in cells[version].values())) + 2
        if current and used + column > WIDTH:
            blocks.append(current)
            current, used = [], first
        current.append(version)
        used += column
    blocks.append(current)
    return [[["patch", *(labels[v] for v in block)],
             *([_label(i, series), *(cells[v].get(i, "?") for v in block)] for i in ids)]
            for block in blocks]
