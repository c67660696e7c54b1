"""Loopback HTTP servers for the tests, served from a daemon thread and stopped at once.

socketserver's serve_forever looks for a shutdown request once per poll interval, 0.5 s unless
told: every server a test stops would hold it that long, about a minute over the suite."""
from __future__ import annotations

import contextlib
import http.server
import socketserver
import threading
from collections.abc import Iterator

SHUTDOWN_POLL_S = 0.02


def serve_in_background(server: socketserver.BaseServer) -> threading.Thread:
    """Start serving `server` in a daemon thread; `server.shutdown()` returns within 20 ms."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
                              daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def hostile_server() -> Iterator[str]:
    """tests/hostile/server.py's server in this process, its scenarios at /<scenario>/<id>: its
    base URL while the block runs."""
    from tests.hostile.server import Handler, Server

    with serving(Handler, Server) as url:
        yield url

class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A loopback server's request handler that answers with `send` and logs nothing (the test's
    output stays its own)."""

    def send(self, code: int, body: bytes, content_type: str = "application/octet-stream") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler],
            server_class: type[socketserver.TCPServer] = http.server.ThreadingHTTPServer) -> Iterator[str]:
    """`handler` served by a `server_class` on a free loopback port while the block runs: its base URL."""
    server = server_class(("127.0.0.1", 0), handler)
    serve_in_background(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
