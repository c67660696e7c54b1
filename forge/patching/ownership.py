"""Whether an apply record describes the install it sits in, and whether a run of it was killed.

A record outlives its install when vLLM is installed again around it without pip removing it:
another release over it, or the same release reinstalled (`pip install --ignore-installed`, or
any installer from before vllm-forge listed its files in RECORD). Such a record names files that
are not this install's; reading it as this install's would revert a release it never touched, or
call a fresh install "changed after vllm-forge patched it"."""
from __future__ import annotations

import hashlib
from pathlib import Path

from forge.files import PACKAGE_FILE, read_if_present
from forge.patching import pip_record
from forge.patching.installed import InstalledVllm
from forge.patching.record import runs
from forge.patching.vocabulary import RecordState, RevertStep


def foreign_reason(installed: InstalledVllm, record: dict) -> str | None:
    """Why `record` belongs to another install of vLLM, or None when it is this install's."""
    recorded = record.get("vllm")
    if recorded is not None and recorded != str(installed.version):
        return (f"it was written for vLLM {recorded}, and vLLM {installed.version} was installed "
                "since")
    if record.get("state") != RecordState.APPLIED or record.get("reverting") is not None:
        return None     # an interrupted run: some files may not be written yet
    record_file = pip_record.record_file(installed.site_dir)
    if record_file is None:
        return None     # no installer's RECORD to tell a reinstall by
    label = record_file.relative_to(installed.site_dir).as_posix()
    written = [e for run in runs(record) for e in run.get("files", []) if e["path"] == label]
    if written:
        if _sha(record_file) != written[-1]["patched_sha256"]:
            return (f"{label} is not the one vllm-forge wrote: vLLM {installed.version} was "
                    "installed again since")
        return None
    return _reinstalled_under_an_old_record(installed, record)


def _reinstalled_under_an_old_record(installed: InstalledVllm, record: dict) -> str | None:
    """A record from before vllm-forge listed itself in RECORD: the install is a new one when
    every vLLM file the record patched holds its original bytes again."""
    package = installed.package_dir.relative_to(installed.site_dir).as_posix() + "/"
    patched = [e for e in record.get("files", [])
               if e["path"].startswith(package) and e.get("package") is None]
    current = [_sha(installed.site_dir / e["path"]) for e in patched]
    if patched and all(sha == e["original_sha256"] for sha, e in zip(current, patched)):
        return (f"every vLLM file it patched holds its original bytes again: vLLM "
                f"{installed.version} was installed again since")
    return None


def interrupted_run(record: dict) -> str | None:
    """"apply" or "revert" when such a run was killed while it replaced files, else None."""
    reverting = record.get("reverting")
    if reverting is not None and reverting.get("step") == RevertStep.RESTORING:
        return "revert"
    if record.get("state") == RecordState.APPLYING:
        return "apply"
    return None


def _sha(path: Path) -> str | None:
    data = read_if_present(path, PACKAGE_FILE)
    return hashlib.sha256(data).hexdigest() if data is not None else None
