"""vLLM releases on PyPI: which exist, their sdists (sha256-checked against the index, cached once)
and the `vllm/` package tree inside each.

Everything lives under the cache directory ($VLLM_FORGE_CACHE, default ~/.cache/vllm-forge):
  index.json              the release list and sdist hashes last read from the index
  sdists/vllm-X.tar.gz    each release's sdist, verified on download
  trees/X/vllm/...        the release's Python package tree, extracted once
  build-files/X/...       files of the sdist outside vllm/ (CMakeLists.txt, ...), read once
  locks/                  one lock file per entry being made, so concurrent runs make it once
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

from packaging.version import InvalidVersion, Version

from forge import files
from forge.data_formats import load_json
from forge.errors import ForgeError
from forge.files import one_maker, write_bytes_atomically, write_text_atomically
from forge.http_session import AnswerError, Deadline, read_capped, retrying_session
from forge.json_text import dump_json
from forge.progress import Progress
from forge.upstream.archives import extract_stream
from forge.versions import Release

DEFAULT_INDEX_URL = "https://pypi.org/simple/vllm/"
SDIST_NAME = re.compile(r"^vllm-(?P<version>[^/]+)\.tar\.gz$")
# The index is re-read when the cached copy is older than this, unless offline.
INDEX_MAX_AGE_S = 6 * 3600
# A simple index page is links to a project's files, far below this; an answer past it is
# refused (an endless page would otherwise be read until memory runs out), and so is one past its
# deadline, retries included (requests' timeout is per read).
INDEX_CAP = 16 * 1024 * 1024
INDEX_DEADLINE_S = 300


def index_url() -> str:
    """The PEP 503 simple-index page listing vLLM's files ($VLLM_FORGE_INDEX overrides PyPI)."""
    return os.environ.get("VLLM_FORGE_INDEX") or DEFAULT_INDEX_URL


def cache_dir() -> Path:
    given = os.environ.get("VLLM_FORGE_CACHE")
    root = given or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm-forge")
    # A refusal names the variable when the user set it.
    source = "$VLLM_FORGE_CACHE" if given else "the cache directory"
    path = Path(root)
    # Only what no use of it survives (a file in its place or above it): not check_output_dir's
    # write probe, since a read-only cache that already holds what a command needs is no fault
    # (its writes, if any, fail by name then).
    for existing in (path, *path.parents):
        if os.path.exists(existing):
            if not os.path.isdir(existing):
                where = "" if existing == path else f" ({existing} is a file)"
                raise ForgeError(f"{source} {path}: is not a directory{where}")
            break
    # Made by the first write into it (each writer makes its folders), not here: a command that
    # only reads, offline, and finds nothing leaves no empty folders behind. One that could not
    # make it is refused now, before any work, not at its first write.
    if not os.path.exists(path):            # False too where a folder above cannot be searched
        folder = next(p for p in path.parents if os.path.exists(p))
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ForgeError(f"{source} {path}: cannot create it: {folder} is not writable")
    return path


def locks_dir() -> Path:
    """Lock files of the cache's makers (forge.files.one_maker), apart from the entries."""
    return cache_dir() / "locks"


@dataclass(frozen=True)
class Sdist:
    version: Version
    url: str
    sha256: str


class _LinkParser(HTMLParser):
    """Collects (href, text) of every anchor in a PEP 503 simple-index page."""

    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, bool]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            attributes = dict(attrs)
            self.links.append((attributes.get("href", ""), "data-yanked" in attributes))


def parse_simple_index(html: str, base_url: str) -> dict[str, dict]:
    """Map version -> {url, sha256} for every non-yanked final-release sdist on the page."""
    parser = _LinkParser()
    parser.feed(html)
    found: dict[str, dict] = {}
    for href, yanked in parser.links:
        url, _, fragment = href.partition("#")
        match = SDIST_NAME.match(url.rsplit("/", 1)[-1])
        if not match or yanked or not fragment.startswith("sha256="):
            continue
        try:
            version = Version(match["version"])
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease:
            continue
        found[str(version)] = {"url": urljoin(base_url, url), "sha256": fragment[len("sha256="):]}
    return found


def _index_file() -> Path:
    return cache_dir() / "index.json"


def _read_cached_index() -> dict | None:
    try:
        cached = load_json(_index_file(), files.INDEX)
    except ForgeError:       # missing or damaged: rebuilt from PyPI
        return None
    # valid JSON of another shape (a list, no releases map) is as damaged as bad JSON
    if not isinstance(cached, dict) or not isinstance(cached.get("releases"), dict):
        return None
    return cached


