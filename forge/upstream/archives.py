"""Extracting tar archives safely on every Python the project supports.

tarfile's extraction filters (`filter="data"`) exist from Python 3.11.4 / 3.10.12; Debian 12's own
python3 is 3.11.2. There the same rule is applied here: regular files and directories only, each
inside the destination, without setuid or group/other write bits.
"""
from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from forge.errors import ForgeError

HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def extract_stream(archive: tarfile.TarFile, destination: Path, members: Iterable[tarfile.TarInfo]) -> None:
    """Extract `members` as they come from an archive opened as a stream (mode "r|gz"): read and
    decompressed once, where random access reads a gzip archive twice (its index, then each
    member again from the start). Each member is checked as it comes; on a refusal what came
    before it is on disk, so the destination is a staging folder its caller removes."""
    if HAS_DATA_FILTER:
        archive.extractall(destination, members=members, filter="data")
        return
    root = Path(destination).resolve()
    archive.extractall(destination, members=(_checked(archive, root, m) for m in members))


def extract_safely(archive: tarfile.TarFile, destination: Path, members=None,
                   on_member: Callable[[tarfile.TarInfo], None] | None = None) -> None:
    """Extract `members` (default: all); `on_member` is called after each one (for progress)."""
    members = list(archive.getmembers() if members is None else members)
    if HAS_DATA_FILTER:
        archive.extractall(destination, members=_reporting(members, on_member), filter="data")
        return
    root = Path(destination).resolve()
    members = [_checked(archive, root, member) for member in members]   # all before any is written
    archive.extractall(destination, members=_reporting(members, on_member))


def _checked(archive: tarfile.TarFile, root: Path, member: tarfile.TarInfo) -> tarfile.TarInfo:
    """`member` as the data filter would pass it, or ForgeError naming it."""
    inside = (root / member.name).resolve().is_relative_to(root)
    if not (member.isfile() or member.isdir()) or not inside:
        raise ForgeError(f"{archive.name!s}: refusing to extract {member.name!r}: not a plain "
                         f"file or directory inside {root}")
    member.mode &= 0o755
    return member


def _reporting(members: list, on_member) -> Iterator[tarfile.TarInfo]:
    # extractall asks for the next member once it has extracted this one.
    for member in members:
        yield member
        if on_member:
            on_member(member)
