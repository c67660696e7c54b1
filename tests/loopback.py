"""Loopback HTTP servers for the tests, served from a daemon thread and stopped at once.

socketserver's serve_forever looks for a shutdown request once per poll interval, 0.5 s unless
told: every server a test stops would hold it that long, about a minute over the suite."""
from __future__ import annotations

import socketserver
import threading

SHUTDOWN_POLL_S = 0.02


def serve_in_background(server: socketserver.BaseServer) -> threading.Thread:
    """Start serving `server` in a daemon thread; `server.shutdown()` returns within 20 ms."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
                              daemon=True)
    thread.start()
    return thread