def load_index(offline: bool = False, refresh: bool = False) -> dict[str, dict]:
    """The release -> sdist map, from the cache when fresh (or when offline), else from PyPI."""
    url = index_url()
    cached = _read_cached_index()
    if cached and cached.get("index_url", DEFAULT_INDEX_URL) != url:
        cached = None  # read from another index: not this one's answer
    fresh = cached and time.time() - cached.get("fetched_at", 0) < INDEX_MAX_AGE_S
    if cached and (offline or (fresh and not refresh)):
        return cached["releases"]
    if offline:
        raise ForgeError(f"offline and no cached vLLM release index at {_index_file()}")
    import requests  # late: the apply path inside images never needs the network

    try:
        with Deadline(INDEX_DEADLINE_S) as deadline, retrying_session() as session, session.get(
                url, timeout=60, stream=True, headers={"Accept": "text/html"}) as response:
            response.raise_for_status()
            page = read_capped(response, INDEX_CAP, deadline)
            encoding = response.encoding or "utf-8"
    except AnswerError as exc:
        raise ForgeError(f"cannot read the vLLM release index: {exc}") from None
    except requests.RequestException as exc:
        if cached:
            return cached["releases"]
        raise ForgeError(f"cannot read the vLLM release index {url}: {exc}") from exc
    try:
        html = page.decode(encoding, errors="replace")
    except LookupError:
        html = page.decode("utf-8", errors="replace")   # an unknown charset: the links are ASCII
    releases = parse_simple_index(html, url)
    if not releases:
        raise ForgeError(f"the index {url} lists no vLLM sdists")
    write_text_atomically(_index_file(), dump_json(
        {"fetched_at": time.time(), "index_url": url, "releases": releases}, indent=1, sort_keys=True))
    return releases


def list_releases(minimum: str | None = None, offline: bool = False) -> list[Version]:
    """Final vLLM releases with an sdist on PyPI, oldest first, from `minimum` on."""
    versions = sorted(Version(v) for v in load_index(offline=offline))
    if minimum:
        versions = [v for v in versions if v >= Version(minimum)]
    return versions


def sdist_info(version: str, offline: bool = False) -> Sdist:
    parsed = Release(version).version
    releases = load_index(offline=offline)
    entry = releases.get(str(parsed))
    if entry is None and not offline:
        entry = load_index(refresh=True).get(str(parsed))
    if entry is None:
        raise ForgeError(f"vLLM {version} has no sdist on the index {index_url()}")
    return Sdist(parsed, entry["url"], entry["sha256"])


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(version: str, offline: bool = False) -> Path:
    """The verified sdist of a release, downloaded once into the cache."""
    info = sdist_info(version, offline=offline)
    target = cache_dir() / "sdists" / f"vllm-{info.version}.tar.gz"
    if target.exists() and sha256_of(target) == info.sha256:
        return target
    with one_maker(target, locks_dir()):   # a run downloading it: wait for it, then look again
        return _fetched(info, target, version, offline)


def _fetched(info: Sdist, target: Path, version: str, offline: bool) -> Path:
    if target.exists():
        if sha256_of(target) == info.sha256:
            return target
        target.unlink()  # a damaged or replaced file: fetch again rather than trust it
    if offline:
        raise ForgeError(f"offline and vLLM {version}'s sdist is not cached at {target}")
    import requests

    target.parent.mkdir(parents=True, exist_ok=True)
    # A private partial file per download: concurrent fetches of one release never share bytes.
    handle, partial_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
    os.close(handle)
    partial = Path(partial_name)
    try:
        _download(info, partial)
    except requests.RequestException as exc:
        partial.unlink(missing_ok=True)
        raise ForgeError(f"cannot download vLLM {version}'s sdist from {info.url}: {exc}") from exc
    actual = sha256_of(partial)
    if actual != info.sha256:
        partial.unlink(missing_ok=True)
        raise ForgeError(f"vLLM {version}'s sdist sha256 is {actual}, the index says {info.sha256}")
    os.replace(partial, target)
    return target


