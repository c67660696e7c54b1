"""vLLM releases on PyPI: which exist, their sdists (sha256-checked against the index, cached once)
and the `vllm/` package tree inside each.

Everything lives under the cache directory ($VLLM_FORGE_CACHE, default ~/.cache/vllm-forge):
  index.json              the release list and sdist hashes last read from the index
  sdists/vllm-X.tar.gz    each release's sdist, verified on download
  trees/X/vllm/...        the release's Python package tree, extracted once
  tree-manifests/X.json   the sha256 of each file of trees/X as extracted from the verified sdist
  build-files/X/...       files of the sdist outside vllm/ (CMakeLists.txt, ...), read once
  locks/                  one lock file per entry being made, so concurrent runs make it once

Entries are content, not trust: read with no link followed and written by renaming a new file
over the name (forge.files read_entry, open_entry, write_entry), each checked for its shape. What
an index or an sdist may make forge read or write is bounded: a download by the size the index's
JSON form declares (forge.upstream.fetch), an extraction in bytes, members, depth and name length
(forge.upstream.archives.bounded, sdist_bounds).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from packaging.version import InvalidVersion, Version

from forge import files
from forge.data_formats import load_json_entry
from forge.errors import ForgeError
from forge.files import one_maker, open_entry, write_entry
from forge.json_text import dump_json
from forge.progress import Progress
from forge.untrusted import visible
from forge.upstream import fetch
from forge.upstream.archives import BROKEN, Bounds, bounded, extract_stream
from forge.versions import Release

if TYPE_CHECKING:
    from forge.upstream.entries import ReleaseIndex

DEFAULT_INDEX_URL = "https://pypi.org/simple/vllm/"
SDIST_NAME = re.compile(r"^vllm-(?P<version>[^/]+)\.tar\.gz$")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# The index is re-read when the cached copy is older than this, unless offline.
INDEX_MAX_AGE_S = 6 * 3600
# The JSON form (PEP 691) declares each file's size, which bounds its download; an index that
# speaks HTML only (PEP 503) is read as before.
JSON_INDEX = "application/vnd.pypi.simple.v1+json"
INDEX_ACCEPT = f"{JSON_INDEX}, text/html;q=0.1"
# Bounds on what a server or an archive may make forge read or write, far above any real one:
# PyPI's vLLM index page is under 1 MB; the largest sdist (0.34.0) is 51 MB, decompressing to
# 150 MB (2.9 times) in 10,296 members at most 10 folders deep, names at most 183 characters.
INDEX_PAGE_CAP = 16 << 20
SDIST_CAP = 512 << 20               # an sdist the index declares no size for
EXPANSION = 16                      # decompressed bytes per byte of sdist, at most
EXTRACTED_CAP = 2 << 30             # and in all
MEMBERS_CAP = 200_000
DEPTH_CAP = 48                      # folders in a member's name
NAME_CAP = 1024                     # characters in a member's name


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
    size: int | None = None     # as the index declares it (its JSON form), else not known


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
        version = final_release(url.rsplit("/", 1)[-1])
        if version is None or yanked or not fragment.startswith("sha256="):
            continue
        sha256 = fragment[len("sha256="):].lower()
        if _SHA256.fullmatch(sha256):
            found[str(version)] = {"url": urljoin(base_url, url), "sha256": sha256}
    return found


def final_release(filename: str) -> Version | None:
    """The vLLM release an sdist's file name names, where it is a final release (no pre- or
    development release); None for any other file."""
    match = SDIST_NAME.match(filename)
    if not match:
        return None
    try:
        version = Version(match["version"])
    except InvalidVersion:
        return None
    return None if version.is_prerelease or version.is_devrelease else version


def parse_json_index(page: object, base_url: str) -> dict[str, dict]:
    """parse_simple_index for the index's PEP 691 JSON form, which also declares each file's size
    (PEP 700): what a download of it may read at most. ForgeError naming the field for a page of
    another shape."""
    files_listed = page.get("files") if isinstance(page, dict) else None
    if not isinstance(files_listed, list):
        raise ForgeError(f"the index {visible(base_url)}: its JSON page has no list of files")
    found: dict[str, dict] = {}
    for number, entry in enumerate(files_listed):
        if not (isinstance(entry, dict) and isinstance(entry.get("filename"), str)
                and isinstance(entry.get("url"), str) and isinstance(entry.get("hashes"), dict)):
            raise ForgeError(f"the index {visible(base_url)}: files[{number}] is not a file entry "
                             "(filename, url, hashes)")
        version = final_release(entry["filename"])
        sha256 = entry["hashes"].get("sha256")
        size = entry.get("size")
        if version is None or entry.get("yanked") or not isinstance(sha256, str) \
                or not _SHA256.fullmatch(sha256.lower()):
            continue
        found[str(version)] = {"url": urljoin(base_url, entry["url"]), "sha256": sha256.lower()}
        if type(size) is int and 0 < size <= SDIST_CAP:
            found[str(version)]["size"] = size
    return found


def _index_file() -> Path:
    return cache_dir() / "index.json"


def _read_cached_index() -> ReleaseIndex | None:
    """The cached index as load_index writes it; None when missing or damaged (rebuilt from the
    index): valid JSON the model refuses (a list, no releases map, an entry without its URL or
    sha256, a version that is none) is as damaged as bad JSON."""
    from forge.typed import entry_or_none
    from forge.upstream.entries import ReleaseIndex

    return entry_or_none(ReleaseIndex, load_json_entry(_index_file(), files.INDEX))


def _as_dicts(index: ReleaseIndex) -> dict[str, dict]:
    """The releases as load_index returns them: url, sha256 and (where declared) size."""
    return {version: entry.model_dump(exclude_none=True) for version, entry in index.releases.items()}


def load_index(offline: bool = False, refresh: bool = False) -> dict[str, dict]:
    """The release -> sdist map, from the cache when fresh (or when offline), else from PyPI."""
    url = index_url()
    cached = _read_cached_index()
    if cached is not None and cached.index_url != url:
        cached = None  # read from another index: not this one's answer
    fresh = cached is not None and time.time() - cached.fetched_at < INDEX_MAX_AGE_S
    if cached is not None and (offline or (fresh and not refresh)):
        return _as_dicts(cached)
    if offline:
        raise ForgeError(f"offline and no cached vLLM release index at {_index_file()}")
    import requests  # late: the apply path inside images never needs the network

    try:
        answer = fetch.get_capped(url, INDEX_PAGE_CAP, "the vLLM release index",
                                  headers={"Accept": INDEX_ACCEPT})
        if answer.status >= 400:
            raise requests.HTTPError(f"HTTP {answer.status}")
    except requests.RequestException as exc:
        if cached is not None:
            return _as_dicts(cached)
        raise ForgeError(f"cannot read the vLLM release index {url}: {exc}") from exc
    if answer.content_type.split(";")[0].strip() == JSON_INDEX:
        from forge.data_formats import parse_json

        releases = parse_json_index(parse_json(answer.body, f"the index {url}"), url)
    else:
        releases = parse_simple_index(answer.body.decode("utf-8", "replace"), url)
    if not releases:
        raise ForgeError(f"the index {url} lists no vLLM sdists")
    write_entry(_index_file(), dump_json(
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
    return Sdist(parsed, entry["url"], entry["sha256"], entry.get("size"))


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return _sha256_of_stream(handle)


def _sha256_of_stream(handle) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def fetch_sdist(version: str, offline: bool = False) -> Path:
    """The verified sdist of a release, downloaded once into the cache."""
    info = sdist_info(version, offline=offline)
    target = cache_dir() / "sdists" / f"vllm-{info.version}.tar.gz"
    if _entry_sha256(target) == info.sha256:
        return target
    with one_maker(target, locks_dir()):   # a run downloading it: wait for it, then look again
        return _fetched(info, target, version, offline)


def _entry_sha256(path: Path) -> str | None:
    """The sha256 of cache entry `path`; None when there is none, or when what is there is no
    plain regular file (a link to /dev/zero, a FIFO): never read through, never waited on."""
    stream = open_entry(path)
    if stream is None:
        return None
    with stream:
        return _sha256_of_stream(stream)


def _fetched(info: Sdist, target: Path, version: str, offline: bool) -> Path:
    if _entry_sha256(target) == info.sha256:
        return target
    if offline:
        there = (" (what is there is not the sdist the index names: remove it)"
                 if files.is_present(target) else "")
        raise ForgeError(f"offline and vLLM {version}'s sdist is not cached at {target}{there}")
    import requests

    target.parent.mkdir(parents=True, exist_ok=True)
    # A private partial file per download: concurrent fetches of one release never share bytes.
    handle, partial_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
    os.close(handle)
    partial = Path(partial_name)
    try:
        try:
            _download(info, partial)
        except requests.RequestException as exc:
            raise ForgeError(f"cannot download vLLM {version}'s sdist from {visible(info.url)}: "
                             f"{visible(exc)}") from exc
        actual = sha256_of(partial)
        if actual != info.sha256:
            raise ForgeError(f"vLLM {version}'s sdist sha256 is {actual}, the index says {info.sha256}")
        # Renamed over whatever is at the name (a damaged file, a link, a FIFO): never written into.
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)   # gone already when renamed in; on any other exit too
    return target


def _download(info: Sdist, partial: Path) -> None:
    """Stream the sdist into `partial`, with progress in bytes (transient failures retried), at
    most the size the index declares for it (else SDIST_CAP). Timed from the request on: a proxy
    that fetches the whole file before it answers would otherwise leave all of the wait out
    ("19.7 MB in 0.0 s")."""
    cap, says = (info.size, "the size the index declares") if info.size and info.size <= SDIST_CAP \
        else (SDIST_CAP, "any vLLM sdist's size")
    with Progress(f"downloading vLLM {info.version} sdist") as progress:
        def advance(size: int, total: int | None) -> None:
            progress.total = progress.total or total      # drawn with the first block
            progress.advance(size)

        fetch.download(info.url, partial, cap, f"vLLM {info.version}'s sdist", says, advance)


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


def sdist_bounds(size: int) -> Bounds:
    """What an sdist of `size` bytes may hold (see EXPANSION and the caps beside it)."""
    return Bounds(min(EXTRACTED_CAP, EXPANSION * max(size, 4 << 20)), MEMBERS_CAP, DEPTH_CAP,
                  NAME_CAP)


def open_sdist(sdist: Path, version: Version | str):
    """The verified sdist as a tar stream, read once; ForgeError when it is no regular file."""
    raw = open_entry(sdist)
    if raw is None:
        raise ForgeError(f"{sdist}: not a regular file; remove it to download vLLM {version}'s "
                         "sdist again")
    return raw


def _broken(sdist: Path, version: Version | str, exc: BaseException) -> ForgeError:
    return ForgeError(f"vLLM {version}'s sdist {sdist}: not a whole gzip-compressed tar archive "
                      f"({type(exc).__name__}: {exc}); remove it to download it again")


def _extract_into(parsed: Version, sdist: Path, staging: Path) -> None:
    """The TREE_PARTS of the sdist into `staging`, in one pass over the gzip stream
    (extract_stream), every member within sdist_bounds; progress in the sdist's bytes read, as
    the number of files is known only at the end."""
    top = f"vllm-{parsed}/"
    raw = open_sdist(sdist, parsed)
    size = os.fstat(raw.fileno()).st_size
    try:
        with raw, tarfile.open(fileobj=raw, mode="r|gz") as archive, \
                Progress(f"extracting vLLM {parsed}'s vllm/ package", total=size) as progress:
            count = 0

            def package_members():
                nonlocal count
                for member in bounded(archive, sdist_bounds(size), f"vLLM {parsed}'s sdist {sdist}"):
                    progress.update(min(raw.tell(), size), detail=f"{count} files")
                    if member.name.startswith(tuple(top + part for part in TREE_PARTS)) and \
                            (member.isfile() or member.isdir()):
                        member.name = member.name[len(top):]
                        count += member.isfile()
                        yield member

            extract_stream(archive, staging, package_members())
            progress.update(size, detail=f"{count} files")
    except BROKEN as exc:
        raise _broken(sdist, parsed, exc) from exc


def _extract_tree(parsed: Version, tree: Path, offline: bool) -> None:
    sdist = fetch_sdist(str(parsed), offline=offline)
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{parsed}-", dir=tree.parent))
    try:
        _extract_into(parsed, sdist, staging)
        if not (staging / "vllm" / "__init__.py").exists():
            raise ForgeError(f"vLLM {parsed}'s sdist {sdist} holds no vllm/ package")
        manifest = _manifest_entry(parsed, _entry_sha256(sdist) or "", _hashes_under(staging))
        shutil.rmtree(tree, ignore_errors=True)  # a half-made tree from an interrupted run
        try:
            os.replace(staging, tree)
        except OSError:
            # Another process extracted the same release meanwhile: its complete tree wins.
            if not (tree / "vllm" / "__init__.py").exists():
                raise
        else:
            write_entry(_manifest_file(parsed), manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- what a tree held when it was extracted ---------------------------------------------------
# The drift probe runs a release's own code (forge/watch/drift_probe.py); it runs a file only when
# its bytes are those the hash-checked sdist held, as recorded here when the tree was extracted
# (or, for a tree made before manifests were kept, read from the sdist itself).

def _manifest_file(version: Version | str) -> Path:
    return cache_dir() / "tree-manifests" / f"{version}.json"


def _manifest_entry(version: Version, sdist_sha256: str, hashes: dict[str, str]) -> str:
    return dump_json({"version": str(version), "sdist_sha256": sdist_sha256, "files": hashes},
                     "a tree manifest", indent=0, sort_keys=True)


def _hashes_under(root: Path) -> dict[str, str]:
    """'/'-separated path -> sha256 of each regular file under `root` (no link followed)."""
    found: dict[str, str] = {}
    for folder, dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                found[os.path.relpath(path, root).replace(os.sep, "/")] = sha256_of(Path(path))
        dirs.sort()
    return found


def _hashes_in_sdist(sdist: Path, version: Version) -> dict[str, str]:
    """The same map, read from the sdist's members that a tree holds (TREE_PARTS)."""
    top = f"vllm-{version}/"
    found: dict[str, str] = {}
    raw = open_sdist(sdist, version)
    bounds = sdist_bounds(os.fstat(raw.fileno()).st_size)
    try:
        with raw, tarfile.open(fileobj=raw, mode="r|gz") as archive:
            for member in bounded(archive, bounds, f"vLLM {version}'s sdist {sdist}"):
                if member.isfile() and member.name.startswith(tuple(top + p for p in TREE_PARTS)):
                    handle = archive.extractfile(member)
                    if handle is not None:
                        found[member.name[len(top):]] = _sha256_of_stream(handle)
    except BROKEN as exc:
        raise _broken(sdist, version, exc) from exc
    return found


