"""A cold vLLM source cache, as on a fresh machine, without downloading from PyPI again: an empty
$VLLM_FORGE_CACHE and $VLLM_FORGE_INDEX pointing at a real HTTP server on 127.0.0.1 that serves
the real sdists (sha256 as PyPI lists them) out of the shared cache. A command run with it
downloads, checks and extracts each release as it would on its first run anywhere."""
from __future__ import annotations

import http.server
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forge.upstream import releases
from tests.loopback import serve_in_background


@contextmanager
def cold_cache(cache: Path, served: list[str] | None = None) -> Iterator[dict[str, str]]:
    """The environment of a first run that finds `cache` empty. The mirror lists every release
    PyPI lists (forge checks the manifest's ranges against them) and serves each sdist from the
    shared cache, fetched from PyPI (sha256-checked) the first time one is asked for. The name of
    each sdist it serves is appended to `served` when given."""
    listed = releases.load_index()
    page = "".join(f'<a href="/files/vllm-{v}.tar.gz#sha256={entry["sha256"]}">vllm-{v}.tar.gz</a>\n'
                   for v, entry in listed.items()).encode()

    class Mirror(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            name = self.path.rsplit("/", 1)[-1]
            version = name.removeprefix("vllm-").removesuffix(".tar.gz")
            body = page if self.path.startswith("/simple/") else \
                releases.fetch_sdist(version).read_bytes() if version in listed else b""
            if served is not None and body and not self.path.startswith("/simple/"):
                served.append(name)
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Mirror)
    serve_in_background(server)
    try:
        yield {"VLLM_FORGE_CACHE": str(cache),
               "VLLM_FORGE_INDEX": f"http://127.0.0.1:{server.server_port}/simple/vllm/",
               "VLLM_FORGE_PROGRESS": ""}   # what a user has: the default
    finally:
        server.shutdown()
        server.server_close()
