"""The drift probe's answers kept in the cache, one per release tree, environment and request, and
used again while nothing the answer depended on has changed (forge.watch.drift.run_probe).

    <cache>/drift-probe/<key>.json

The key is the sha256 of what the probe's run is made of: the probe script's bytes, the
environment (its python as named and the interpreter it resolves to, the installed set its marker
file records: forge.upstream.pyenvs), the request (the assistant's config type, each role's
config.json bytes: the model folders are temporary, their names never count), the release and
its tree's path (the answers' tracebacks name the tree's files). Like a compiler's depfile, the
entry also holds every file of the tree the probe read (path -> sha256 of its bytes) or looked
for and did not find (null): it holds only while each is still so.

Only answers of a probe that ran to the end are kept, and only "works" and "breaks": a
probe-error is the check not having run, and is asked again each time. A missing, damaged or
other-shaped entry is asked again and rewritten; a cache that cannot be written (read-only, full)
costs the next run the probe again, never the check.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

from forge import files
from forge.data_formats import load_json_entry
from forge.errors import ForgeError
from forge.json_text import dump_json
from forge.upstream import pyenvs, releases

FORMAT = 1             # the one forge.watch.probe_entry's model takes
KEPT = ("works", "breaks")


def probe_cache_dir() -> Path:
    return releases.cache_dir() / "drift-probe"


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def keys(python: Path, script: Path, assistant_type: str, models: dict[str, str],
         trees: dict[str, Path]) -> dict[str, str]:
    """Each release's entry name under this environment and request."""
    interpreter = os.path.realpath(python)
    found = os.stat(interpreter)
    shared = {
        "format": FORMAT,
        "probe": _sha256(files.read_bytes(script, files.SOURCE)),
        "python": [str(python), interpreter, found.st_size, found.st_mtime_ns],
        "installed": pyenvs.installed_set(python),
        "assistant_type": assistant_type,
        # A role whose folder holds no config.json keys on null (the probe fails on it anyway).
        "models": {role: _sha256(files.read_if_present(Path(folder) / "config.json", files.CACHE))
                   for role, folder in models.items()}}
    return {release: hashlib.sha256(dump_json(
        {**shared, "release": release, "tree": [str(tree), os.path.abspath(tree)]},
        sort_keys=True).encode()).hexdigest() for release, tree in trees.items()}


def load(key: str, tree: Path, roles: list[str]) -> tuple[str, dict] | None:
    """(transformers version, the release's per-role answers) of a valid entry, else None
    (missing, damaged or of another shape, for another key or roles, or a file it read changed:
    ask the probe again)."""
    from forge.typed import entry_or_none
    from forge.watch.probe_entry import ProbeEntry

    entry = entry_or_none(ProbeEntry, load_json_entry(probe_cache_dir() / f"{key}.json", files.CACHE))
    if (entry is None or entry.key != key or sorted(entry.models) != sorted(roles)
            or not all(_still(tree, relative, sha) for relative, sha in entry.read.items())):
        return None
    return entry.transformers, {role: answer.model_dump(exclude_unset=True)
                                for role, answer in entry.models.items()}


def _still(tree: Path, relative: str, sha: str | None) -> bool:
    """Whether the tree's file is still as the probe found it (these bytes, or absent)."""
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts:
        return False
    return _sha256(files.read_if_present(tree / relative, files.SOURCE)) == sha


def store(key: str, release: str, tree: Path, transformers: str, models: dict, read: dict,
          temporary: str) -> None:
    """Keep one release's answers when they may be used again; a write that fails is let go."""
    if any(m.get("outcome") not in KEPT for m in models.values()):
        return            # a probe error: the check did not run, ask again next time
    if _mentions(models, temporary):
        # The answer names the temporary model folder (an error message or traceback quoting the
        # config's path): kept, it would name a folder gone and differently named on every run.
        return
    entry = {"format": FORMAT, "key": key, "release": release, "tree": str(tree),
             "transformers": transformers, "read": read, "models": models}
    try:
        files.write_entry(probe_cache_dir() / f"{key}.json",
                          dump_json(entry, "the drift-probe cache", indent=1) + "\n")
    except (ForgeError, OSError):
        pass              # a read-only or full cache: the answer stands, the next run asks again


def _mentions(value: object, text: str) -> bool:
    if isinstance(value, str):
        return text in value
    if isinstance(value, dict):
        return any(_mentions(k, text) or _mentions(v, text) for k, v in value.items())
    if isinstance(value, list):
        return any(_mentions(v, text) for v in value)
    return False