def sdist_files(version: str, prefix: str, offline: bool = False) -> dict[str, bytes]:
    """The bytes of each regular file of release `version`'s sdist whose path (below the sdist's
    top folder) starts with `prefix`, read in one pass within sdist_bounds; each at most a source
    file's cap."""
    sdist = fetch_sdist(version, offline=offline)
    parsed = Release(version).version
    top = f"vllm-{parsed}/"
    raw = open_sdist(sdist, parsed)
    bounds = sdist_bounds(os.fstat(raw.fileno()).st_size)
    found: dict[str, bytes] = {}
    try:
        with raw, tarfile.open(fileobj=raw, mode="r|gz") as archive:
            for member in bounded(archive, bounds, f"vLLM {parsed}'s sdist {sdist}"):
                if not (member.isfile() and member.name.startswith(top + prefix)):
                    continue
                if member.size > files.SOURCE.cap:
                    raise ForgeError(f"vLLM {parsed}'s sdist {sdist}: {member.name} is "
                                     f"{member.size} bytes, over the cap for a source file")
                handle = archive.extractfile(member)
                if handle is not None:
                    found[member.name[len(top):]] = handle.read(files.SOURCE.cap + 1)
    except BROKEN as exc:
        raise _broken(sdist, parsed, exc) from exc
    return found


