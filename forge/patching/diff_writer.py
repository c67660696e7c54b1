"""Writing a unified diff between a release's pristine tree and an edited copy of it, in the form
the series carries (a/ and b/ prefixes, -p1, paths under vllm/) and the strict engine
(forge.patching.diffs) accepts: each file's diff is checked to rebuild the edited file exactly
from the pristine one, and where a hunk's old lines occur more than once in the file it is
written again with more context until every hunk is unique."""
from __future__ import annotations

import difflib
import os
from pathlib import Path

from forge.errors import ForgeError
from forge.files import SOURCE, read_if_present
from forge.patching import diffs

PACKAGE = "vllm"
# Made by running, patching or editing the code, never part of a change: left out of the diff.
IGNORED_DIRS = {"__pycache__"}
IGNORED_SUFFIXES = (".pyc", ".orig", ".rej", "~", ".swp")
CONTEXTS = (3, 6, 12, 24, 48, 96)


def _files(root: Path) -> set[str]:
    """The regular files under root/vllm/, no link followed: a symbolic link (to a file or a
    folder, anywhere in the tree) is refused, as a diff holds regular files only and reading
    through one would put whatever it points to (outside the tree) into the patch."""
    found = set()
    for folder, dirs, names in os.walk(root / PACKAGE):     # os.walk follows no folder link
        for name in (*dirs, *names):
            path = Path(folder) / name
            if path.is_symlink():
                raise ForgeError(f"{path}: a symbolic link; a source patch holds regular files "
                                 "only (nothing is read through a link)")
        dirs[:] = [d for d in dirs if d not in IGNORED_DIRS]
        for name in names:
            path = Path(folder) / name
            if not name.endswith(IGNORED_SUFFIXES) and path.is_file():
                found.add(path.relative_to(root).as_posix())
    return found


def read_or_none(path: Path) -> bytes | None:
    """A file's bytes, None where there is none; a link is refused, not followed."""
    if path.is_symlink():
        raise ForgeError(f"{path}: a symbolic link; a source patch holds regular files only "
                         "(nothing is read through a link)")
    return read_if_present(path, SOURCE)


def changed_files(pristine: Path, edited: Path) -> list[str]:
    """Paths (relative to the trees, e.g. vllm/x.py) that differ, were added or were deleted."""
    names = _files(pristine) | _files(edited)
    return sorted(rel for rel in names if read_or_none(pristine / rel) != read_or_none(edited / rel))


def tree_diff(pristine: Path, edited: Path) -> bytes:
    """The diff taking `pristine` to `edited` (both hold vllm/); an error if nothing changed."""
    changed = changed_files(pristine, edited)
    if not changed:
        raise ForgeError(f"{edited / PACKAGE}: no file differs from the release; edit one first")
    return b"".join(file_diff(rel, read_or_none(pristine / rel), read_or_none(edited / rel))
                    for rel in changed)


def file_diff(rel: str, old: bytes | None, new: bytes | None) -> bytes:
    """One file's diff, with the least context (from CONTEXTS) that the strict engine accepts."""
    for content in (old, new):
        if content is not None and b"\0" in content:
            raise ForgeError(f"{rel}: a binary file; a source patch changes text only")
    for context in CONTEXTS:
        text = _unified(rel, old, new, context)
        try:
            (parsed,) = diffs.parse_diff(text, rel)
            if diffs.plan_file(Path(rel), parsed, old) == new:
                return text
        except diffs.HunkError:
            continue        # a hunk's old lines occur twice: more context makes it unique
    raise ForgeError(f"{rel}: no diff of this change fits the file exactly once, even with "
                     f"{CONTEXTS[-1]} lines of context")


def _unified(rel: str, old: bytes | None, new: bytes | None, context: int) -> bytes:
    old_name = f"a/{rel}" if old is not None else diffs.DEV_NULL
    new_name = f"b/{rel}" if new is not None else diffs.DEV_NULL
    lines = difflib.diff_bytes(difflib.unified_diff, _lines(old), _lines(new),
                               old_name.encode(), new_name.encode(), n=context)
    out = []
    for line in lines:
        # difflib passes a last line without its newline through as it is; diff marks it.
        out.append(line if line.endswith(b"\n") else line + b"\n" + diffs.NO_NEWLINE + b"\n")
    return b"".join(out)


def _lines(content: bytes | None) -> list[bytes]:
    """Split on b"\\n" only, as the engine does (bytes.splitlines would also split on \\r)."""
    if not content:
        return []
    parts = content.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
