"""Apply (or revert) the patch series to an installed vLLM, all or nothing.

Steps: find vllm without importing it; clean what an interrupted earlier run left; refuse what
the manifest does not cover; compute every patch's status on the installed tree (same engine as
for release sdists; dependency constraints from the installed versions); plan every hunk in
memory and stage every violated dependency's new version with pip in a private directory
(forge.patching.dependency_apply), so that source patches, MoE configs and dependencies are one list of
file writes. Then, in this order:

  1. the record `vllm/.vllm-forge/applied.json` (state "staging", listing every file and every
     directory the run will create), a copy of the run's file list (`originals/files.json`,
     forge.patching.record) and the original bytes of every file it will touch
     (`vllm/.vllm-forge/originals/N`: a hard link to a file that has no other name, which the
     run then replaces or removes, else a copy); vLLM's dist-info RECORD is the first of those files,
     rewritten to list the record's files so that pip uninstall removes them
     (forge.patching.pip_record);
  2. every output staged in a temp file `.NAME.XXXX.vllm-forge-tmp` next to its target (a
     read-only target fails here, with nothing changed);
  3. the record marked "applying", then one os.replace (or unlink) per file, then "applied".

A failure anywhere undoes every step already taken and removes what the run created (temp
files, new directories, the record): nothing changed. A killed run leaves a record that names
every place it wrote: the next run removes the temp files and, for a run killed before step 3,
everything else it created; after step 3 began, it asks for --revert, which restores every file
byte for byte from the originals (no network needed, dependencies included).

Revert is a transaction of the same shape, with its step in the record (`reverting`): "staging"
(with the directories it creates) before any temp file, "restoring" before the first file is put
back. A revert killed while staging is forgotten by the next run (its temp files and directories
removed, the install still patched); one killed while restoring is finished by the next run,
`apply` included (then it applies afresh). A record that belongs to another install (see
forge.patching.ownership) is refused by apply and dropped by revert.

An install that already carries a record is checked again: a dependency that drifted outside
its constraint since (pip install -U, a new base) is pinned again in a run appended to the
record (record["later"]); revert undoes every run (see _revertible_entries).

No directory is ever renamed: inside an image, vllm/ and site-packages sit in a lower overlayfs
layer, where renaming a directory fails with "Invalid cross-device link" (EXDEV). Files are
replaced with os.replace from a temp file in the same directory, which overlayfs allows.

Fault injection (for tests, and for anyone who wants to watch the rollback work): with
VLLM_FORGE_FAIL_AFTER_RENAMES=N the step-3 sequence raises a real OSError before step N+1
(record marked applying = 1, each file, record marked applied = the last); with
VLLM_FORGE_KILL_AFTER_RENAMES=N the process SIGKILLs itself there instead, and with
VLLM_FORGE_KILL_AFTER_STAGED=N after staging N temp files.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forge.errors import ConflictError, FileError, ForgeError
from forge.files import PACKAGE_FILE, SOURCE, files_under, read_bytes, read_if_present
from forge.patching import diffs, ownership, pip_record
from forge.patching import record as records
from forge.patching.installed import InstalledVllm, find_vllm
from forge.patching.record import RECORD_DIR, RECORD_FILE, originals_prefix, runs
from forge.patching.series import CANDIDATE_FLAG, Series, load_series
from forge.patching.status import PatchStatus, applied_statuses, tree_status
from forge.patching.transaction import (
    FAIL_AFTER_ENV,
    KILL_AFTER_ENV,
    KILL_AFTER_STAGED_ENV,
    TEMP_SUFFIX,
    Write,
    commit,
    forget_run,
    remove_empty_dirs,
    remove_temps,
    sha,
    write_record,
)
from forge.patching.vocabulary import ApplyOutcome, Kind, RecordState, RevertStep, Status

__all__ = ["FAIL_AFTER_ENV", "KILL_AFTER_ENV", "KILL_AFTER_STAGED_ENV", "RECORD_DIR", "RECORD_FILE",
           "TEMP_SUFFIX", "apply_series", "clean_leftovers", "install_statuses",
           "read_install_record"]


@dataclass
class ApplyReport:
    installed: InstalledVllm
    action: ApplyOutcome
    applied: list[str] = field(default_factory=list)        # patch ids written
    files: list[str] = field(default_factory=list)          # files written (a dependency's
    #                                                         files are counted, not listed)
    statuses: list[PatchStatus] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dependencies: list[dict] = field(default_factory=list)  # the record's dependency entries
    foreign: str = ""      # DROPPED_FOREIGN: why the record was another install's

    def lines(self) -> list[str]:
        where = f"vLLM {self.installed.version} at {self.installed.package_dir}"
        head = {
            ApplyOutcome.APPLIED: f"applied {len(self.applied)} patch(es) to {where}: "
                       f"{', '.join(self.applied)}",
            ApplyOutcome.ALREADY_APPLIED: f"{where} already carries this patch series "
                               f"({', '.join(self.applied) or 'no files'}) and every dependency "
                               "is inside its constraint; nothing to do",
            ApplyOutcome.RE_PINNED: f"{where} carries this patch series, but {len(self.applied)} "
                         "dependency(ies) drifted outside their constraint since: pinned again "
                         f"({', '.join(self.applied)}); `--revert` undoes every run",
            ApplyOutcome.NOTHING_TO_APPLY: f"nothing to apply to {where}",
            ApplyOutcome.REVERTED: f"reverted {', '.join(self.applied)} on {where}; "
                        f"{len(self.files)} file(s) restored byte for byte",
            ApplyOutcome.NOTHING_TO_REVERT: f"{where} carries no vllm-forge patches; nothing to revert",
            ApplyOutcome.DROPPED_FOREIGN: f"{where} was never patched by vllm-forge: dropped the "
                                          f"apply record of another install found in it "
                                          f"({self.foreign}); {len(self.files)} file(s) "
                                          "that still held vllm-forge's bytes restored",
        }[self.action]
        out = [head]
        out += [f"  {s.id:<36} {s.status:<17} {s.detail}" for s in self.statuses]
        out += [f"  {line}" for line in self.dependency_lines()]
        out += [f"  wrote {f}" for f in self.files if self.action == ApplyOutcome.APPLIED]
        out += [f"  {note}" for note in self.notes]
        return out

    def dependency_lines(self) -> list[str]:
        if self.action == ApplyOutcome.REVERTED:
            return [f"{d['package']} {d['installed']} -> {d['previous']} (restored)"
                    for d in self.dependencies]
        return [f"{d['package']} {d['previous']} -> {d['installed']} (pinned =={d['installed']}: "
                f"constraint {d['specifier']} of {d['id']}; vLLM requires {d['vllm_requires']})"
                for d in self.dependencies]


def apply_series(site_packages=None, expected_version=None, revert=False, moe_config_dir=None,
                 series_path=None, moe_device=None, offline=False, find_links=None, pins=None,
                 with_candidates=None) -> ApplyReport:
    """`pins`: ["transformers==5.14.1", ...], the exact version for a violated constraint.
    `with_candidates`: ids of candidate patches (series.yaml `candidate: true`) to apply too;
    without it every candidate is left out."""
    from forge.patching.dependency_apply import check_pins, parse_pins

    parsed_pins = parse_pins(pins)
    if parsed_pins:     # before the install is read: a pin nothing uses is refused at once
        check_pins(load_series(series_path, check_index=False), parsed_pins)
    if revert and with_candidates:
        raise ForgeError(f"{CANDIDATE_FLAG}: not with --revert (a revert restores every patched "
                         "file, candidates included)")
    installed = find_vllm(site_packages)
    with _exclusive(installed):
        return _apply_locked(installed, expected_version, revert, moe_config_dir, series_path,
                             moe_device, offline, find_links, parsed_pins, with_candidates or [])


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


def _apply_locked(installed, expected_version, revert, moe_config_dir, series_path, moe_device,
                  offline, find_links, pins, with_candidates) -> ApplyReport:
    if expected_version is not None and not _same_release(expected_version, installed.version):
        raise ForgeError(f"--vllm {expected_version}: the vLLM installed at "
                         f"{installed.package_dir} is {installed.version}")
    clean_leftovers(installed)
    if revert:
        return _revert(installed, records.read_for_revert(installed))
    record = records.read(installed)
    if record is not None and record.get("reverting") is not None:
        finished = _revert(installed, record)   # a revert killed while restoring files
        try:
            report = _apply_clean(installed, moe_config_dir, series_path, moe_device, offline,
                                  find_links, pins, with_candidates, record=None)
        except ForgeError as exc:
            raise type(exc)(f"{_finished_note(finished)}; then: {exc}") from exc
        report.notes.append(_finished_note(finished))
        return report
    return _apply_clean(installed, moe_config_dir, series_path, moe_device, offline, find_links,
                        pins, with_candidates, record)


def _finished_note(finished: ApplyReport) -> str:
    return (f"finished the revert that was killed part way ({records.record_path(finished.installed)}): "
            f"{len(finished.files)} more file(s) restored")


def _apply_clean(installed, moe_config_dir, series_path, moe_device, offline, find_links, pins,
                 with_candidates, record) -> ApplyReport:
    """Apply on an install with no interrupted revert: a first apply, or a check (and re-pin)
    of one that carries this install's record."""
    # The manifest was checked against the package index when the image was planned; the index
    # may be out of reach here (an image, an air-gapped host).
    series = load_series(series_path, check_index=False)
    chosen = series.chosen_candidates(with_candidates)
    foreign = ownership.foreign_reason(installed, record) if record is not None else None
    if foreign is not None:
        raise ForgeError(f"{records.record_path(installed)}: the apply record of another install "
                         f"of vLLM ({foreign}); `build.py apply --revert` drops it, putting back "
                         "only files that still hold vllm-forge's bytes; nothing changed")
    if record is not None:
        if record.get("state") != RecordState.APPLIED:
            raise ForgeError(f"{records.record_path(installed)}: an earlier apply was interrupted; "
                             "run `build.py apply --revert` first")
        if record.get("series") != series.digest:
            raise ForgeError(f"{records.record_path(installed)}: vLLM was patched by a different patch "
                             "series; run `build.py apply --revert` first")
        missing = sorted(chosen - set(_applied_ids(record)))
        if missing:
            raise ForgeError(f"{CANDIDATE_FLAG} {missing[0]}: {records.record_path(installed)} was "
                             "applied without it; run `build.py apply --revert` first, then apply "
                             "with it; nothing changed")
        return _reapply(installed, series, record, moe_device, offline, find_links, pins)
    _check_covered(series, installed)
    statuses = tree_status(series, installed.site_dir, installed.version, moe_device,
                           install_path=installed.search_path)
    wanted = applied_statuses(statuses, series, chosen)
    for s in wanted:
        if s.status == Status.CONFLICT:
            raise ConflictError(f"{installed.package_dir}: patch {s.id}: {s.detail}; "
                                "nothing changed")
    writes, applied, notes = _plan(series, wanted, installed, moe_config_dir)
    notes += [f"{s.id}: candidate, not applied ({s.status}); `{CANDIDATE_FLAG} {s.id}` applies it"
              for s in statuses if s not in wanted]
    from forge.patching import dependency_apply

    pinned = dependency_apply.plan(series, wanted, installed, offline, find_links, pins)
    if not writes and not pinned:
        return ApplyReport(installed, ApplyOutcome.NOTHING_TO_APPLY, statuses=statuses, notes=notes)
    patched_files = [w.label for w in writes]
    try:
        writes += _pin_writes(pinned, installed, find_links, applied, notes)
        writes = _with_pip_record(writes, installed, run_index=0)
        order = [p.id for p in series.patches]
        applied.sort(key=order.index)
        record = {"series": series.digest, "vllm": str(installed.version), "applied": applied,
                  "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "dependencies": [d.to_record() for d in pinned]}
        commit(writes, installed, new_record=record)
    finally:
        dependency_apply.discard_staging(installed)
    return ApplyReport(installed, ApplyOutcome.APPLIED, applied=applied, files=patched_files,
                       statuses=statuses, notes=notes, dependencies=record["dependencies"])


def _reapply(installed, series, record, moe_device, offline, find_links, pins) -> ApplyReport:
    """An install that carries a record: the source patches stay as they are (each must still be
    in), but every dependency is checked against what is installed NOW. A `pip install -U` (or a
    new base) after the first apply may have put a violating version back: that drift is pinned
    again, in a run of its own appended to the record (see _revertible_entries for
    what revert restores)."""
    statuses = install_statuses(series, installed, record, moe_device)
    recorded = set(_applied_ids(record))
    lost = [s.id for s in statuses if s.id in recorded and s.kind == Kind.SOURCE
            and s.status == Status.APPLIES]
    if lost:
        raise ForgeError(f"{records.record_path(installed)}: {', '.join(lost)} recorded as applied but "
                         "no longer in the installed files (vLLM changed after vllm-forge patched "
                         "it); nothing changed")
    from forge.patching import dependency_apply

    pinned = dependency_apply.plan(series, statuses, installed, offline, find_links, pins)
    if not pinned:
        return ApplyReport(installed, ApplyOutcome.ALREADY_APPLIED, applied=_applied_ids(record),
                           statuses=statuses, dependencies=_dependencies(record))
    applied: list[str] = []
    notes: list[str] = []
    try:
        writes = _pin_writes(pinned, installed, find_links, applied, notes)
        writes = _with_pip_record(writes, installed, run_index=len(runs(record)))
        dependencies = [d.to_record() for d in pinned]
        run = {"applied": applied,
               "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "dependencies": dependencies}
        commit(writes, installed, new_record=run, old_record=record)
    finally:
        dependency_apply.discard_staging(installed)
    return ApplyReport(installed, ApplyOutcome.RE_PINNED, applied=applied, statuses=statuses, notes=notes,
                       dependencies=dependencies)


def install_statuses(series, installed: InstalledVllm, record: dict | None,
                     moe_device: str | None = None) -> list[PatchStatus]:
    """Every patch's status on an install as it is now: dependencies from the versions installed
    now (a drift after apply shows as `applies`), and a source patch the record lists that is in
    the files as `applied` (the tree alone cannot tell it from an upstream fix)."""
    statuses = tree_status(series, installed.site_dir, installed.version, moe_device,
                           install_path=installed.search_path)
    if record is None or ownership.foreign_reason(installed, record) is not None:
        return statuses
    recorded = set(_applied_ids(record))
    interrupted = ownership.interrupted_run(record)
    if interrupted is not None:
        way_out = ("the next `build.py apply` or `--revert` finishes it"
                   if interrupted == "revert" else "`build.py apply --revert` undoes it")
        return [PatchStatus(s.id, s.kind, str(Status.INTERRUPTED),
                            f"a vllm-forge {interrupted} was killed part way "
                            f"({records.record_path(installed)}); {way_out}")
                if s.id in recorded else s for s in statuses]
    return [PatchStatus(s.id, s.kind, str(Status.APPLIED), f"by vllm-forge ({records.record_path(installed)}); "
                                                  f"{s.detail}")
            if s.id in recorded and s.kind == Kind.SOURCE and s.status == Status.ALREADY_UPSTREAM else s
            for s in statuses]


def read_install_record(installed: InstalledVllm) -> dict | None:
    return records.read(installed)


def _applied_ids(record: dict) -> list[str]:
    ids = []
    for run in runs(record):
        ids += [i for i in run.get("applied", []) if i not in ids]
    return ids


def _dependencies(record: dict) -> list[dict]:
    return [d for run in runs(record) for d in run.get("dependencies", [])]


def _pin_writes(pinned, installed: InstalledVllm, find_links, applied: list[str],
                notes: list[str]) -> list[Write]:
    """The file writes of every pinned dependency (staged with pip); appends to applied/notes."""
    writes = []
    for dependency in pinned:
        dependency_writes = _dependency_writes(dependency, installed, find_links)
        writes += dependency_writes
        applied.append(dependency.patch_id)
        notes.append(f"{dependency.package}: {len(dependency_writes)} file(s) changed in "
                     f"{dependency.base}")
    return writes


def _dependency_writes(dependency, installed: InstalledVllm, find_links) -> list[Write]:
    from forge.patching import dependency_apply

    try:
        staged = dependency_apply.stage(dependency, installed, find_links)
        changes = dependency_apply.file_changes(dependency, staged, installed)
    except OSError as exc:
        raise ForgeError(f"cannot stage {dependency.package} {dependency.version} in "
                         f"{dependency_apply.staging_dir(installed)}: {exc.strerror or exc}; "
                         "nothing changed") from exc
    writes = []
    for target, change in changes.items():
        original = read_if_present(target, PACKAGE_FILE)
        new, mode = change if change is not None else (None, None)
        if new is None and original is not None:
            mode = stat.S_IMODE(os.stat(target).st_mode)     # to put a removed file back as it was
        if new != original:     # most files are the same in neighbouring releases
            writes.append(Write(target, new, original, _label(target, installed), mode=mode,
                                package=dependency.package))
    return writes


def _label(path: Path | str, installed: InstalledVllm) -> str:
    """Paths inside the site directory are recorded relative to it, others absolute. (A prefix
    test on the normalized text, as Path.relative_to would say, without two Paths per file.)"""
    inside = os.path.join(installed.site_dir, "")
    text = str(path)
    return text[len(inside):] if text.startswith(inside) else text


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
    for status in statuses:
        patch = series.get(status.id)
        if status.status != Status.APPLIES or patch.kind == Kind.DEPENDENCY:
            continue
        if patch.kind == Kind.SOURCE:
            contents.update(diffs.plan_diff(installed.site_dir, patch.diffs, contents=contents))
            applied.append(patch.id)
        elif moe_config_dir is None:
            notes.append(f"{patch.id}: not installed: pass --moe-config-dir")
        else:
            moe_files += patch.files
            applied.append(patch.id)
    writes = []
    for rel, new in contents.items():
        path = str(installed.site_dir / rel)
        writes.append(Write(path, new, read_if_present(path, SOURCE), rel))
    if moe_files:
        moe_dir = Path(moe_config_dir).resolve()
        for f in moe_files:
            target = str(moe_dir / f.name)
            writes.append(Write(target, read_bytes(f.absolute, SOURCE),
                                read_if_present(target, SOURCE), target))
    return writes, applied, notes


def _target_of(installed: InstalledVllm, label: str) -> str:
    """The file a record's label names: relative to the site directory, or absolute (joining an
    absolute path gives that path). Text, not Path: a record lists thousands of files."""
    return os.path.join(installed.site_dir, label)


def _with_pip_record(writes: list[Write], installed: InstalledVllm, run_index: int) -> list[Write]:
    """The writes, led by vLLM's RECORD rewritten to list them and the apply record's files
    (forge.patching.pip_record); first, so that from the first replaced file on, pip knows every
    file vllm-forge added. Unchanged without a RECORD (a source tree, an install pip never saw)."""
    path = pip_record.record_file(installed.site_dir)
    if path is None:
        return writes
    prefix = originals_prefix(run_index)
    # vLLM's own files, by their path in RECORD (relative to the site directory); compared as
    # text, as for _label.
    ours = os.path.join(installed.package_dir, "")
    changes = {_label(w.target, installed): w.new for w in writes if w.target.startswith(ours)}
    # Index 0 is RECORD itself (it has original bytes), the others keep their order. Files an
    # earlier run saved are listed too (a record from before RECORD listed them).
    saved = [f"{prefix}{index + 1}" for index, w in enumerate(writes) if w.original is not None]
    record_dir = installed.package_dir / RECORD_DIR
    earlier = sorted(name for name in files_under(record_dir) if not name.endswith(".tmp"))
    names = [RECORD_FILE, *earlier, records.run_files_name(prefix), f"{prefix}0", *saved]
    in_site = _label(record_dir, installed)      # the record directory, relative to the site
    record_rows = [f"{in_site}/{name}" for name in dict.fromkeys(names)]
    original = pip_record.read_record(path)
    new = pip_record.updated(original, changes, record_rows)
    return [Write(str(path), new, original, _label(path, installed)), *writes]


def _revert(installed: InstalledVllm, record: dict | None) -> ApplyReport:
    """Put back every file the record's runs wrote. A record of another install (pip reinstalled
    vLLM around it) is dropped, restoring only the files that still hold vllm-forge's bytes."""
    if record is None:
        return ApplyReport(installed, ApplyOutcome.NOTHING_TO_REVERT)
    foreign = ownership.foreign_reason(installed, record)
    record_dir = installed.package_dir / RECORD_DIR
    writes = []
    for entry in _revertible_entries(record):
        target = _target_of(installed, entry["path"])
        current = read_if_present(target, PACKAGE_FILE)
        current_sha = sha(current)
        if current_sha == entry["original_sha256"]:
            continue    # never patched (an interrupted apply) or already restored
        if current_sha != entry["patched_sha256"]:
            if foreign is not None:
                continue    # the other install's file
            raise ForgeError(f"{target}: changed since vllm-forge patched it; not reverting "
                             "(nothing changed)")
        writes.append(_restoring(record_dir, entry, target, current))
    commit(writes, installed, new_record=None, old_record=record)
    if foreign is not None:
        return ApplyReport(installed, ApplyOutcome.DROPPED_FOREIGN, files=[w.label for w in writes],
                           foreign=foreign)
    return ApplyReport(installed, ApplyOutcome.REVERTED, applied=_applied_ids(record),
                       files=[w.label for w in writes],
                       dependencies=_restored_dependencies(record))


def _restoring(record_dir: Path, entry: dict, target: str, current: bytes | None) -> Write:
    """The write that puts `entry`'s saved original back over `current`. A saved original only
    the record holds (the usual case) is linked into place, not read here (see
    transaction._stage_saved); one that is more (a link shared with a file that was never
    replaced, an unusual file) is read, and refused in one line if it cannot be."""
    mode = entry.get("original_mode")
    if entry["original"] is not None:
        path = os.path.join(record_dir, entry["original"])
        if _only_in_the_record(path):
            return Write(target, None, current, entry["path"], mode=mode, saved=path)
    return Write(target, _saved_original(record_dir, entry), current, entry["path"], mode=mode)


def _only_in_the_record(path: str) -> bool:
    """A regular file with no other name: changing its mode and time changes nothing else."""
    try:
        found = os.lstat(path)
    except OSError:
        return False        # _saved_original says why in one line
    return stat.S_ISREG(found.st_mode) and found.st_nlink == 1


def _saved_original(record_dir: Path, entry: dict) -> bytes | None:
    if entry["original"] is None:
        return None
    path = record_dir / entry["original"]
    try:
        return read_bytes(path, PACKAGE_FILE)
    except FileError as exc:
        raise ForgeError(f"{path}: the saved original of {entry['path']} cannot be read "
                         f"({str(exc).partition(': ')[2]}); not reverting (nothing changed)") from exc


def _restored_dependencies(record: dict) -> list[dict]:
    """Per package, the newest run's pin: its `previous` is the version revert puts back."""
    newest: dict[str, dict] = {}
    for run in reversed(runs(record)):
        for dependency in run.get("dependencies", []):
            newest.setdefault(dependency["package"], dependency)
    return list(newest.values())


def _revertible_entries(record: dict) -> list[dict]:
    """The file entries revert restores. Revert undoes every run of the record: each file goes
    back to the bytes the run that wrote it found. One exception: when a later run pinned a
    dependency again, the files an earlier run had written for that same dependency were replaced
    by someone else in between (the drift: `pip install -U`, a new base); those are theirs now,
    and the later run's originals (the drifted version, exactly as it was) are what comes back.
    So the install returns to how it was before the first apply, except that a dependency changed
    by others after an apply comes back as they left it. A file several runs wrote (vLLM's RECORD)
    is one entry: the bytes the first run found, replacing what the last run wrote."""
    all_runs = runs(record)
    by_path: dict[str, dict] = {}
    for index, run in enumerate(all_runs):
        repinned_later = {d["package"] for later in all_runs[index + 1:]
                          for d in later.get("dependencies", [])}
        for entry in run.get("files", []):
            if entry.get("package") in repinned_later:
                continue
            first = by_path.get(entry["path"])
            by_path[entry["path"]] = entry if first is None else \
                dict(first, patched_sha256=entry["patched_sha256"])
    return list(by_path.values())


# --- leftovers of an interrupted run -----------------------------------------------------------

def clean_leftovers(installed: InstalledVllm) -> list[Path]:
    """Remove what a killed apply or revert left: its temp files (wherever the record says it
    wrote), pip's staging directory, a record that never got past staging together with the
    directories that run created, and the directories a killed revert created (a revert killed
    while staging is forgotten: the install is still patched). A record of a run that began
    changing files stays: --revert (or, for a revert, the next apply) finishes it. Returns what
    was removed."""
    from forge.patching import dependency_apply

    removed = []
    staging = dependency_apply.staging_dir(installed)
    if staging.exists():
        shutil.rmtree(staging)
        removed.append(staging)
    record_dir = installed.package_dir / RECORD_DIR
    if not record_dir.is_dir():
        return removed
    half_written = record_dir / f"{RECORD_FILE}.tmp"
    if half_written.exists():     # (unlink of a missing file still fails on a read-only mount)
        half_written.unlink()
    record = records.read_for_revert(installed)
    if record is not None:
        targets = [_target_of(installed, entry["path"])
                   for run in runs(record) for entry in run.get("files", [])]
        removed += remove_temps({os.path.dirname(t) for t in targets})
    if record is not None and record.get("reverting") is not None:
        return removed + _clean_killed_revert(record_dir, record)
    if record is not None and record.get("state") == RecordState.STAGING and record.get("later"):
        # A later run killed before it changed a file: drop just that run.
        *earlier, last = record["later"]
        removed += remove_empty_dirs(last.get("created_dirs", []))
        previous = dict(record, state=RecordState.APPLIED, later=earlier)
        if not earlier:
            del previous["later"]
        forget_run(record_dir, previous)
        return removed
    if record is None and records.holds_files(record_dir / "originals"):
        return removed      # saved originals without a record: records.read says so
    if record is None or record.get("state") == RecordState.STAGING:
        removed += remove_empty_dirs((record or {}).get("created_dirs", []))
        shutil.rmtree(record_dir)
        removed.append(record_dir)
    return removed


def _clean_killed_revert(record_dir: Path, record: dict) -> list[Path]:
    """The directories a killed revert created (each empty once its temp files are gone); one
    killed while staging is forgotten, one killed while restoring stays to be finished."""
    reverting = record["reverting"]
    removed = remove_empty_dirs(reverting.get("created_dirs", []))
    if reverting.get("step") == RevertStep.STAGING:
        write_record(record_dir, {k: v for k, v in record.items() if k != "reverting"})
    return removed

