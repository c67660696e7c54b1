"""The one error type users see: a single line naming what is wrong and where."""
from __future__ import annotations

import errno
import os


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
