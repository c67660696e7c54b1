"""A small, strict unified-diff engine in pure Python (no git or patch binary needed).

Runs the same in a bare image (python3 only) as on a developer machine. Strict in the spirit of
eugr/spark-vllm-docker: each hunk's old side (context + removed lines) must match EXACTLY ONE
place in the whole file, whatever line number the hunk states. No fuzz, no offsets guessed from
nearby text: zero matches or several matches is an error naming the file, the hunk and the line.
Reverse application swaps the old and new sides.

Files are handled as bytes split on b"\\n" (each line keeps its terminator), so applying and then
reversing restores a file byte for byte, CRLF and odd encodings included.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from forge.errors import ForgeError
from forge.files import SOURCE, read_bytes, read_if_present

HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = b"\\ No newline at end of file"
DEV_NULL = "/dev/null"


class DiffFormatError(ForgeError):
    """The diff file itself is malformed."""


class HunkError(ForgeError):
    """A hunk does not fit the file it targets (zero or several matches, or a missing file)."""

    def __init__(self, path: str, hunk: int | None, line: int | None, problem: str):
        self.path, self.hunk, self.line, self.problem = path, hunk, line, problem
        where = path if hunk is None else f"{path}: hunk {hunk} (line {line})"
        super().__init__(f"{where}: {problem}")


@dataclass
class Hunk:
    number: int          # 1-based position in its file section, for messages
    old_start: int
    new_start: int
    old_lines: list[bytes] = field(default_factory=list)   # context + removed, with terminators
    new_lines: list[bytes] = field(default_factory=list)   # context + added, with terminators

    def reversed(self) -> Hunk:
        return Hunk(self.number, self.new_start, self.old_start, self.new_lines, self.old_lines)


@dataclass
class FileDiff:
    old_path: str | None   # None for a file the diff creates
    new_path: str | None   # None for a file the diff deletes
    hunks: list[Hunk]

    @property
    def path(self) -> str:
        return self.new_path or self.old_path  # type: ignore[return-value]

    def reversed(self) -> FileDiff:
        return FileDiff(self.new_path, self.old_path, [h.reversed() for h in self.hunks])


def _split_lines(data: bytes) -> list[bytes]:
    """Split on b"\\n" only (not on \\r or form feeds, unlike str.splitlines), keeping ends."""
    lines = data.split(b"\n")
    result = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        result.append(lines[-1])   # last line without a newline
    return result


def _strip_prefix(raw: bytes, source: str, line_no: int) -> str | None:
    name = raw.split(b"\t", 1)[0].strip().decode("utf-8", "surrogateescape")
    if name == DEV_NULL:
        return None
    # -p1, as git writes diffs: a/... and b/...
    if not (name.startswith("a/") or name.startswith("b/")):
        raise DiffFormatError(f"{source}: line {line_no}: file name {name!r} lacks the a/ or b/ prefix")
    return _inside_tree(name[2:], name, source, line_no)


def _inside_tree(relative: str, name: str, source: str, line_no: int) -> str:
    """`relative` in its normal form, refused unless it names a file below the tree's root: a
    diff is applied under a site-packages directory, and `b/../x` or `b//etc/x` would write
    outside it."""
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or ".." in path.parts or not path.parts \
            or "\\" in relative or "\0" in relative:
        raise DiffFormatError(f"{source}: line {line_no}: file name {name!r} is not a relative "
                              "path inside the tree (no leading /, no .., no backslash)")
    return path.as_posix()


def parse_diff(data: bytes, source: str) -> list[FileDiff]:
    """Parse a unified diff. Text before the first `--- ` line (our provenance header) is ignored."""
    lines = _split_lines(data)
    files: list[FileDiff] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith(b"--- ") and i + 1 < len(lines)
                and lines[i + 1].startswith(b"+++ ")):
            i += 1
            continue
        old = _strip_prefix(lines[i][4:], source, i + 1)
        new = _strip_prefix(lines[i + 1][4:], source, i + 2)
        if old is None and new is None:
            raise DiffFormatError(f"{source}: line {i + 1}: both sides are /dev/null")
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and lines[i].startswith(b"@@"):
            hunk, i = _parse_hunk(lines, i, source, len(hunks) + 1)
            hunks.append(hunk)
        if not hunks:
            raise DiffFormatError(f"{source}: line {i}: file section for {new or old} has no hunks")
        files.append(FileDiff(old, new, hunks))
    if not files:
        raise DiffFormatError(f"{source}: no file sections (--- a/... +++ b/...) found")
    return files


def _parse_hunk(lines: list[bytes], i: int, source: str, number: int) -> tuple[Hunk, int]:
    match = HUNK_HEADER.match(lines[i])
    if not match:
        raise DiffFormatError(f"{source}: line {i + 1}: malformed hunk header")
    old_count = int(match[2]) if match[2] is not None else 1
    new_count = int(match[4]) if match[4] is not None else 1
    hunk = Hunk(number, int(match[1]), int(match[3]))
    header_line = i + 1
    i += 1
    while len(hunk.old_lines) < old_count or len(hunk.new_lines) < new_count:
        if i >= len(lines):
            raise DiffFormatError(f"{source}: hunk at line {header_line}: ends early "
                                  f"(expected -{old_count} +{new_count} lines)")
        line = lines[i]
        tag, body = line[:1], line[1:]
        if line in (b"\n", b""):          # some editors strip the space of empty context lines
            tag, body = b" ", b"\n"
        sides = {b" ": (hunk.old_lines, hunk.new_lines), b"-": (hunk.old_lines,),
                 b"+": (hunk.new_lines,)}.get(tag)
        if sides is None:
            raise DiffFormatError(f"{source}: line {i + 1}: unexpected line in hunk "
                                  f"starting at line {header_line}")
        for side in sides:
            side.append(body)
        i += 1
        if i < len(lines) and lines[i].rstrip(b"\n") == NO_NEWLINE:
            for side in sides:
                side[-1] = side[-1].rstrip(b"\n")
            i += 1
    if len(hunk.old_lines) != old_count or len(hunk.new_lines) != new_count:
        raise DiffFormatError(f"{source}: hunk at line {header_line}: line counts do not match "
                              f"its header (-{old_count} +{new_count})")
    return hunk, i


def load_diff(path: Path) -> list[FileDiff]:
    return parse_diff(read_bytes(path, SOURCE), str(path))


def find_matches(file_lines: list[bytes], needle: list[bytes]) -> list[int]:
    """0-based starts of every place where `needle` occurs as consecutive lines."""
    if not needle:
        return []
    first, size = needle[0], len(needle)
    return [start for start in range(len(file_lines) - size + 1)
            if file_lines[start] == first and file_lines[start:start + size] == needle]


def apply_to_bytes(original: bytes, diff: FileDiff) -> bytes:
    """The file's new content. Raises HunkError when any hunk does not match exactly once."""
    file_lines = _split_lines(original)
    placed: list[tuple[int, Hunk]] = []
    for hunk in diff.hunks:
        starts = find_matches(file_lines, hunk.old_lines)
        if not hunk.old_lines:
            raise HunkError(diff.path, hunk.number, hunk.old_start,
                            "hunk has no old lines to locate it (nothing to anchor on)")
        if not starts:
            raise HunkError(diff.path, hunk.number, hunk.old_start,
                            "its old lines match nowhere in the file")
        if len(starts) > 1:
            where = ", ".join(str(s + 1) for s in starts)
            raise HunkError(diff.path, hunk.number, hunk.old_start,
                            f"its old lines match {len(starts)} places (lines {where})")
        placed.append((starts[0], hunk))
    placed.sort(key=lambda item: item[0])
    for (start_a, hunk_a), (start_b, hunk_b) in zip(placed, placed[1:]):
        if start_a + len(hunk_a.old_lines) > start_b:
            raise HunkError(diff.path, hunk_b.number, start_b + 1,
                            f"overlaps hunk {hunk_a.number}")
    result: list[bytes] = []
    cursor = 0
    for start, hunk in placed:
        result.extend(file_lines[cursor:start])
        result.extend(hunk.new_lines)
        cursor = start + len(hunk.old_lines)
    result.extend(file_lines[cursor:])
    return b"".join(result)


