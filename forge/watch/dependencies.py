"""patches/dependency-watch.yaml: the dependencies of Gemma 4 serving that `build.py
upstream-watch` follows on PyPI, each with the reproduction it runs and how far it was checked.
Validated on load; written back (comment block kept) when the watch moves `checked_through`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name

from forge import REPO_ROOT, files
from forge.errors import ForgeError
from forge.files import write_text_atomically
from forge.schema import Field, ListOf, load_yaml, pep440_version, validate
from forge.watch.drift import PROBES

DEFAULT_WATCH = REPO_ROOT / "patches" / "dependency-watch.yaml"


def _probe_name(value: str) -> str | None:
    known = sorted(set(PROBES.values()))
    return None if value in known else f"no such reproduction (known: {', '.join(known)})"


def _package_name(value: str) -> str | None:
    if canonicalize_name(value) not in PROBES:
        return f"no drift reproduction for {value!r} (known: {', '.join(sorted(PROBES))})"
    return None


ENTRY_SCHEMA = {
    "package": Field(str, check=_package_name),
    "probe": Field(str, check=_probe_name),
    "checked_through": Field(str, check=pep440_version),
    "why": Field(str),
}
WATCH_SCHEMA = {"dependencies": Field(ListOf(ENTRY_SCHEMA, min_items=1))}


@dataclass
class WatchedDependency:
    package: str
    probe: str
    checked_through: str
    why: str


@dataclass
class WatchList:
    path: Path
    dependencies: list[WatchedDependency]
    header: str = ""


def load_watch(path: str | Path | None = None) -> WatchList:
    path = Path(path or DEFAULT_WATCH)
    data = validate(load_yaml(path), WATCH_SCHEMA, str(path))
    seen: set[str] = set()
    entries = []
    for index, entry in enumerate(data["dependencies"]):
        name = canonicalize_name(entry["package"])
        if name in seen:
            raise ForgeError(f"{path}: dependencies[{index}].package: {entry['package']} is listed twice")
        if PROBES[name] != entry["probe"]:
            raise ForgeError(f"{path}: dependencies[{index}].probe: {entry['package']} is "
                             f"reproduced by {PROBES[name]!r}, not {entry['probe']!r}")
        seen.add(name)
        entries.append(WatchedDependency(**entry))
    return WatchList(path, entries, _leading_comments(files.read_text(path, files.DATA_YAML)))


def _leading_comments(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        if line.strip() and not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


class _BlockStrings(yaml.SafeDumper):
    """Multi-line strings (`why`) as `|` blocks, as the file is written by hand."""


_BlockStrings.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def save_watch(watch: WatchList) -> Path:
    data = {"dependencies": [{"package": d.package, "probe": d.probe,
                              "checked_through": d.checked_through, "why": d.why}
                             for d in watch.dependencies]}
    body = yaml.dump(data, Dumper=_BlockStrings, sort_keys=False, width=100, allow_unicode=True)
    return write_text_atomically(watch.path, watch.header + body, check=load_watch)
