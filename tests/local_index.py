"""A package index on 127.0.0.1 that pip and forge.upstream.pypi both read ($VLLM_FORGE_PYPI;
forge.upstream.pyenvs hands pip the same URL): every project's page is PyPI's own (PEP 691 JSON,
fetched live the first time the index is asked for it, its files still downloaded from PyPI), plus
the wheels a test adds, served from a local directory. The added wheels are real wheels (forge_fixture_wheel) whose METADATA says what
they require, so pip resolves them against PyPI's real releases.

An isolated cache (isolated_cache) keeps the index answers of such a run out of the shared cache,
while reusing its vLLM sources and environments.
"""
from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from forge.upstream import releases
from tests.loopback import QuietHandler, serving

PYPI_SIMPLE = "https://pypi.org/simple/"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def forge_fixture_wheel(directory: Path, name: str, version: str, requires: list[str]) -> Path:
    """A minimal valid wheel (metadata only, py3-none-any) of name==version requiring `requires`."""
    dist = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    files = {
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n"
        "Summary: vllm-forge test fixture (never published)\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: vllm-forge tests\n"
                                   "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},sha256={_digest(text.encode())},{len(text.encode())}\n"
                     for path, text in files.items()) + f"{dist}.dist-info/RECORD,,\n"
    files[f"{dist}.dist-info/RECORD"] = record
    wheel = Path(directory) / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def pypi_versions(name: str) -> list[str]:
    """The versions PyPI's own simple index lists for `name` right now (read here directly, not
    through the code under test)."""
    response = requests.get(f"{PYPI_SIMPLE}{canonicalize_name(name)}/", timeout=60,
                            headers={"Accept": JSON_TYPE})
    response.raise_for_status()
    return response.json()["versions"]


@contextmanager
def local_index(wheels: list[Path], newest: dict[str, str] | None = None) -> Iterator[str]:
    """The simple-index URL of a loopback index: PyPI's pages plus `wheels` (each listed under
    its project, replacing any PyPI file of the same version). `newest` caps a project's page at
    a release ({"transformers": "5.15.0"}: nothing later listed), so "the index's newest" is a
    release a test knows, whatever PyPI published since."""
    caps = {canonicalize_name(name): Version(version) for name, version in (newest or {}).items()}
    added: dict[str, list[Path]] = {}
    for wheel in wheels:
        added.setdefault(parse_wheel_filename(wheel.name)[0], []).append(wheel)
    by_file = {wheel.name: wheel for wheel in wheels}
    fetched: dict[str, tuple[int, str]] = {}

    def pypi_page(name: str) -> tuple[int, str]:
        """PyPI's answer for `name` (status, body), fetched once per index: pip asks for the same
        few pages on every install it tries, and the TLS and download cost more than the tests."""
        if name not in fetched:
            response = requests.get(f"{PYPI_SIMPLE}{name}/", timeout=60, headers={"Accept": JSON_TYPE})
            if response.status_code != 404:
                response.raise_for_status()
            fetched[name] = (response.status_code, response.text)
        return fetched[name]

    class Index(QuietHandler):
        def do_GET(self):
            parts = [p for p in self.path.split("/") if p]
            if len(parts) == 2 and parts[0] == "files" and parts[1] in by_file:
                self.send(200, by_file[parts[1]].read_bytes())
            elif len(parts) == 2 and parts[0] == "simple":
                page = self._page(canonicalize_name(parts[1]))
                if page is None:
                    self.send(404, b"", "text/plain")
                else:
                    self.send(200, json.dumps(page).encode(), JSON_TYPE)
            else:
                self.send(404, b"", "text/plain")

        def _page(self, name: str) -> dict | None:
            local = added.get(name, [])
            status, body = pypi_page(name)
            if status == 404:
                if not local:
                    return None
                page = {"meta": {"api-version": "1.0"}, "name": name, "files": [], "versions": []}
            else:
                page = json.loads(body)
            local_versions = {str(parse_wheel_filename(w.name)[1]) for w in local}
            page["files"] = [f for f in page["files"] if _file_version(f["filename"]) not in local_versions]
            port = self.server.server_address[1]
            page["files"] += [{"filename": w.name, "url": f"http://127.0.0.1:{port}/files/{w.name}",
                               "hashes": {"sha256": hashlib.sha256(w.read_bytes()).hexdigest()}}
                              for w in local]
            page["versions"] = sorted(set(page.get("versions", [])) | local_versions)
            if name in caps:
                page["files"] = [f for f in page["files"] if _at_most(f["filename"], caps[name])]
                page["versions"] = [v for v in page["versions"] if Version(v) <= caps[name]]
            return page

    with serving(Index) as base:
        yield f"{base}/simple/"


def _at_most(filename: str, cap: Version) -> bool:
    version = _file_version(filename)
    return version is not None and Version(version) <= cap


def _file_version(filename: str) -> str | None:
    from forge.upstream.pypi import version_of_file

    version = version_of_file(filename)
    return None if version is None else str(version)


def isolated_cache(tmp_path: Path) -> Path:
    """A cache that shares the real one's vLLM sources, trees and environments but keeps its own
    package-index answers (pypi/), so a run against another index leaves the shared cache as it was.
    The drift-probe answers are the shared ones: they are keyed by the real paths of the trees and
    environments (forge.watch.drift.real_location), which are the shared cache's."""
    shared = releases.cache_dir()
    cache = tmp_path / "cache"
    cache.mkdir()
    releases.list_releases()   # the vLLM release index, read once into the shared cache
    for entry in shared.iterdir():
        if entry.name != "pypi":
            (cache / entry.name).symlink_to(entry)
    for folder in ("envs", "drift-probe"):
        (shared / folder).mkdir(exist_ok=True)
        if not (cache / folder).exists():
            (cache / folder).symlink_to(shared / folder)
    return cache
