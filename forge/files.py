"""The one way forge reads and writes files.

Reads take regular files only (a FIFO would block forever, /dev/zero never ends, a directory is
no file) and at most a cap per kind of file, so no file can run a command out of memory: each
read asks for cap + 1 bytes and refuses a file that delivers more.

Writes are whole or not at all: a temp file beside the target (in the directory of a symlink's
target: the link stays a link), fsynced, renamed over the target, the directory fsynced; the
file keeps its mode (a new one gets 0666 less the umask, as `open` would); the temp file is
removed on any failure. Output flags are checked before a command's first effect. A cache
entry that several processes may want at once has one maker at a time (one_maker).

Every OSError becomes a one-line FileError (forge.errors.file_error) naming the path and what to
do: permission denied, read-only file system, disk full, a directory in the way.
"""
from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from forge.errors import FileError, ForgeError, file_error

MiB = 1 << 20


@dataclass(frozen=True)
class FileKind:
    """What a file is (for the messages) and the most bytes forge reads of one."""
    what: str
    cap: int


# The caps, by kind: far above any real file of the kind (the largest in the repository or a
# run is named beside each), far below what would strain a 512 MB process.
DATA_YAML = FileKind("data YAML file", 1 * MiB)        # patches/series.yaml: 25 KB
LOCK = FileKind("lock file", 1 * MiB)                  # images/lock.yaml: a few KB
INDEX = FileKind("index", 8 * MiB)                     # images/published.json, the release index
REPORT = FileKind("report", 16 * MiB)                  # a verify report or result: ~110 KB
SERVER_LOG = FileKind("server log", 64 * MiB)          # read from its end (read_tail)
SOURCE = FileKind("source file", 32 * MiB)             # a vLLM file a patch reads, a diff
METADATA = FileKind("package metadata file", 16 * MiB)  # a dist-info's RECORD, METADATA
CACHE = FileKind("cache file", 64 * MiB)               # PyPI JSON and other cached answers
# A file of a dependency apply replaces (a pinned transformers): wheels may carry large shared
# libraries, which the apply must save byte for byte to revert them.
PACKAGE_FILE = FileKind("installed package file", 1024 * MiB)
# A profiler's Chrome trace (verify/profile.py): ~100k events per 128 tokens, tens of MB.
TRACE = FileKind("profiler trace", 512 * MiB)

KINDS = (DATA_YAML, LOCK, INDEX, REPORT, SERVER_LOG, SOURCE, METADATA, CACHE, PACKAGE_FILE,
         TRACE)


# --- reads -------------------------------------------------------------------------------------