def _download(info: Sdist, partial: Path) -> None:
    """Stream the sdist into `partial`, with progress in bytes (transient failures retried).
    Timed from the request on: a proxy that fetches the whole file before it answers would
    otherwise leave all of the wait out ("19.7 MB in 0.0 s")."""
    with Progress(f"downloading vLLM {info.version} sdist") as progress, retrying_session() as session, \
            session.get(info.url, stream=True, timeout=300) as response:
        response.raise_for_status()
        progress.total = int(response.headers.get("Content-Length") or 0) or None  # drawn with the first block
        with open(partial, "wb") as out:
            for block in response.iter_content(1 << 20):
                out.write(block)
                progress.advance(len(block))


def tree_path(version: str) -> Path:
    """Where release_tree keeps release `version`'s tree (made or not)."""
    return cache_dir() / "trees" / str(Release(version).version)


# What a tree holds of its sdist: the package, the requirement files its setup.py reads
# (forge.patching.dependencies) and the kernel build's CMakeLists.txt (forge.upgrade.kernels),
# taken in the same pass rather than decompressing the sdist again for each.
TREE_PARTS = ("vllm/", "requirements/", "CMakeLists.txt")


def release_tree(version: str, offline: bool = False) -> Path:
    """The directory that holds release `version`'s `vllm/` package, extracted once, and beside it
    the sdist's `requirements/` (in trees made since it was added).

    Returns the parent of `vllm/`, laid out like a site-packages directory.
    """
    parsed = Release(version).version
    tree = tree_path(version)
    if (tree / "vllm" / "__init__.py").exists():
        return tree
    with one_maker(tree, locks_dir()):     # a run extracting it: wait for its tree
        if not (tree / "vllm" / "__init__.py").exists():
            _extract_tree(parsed, tree, offline)
    return tree


def _extract_tree(parsed: Version, tree: Path, offline: bool) -> None:
    sdist = fetch_sdist(str(parsed), offline=offline)
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{parsed}-", dir=tree.parent))
    try:
        top = f"vllm-{parsed}/"
        size = sdist.stat().st_size
        # One pass over the gzip stream (extract_stream); progress in the sdist's bytes read, as
        # the number of files is known only at the end.
        with open(sdist, "rb") as raw, tarfile.open(fileobj=raw, mode="r|gz") as archive, \
                Progress(f"extracting vLLM {parsed}'s vllm/ package", total=size) as progress:
            files = 0

            def package_members():
                nonlocal files
                for member in archive:
                    progress.update(min(raw.tell(), size), detail=f"{files} files")
                    if member.name.startswith(tuple(top + part for part in TREE_PARTS)) and \
                            (member.isfile() or member.isdir()):
                        member.name = member.name[len(top):]
                        files += member.isfile()
                        yield member

            extract_stream(archive, staging, package_members())
            progress.update(size, detail=f"{files} files")
        if not (staging / "vllm" / "__init__.py").exists():
            raise ForgeError(f"vLLM {parsed}'s sdist {sdist} holds no vllm/ package")
        shutil.rmtree(tree, ignore_errors=True)  # a half-made tree from an interrupted run
        try:
            os.replace(staging, tree)
        except OSError:
            # Another process extracted the same release meanwhile: its complete tree wins.
            if not (tree / "vllm" / "__init__.py").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def release_file(version: str, relative_path: str, offline: bool = False) -> Path | None:
    """One file of a release's package tree (path relative to the tree, e.g. `vllm/envs.py`)."""
    path = release_tree(version, offline=offline) / relative_path
    return path if path.exists() else None


def release_build_file(version: str, relative_path: str, offline: bool = False) -> Path | None:
    """A file of release `version`'s sdist outside the vllm/ package (`CMakeLists.txt`,
    `cmake/utils.cmake`, `docker/Dockerfile`): from the release tree when it is one of the
    TREE_PARTS, else taken from the sdist once and cached; None when the sdist has no such file."""
    parsed = Release(version).version
    if relative_path.startswith(TREE_PARTS):
        in_tree = release_tree(str(parsed), offline=offline) / relative_path
        if in_tree.is_file():      # a tree made before the part was added lacks it: the sdist
            return in_tree
    cached = cache_dir() / "build-files" / str(parsed) / relative_path
    if cached.is_file():
        return cached
    sdist = fetch_sdist(str(parsed), offline=offline)
    with tarfile.open(sdist) as archive:
        try:
            member = archive.getmember(f"vllm-{parsed}/{relative_path}")
        except KeyError:
            return None
        handle = archive.extractfile(member) if member.isfile() else None
        if handle is None:
            return None
        data = handle.read()
    return write_bytes_atomically(cached, data)
