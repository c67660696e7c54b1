"""Extracting tar archives safely on every Python the project supports.

tarfile's extraction filters (`filter="data"`) exist from Python 3.11.4 / 3.10.12; Debian 12's own
python3 is 3.11.2. There the same rule is applied here: regular files and directories only, each
inside the destination, without setuid or group/other write bits.
"""
from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

from forge.errors import ForgeError

HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def extract_safely(archive: tarfile.TarFile, destination: Path, members=None,
                   on_member: Callable[[tarfile.TarInfo], None] | None = None) -> None:
    """Extract `members` (default: all); `on_member` is called after each one (for progress)."""
    members = list(archive.getmembers() if members is None else members)
    if HAS_DATA_FILTER:
        archive.extractall(destination, members=_reporting(members, on_member), filter="data")
        return
    root = Path(destination).resolve()
    for member in members:
        inside = (root / member.name).resolve().is_relative_to(root)
        if not (member.isfile() or member.isdir()) or not inside:
            raise ForgeError(f"{archive.name!s}: refusing to extract {member.name!r}: not a plain "
                             f"file or directory inside {root}")
        member.mode &= 0o755
    archive.extractall(destination, members=_reporting(members, on_member))


def _reporting(members: list, on_member) -> Iterator[tarfile.TarInfo]:
    # extractall asks for the next member once it has extracted this one.
    for member in members:
        yield member
        if on_member:
            on_member(member)
