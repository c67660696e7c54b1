"""The all-or-nothing file transaction behind `build.py apply` and `--revert`
(forge.patching.apply says what each step guarantees): every output staged in a temp file next to
its target, then one os.replace (or unlink) per file, with the record saying where the run stands
so that a failure is undone at once and a kill is cleaned up or finished by the next run."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
import secrets
import shutil
import signal
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from forge.errors import FileError, ForgeError
from forge.files import PACKAGE_FILE, mode_of, read_bytes
from forge.json_text import dump_json_lines
from forge.patching import record as records
from forge.patching.installed import InstalledVllm
from forge.patching.record import RECORD_DIR, RECORD_FILE, originals_prefix, runs
from forge.patching.vocabulary import RecordState, RevertStep

TEMP_SUFFIX = ".vllm-forge-tmp"
FAIL_AFTER_ENV = "VLLM_FORGE_FAIL_AFTER_RENAMES"
KILL_AFTER_ENV = "VLLM_FORGE_KILL_AFTER_RENAMES"
KILL_AFTER_STAGED_ENV = "VLLM_FORGE_KILL_AFTER_STAGED"   # SIGKILL after N temp files are staged


# Temp files are named `.NAME.<this process's token><a count>.vllm-forge-tmp`, made with O_EXCL:
# unique without tempfile.mkstemp's random name per file (a run stages thousands).
_TEMP_TOKEN = secrets.token_hex(4)
_TEMP_COUNT = itertools.count()


@dataclass
class Write:
    target: str                # the file's path (text, not Path: a run writes thousands)
    new: bytes | None          # None: remove the file
    original: bytes | None     # None: the file did not exist
    label: str                 # how the record names it
    temp: str | None = None
    mode: int | None = None    # for a new file (default 0o644); an existing file keeps its mode
    package: str | None = None  # the dependency these files belong to (None: vLLM, MoE configs)
    # A revert's saved original that holds the new bytes (`new` is then None): put in place by a
    # hard link, not read and written again (see _stage_saved).
    saved: str | None = None

    @property
    def removes(self) -> bool:
        return self.new is None and self.saved is None


def sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def remove_temps(directories: Iterable[str | Path]) -> list[Path]:
    """Remove the temp files (`.*.vllm-forge-tmp`) in each directory; returns them."""
    removed = []
    for directory in directories:
        try:
            with os.scandir(directory) as listing:
                temps = [entry.path for entry in listing
                         if entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)]
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue    # as Path.glob: nothing there, or a directory it cannot list
        for temp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            removed.append(Path(temp))
    return removed


def remove_empty_dirs(directories: Iterable[str | Path]) -> list[Path]:
    """rmdir each directory that exists and is empty, deepest first."""
    removed = []
    for directory in sorted(directories, key=_depth, reverse=True):
        try:
            os.rmdir(directory)
            removed.append(Path(directory))
        except OSError:
            pass        # absent, or holds something: not ours to remove
    return removed


def _depth(directory: str | Path) -> int:
    return os.fspath(directory).rstrip("/").count("/")


def _missing_dirs(writes: list[Write]) -> list[str]:
    """Directories that staging the writes will create, shallowest first."""
    missing: set[str] = set()
    # Each directory once: thousands of files share a few hundred.
    for parent in {os.path.dirname(w.target) for w in writes if not w.removes}:
        while not os.path.exists(parent) and parent not in missing:
            missing.add(parent)
            parent = os.path.dirname(parent)
    return sorted(missing, key=_depth)


def commit(writes: list[Write], installed: InstalledVllm, new_record: dict | None,
            old_record: dict | None = None) -> None:
    """Record (apply only), stage, then replace file by file; on any failure undo every step
    already taken and remove everything this run created. See the module docstring."""
    record_dir = installed.package_dir / RECORD_DIR
    created = _missing_dirs(writes)
    record = None
    marked: list[dict] = []     # the record as a revert marked it (a failure puts it back)
    # An apply with an old record appends a run to it: a failure puts the old record back.
    appending = new_record is not None and old_record is not None
    forget = (lambda: forget_run(record_dir, old_record or {})) if appending else \
        (lambda: shutil.rmtree(record_dir, ignore_errors=True)) if new_record is not None else \
        (lambda: _put_back(record_dir, marked, old_record or {}))
    try:
        if new_record is not None:
            record = _start_record(record_dir, writes, new_record, created, old_record)
        else:    # a revert says what it will create before it creates anything
            marked.append(_mark_revert(record_dir, old_record or {}, RevertStep.STAGING, created))
        for directory in created:
            os.mkdir(directory)
        ready: set[str] = set()     # directories _stage has made sure of
        for staged, w in enumerate(w for w in writes if not w.removes):
            _maybe_kill_while_staging(staged)
            if w.saved is not None:
                w.temp = _stage_saved(w.target, w.saved, w.mode, ready)
            else:
                assert w.new is not None
                w.temp = _stage(w.target, w.new, w.mode, ready)
    except OSError as exc:
        _discard(writes, created, forget)
        raise ForgeError(f"cannot write {exc.filename or installed.package_dir}: "
                         f"{exc.strerror or exc}; nothing changed") from exc
    undo: list = []
    try:
        _maybe_inject_failure(len(undo))
        if record is not None:
            write_record(record_dir, dict(record, state=RecordState.APPLYING))
        else:    # from here on the next run finishes the revert
            _mark_revert(record_dir, old_record or {}, RevertStep.RESTORING, created)
        undo.append(lambda: None)       # _discard removes (or puts back) the record itself
        for w in writes:
            _maybe_inject_failure(len(undo))
            if w.removes:
                os.unlink(w.target)
            else:
                assert w.temp is not None    # staged before the commit starts
                os.replace(w.temp, w.target)
                w.temp = None
            undo.append(lambda w=w: _restore(w))
        _maybe_inject_failure(len(undo))
        if record is not None:
            write_record(record_dir, dict(record, state=RecordState.APPLIED))
        else:
            _finish_revert(record_dir, old_record or {})
    except OSError as exc:
        for step in reversed(undo):
            step()
        _discard(writes, created, forget)
        raise ForgeError(f"failed while writing {exc.filename or 'the patched files'}: "
                         f"{exc.strerror or exc}; rolled back {len(undo)} step(s), "
                         "nothing changed") from exc
    # Directories that held only removed files (a dependency's old dist-info) go too; revert
    # recreates them with the files.
    remove_empty_dirs({os.path.dirname(w.target) for w in writes if w.removes})


def _put_back(record_dir: Path, marked: list[dict], record: dict) -> None:
    """A failed revert puts the record back as it found it (once it had marked it)."""
    if marked:
        write_record(record_dir, record)


def _mark_revert(record_dir: Path, record: dict, step: RevertStep, created: list[str]) -> dict:
    """The record with `reverting` set: the revert's step and the directories it creates."""
    marked = dict(record, reverting={"step": step, "created_dirs": created})
    write_record(record_dir, marked)
    return marked