def manifest_files(data: object, info: Sdist) -> dict[str, str] | None:
    """The files of a manifest entry as _manifest_entry writes one for the sdist `info` names;
    None for anything else (another sdist's, another shape, a hash that is no sha256)."""
    from forge.typed import entry_or_none
    from forge.upstream.entries import TreeManifest

    manifest = entry_or_none(TreeManifest, data)
    if manifest is None or manifest.version != str(info.version) or manifest.sdist_sha256 != info.sha256:
        return None
    return dict(manifest.files)


def tree_manifest(version: str, offline: bool = False) -> dict[str, str]:
    """'/'-separated path -> sha256 of each file release `version`'s tree held when it was
    extracted from its sdist, the sdist being the one the index names (by its sha256)."""
    info = sdist_info(version, offline=offline)
    entry = _manifest_file(info.version)
    found = manifest_files(load_json_entry(entry, files.CACHE), info)
    if found is None:
        with one_maker(entry, locks_dir()):
            found = manifest_files(load_json_entry(entry, files.CACHE), info)
            if found is None:
                sdist = fetch_sdist(str(info.version), offline=offline)
                found = _hashes_in_sdist(sdist, info.version)
                write_entry(entry, _manifest_entry(info.version, info.sha256, found))
    return found


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
    if stat.S_ISREG(files.mode_of(str(cached), follow_symlinks=False)):
        return cached     # a regular file, not a link to one: taken from the sdist before
    data = sdist_files(str(parsed), relative_path, offline=offline).get(relative_path)
    return None if data is None else write_entry(cached, data)