def _describe(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _refuse_irregular(path: Path | str, mode: int, kind: FileKind) -> None:
    if not stat.S_ISREG(mode):
        raise FileError(f"{path}: is {_describe(mode)}, not a regular file; {_a(kind.what)} "
                        "must be a regular file")


def _open_regular(path: Path | str, kind: FileKind) -> int:
    """A read-only descriptor of `path`, refused unless it is a regular file. O_NONBLOCK: opening
    a FIFO with no writer would otherwise wait forever before fstat could tell."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise _dangling_link(path) or file_error(path, exc, "read it") from exc
    except OSError as exc:
        raise file_error(path, exc, "read it") from exc
    try:
        _refuse_irregular(path, os.fstat(fd).st_mode, kind)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _dangling_link(path: Path | str) -> FileError | None:
    """The fault where `path` is a symbolic link to nothing ("no such file" would hide the link)."""
    try:
        target = os.readlink(path)
    except OSError:
        return None
    return FileError(f"{path}: cannot read it: a symbolic link to {target}, which does not exist")


def is_present(path: Path | str) -> bool:
    """Whether anything is at `path`, a dangling link included (a link to nothing is a fault for
    the reader to name, not an absence); a name the OS refuses (a NUL, too long) is nothing."""
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


def _read_upto(fd: int, limit: int, path: Path | str) -> bytes:
    chunks, size = [], 0
    try:
        while size < limit:
            chunk = os.read(fd, min(limit - size, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise file_error(path, exc, "read it") from exc
    return b"".join(chunks)


def _a(what: str) -> str:
    return f"an {what}" if what[0] in "aeiou" else f"a {what}"


def _cap_text(cap: int) -> str:
    return f"{cap // MiB} MiB" if cap >= MiB else f"{cap} bytes"


def read_bytes(path: Path | str, kind: FileKind) -> bytes:
    """The whole of a regular file of at most `kind.cap` bytes; FileError otherwise."""
    fd = _open_regular(path, kind)
    try:
        data = _read_upto(fd, kind.cap + 1, path)
    finally:
        os.close(fd)
    _refuse_over_cap(path, data, kind)
    return data


def _refuse_over_cap(path: Path | str, data: bytes, kind: FileKind) -> None:
    if len(data) > kind.cap:
        raise FileError(f"{path}: larger than the {_cap_text(kind.cap)} cap for {_a(kind.what)}; "
                        "is it the right file?")


def read_text(path: Path | str, kind: FileKind, errors: str = "strict") -> str:
    """read_bytes decoded as UTF-8; with errors="strict" a non-UTF-8 byte is a one-line error
    naming the line (the project's text files are UTF-8)."""
    data = read_bytes(path, kind)
    if errors != "strict":
        return data.decode("utf-8", errors)
    return decode_utf8(data, str(path))


def decode_utf8(data: bytes, source: str) -> str:
    """UTF-8 or a one-line error naming the line and byte (never the locale's encoding)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileError(f"{source}: line {line}: not UTF-8 text (byte "
                        f"0x{data[exc.start]:02x}); save the file as UTF-8") from exc


def read_tail(path: Path | str, kind: FileKind = SERVER_LOG) -> bytes:
    """The last `kind.cap` bytes of a regular file (a log: its end says why a run stopped)."""
    fd = _open_regular(path, kind)
    try:
        size = os.fstat(fd).st_size
        if size > kind.cap:
            os.lseek(fd, size - kind.cap, os.SEEK_SET)
        return _read_upto(fd, kind.cap, path)
    finally:
        os.close(fd)


def regular_or_absent(path: Path | str, kind: FileKind) -> bool:
    """True for a regular file, False for nothing there; FileError for anything else (a
    directory or FIFO where a file should be is a fault, not an absence)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise file_error(path, exc, "read it") from exc
    _refuse_irregular(path, mode, kind)
    return True


def read_if_present(path: Path | str, kind: FileKind) -> bytes | None:
    """The file's bytes, or None when there is none (a dangling link included, as for
    regular_or_absent); FileError when it is no regular file. Opened at once, without a stat
    first: apply reads thousands of files this way."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise file_error(path, exc, "read it") from exc
    try:
        _refuse_irregular(path, os.fstat(fd).st_mode, kind)
        data = _read_upto(fd, kind.cap + 1, path)
    finally:
        os.close(fd)
    _refuse_over_cap(path, data, kind)
    return data


# --- listings (text paths: over thousands of files, a Path per file is the cost) -------------

# What pathlib's is_file and is_dir take for "nothing there" (any other error is raised).
_NOTHING_THERE = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def mode_of(path: str, follow_symlinks: bool = True) -> int:
    """st_mode of `path`; 0 where pathlib finds nothing (Path.is_file and is_dir say False)."""
    try:
        return os.stat(path, follow_symlinks=follow_symlinks).st_mode
    except OSError as exc:
        if exc.errno not in _NOTHING_THERE:
            raise
        return 0
    except ValueError:      # a NUL in the name
        return 0


def files_under(root: Path | str) -> list[str]:
    """The files under `root` (links to files included), as '/'-separated paths relative to it,
    in the order sorted(Path(root).rglob("*")) gives (component by component, which is a walk in
    name order). As rglob: a link to a directory is not followed, a directory that cannot be
    listed is passed over."""
    found: list[str] = []
    if stat.S_ISDIR(mode_of(os.fspath(root))):
        _add_files(os.fspath(root), "", found)
    return found


def _add_files(folder: str, prefix: str, found: list[str]) -> None:
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except PermissionError:
        return
    for entry in entries:
        if entry.is_symlink():      # a file through the link counts, as for Path.is_file
            if stat.S_ISREG(mode_of(entry.path)):
                found.append(prefix + entry.name)
        elif entry.is_dir():
            _add_files(entry.path, f"{prefix}{entry.name}/", found)
        elif entry.is_file():
            found.append(prefix + entry.name)


# --- writes ------------------------------------------------------------------------------------

def write_text_atomically(path: Path | str, text: str,
                          check: Callable[[Path], object] | None = None) -> Path:
    """Replace `path` with `text`. `check(temp_path)` may raise to refuse the new content, which
    then never reaches `path` (the temp file sits in the same directory, so relative paths the
    content names resolve as they will for the real file)."""
    return write_bytes_atomically(path, text.encode(), check)


def write_bytes_atomically(path: Path | str, data: bytes,
                           check: Callable[[Path], object] | None = None) -> Path:
    """write_text_atomically for bytes (diffs are compared and hashed byte for byte). Writes
    through a symlink to its target; returns `path` as given."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = _existing(target)
    except OSError as exc:
        raise file_error(target, exc, "write it") from exc
    temp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    try:
        _write_temp(temp, data, existing)
        if check is not None:
            check(temp)
        os.replace(temp, target)
    except BaseException as exc:
        _remove_quietly(temp)
        if isinstance(exc, OSError):
            raise file_error(target, exc, "write it") from exc
        raise
    _fsync_dir(target.parent)
    return path


def _existing(target: Path) -> os.stat_result | None:
    try:
        found = os.stat(target)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(found.st_mode):
        raise IsADirectoryError(21, "Is a directory", str(target))
    return found


def _write_temp(temp: Path, data: bytes, existing: os.stat_result | None) -> None:
    # 0o666 through the umask, as open() makes a new file; an existing file's mode is kept, and
    # its owner where root rewrites another user's file.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        if existing is not None:
            if os.geteuid() == 0 and (existing.st_uid, existing.st_gid) != (0, 0):
                os.fchown(fd, existing.st_uid, existing.st_gid)
            os.fchmod(fd, stat.S_IMODE(existing.st_mode))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)          # the bytes are on disk before the rename makes them the file
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable: a crash after it must not bring the old index or lock back."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass                  # some file systems refuse fsync on a directory; the rename stands
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        pass                  # the original error is the one to report


def append_text(path: Path | str, text: str) -> None:
    """Append to a step-output file (GitHub's $GITHUB_OUTPUT is appended to, never replaced)."""
    try:
        with open(path, "a", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise file_error(path, exc, "write it") from exc


# --- cache entries: content, never trust ---------------------------------------------------------

# A cache (~/.cache/vllm-forge, often root's in CI and images) is a folder anyone with write access
# to it may have changed: an entry replaced by a symbolic link must neither be read through (a
# link to /dev/zero, to another user's file) nor written through (as root, onto any file of the
# machine). So entries are read with O_NOFOLLOW, and anything there that is not a plain regular
# file within its kind's cap counts as no entry (its reader rebuilds it); and written by renaming
# a new file over the name, which replaces a link, FIFO or file there rather than writing into it,
# with the temp file made and renamed through a descriptor of the folder.

def read_entry(path: Path | str, kind: FileKind) -> bytes | None:
    """The bytes of cache entry `path`; None when there is none, or when what is there is not a
    plain regular file of at most `kind.cap` bytes (a link, a FIFO, a directory, a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            return None
        raise file_error(path, exc, "read it") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = _read_upto(fd, kind.cap + 1, path)
    finally:
        os.close(fd)
    return data if len(data) <= kind.cap else None


def open_entry(path: Path | str) -> BinaryIO | None:
    """Cache entry `path` opened to be read as a stream (an sdist: too large for read_entry), or
    None when there is none or what is there is not a plain regular file (a link, say to
    /dev/zero, a FIFO, a directory): nothing is read through a link, nothing waits on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
        raise file_error(path, exc, "read it") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def write_entry(path: Path | str, data: bytes | str) -> Path:
    """Replace cache entry `path` with `data` (whole or not at all, as write_bytes_atomically),
    never through a link: whatever is at the name (a link, a FIFO, a file) is replaced, not
    written into. Its folder is made if missing; a folder that is a link stays one (a cache may
    share another's folders: tests/local_index.py's isolated caches, a cache on another disk)."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise file_error(path, exc, "write it") from exc
    temp = f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666, dir_fd=folder)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        try:
            os.fsync(folder)
        except OSError:
            pass              # some file systems refuse fsync on a directory; the rename stands
    except BaseException as exc:
        try:
            os.unlink(temp, dir_fd=folder)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise file_error(path, exc, "write it") from exc
        raise
    finally:
        os.close(folder)
    return path


# --- output checks, before a command's first effect -------------------------------------------

def check_output_file(path: Path | str, flag: str = "") -> Path:
    """Refuse, before a command writes or moves anything, an output file it could not write:
    a directory in its place, a folder that is missing, a folder or file it may not write, a
    read-only or full file system. Checked up front so that a command with several effects
    (publish: the tag, the index, then the step outputs) never stops half way."""
    path = Path(path)
    label = f"{flag} {path}" if flag else str(path)
    if path.is_dir():
        raise ForgeError(f"{label}: is a directory, not a file")
    real = Path(os.path.realpath(path))
    folder = real.parent
    if not folder.is_dir():
        what = "is not a directory" if folder.exists() else "does not exist"
        raise ForgeError(f"{label}: the folder {folder} {what}")
    if real.exists() and not stat.S_ISREG(os.stat(real).st_mode):
        # a FIFO, a device: nothing an atomic rename may replace
        raise ForgeError(f"{label}: is {_describe(os.stat(real).st_mode)}, not a regular file")
    _probe_folder(folder, label)
    if real.exists():
        _probe_append(real, label)
    return path


def _probe_folder(folder: Path, label: str) -> None:
    """Write one byte to a temp file in `folder` and remove it: the same steps (create, write,
    sync) a write there takes, so a read-only, forbidden or full folder is found now."""
    probe = folder / f".vllm-forge-probe.{secrets.token_hex(4)}.tmp"
    try:
        _write_temp(probe, b"\n", None)
    except OSError as exc:
        raise FileError(f"{label}: {str(file_error(folder, exc, 'write in it'))}") from exc
    finally:
        _remove_quietly(probe)


def _probe_append(path: Path, label: str) -> None:
    """Open an existing file for appending without writing (its bytes and times stay)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC))
    except OSError as exc:
        raise FileError(f"{label}: {str(file_error(path, exc, 'write it'))}") from exc


