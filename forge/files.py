"""Files written whole or not at all: a temp file beside the target, then an atomic rename; the
check every output flag gets before a command writes anything; and one maker at a time for a
cache entry that several processes may want at once."""
from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from forge.errors import ForgeError


def write_text_atomically(path: Path | str, text: str,
                          check: Callable[[Path], object] | None = None) -> Path:
    """Replace `path` with `text`. `check(temp_path)` may raise to refuse the new content, which
    then never reaches `path` (the temp file sits in the same directory, so relative paths the
    content names resolve as they will for the real file)."""
    return write_bytes_atomically(path, text.encode(), check)


def write_bytes_atomically(path: Path | str, data: bytes,
                           check: Callable[[Path], object] | None = None) -> Path:
    """write_text_atomically for bytes (diffs are compared and hashed byte for byte)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(data)
    try:
        if check is not None:
            check(Path(tmp.name))
        os.replace(tmp.name, path)
    except BaseException:
        os.unlink(tmp.name)
        raise
    return path


def check_output_file(path: Path | str, flag: str) -> Path:
    """Refuse, before a command writes or moves anything, an output file it could not write:
    a directory in its place, or a folder that is missing. Checked up front so that a command
    with several effects (publish: the index, then the step outputs) never stops half way."""
    path = Path(path)
    if path.is_dir():
        raise ForgeError(f"{flag} {path}: is a directory, not a file")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a directory" if folder.exists() else "does not exist"
        raise ForgeError(f"{flag} {path}: the folder {folder} {what}")
    return path


def check_output_dir(path: Path | str, flag: str) -> Path:
    """Refuse an output directory that cannot be made: a file in its place or above it."""
    path = Path(path)
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                where = "" if existing == path else f" ({existing} is a file)"
                raise ForgeError(f"{flag} {path}: is not a directory{where}")
            break
    return path


@contextmanager
def one_maker(entry: Path, locks: Path) -> Iterator[None]:
    """Hold an exclusive lock for making cache entry `entry` (a file or directory): a second process
    that wants the same entry waits here, then finds it made, instead of downloading or building
    it a second time beside the first; makers of other entries go on. The lock file lives in
    `locks` (`<folder>-<name>.lock`), never among the entries, and stays there: removing it
    would let a third process lock a fresh file while the second still holds the old one."""
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{entry.parent.name}-{entry.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
