"""Extracting tar archives safely on every Python the project supports, within bounds.

tarfile's extraction filters (`filter="data"`) exist from Python 3.11.4 / 3.10.12; Debian 12's own
python3 is 3.11.2. There the same rule is applied here: regular files and directories only, each
inside the destination, without setuid or group/other write bits.
"""
from __future__ import annotations

import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge.errors import ForgeError

HAS_DATA_FILTER = hasattr(tarfile, "data_filter")
# What a damaged or hostile archive raises as it is read: not gzip, cut short, a bad header.
BROKEN = (tarfile.TarError, EOFError, zlib.error)


@dataclass(frozen=True)
class Bounds:
    """The most an archive may hold, checked from each member's header before its bytes are
    read: a gzip bomb (1.5 MB of zeros that decompress to 1.5 GB) is refused at its header."""
    size: int            # bytes of all members together, as their headers declare them
    members: int
    depth: int           # folders in a member's name
    name: int            # characters in a member's name


def bounded(archive: tarfile.TarFile, bounds: Bounds, where: str) -> Iterator[tarfile.TarInfo]:
    """The archive's members as read, each checked against `bounds` (ForgeError naming `where`)."""
    total = count = 0
    for member in archive:
        count += 1
        total += max(member.size, 0)
        if count > bounds.members:
            raise ForgeError(f"{where}: more than {bounds.members} members; not a real sdist")
        if total > bounds.size:
            raise ForgeError(f"{where}: its members decompress to more than {bounds.size >> 20} MiB "
                             f"(at {member.name[:200]!r}); refused as a decompression bomb")
        if len(member.name) > bounds.name or member.name.count("/") > bounds.depth:
            raise ForgeError(f"{where}: a member's name is {len(member.name)} characters, "
                             f"{member.name.count('/')} folders deep (at most {bounds.name} and "
                             f"{bounds.depth}): {member.name[:120]!r}...")
        yield member


def extract_stream(archive: tarfile.TarFile, destination: Path, members: Iterable[tarfile.TarInfo]) -> None:
    """Extract `members` as they come from an archive opened as a stream (mode "r|gz"): read and
    decompressed once, where random access reads a gzip archive twice (its index, then each
    member again from the start). Each member is checked as it comes; on a refusal what came
    before it is on disk, so `destination` is a fresh staging folder its caller removes.

    The rule is the data filter's, checked by name: in a folder holding only the plain files and
    folders let in before, no link can lead out, so a relative name without `..` stays inside,
    and the data filter's realpath of each member (an lstat per path component, a fifth of the
    time a vLLM tree takes) is not needed."""
    if HAS_DATA_FILTER:
        archive.extractall(destination, members=members,
                           filter=lambda member, _: _plain_member(archive, member))
        return
    archive.extractall(destination, members=(_plain_member(archive, m) for m in members))


def _plain_member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> tarfile.TarInfo:
    """`member` as the data filter passes a plain file or folder with a relative name without
    `..`, or ForgeError naming it: no setuid, sticky or group/other write bits, owner read and
    write on files, no owner taken from the archive."""
    if not (member.isfile() or member.isdir()) or member.name.startswith("/") \
            or ".." in member.name.split("/"):
        raise ForgeError(f"{archive.name!s}: refusing to extract {member.name!r}: not a plain "
                         "file or directory with a relative name inside the destination")
    mode = member.mode & 0o755
    if member.isfile():
        mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
    if not HAS_DATA_FILTER:       # an older tarfile applies what it is given, owner included
        member.mode = mode
        return member
    # None: not applied (PEP 706), so a folder keeps extractall's mode and nothing is chowned
    # (typeshed's stub allows no None, hence the untyped mapping)
    applied: dict[str, Any] = {"mode": mode if member.isfile() else None, "uid": None, "gid": None,
                               "uname": None, "gname": None}
    return member.replace(deep=False, **applied)


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