def plan_file(root: Path, diff: FileDiff, current: bytes | None) -> bytes | None:
    """New content of one file (None: delete it), given its `current` content (None: absent)."""
    if diff.old_path is None:       # the diff creates the file
        if current is not None:
            raise HunkError(diff.path, None, None, "the diff creates this file but it exists")
        return b"".join(diff.hunks[0].new_lines)
    if current is None:
        raise HunkError(diff.path, None, None, f"file not found under {root}")
    if diff.new_path is None:       # the diff deletes the file
        if current != b"".join(diff.hunks[0].old_lines):
            raise HunkError(diff.path, 1, 1, "the file to delete differs from the diff's copy")
        return None
    return apply_to_bytes(current, diff)


def plan_diff(root: Path, diffs: list[FileDiff], reverse: bool = False,
              contents: dict[str, bytes | None] | None = None) -> dict[str, bytes | None]:
    """Check every hunk of every file first; return {relative path: new bytes or None (delete)}.

    `contents` overrides what is on disk (used to stack several patches in memory).
    Nothing is written. Raises HunkError naming the first file and hunk that does not fit.
    """
    contents = contents or {}
    planned: dict[str, bytes | None] = {}
    for diff in diffs:
        if reverse:
            diff = diff.reversed()
        current = _read(root, diff.old_path or diff.path, contents, planned)
        planned[diff.path] = plan_file(root, diff, current)
        if diff.old_path and diff.new_path and diff.old_path != diff.new_path:
            planned[diff.old_path] = None   # a rename: the old name goes
    return planned


def _read(root: Path, rel: str, contents: dict, planned: dict) -> bytes | None:
    if rel in planned:
        return planned[rel]
    if rel in contents:
        return contents[rel]
    return read_if_present(root / rel, SOURCE)


def target_paths(diffs: list[FileDiff]) -> list[str]:
    """Every file a diff reads or writes (relative to the tree root)."""
    seen: list[str] = []
    for diff in diffs:
        for rel in (diff.old_path, diff.new_path):
            if rel and rel not in seen:
                seen.append(rel)
    return seen