def _finish_revert(record_dir: Path, record: dict) -> None:
    """The record goes last: applied.json first (from then on the install counts as clean),
    then the rest of the record directory, file by file (no directory rename). The directories
    the runs created go too, once empty (also those a killed revert emptied earlier)."""
    remove_empty_dirs([d for run in runs(record) for d in run.get("created_dirs", [])])
    (record_dir / RECORD_FILE).unlink()
    shutil.rmtree(record_dir, ignore_errors=True)


def _start_record(record_dir: Path, writes: list[Write], record: dict, created: list[str],
                  previous: dict | None = None) -> dict:
    """The record in state "staging": every file (with its original bytes) and every directory
    the run may create, written before anything else so a killed run can be cleaned up. With a
    `previous` record (a later run), the run is appended to it as record["later"][-1]."""
    prefix = originals_prefix(len(runs(previous)) if previous is not None else 0)
    run: dict = dict(record, created_dirs=list(created), files=[])
    for index, w in enumerate(writes):
        original = f"{prefix}{index}" if w.original is not None else None
        entry: dict[str, object] = {"path": w.label, "original": original, "original_sha256": sha(w.original),
                 "patched_sha256": sha(w.new)}
        if w.original is not None and w.new is None:
            entry["original_mode"] = w.mode
        if w.package is not None:
            entry["package"] = w.package
        run["files"].append(entry)
    if previous is None:
        record_dir.mkdir()
        record = dict(run, state=RecordState.STAGING)
    else:
        record = dict(previous, state=RecordState.STAGING, later=[*previous.get("later", []), run])
    write_record(record_dir, record)
    (record_dir / "originals").mkdir(exist_ok=True)
    records.write_run_files(record_dir, prefix, run)
    for index, w in enumerate(writes):
        if w.original is not None:
            _save_original(w.target, os.path.join(record_dir, f"{prefix}{index}"), w.original)
    return record


def _maybe_kill_while_staging(staged: int) -> None:
    kill_at = os.environ.get(KILL_AFTER_STAGED_ENV)
    if kill_at is not None and staged >= int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)


def _maybe_inject_failure(renames_done: int) -> None:
    kill_at = os.environ.get(KILL_AFTER_ENV)
    if kill_at is not None and renames_done >= int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)     # a real crash: no handler, no cleanup runs
    limit = os.environ.get(FAIL_AFTER_ENV)
    if limit is not None and renames_done >= int(limit):
        raise OSError(errno.EIO, f"injected failure after {renames_done} rename(s) "
                                 f"({FAIL_AFTER_ENV}={limit})")


