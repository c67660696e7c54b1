"""Apply (or revert) the patch series to an installed vLLM, all or nothing.

Steps: find vllm without importing it; refuse what the manifest does not cover; compute every
patch's status on the installed tree (same engine as for release sdists); plan every hunk in
memory; stage every output in a temp file next to its target (a read-only target fails here,
with nothing changed); then atomic renames; a failure mid-way renames nothing more and puts
back what was already renamed. The record `vllm/.vllm-forge/applied.json` plus the original
bytes of every file (`vllm/.vllm-forge/originals/N`) make a second apply a no-op and let
--revert restore every file byte for byte. The record goes in first (state "applying") and is
marked "applied" last, so even a killed process leaves what --revert needs.

Fault injection (for tests, and for anyone who wants to watch the rollback work): with
VLLM_FORGE_FAIL_AFTER_RENAMES=N the renaming sequence raises a real OSError before rename N+1
(record in place = rename 1, each target, record marked applied = the last); with
VLLM_FORGE_KILL_AFTER_RENAMES=N the process SIGKILLs itself there instead.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forge import diffs
from forge.errors import ConflictError, ForgeError
from forge.installed import InstalledVllm, find_vllm
from forge.patch_series import Series, load_series
from forge.patches import PatchStatus, tree_status

RECORD_DIR = ".vllm-forge"
RECORD_FILE = "applied.json"
FAIL_AFTER_ENV = "VLLM_FORGE_FAIL_AFTER_RENAMES"
KILL_AFTER_ENV = "VLLM_FORGE_KILL_AFTER_RENAMES"


@dataclass
class ApplyReport:
    installed: InstalledVllm
    action: str                    # applied | already-applied | nothing-to-apply | reverted |
    #                                nothing-to-revert
    applied: list[str] = field(default_factory=list)        # patch ids written
    files: list[str] = field(default_factory=list)          # files written
    statuses: list[PatchStatus] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        where = f"vLLM {self.installed.version} at {self.installed.package_dir}"
        head = {
            "applied": f"applied {len(self.applied)} patch(es) to {where}: "
                       f"{', '.join(self.applied)}",
            "already-applied": f"{where} already carries this patch series "
                               f"({', '.join(self.applied) or 'no files'}); nothing to do",
            "nothing-to-apply": f"nothing to apply to {where}",
            "reverted": f"reverted {', '.join(self.applied)} on {where}; "
                        f"{len(self.files)} file(s) restored byte for byte",
            "nothing-to-revert": f"{where} carries no vllm-forge patches; nothing to revert",
        }[self.action]
        out = [head]
        out += [f"  {s.id:<36} {s.status:<17} {s.detail}" for s in self.statuses]
        out += [f"  wrote {f}" for f in self.files if self.action == "applied"]
        out += [f"  {note}" for note in self.notes]
        return out


@dataclass
class _Write:
    target: Path
    new: bytes | None          # None: remove the file
    original: bytes | None     # None: the file did not exist
    label: str                 # how the record names it
    temp: Path | None = None


def apply_series(site_packages=None, expected_version=None, revert=False, moe_config_dir=None,
                 series_path=None, moe_device=None) -> ApplyReport:
    installed = find_vllm(site_packages)
    with _exclusive(installed):
        return _apply_locked(installed, expected_version, revert, moe_config_dir, series_path,
                             moe_device)


@contextlib.contextmanager
def _exclusive(installed: InstalledVllm):
    """One apply or revert per install at a time: an flock on the package directory itself
    (no lock file, so a read-only or untouched package stays untouched)."""
    fd = os.open(installed.package_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise ForgeError(f"{installed.package_dir}: another `build.py apply` is running on "
                             "this vLLM; nothing changed") from exc
        yield
    finally:
        os.close(fd)


def _apply_locked(installed, expected_version, revert, moe_config_dir, series_path, moe_device
                  ) -> ApplyReport:
    if expected_version is not None and not _same_release(expected_version, installed.version):
        raise ForgeError(f"--vllm {expected_version}: the vLLM installed at "
                         f"{installed.package_dir} is {installed.version}")
    record = _read_record(installed)
    if revert:
        return _revert(installed, record)
    # The manifest was checked against the package index when the image was planned; the index
    # may be out of reach here (an image, an air-gapped host).
    series = load_series(series_path, check_index=False)
    if record is not None:
        if record.get("state") != "applied":
            raise ForgeError(f"{_record_path(installed)}: an earlier apply was interrupted; "
                             "run `build.py apply --revert` first")
        if record.get("series") == series.digest:
            return ApplyReport(installed, "already-applied", applied=record.get("applied", []))
        raise ForgeError(f"{_record_path(installed)}: vLLM was patched by a different patch "
                         "series; run `build.py apply --revert` first")
    _check_covered(series, installed)
    statuses = tree_status(series, installed.site_dir, installed.version, moe_device,
                           install_path=installed.search_path)
    for s in statuses:
        if s.status == "conflict":
            raise ConflictError(f"{installed.package_dir}: patch {s.id}: {s.detail}; "
                                "nothing changed")
    writes, applied, notes = _plan(series, statuses, installed, moe_config_dir)
    if not writes:
        return ApplyReport(installed, "nothing-to-apply", statuses=statuses, notes=notes)
    record = {"series": series.digest, "vllm": str(installed.version), "applied": applied,
              "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": []}
    _commit(writes, installed, new_record=record)
    return ApplyReport(installed, "applied", applied=applied, files=[w.label for w in writes],
                       statuses=statuses, notes=notes)


def _same_release(expected: str, installed: Version) -> bool:
    """`--vllm 0.25.0` accepts a 0.25.0+cu130 build; `--vllm 0.25.0+cu130` wants exactly that."""
    try:
        wanted = Version(str(expected))
    except InvalidVersion as exc:
        raise ForgeError(f"--vllm {expected}: not a PEP 440 version") from exc
    return wanted == installed or (wanted.local is None and wanted == Version(installed.public))


def _check_covered(series: Series, installed: InstalledVllm) -> None:
    # A dev or local build (0.25.1.dev3+g1234, 0.25.0+cu130) counts as the release it names.
    release = Version(installed.version.base_version)
    low, high = Version(series.checked_from), Version(series.checked_through)
    if not (low <= release <= high):
        raise ForgeError(f"{series.path}: vLLM {installed.version} (at {installed.package_dir}) is "
                         f"not covered by the manifest (checked_from {series.checked_from}, "
                         f"checked_through {series.checked_through})")


def _plan(series: Series, statuses, installed: InstalledVllm, moe_config_dir):
    contents: dict[str, bytes | None] = {}
    applied: list[str] = []
    notes: list[str] = []
    moe_files = []
    for patch, status in zip(series.patches, statuses):
        if status.status != "applies":
            continue
        if patch.kind == "dependency":
            continue
        if patch.kind == "source":
            contents.update(diffs.plan_diff(installed.site_dir, patch.diffs, contents=contents))
            applied.append(patch.id)
        elif moe_config_dir is None:
            notes.append(f"{patch.id}: not installed: pass --moe-config-dir")
        else:
            moe_files += patch.files
            applied.append(patch.id)
    writes = []
    for rel, new in contents.items():
        path = installed.site_dir / rel
        writes.append(_Write(path, new, path.read_bytes() if path.is_file() else None, rel))
    if moe_files:
        moe_dir = Path(moe_config_dir).resolve()
        for f in moe_files:
            target = moe_dir / f.name
            writes.append(_Write(target, f.absolute.read_bytes(),
                                 target.read_bytes() if target.is_file() else None, str(target)))
    return writes, applied, notes


def _revert(installed: InstalledVllm, record: dict | None) -> ApplyReport:
    if record is None:
        return ApplyReport(installed, "nothing-to-revert")
    record_dir = installed.package_dir / RECORD_DIR
    writes = []
    for entry in record["files"]:
        target = Path(entry["path"])
        target = target if target.is_absolute() else installed.site_dir / target
        current = target.read_bytes() if target.is_file() else None
        if _sha(current) == entry["original_sha256"]:
            continue    # never patched (an interrupted apply) or already restored
        if _sha(current) != entry["patched_sha256"]:
            raise ForgeError(f"{target}: changed since vllm-forge patched it; not reverting "
                             "(nothing changed)")
        original = (record_dir / entry["original"]).read_bytes() if entry["original"] else None
        writes.append(_Write(target, original, current, entry["path"]))
    _commit(writes, installed, new_record=None)
    return ApplyReport(installed, "reverted", applied=record.get("applied", []),
                       files=[w.label for w in writes])


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _record_path(installed: InstalledVllm) -> Path:
    return installed.package_dir / RECORD_DIR / RECORD_FILE


def _read_record(installed: InstalledVllm) -> dict | None:
    path = _record_path(installed)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ForgeError(f"{path}: unreadable apply record ({exc}); restore it or reinstall vLLM")\
            from exc


# --- the transaction ---------------------------------------------------------------------------

def _commit(writes: list[_Write], installed: InstalledVllm, new_record: dict | None) -> None:
    """Stage everything, then rename; on any failure undo every step already taken.

    Apply puts the record (state "applying", originals inside) in place BEFORE the first target
    and marks it "applied" last, so even a process killed mid-way leaves what --revert needs.
    Revert removes the record last, and skips files already back to their original bytes.
    """
    record_dir = installed.package_dir / RECORD_DIR
    staged_record = None
    try:
        for w in writes:
            if w.new is not None:
                w.temp = _stage(w.target, w.new)
        if new_record is not None:
            staged_record = _stage_record(record_dir, writes, new_record)
    except OSError as exc:
        _discard(writes, staged_record)
        raise ForgeError(f"cannot write {exc.filename or installed.package_dir}: "
                         f"{exc.strerror or exc}; nothing changed") from exc
    undo: list = []
    try:
        if new_record is not None:
            _maybe_inject_failure(len(undo))
            os.replace(staged_record, record_dir)
            undo.append(lambda: shutil.rmtree(record_dir))
        for w in writes:
            _maybe_inject_failure(len(undo))
            if w.new is None:
                os.unlink(w.target)
            else:
                os.replace(w.temp, w.target)
            undo.append(lambda w=w: _restore(w))
        _maybe_inject_failure(len(undo))
        if new_record is not None:
            _write_record(record_dir, dict(new_record, state="applied"))
        else:
            trash = record_dir.with_name(f"{RECORD_DIR}.removing-{os.getpid()}")
            os.replace(record_dir, trash)
            shutil.rmtree(trash, ignore_errors=True)
    except OSError as exc:
        for step in reversed(undo):
            step()
        _discard(writes, staged_record)
        raise ForgeError(f"failed while writing {exc.filename or 'the patched files'}: "
                         f"{exc.strerror or exc}; rolled back {len(undo)} step(s), "
                         "nothing changed") from exc


def _maybe_inject_failure(renames_done: int) -> None:
    kill_at = os.environ.get(KILL_AFTER_ENV)
    if kill_at is not None and renames_done >= int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)     # a real crash: no handler, no cleanup runs
    limit = os.environ.get(FAIL_AFTER_ENV)
    if limit is not None and renames_done >= int(limit):
        raise OSError(errno.EIO, f"injected failure after {renames_done} rename(s) "
                                 f"({FAIL_AFTER_ENV}={limit})")


def _stage(target: Path, data: bytes) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".vllm-forge-tmp",
                                dir=target.parent)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644
    os.chmod(name, mode)
    return Path(name)


def _stage_record(record_dir: Path, writes: list[_Write], record: dict) -> Path:
    staging = Path(tempfile.mkdtemp(prefix=f"{RECORD_DIR}.", suffix=".tmp", dir=record_dir.parent))
    os.chmod(staging, 0o755)   # mkdtemp makes 0700; the package around it is world-readable
    (staging / "originals").mkdir()
    for index, w in enumerate(writes):
        original = None
        if w.original is not None:
            original = f"originals/{index}"
            (staging / original).write_bytes(w.original)
        record["files"].append({"path": w.label, "original": original,
                                "original_sha256": _sha(w.original),
                                "patched_sha256": _sha(w.new)})
    record["state"] = "applying"
    _write_record(staging, record)
    return staging


def _write_record(record_dir: Path, record: dict) -> None:
    temp = record_dir / f"{RECORD_FILE}.tmp"
    temp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(temp, record_dir / RECORD_FILE)


def _restore(w: _Write) -> None:
    if w.original is None:
        w.target.unlink(missing_ok=True)
    else:
        os.replace(_stage(w.target, w.original), w.target)


def _discard(writes: list[_Write], staged_record: Path | None) -> None:
    for w in writes:
        if w.temp is not None and w.temp.exists():
            w.temp.unlink()
    if staged_record is not None:
        shutil.rmtree(staged_record, ignore_errors=True)
