"""Published versions of any PyPI project, read from the PEP 691 JSON simple index and cached the
way forge.upstream.releases caches vLLM's: `<cache>/pypi/<canonical name>.json`, re-read when older than
INDEX_MAX_AGE_S unless offline, and used as it is when the index does not answer.

Dependency constraints (kind `dependency` in patches/series.yaml) use it to prove a package
exists, that a specifier admits something, and which versions a release's requirement admits.
A local wheelhouse (`--find-links DIR`) is read by `wheelhouse_versions` instead.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from forge import files
from forge.data_formats import load_json
from forge.errors import ForgeError
from forge.files import write_text_atomically
from forge.json_text import dump_json

DEFAULT_SIMPLE_URL = "https://pypi.org/simple/"
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
INDEX_MAX_AGE_S = 6 * 3600
# What one project page may be: PyPI's JSON page for torch, among the largest a dependency
# constraint asks for, is a few MB; an answer past this is refused, not read until memory runs out.
PAGE_CAP = 32 * 1024 * 1024
# A page's read in all, retries included (requests' timeout is per read).
PAGE_DEADLINE_S = 300


class UnknownProject(ForgeError):
    """The index answered and has no such project."""


def simple_url() -> str:
    """The PEP 503/691 simple index root ($VLLM_FORGE_PYPI overrides PyPI)."""
    url = os.environ.get("VLLM_FORGE_PYPI") or DEFAULT_SIMPLE_URL
    return url if url.endswith("/") else url + "/"


def _cache_file(name: str) -> Path:
    from forge.upstream.releases import cache_dir

    return cache_dir() / "pypi" / f"{canonicalize_name(name)}.json"


def _read_cache(name: str) -> dict | None:
    try:
        cached = load_json(_cache_file(name), files.CACHE)
    except ForgeError:       # missing or damaged: asked again
        return None
    return cached if cached.get("index") == simple_url() else None


def version_of_file(filename: str) -> Version | None:
    """The version a wheel or sdist file name carries (None for anything else)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def _parse_project_page(data: object) -> list[str]:
    """The versions of a PEP 691 project page; ValueError for a page of another shape."""
    found = data.get("files") if isinstance(data, dict) else None
    if not isinstance(found, list) or not all(
            isinstance(f, dict) and isinstance(f.get("filename"), str) for f in found):
        raise ValueError("not a PEP 691 project page (files: a list of {filename: ...})")
    versions = {version_of_file(f["filename"]) for f in found if not f.get("yanked")}
    # Oldest first by PEP 440 order (as text, "5.9.0" would sort after "5.15.0").
    return [str(v) for v in sorted(v for v in versions if v is not None)]


def _fetch(name: str) -> list[str] | None:
    """The project's versions from the index; None when the index cannot be reached."""
    try:
        import requests  # late: `build.py apply` runs in bare images without it
    except ImportError:
        return None
    from forge.http_session import Deadline, read_capped, retrying_session

    url = simple_url() + canonicalize_name(name) + "/"
    try:
        with Deadline(PAGE_DEADLINE_S) as deadline, retrying_session() as session, session.get(
                url, timeout=60, stream=True, headers={"Accept": JSON_ACCEPT}) as response:
            if response.status_code == 404:
                raise UnknownProject(f"no project {name!r} on the package index {simple_url()}")
            if not response.ok:
                return None
            body = read_capped(response, PAGE_CAP, deadline)
    except requests.RequestException:
        return None
    try:
        return _parse_project_page(json.loads(body))
    except (ValueError, RecursionError):
        return None


def published_versions(name: str, offline: bool = False, refresh: bool = False) -> list[Version]:
    """Every version of project `name` with at least one non-yanked file, oldest first.

    Raises UnknownProject when the index says the project does not exist, ForgeError when the
    index cannot be reached and nothing is cached."""
    cached = _read_cache(name)
    fresh = cached and time.time() - cached.get("fetched_at", 0) < INDEX_MAX_AGE_S
    if cached and (offline or (fresh and not refresh)):
        return sorted(Version(v) for v in cached["versions"])
    fetched = None if offline else _fetch(name)
    if fetched is None:
        if cached:
            return sorted(Version(v) for v in cached["versions"])
        raise ForgeError(f"cannot read {name!r} from the package index {simple_url()} "
                         f"({'offline' if offline else 'unreachable'}) and nothing is cached at "
                         f"{_cache_file(name)}")
    write_text_atomically(_cache_file(name), dump_json(
        {"index": simple_url(), "fetched_at": time.time(), "versions": fetched}, indent=1))
    return [Version(v) for v in fetched]


def live_versions(name: str) -> list[Version] | None:
    """The versions the index publishes right now (cache refreshed); None when it does not
    answer (pip could not install from it either)."""
    fetched = _fetch(name)
    if fetched is None:
        return None
    write_text_atomically(_cache_file(name), dump_json(
        {"index": simple_url(), "fetched_at": time.time(), "versions": fetched}, indent=1))
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
