"""Loopback HTTP servers for the tests, served from a daemon thread and stopped at once.

socketserver's serve_forever looks for a shutdown request once per poll interval, 0.5 s unless
told: every server a test stops would hold it that long, about a minute over the suite."""
from __future__ import annotations

import contextlib
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

    server = Server(("127.0.0.1", 0), Handler)
    serve_in_background(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
