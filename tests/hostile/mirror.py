"""A hostile package index on 127.0.0.1, for the cache and archive cases (cases_cache.py).

`http://127.0.0.1:PORT/<scenario>/simple/vllm/` is a vLLM index as $VLLM_FORGE_INDEX names one:
every release the run's own cache lists, but 0.27.1's sdist is the scenario's (SDISTS), with its
true sha256 (and, in the JSON form of PEP 691, its true size, except where the scenario says
otherwise). `.../<scenario>/pypi/<project>/` is a PEP 691 project page as $VLLM_FORGE_PYPI names
one (PAGES). HTML or JSON as the client's Accept header asks, as PyPI answers.

The server starts once per process, at the first mirror_url() (when the case table is built: it
names the port), in a daemon thread of the process that runs the cases; the children reach it on
loopback.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import tarfile
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.loopback import serve_in_background

RELEASE = "0.27.1"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
BOMB_BYTES = 200 << 20          # what the bomb's one member decompresses to


class _Zeros(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        buffer[:] = bytes(len(buffer))
        return len(buffer)


def _sdist(members: dict[str, bytes | int]) -> bytes:
    """A gzip tar of `members` under vllm-0.27.1/ (an int: that many zero bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(f"vllm-{RELEASE}/{name}")
            if isinstance(data, int):
                info.size = data
                archive.addfile(info, io.BufferedReader(_Zeros()))
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@functools.cache
def _real_sdist() -> bytes:
    from forge.upstream import releases

    return releases.fetch_sdist(RELEASE).read_bytes()


PACKAGE = {"vllm/__init__.py": b"", "vllm/version.py": b"__version__ = '0.27.1'\n"}
# scenario -> the 0.27.1 sdist's bytes (made when first asked for)
SDISTS: dict[str, Callable[[], bytes]] = {
    "real": _real_sdist,
    "bomb": functools.cache(lambda: _sdist({**PACKAGE, "vllm/zeros.bin": BOMB_BYTES})),
    "not-gzip": lambda: b"<html>this is no sdist</html>\n" * 200,
    "truncated": functools.cache(lambda: _real_sdist()[:len(_real_sdist()) // 2]),
    # Deeper than PATH_MAX lets a file be made: 2100 folders, 4,200 characters.
    "deep": functools.cache(lambda: _sdist({**PACKAGE, "vllm/" + "d/" * 2100 + "x.py": b"x = 1\n"})),
}
# Sdists the index declares otherwise than they come: scenario -> the size it declares (its
# sha256 is no file's).
DECLARED = {"endless": 4096, "stall": 1 << 20}


def _endless() -> Iterator[bytes]:
    chunk = bytes(1 << 16)
    for _ in range(1 << 17):                 # 8 GiB, then the server gives up
        yield chunk


def _stall() -> Iterator[bytes]:
    yield bytes(1 << 16)
    time.sleep(60)


STREAMED: dict[str, Callable[[], Iterator[bytes]]] = {"endless": _endless, "stall": _stall}
# scenario -> a PEP 691 project page for every project
PAGES: dict[str, Callable[[], Iterator[bytes]] | bytes] = {
    "pypi-list": b"[1, 2, 3]",
    "pypi-files-strings": b'{"files": ["transformers-5.0.0.tar.gz"]}',
    "pypi-endless": lambda: (b'{"files": [' + b'{"filename": "a-1.0.tar.gz"}, ' * 2000
                             for _ in range(1 << 17)),
}


@functools.cache
def _listed() -> dict[str, dict]:
    from forge.upstream import releases

    return dict(releases.load_index())


def _entries(scenario: str) -> list[dict]:
    entries = []
    for version, entry in sorted(_listed().items()):
        item = {"filename": f"vllm-{version}.tar.gz", "url": entry["url"],
                "hashes": {"sha256": entry["sha256"]}}
        if version == RELEASE:
            item["url"] = f"/{scenario}/files/vllm-{RELEASE}.tar.gz"
            if scenario in STREAMED:
                item.update(hashes={"sha256": "0" * 64}, size=DECLARED[scenario])
            elif scenario in SDISTS:
                body = SDISTS[scenario]()
                item.update(hashes={"sha256": hashlib.sha256(body).hexdigest()}, size=len(body))
        entries.append(item)
    return entries


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        parts = self.path.split("/")               # "", scenario, kind, ...
        if len(parts) < 4:
            return self._send(404, b"", "text/plain")
        scenario, kind, name = parts[1], parts[2], parts[-2] if self.path.endswith("/") else parts[-1]
        if kind == "simple" and scenario == "index-endless":
            link = b'<a href="/x/vllm-0.0.1.tar.gz#sha256=' + b"0" * 64 + b'">vllm</a>\n'
            return self._stream((link * 512 for _ in range(1 << 18)), "text/html")
        if kind == "simple":
            return self._index(scenario)
        if kind == "files" and scenario in STREAMED:
            return self._stream(STREAMED[scenario](), "application/octet-stream")
        if kind == "files" and scenario in SDISTS:
            return self._send(200, SDISTS[scenario](), "application/octet-stream")
        if kind == "pypi" and scenario in PAGES:
            page = PAGES[scenario]
            if isinstance(page, bytes):
                return self._send(200, page, JSON_TYPE)
            return self._stream(page(), JSON_TYPE)
        return self._send(404, f"no {name}".encode(), "text/plain")

    def _index(self, scenario: str):
        entries = _entries(scenario)
        if JSON_TYPE in self.headers.get("Accept", ""):
            page = {"meta": {"api-version": "1.1"}, "name": "vllm", "files": entries}
            return self._send(200, json.dumps(page).encode(), JSON_TYPE)
        links = "".join(f'<a href="{e["url"]}#sha256={e["hashes"]["sha256"]}">{e["filename"]}</a>\n'
                        for e in entries)
        return self._send(200, f"<html><body>\n{links}</body></html>\n".encode(), "text/html")

    def _send(self, status: int, body: bytes, content_type: str):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass                                   # the reader stopped, as it may

    def _stream(self, chunks: Iterator[bytes], content_type: str):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(chunk)
        except OSError:
            pass                                   # the reader stopped, as it should
        self.close_connection = True


@functools.cache
def mirror_url() -> str:
    """The mirror's root URL; the server starts with the first call."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    serve_in_background(server)
    return f"http://127.0.0.1:{server.server_port}"
