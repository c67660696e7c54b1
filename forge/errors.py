"""The one error type users see: a single line naming what is wrong and where; and how a script
stopped by Ctrl-C says so."""
from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable


class ForgeError(Exception):
    """A user-facing failure. build.py prints `error: <message>` and exits non-zero.

    Messages are one line and name the file and field (or release, target, path) at fault.
    """

    exit_code = 2

    def __str__(self) -> str:
        # Guarantee the one-line promise even when a message is built from multi-line text.
        return " ".join(super().__str__().split())


class ConflictError(ForgeError):
    """A patch that should apply to a release fits neither forward nor reverse."""

    exit_code = 3


class FileError(ForgeError):
    """A file that cannot be read or written as asked: not a regular file, over its size cap,
    or a fault of the file system (permission, read-only, full, a directory in the way)."""


# What to do about each fault, by errno; `{dir}` is the folder the file sits in.
_REMEDIES = {
    errno.EACCES: "permission denied ({who}); give this user access to {dir} or run as its owner",
    errno.EPERM: "operation not permitted ({who}); give this user access to {dir} or run as its owner",
    errno.EROFS: "the file system is read-only; work in a writable copy or remount it read-write",
    errno.ENOSPC: "no space left on the device; free some space and run again",
    errno.EDQUOT: "disk quota exceeded; free some space and run again",
    errno.EISDIR: "is a directory; name a file",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ENOENT: "no such file or directory",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many levels of symbolic links",
    errno.EFBIG: "the file is too large for the file system",
}


def file_error(path: object, exc: OSError, doing: str) -> FileError:
    """One line for an OSError on `path` while `doing` ("reading", "writing", ...): the path,
    what happened and what to do; the original stays chained for debugging."""
    remedy = _REMEDIES.get(exc.errno or 0, exc.strerror or str(exc))
    folder = os.path.dirname(os.path.abspath(str(path))) or "/"
    who = f"uid {os.geteuid()}"
    return FileError(f"{path}: cannot {doing}: {remedy.format(dir=folder, who=who)}")


# The exit status of a program stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def exit_on_interrupt(main: Callable[[], int | None]) -> int:
    """Run a script's `main()` and return its exit status; Ctrl-C is one line on stderr and exit
    130, not a traceback. The process ends there and then (os._exit, after flushing): a thread
    still waiting on a server or an engine cannot hold the exit. Whatever main writes must be
    atomic for this to leave nothing half-written (forge.files)."""
    try:
        return main() or 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(INTERRUPTED)
