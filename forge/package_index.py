"""Published versions of a PyPI project (other than vLLM: forge.releases reads vLLM's own index),
from the JSON simple API (PEP 691), cached like the vLLM release index.

    <cache>/packages/<name>.json     {"fetched_at", "index_url", "versions": [...]}

A version counts when at least one of its files is not yanked. Offline, the cached answer is used
whatever its age.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError
from forge.files import write_text_atomically
from forge.http_session import retrying_session
from forge.releases import INDEX_MAX_AGE_S, cache_dir

DEFAULT_SIMPLE_URL = "https://pypi.org/simple/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def simple_url(package: str) -> str:
    base = os.environ.get("VLLM_FORGE_PACKAGE_INDEX") or DEFAULT_SIMPLE_URL
    return f"{base.rstrip('/')}/{canonicalize_name(package)}/"


def _cache_file(package: str) -> Path:
    return cache_dir() / "packages" / f"{canonicalize_name(package)}.json"


def _read_cache(package: str) -> dict | None:
    try:
        cached = json.loads(_cache_file(package).read_text())
    except (OSError, ValueError):
        return None
    return cached if cached.get("index_url") == simple_url(package) else None


def versions(package: str, offline: bool = False, refresh: bool = False) -> list[Version]:
    """Every published version (yanked ones left out), oldest first."""
    cached = _read_cache(package)
    fresh = cached and time.time() - cached.get("fetched_at", 0) < INDEX_MAX_AGE_S
    if cached and (offline or (fresh and not refresh)):
        return sorted(Version(v) for v in cached["versions"])
    if offline:
        raise ForgeError(f"offline and no cached version list for {package} at {_cache_file(package)}")
    found = _fetch(package)
    write_text_atomically(_cache_file(package), json.dumps(
        {"fetched_at": time.time(), "index_url": simple_url(package),
         "versions": [str(v) for v in found]}, indent=1))
    return found


def final_versions(package: str, newer_than: str | None = None, offline: bool = False) -> list[Version]:
    """Final releases (no pre- or dev-releases), oldest first; only those after `newer_than`."""
    found = [v for v in versions(package, offline=offline) if not (v.is_prerelease or v.is_devrelease)]
    if newer_than is not None:
        found = [v for v in found if v > Version(newer_than)]
    return found


def newest(package: str, offline: bool = False) -> Version:
    found = final_versions(package, offline=offline)
    if not found:
        raise ForgeError(f"{simple_url(package)} lists no final release of {package}")
    return found[-1]


def _fetch(package: str) -> list[Version]:
    import requests

    url = simple_url(package)
    try:
        with retrying_session() as session:
            response = session.get(url, timeout=60, headers={"Accept": SIMPLE_JSON})
        if response.status_code == 404:
            raise ForgeError(f"{package} is not a project on {url}")
        response.raise_for_status()
        files = response.json()["files"]
    except (requests.RequestException, ValueError, KeyError) as exc:
        raise ForgeError(f"cannot read {package}'s versions from {url}: {exc}") from exc
    published = {_file_version(f["filename"]) for f in files if not f.get("yanked")}
    return sorted(v for v in published if v is not None)


def _file_version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        if filename.endswith((".tar.gz", ".zip")):
            return parse_sdist_filename(filename)[1]
    except (InvalidVersion, ValueError):
        return None
    return None