def check_output_dir(path: Path | str, flag: str) -> Path:
    """Refuse an output directory that cannot be made: a file in its place or above it, or the
    nearest existing folder not writable (permission, read-only or full file system)."""
    path = Path(path)
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                where = "" if existing == path else f" ({existing} is a file)"
                raise ForgeError(f"{flag} {path}: is not a directory{where}")
            _probe_folder(existing, f"{flag} {path}")
            break
    return path


def check_stdout() -> None:
    """Refuse, before any effect, a standard output on a full file system (`> file` on a full
    disk would otherwise fail at the first print, after the command acted)."""
    try:
        found = os.fstat(1)
    except OSError:
        return
    if stat.S_ISREG(found.st_mode):
        space = os.fstatvfs(1)
        if space.f_bavail == 0:
            raise FileError("standard output: no space left on the device; free some space "
                            "or write elsewhere, and run again")


@contextmanager
def one_maker(entry: Path, locks: Path) -> Iterator[None]:
    """Hold an exclusive lock for making cache entry `entry` (a file or directory): a second process
    that wants the same entry waits here, then finds it made, instead of downloading or building
    it a second time beside the first; makers of other entries go on. The lock file lives in
    `locks` (`<folder>-<name>.lock`), never among the entries, and stays there: removing it
    would let a third process lock a fresh file while the second still holds the old one."""
    locks.mkdir(parents=True, exist_ok=True)
    lock = locks / f"{entry.parent.name}-{entry.name}.lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(lock, flags, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise file_error(lock, exc, "lock it") from exc
        # A link in a lock's place would make O_CREAT create (or open) its target: the link goes.
        try:
            os.unlink(lock)
            fd = os.open(lock, flags, 0o644)
        except OSError as again:
            raise file_error(lock, again, "lock it") from again
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
