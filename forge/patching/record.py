"""The apply record, `vllm/.vllm-forge/applied.json`: reading it (every field checked, so a damaged
record is one line naming the file and the field, never a traceback), the copy of each run's file
list kept next to the saved originals (`originals/files.json`, `originals/runN-files.json`) from
which `--revert` restores even when applied.json itself is damaged. Whether a record belongs to
the install it sits in is forge.patching.ownership's question.

A run's file list never changes once written (only the record's `state` does), so the copy is
written once, at staging, before any original."""
from __future__ import annotations

import re
from pathlib import Path

from forge.data_formats import DataError, parse_json
from forge.errors import FileError, ForgeError
from forge.files import INDEX, read_bytes, write_text_atomically
from forge.json_text import dump_json_lines
from forge.patching.installed import InstalledVllm
from forge.patching.vocabulary import RecordState, RevertStep

RECORD_DIR = ".vllm-forge"
RECORD_FILE = "applied.json"
RUN_FILES = "files.json"          # a run's own copy of its file list, among its originals
RUN_FILES_NAME = re.compile(r"(?:run(\d+)-)?" + re.escape(RUN_FILES))

_MISSING = "missing, while the originals it saved are there"
_OPTIONAL_TEXT = (str, type(None))
_ENTRY_FIELDS = {"path": (str,), "original": _OPTIONAL_TEXT, "original_sha256": _OPTIONAL_TEXT,
                 "patched_sha256": _OPTIONAL_TEXT}
_DEPENDENCY_FIELDS = ("id", "package", "specifier", "previous", "installed", "vllm_requires")
_RUN_LISTS = {"applied": str, "created_dirs": str, "dependencies": dict, "files": dict}


def record_path(installed: InstalledVllm) -> Path:
    return installed.package_dir / RECORD_DIR / RECORD_FILE


def originals_prefix(run_index: int) -> str:
    """Where run `run_index` (0: the first apply) keeps its original bytes, inside the record."""
    return "originals/" if run_index == 0 else f"originals/run{run_index}-"


def runs(record: dict) -> list[dict]:
    """The runs a record holds, oldest first: the first apply (the record's own fields), then
    every later one that brought a drifted dependency back inside its constraint."""
    return [record, *record.get("later", [])]


def read(installed: InstalledVllm) -> dict | None:
    """The record, checked field by field; None when there is none."""
    path = record_path(installed)
    if not path.exists():
        if holds_files(path.parent / "originals"):
            raise ForgeError(f"{path}: {_MISSING}; {_way_out(installed)}")
        return None
    problem, record = _parse(path)
    if problem is None:
        problem = _record_problem(record)
    if problem is not None:
        raise ForgeError(f"{path}: {problem}; {_way_out(installed)}")
    return record


def read_for_revert(installed: InstalledVllm) -> dict | None:
    """What --revert restores from: the record, or, when applied.json is damaged or gone while
    the originals are there, the runs rebuilt from their own file lists."""
    path = record_path(installed)
    problem, record = _parse(path) if path.exists() else (_MISSING, None)
    if problem is None:
        problem = _record_problem(record)
    if problem is None:
        return record
    rebuilt = _rebuilt_from_run_files(installed)
    if rebuilt is None and (path.exists() or holds_files(path.parent / "originals")):
        raise ForgeError(f"{path}: {problem}; {_way_out(installed)}")
    return rebuilt


def holds_files(directory: Path) -> bool:
    return directory.is_dir() and any(p.is_file() for p in directory.iterdir())


def write_run_files(record_dir: Path, prefix: str, run: dict) -> None:
    write_text_atomically(record_dir / f"{prefix}{RUN_FILES}",
                          dump_json_lines(run, "the apply record") + "\n")


def run_files_name(prefix: str) -> str:
    return f"{prefix}{RUN_FILES}"


def _parse(path: Path) -> tuple[str | None, dict]:
    try:
        data = read_bytes(path, INDEX)
    except FileError as exc:
        return f"cannot be read ({str(exc).partition(': ')[2]})", {}
    try:
        return None, parse_json(data, str(path))
    except DataError as exc:
        return f"not valid JSON ({str(exc).partition(': ')[2]})", {}


def _record_problem(record) -> str | None:
    if not isinstance(record, dict):
        return f"holds a JSON {type(record).__name__}, not the object vllm-forge writes"
    state = record.get("state")
    if state not in {s.value for s in RecordState}:
        return f"field state is {state!r}, not one of {', '.join(s.value for s in RecordState)}"
    reverting = record.get("reverting")
    if reverting is not None and (not isinstance(reverting, dict) or reverting.get("step")
                                  not in {s.value for s in RevertStep}):
        return f"field reverting is {reverting!r}, not a revert step vllm-forge writes"
    later = record.get("later", [])
    if not isinstance(later, list):
        return "field later is not a list"
    for index, run in enumerate(runs(record)):
        where = "" if index == 0 else f"later[{index - 1}]."
        problem = run_problem(run, where)
        if problem is not None:
            return problem
    return None


def run_problem(run, where: str = "") -> str | None:
    """What is wrong with one run's fields (None: nothing), the field named as `where`+name."""
    if not isinstance(run, dict):
        return f"field {where.rstrip('.') or 'record'} is not an object"
    for name, item_type in _RUN_LISTS.items():
        value = run.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, item_type) for v in value):
            return f"field {where}{name} is not a list of {item_type.__name__}"
    for index, entry in enumerate(run.get("files", [])):
        for name, types in _ENTRY_FIELDS.items():
            if name not in entry:
                return f"field {where}files[{index}].{name} is missing"
            if not isinstance(entry[name], types):
                return f"field {where}files[{index}].{name} is {entry[name]!r}"
    for index, dependency in enumerate(run.get("dependencies", [])):
        for name in _DEPENDENCY_FIELDS:
            if not isinstance(dependency.get(name), str):
                return f"field {where}dependencies[{index}].{name} is missing or not text"
    return None


def _rebuilt_from_run_files(installed: InstalledVllm) -> dict | None:
    """Every run's own copy of its file list, in run order, as one record (state applying: which
    files were replaced is unknown, and revert checks each file's bytes anyway)."""
    originals = installed.package_dir / RECORD_DIR / "originals"
    found: dict[int, dict] = {}
    for path in originals.glob(f"*{RUN_FILES}") if originals.is_dir() else []:
        match = RUN_FILES_NAME.fullmatch(path.name)
        problem, run = _parse(path)
        if match is None:
            continue
        if problem is None:
            problem = run_problem(run)
        if problem is not None:
            raise ForgeError(f"{path}: {problem}; the saved originals cannot be matched to their "
                             f"files: reinstall vLLM ({_reinstall(installed)})")
        found[int(match[1] or 0)] = run
    if 0 not in found:
        return None
    later = [found[i] for i in sorted(found) if i > 0]
    return dict(found[0], state=RecordState.APPLYING, later=later)


def _way_out(installed: InstalledVllm) -> str:
    if _rebuilt_from_run_files_safely(installed):
        return ("`build.py apply --revert` restores every file from the saved originals "
                f"({installed.package_dir / RECORD_DIR / 'originals'})")
    return f"it cannot be used: reinstall vLLM ({_reinstall(installed)}) and remove {RECORD_DIR}/"


def _rebuilt_from_run_files_safely(installed: InstalledVllm) -> bool:
    try:
        return _rebuilt_from_run_files(installed) is not None
    except ForgeError:
        return False


def _reinstall(installed: InstalledVllm) -> str:
    return f"pip install --force-reinstall --no-deps {installed.distribution}=={installed.version}"
