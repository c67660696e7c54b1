"""A result record: benchmarks/results/<id>/result.json, what ran (command, recipe, target, GPU,
versions, settings, date), its raw figures and its verdict, with the raw files it came from beside
it. Validated on load; every error is one line naming the file and the field:

    benchmarks/results/h200-0.27.1-smoke-26b-a4b-v2/result.json: figures.step_ms: must be a finite number
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from forge import REPO_ROOT, files
from forge.data_formats import parse_json
from forge.schema import Field, ListOf, SchemaError, validate

RESULTS = REPO_ROOT / "benchmarks" / "results"
RECORD_FILE = "result.json"
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9.-]*")
KINDS = ("smoke", "bench", "profile", "serve", "drift", "build", "tune", "latency", "suite")
VERDICTS = ("pass", "fail", "measured", "win", "loss", "tie")
SETTING_TYPES = (str, int, float, bool)


def _iso_date(value: str) -> str | None:
    try:
        date.fromisoformat(value)
    except ValueError:
        return f"not a date YYYY-MM-DD: {value!r}"
    return None


def _finite_figures(figures: dict) -> str | None:
    for name, value in figures.items():
        if not isinstance(name, str) or not name:
            return f"figure names must be text (got {name!r})"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{name}: must be a finite number (got {value!r})"
    return None


def _plain_settings(settings: dict) -> str | None:
    for name, value in settings.items():
        if value is not None and not isinstance(value, SETTING_TYPES):
            return f"{name}: must be text, a number, a boolean or null (got {type(value).__name__})"
    return None


def _plain_file_name(name: str) -> str | None:
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or ".." in parts or name == RECORD_FILE:
        return f"not a file beside the record: {name!r}"
    return None


GPU_SCHEMA = {
    "name": Field(str),
    "count": Field(int, check=lambda n: None if n >= 1 else "must be at least 1"),
    "driver": Field(str, required=False),
}
def _version_texts(versions: dict) -> str | None:
    for name, value in versions.items():
        if not isinstance(name, str) or not (value is None or isinstance(value, str) and value):
            return f"{name}: a package's version must be text, or null where not recorded (got {value!r})"
    return None
def _pairs(pairs: dict) -> str | None:
    """A candidate against its baseline, each a `vllm bench latency` JSON: `{name: {"candidate":
    file beside the record, "baseline": "<record id>/<file>"}}`."""
    for name, pair in pairs.items():
        if not isinstance(name, str) or not ID_PATTERN.fullmatch(name.replace("_", "-")):
            return f"pair names must be [a-z0-9_]+ (got {name!r})"
        if not isinstance(pair, dict) or set(pair) != {"candidate", "baseline"} or not all(
                isinstance(v, str) and v for v in pair.values()):
            return f"{name}: must be {{candidate: file, baseline: <record id>/<file>}} (got {pair!r})"
        if pair["candidate"].count("/") or pair["baseline"].count("/") != 1:
            return f"{name}: candidate is a file beside the record, baseline <record id>/<file>"
    return None


SCHEMA = {
    "schema": Field(int, choices=(1,)),
    "id": Field(str, check=lambda v: None if ID_PATTERN.fullmatch(v) else
                f"must match [a-z0-9.-]+ (got {v!r})"),
    "kind": Field(str, choices=KINDS),
    "date": Field(str, check=_iso_date),
    "command": Field(str),
    "recipe": Field(str, required=False),
    "target": Field(str, required=False),
    "gpu": Field(GPU_SCHEMA, required=False),
    # package -> version as the run named it: vllm, torch, transformers, triton, ...
    "versions": Field(dict, required=False, default={}, check=_version_texts),
    "settings": Field(dict, required=False, default={}, check=_plain_settings),
    "figures": Field(dict, check=_finite_figures),
    "verdict": Field(str, choices=VERDICTS),
    "summary": Field(str, required=False),
    "files": Field(ListOf(str), required=False, default=[]),
    "pairs": Field(dict, required=False, default={}, check=_pairs),
}


@dataclass(frozen=True)
class Record:
    id: str
    kind: str
    date: str
    command: str
    recipe: str | None
    target: str | None
    gpu: dict | None
    versions: dict
    settings: dict
    figures: dict
    verdict: str
    summary: str | None
    files: list
    pairs: dict
    folder: Path

    @property
    def vllm(self) -> str | None:
        return self.versions.get("vllm")

    def raw(self, name: str) -> Path:
        """One of the raw files beside the record (named in its `files`)."""
        if name not in self.files:
            raise SchemaError(f"{self.folder / RECORD_FILE}: files: {name!r} is not one of its files")
        return self.folder / name


def load_record(folder: Path, name: str | None = None) -> Record:
    """The record in `folder`; `name` is how errors call its result.json (default its path)."""
    path = folder / RECORD_FILE
    source = name or str(path)
    data = _read_json(path, source)
    fields = validate(data, SCHEMA, source)
    if fields["id"] != folder.name:
        raise SchemaError(f"{source}: id: must equal its folder's name {folder.name!r} "
                          f"(got {fields['id']!r})")
    for i, file_name in enumerate(fields["files"]):
        problem = _plain_file_name(file_name)
        if problem is None and not (folder / file_name).is_file():
            problem = f"no such file beside the record: {file_name!r}"
        if problem:
            raise SchemaError(f"{source}: files[{i}]: {problem}")
    for name, pair in fields["pairs"].items():
        if pair["candidate"] not in fields["files"]:
            raise SchemaError(f"{source}: pairs.{name}.candidate: {pair['candidate']!r} is not one of its files")
    del fields["schema"]
    return Record(folder=folder, **fields)


def _read_json(path: Path, source: str) -> Any:
    """The record through the file layer (a regular file, the REPORT cap) and the one guarded
    JSON loader (duplicate keys, NaN and Infinity, deep nesting refused)."""
    return parse_json(files.read_bytes(path, files.REPORT), source)


def load_records(results: Path | None = None) -> dict[str, Record]:
    """Every record under `results` (default benchmarks/results), by id. A folder there without
    a result.json is not a record and is refused, so nothing half-written is cited.

    Loading every recipe checks its evidence against all ~80 records: what was read is kept while
    no folder and no result.json under `results` changed (by their status), and handed out as a
    new dict each time."""
    results = RESULTS if results is None else results
    folders = sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []
    return dict(_load_folders(tuple((folder, _directories_status(folder), _status(folder / RECORD_FILE))
                                    for folder in folders)))


def _directories_status(folder: Path) -> tuple:
    """The folder's and each folder's beneath it (raw files may sit in one): a file named in
    `files` that comes or goes changes its directory's times."""
    return tuple((top, _status(Path(top))) for top, _, _ in os.walk(folder))


def _status(path: Path) -> tuple[int, ...] | None:
    """What changes when the file or folder does: a folder's times change as a file in it comes
    or goes, a file's with every write (ctime even where the writer kept mtime and size)."""
    try:
        found = path.stat()
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


@functools.lru_cache(maxsize=8)
def _load_folders(folders: tuple[tuple[Path, object, object], ...]) -> tuple[tuple[str, Record], ...]:
    return tuple((folder.name, load_record(folder, _display(folder / RECORD_FILE)))
                 for folder, _, _ in folders)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def check_cited(ids: list, records: dict[str, Record], source: str, where: str) -> None:
    """Every id in `ids` names a record; one line naming the file and the field otherwise."""
    for i, record_id in enumerate(ids):
        if record_id not in records:
            raise SchemaError(f"{source}: {where}[{i}]: no result record {record_id!r} "
                              f"(benchmarks/results/<id>/result.json)")