def _stage(target: str, data: bytes, mode: int | None = None, ready: set[str] | None = None
           ) -> str:
    """`data` in a temp file beside `target` (created 0o600 as mkstemp does, O_EXCL), with
    target's mode (else `mode`, else 0o644); `ready` as for _make_sure_of."""
    parent, name = os.path.split(target)
    _make_sure_of(parent, ready)
    while True:
        temp = _temp_name(parent, name)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            break
        except FileExistsError:
            continue    # another process's temp of the same name: take the next count
    try:
        os.fchmod(fd, _mode_for(target, mode))
    except BaseException:
        os.close(fd)
        _remove_temp(temp)
        raise
    try:
        _write_all(fd, data)
    except BaseException:
        _remove_temp(temp)
        raise
    return temp


def _stage_saved(target: str, saved: str, mode: int | None, ready: set[str]) -> str:
    """A revert's saved original in a temp file beside `target`, as _stage puts bytes there: a
    hard link to it (the record alone holds it: _revert checked), then target's mode (else
    `mode`, else 0o644) and the time now, as a fresh write would have (a bytecode cache compares
    a source's mtime and size, so the restored file must not keep the time it was saved at).
    Where the file system refuses the link (another device, no hard links), its bytes are copied."""
    parent, name = os.path.split(target)
    _make_sure_of(parent, ready)
    while True:
        temp = _temp_name(parent, name)
        try:
            os.link(saved, temp)
            break
        except FileExistsError:
            continue
        except OSError:
            return _stage(target, _saved_bytes(saved), mode, ready)
    try:
        os.chmod(temp, _mode_for(target, mode))
        os.utime(temp)
    except BaseException:
        _remove_temp(temp)
        raise
    return temp


def _saved_bytes(saved: str) -> bytes:
    """A saved original's bytes; what stops it being read is an OSError, as for any other write
    the commit stages (it rolls back on OSError)."""
    try:
        return read_bytes(saved, PACKAGE_FILE)
    except FileError as exc:
        raise OSError(errno.EIO, str(exc).partition(": ")[2] or str(exc), saved) from exc


def _make_sure_of(parent: str, ready: set[str] | None) -> None:
    """Make `parent` if missing; `ready`: the directories already made sure of in this run (each
    is made once, not per file)."""
    if ready is None or parent not in ready:
        os.makedirs(parent, exist_ok=True)
        if ready is not None:
            ready.add(parent)


def _temp_name(parent: str, name: str) -> str:
    return os.path.join(parent, f".{name}.{_TEMP_TOKEN}{next(_TEMP_COUNT)}{TEMP_SUFFIX}")


def _mode_for(target: str, mode: int | None) -> int:
    """The mode a file staged for `target` gets: target's own, else `mode`, else 0o644."""
    existing = mode_of(target)      # 0: no file there
    if existing:
        return stat.S_IMODE(existing)
    return mode if mode is not None else 0o644


def _remove_temp(temp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(temp)


def _save_original(target: str, saved: str, original: bytes) -> None:
    """`original` (the bytes read from `target`) kept at `saved`. A hard link to target where
    target is a regular file with no other name and still the size read: the commit replaces or
    removes target, after which the record alone holds those bytes (revert links them back, see
    _stage_saved). Else (a link, a file with other names, another device, no hard links) the
    bytes are written."""
    try:
        found = os.lstat(target)
        if stat.S_ISREG(found.st_mode) and found.st_nlink == 1 and found.st_size == len(original):
            os.link(target, saved, follow_symlinks=False)
            return
    except OSError:
        pass
    _write_file(saved, original)


def _write_file(path: str, data: bytes) -> None:
    """Path(path).write_bytes(data) (created 0o666 less the umask, or truncated), without a Path
    and a buffered file object per file: a run saves thousands of originals."""
    _write_all(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666), data)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd`, then close it (also on failure)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_record(record_dir: Path, record: dict) -> None:
    temp = record_dir / f"{RECORD_FILE}.tmp"
    temp.write_text(dump_json_lines(record, "the apply record") + "\n")
    os.replace(temp, record_dir / RECORD_FILE)


def _restore(w: Write) -> None:
    if w.original is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(w.target)
    else:
        existing = mode_of(w.target)
        mode = stat.S_IMODE(existing) if existing else w.mode
        os.replace(_stage(w.target, w.original, mode), w.target)


def _discard(writes: list[Write], created: list[str], forget_record) -> None:
    for w in writes:
        if w.temp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(w.temp)
        w.temp = None
    remove_empty_dirs(created)
    if forget_record is not None:
        forget_record()


def forget_run(record_dir: Path, previous: dict) -> None:
    """Undo the start of an appended run: the previous record back, the run's originals gone."""
    write_record(record_dir, previous)
    prefix = originals_prefix(len(runs(previous)))
    for original in (record_dir / "originals").glob(f"{Path(prefix).name}*"):
        original.unlink()
