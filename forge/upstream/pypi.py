"""Published versions of any PyPI project, read from the PEP 691 JSON simple index and cached the
way forge.upstream.releases caches vLLM's: `<cache>/pypi/<canonical name>.json`, re-read when older than
INDEX_MAX_AGE_S unless offline, and used as it is when the index does not answer.

Dependency constraints (kind `dependency` in patches/series.yaml) use it to prove a package
exists, that a specifier admits something, and which versions a release's requirement admits.
A local wheelhouse (`--find-links DIR`) is read by `wheelhouse_versions` instead.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from forge import files
from forge.data_formats import load_json_entry
from forge.errors import ForgeError
from forge.files import write_entry
from forge.json_text import dump_json
from forge.untrusted import visible

if TYPE_CHECKING:
    from forge.upstream.entries import PypiEntry

DEFAULT_SIMPLE_URL = "https://pypi.org/simple/"
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
INDEX_MAX_AGE_S = 6 * 3600
# A project page holds every file of every release: torch's, among the largest, is a few MB.
PAGE_CAP = 32 << 20


class UnknownProject(ForgeError):
    """The index answered and has no such project."""


def simple_url() -> str:
    """The PEP 503/691 simple index root ($VLLM_FORGE_PYPI overrides PyPI)."""
    url = os.environ.get("VLLM_FORGE_PYPI") or DEFAULT_SIMPLE_URL
    return url if url.endswith("/") else url + "/"


def _cache_file(name: str) -> Path:
    from forge.upstream.releases import cache_dir

    return cache_dir() / "pypi" / f"{canonicalize_name(name)}.json"


def _read_cache(name: str) -> PypiEntry | None:
    """The cached page as published_versions writes it (a PypiEntry), for this index; None when
    missing, damaged or of another shape (asked again)."""
    from forge.typed import entry_or_none
    from forge.upstream.entries import PypiEntry

    cached = entry_or_none(PypiEntry, load_json_entry(_cache_file(name), files.CACHE))
    return cached if cached is not None and cached.index == simple_url() else None


def version_of_file(filename: str) -> Version | None:
    """The version a wheel or sdist file name carries (None for anything else)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def _parse_project_page(data: object, url: str) -> list[str]:
    """The versions of a PEP 691 project page's non-yanked files; ForgeError naming the field for
    a page of another shape (a list, files that are no list of objects with a filename)."""
    listed = data.get("files") if isinstance(data, dict) else None
    if not isinstance(listed, list):
        raise ForgeError(f"the package index page {visible(url)}: no list of files in its JSON")
    versions = set()
    for number, entry in enumerate(listed):
        if not (isinstance(entry, dict) and isinstance(entry.get("filename"), str)):
            raise ForgeError(f"the package index page {visible(url)}: files[{number}] has no filename")
        if not entry.get("yanked"):
            versions.add(version_of_file(entry["filename"]))
    # Oldest first by PEP 440 order (as text, "5.9.0" would sort after "5.15.0").
    return [str(v) for v in sorted(v for v in versions if v is not None)]


def _fetch(name: str) -> list[str] | None:
    """The project's versions from the index; None when the index cannot be reached."""
    page = _project_page(name)
    return None if page is None else _parse_project_page(*page)


def _project_page(name: str) -> tuple[object, str] | None:
    """The project's PEP 691 page as parsed JSON, and its URL; None when the index cannot be
    reached or does not speak JSON; UnknownProject when it has no such project."""
    try:
        import requests  # late: `build.py apply` runs in bare images without it
    except ImportError:
        return None
    from forge.data_formats import parse_json
    from forge.upstream import fetch

    url = simple_url() + canonicalize_name(name) + "/"
    try:
        answer = fetch.get_capped(url, PAGE_CAP, "the package index page",
                                  headers={"Accept": JSON_ACCEPT})
    except requests.RequestException:
        return None
    if answer.status == 404:
        raise UnknownProject(f"no project {name!r} on the package index {simple_url()}")
    if answer.status >= 400 or answer.content_type.split(";")[0].strip() not in (
            JSON_ACCEPT, "application/json"):
        return None               # an index that does not speak JSON: as one not reached
    return parse_json(answer.body, f"the package index page {visible(url)}"), url


def file_url(name: str, sha256: str) -> str | None:
    """Where the index serves project `name`'s file whose sha256 is `sha256` (an http(s) URL);
    None where the index has no such project or no such file (a wheel of another index, as
    PyTorch's `+cpu` builds are). ForgeError when the index cannot be read."""
    from urllib.parse import urljoin

    try:
        page = _project_page(name)
    except UnknownProject:
        return None
    if page is None:
        raise ForgeError(f"cannot read {name!r} from the package index {simple_url()}")
    data, url = page
    _parse_project_page(data, url)           # the page's shape, checked (a list of named files)
    for entry in data["files"]:              # type: ignore[index]
        hashes = entry.get("hashes")
        if isinstance(hashes, dict) and hashes.get("sha256") == sha256 and isinstance(entry.get("url"), str):
            found = urljoin(url, entry["url"])
            return found if found.startswith(("https://", "http://")) else None
    return None


def published_versions(name: str, offline: bool = False, refresh: bool = False) -> list[Version]:
    """Every version of project `name` with at least one non-yanked file, oldest first.

    Raises UnknownProject when the index says the project does not exist, ForgeError when the
    index cannot be reached and nothing is cached."""
    cached = _read_cache(name)
    fresh = cached is not None and time.time() - cached.fetched_at < INDEX_MAX_AGE_S
    if cached is not None and (offline or (fresh and not refresh)):
        return sorted(Version(v) for v in cached.versions)
    fetched = None if offline else _fetch(name)
    if fetched is None:
        if cached is not None:
            return sorted(Version(v) for v in cached.versions)
        raise ForgeError(f"cannot read {name!r} from the package index {simple_url()} "
                         f"({'offline' if offline else 'unreachable'}) and nothing is cached at "
                         f"{_cache_file(name)}")
    _write_cache(name, fetched)
    return [Version(v) for v in fetched]


def _write_cache(name: str, versions: list[str]) -> None:
    write_entry(_cache_file(name), dump_json(
        {"index": simple_url(), "fetched_at": time.time(), "versions": versions}, indent=1))


def live_versions(name: str) -> list[Version] | None:
    """The versions the index publishes right now (cache refreshed); None when it does not
    answer (pip could not install from it either)."""
    fetched = _fetch(name)
    if fetched is None:
        return None
    _write_cache(name, fetched)
    return [Version(v) for v in fetched]


def wheelhouse_versions(directory: Path, name: str) -> list[Version]:
    """Versions of `name` that a local wheelhouse (pip --find-links DIR) holds."""
    wanted = canonicalize_name(name)
    found = set()
    for path in Path(directory).iterdir():
        if path.name.endswith(".whl"):
            try:
                project, version, _, _ = parse_wheel_filename(path.name)
            except InvalidWheelFilename:
                continue
        else:
            try:
                project, version = parse_sdist_filename(path.name)
            except InvalidSdistFilename:
                continue
        if project == wanted:
            found.add(version)
    return sorted(found)
