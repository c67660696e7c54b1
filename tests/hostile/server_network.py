"""The hostile server's answers that a body alone cannot make (tests/hostile/server.py serves them):
headers of their own (a redirect, a charset), a body or headers dripped a byte at a time, a
/metrics line naming a draft position a hundred million places out.

Each scenario maps a path to a Respond, which writes the whole answer itself. A redirect to
"another server" goes to the second port tests/hostile/server.py listens on (OTHER.port), which
answers as the healthy server does: a client that followed it would pass without a word.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable

from tests.metrics_server import prometheus

MODEL = "gemma-4-26b-a4b-it"
# How long a dripped byte waits: 240 bytes of a --timeout 1 answer take 24 s, past any case's
# limit, while every single read is answered well within its own timeout.
DRIP_S = 0.1


class Other:
    """The second listening port, set by the server's main once it listens."""

    port = 0


OTHER = Other()


class Respond:
    """An answer written whole by `write(handler, prefix, n)`: status line, headers and body."""

    def __init__(self, write: Callable):
        self.write = write


def _headers(handler, status: int, headers: dict[str, str]) -> None:
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()


def _body(data: bytes, content_type: str = "application/json") -> Respond:
    def write(handler, _prefix, _n):
        _headers(handler, 200, {"Content-Type": content_type, "Content-Length": str(len(data))})
        handler.wfile.write(data)
    return Respond(write)


def _redirect(location: Callable[[str], str], status: int = 302) -> Respond:
    def write(handler, prefix, _n):
        _headers(handler, status, {"Location": location(prefix), "Content-Length": "0"})
    return Respond(write)


def _drip(data: bytes, headers_too: bool = False) -> Respond:
    """`data` a byte at a time, DRIP_S apart (with headers_too, the header lines as well)."""
    def write(handler, _prefix, _n):
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        handler.close_connection = True
        try:
            if headers_too:
                for byte in head:
                    handler.wfile.write(bytes([byte]))
                    handler.wfile.flush()
                    time.sleep(DRIP_S)
            else:
                handler.wfile.write(head)
            for byte in data:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(DRIP_S)
        except OSError:
            pass                          # the reader gave up: what it should do
    return Respond(write)


def _endless(start: bytes, repeat: bytes, content_type: str) -> Respond:
    """`start`, then `repeat` without end (no Content-Length): a reader must stop on its own."""
    def write(handler, _prefix, _n):
        _headers(handler, 200, {"Content-Type": content_type, "Connection": "close"})
        handler.close_connection = True
        chunk = repeat * (65536 // len(repeat))
        try:
            handler.wfile.write(start)
            for _ in range(40000):            # 2.6 GB at most, then the server gives up
                handler.wfile.write(chunk)
        except OSError:
            pass
    return Respond(write)


def _metrics(n: int) -> str:
    return prometheus(10.0 * n, 30.0 * n, 24.0 * n, [9.0 * n, 8.0 * n, 7.0 * n])


def _metrics_far_position() -> Respond:
    def write(handler, _prefix, n):
        data = (_metrics(n) + 'vllm:spec_decode_num_accepted_tokens_per_pos_total'
                '{engine="0",model_name="m",position="100000000"} 0\n').encode()
        _headers(handler, 200, {"Content-Type": "text/plain", "Content-Length": str(len(data))})
        handler.wfile.write(data)
    return Respond(write)


MODELS = json.dumps({"data": [{"id": MODEL}]}).encode()
TRICKLED = json.dumps({"data": [{"id": MODEL, "padding": "x" * 200}]}).encode()

NETWORK_SCENARIOS: dict[str, dict[str, Respond]] = {
    # "*": any path (a package index's pages)
    "index-endless": {"*": _endless(b"<html><body>\n", b'<a href="vllm-0.1.tar.gz">x</a>\n',
                                    "text/html")},
    "pypi-endless": {"*": _endless(b'{"meta": {"api-version": "1.0"}, "files": [',
                                   b'{"filename": "x-1.0.tar.gz"}, ',
                                   "application/vnd.pypi.simple.v1+json")},
    "metrics-position-far": {"/metrics": _metrics_far_position()},
    "models-trickle": {"/v1/models": _drip(TRICKLED)},
    "models-headers-trickle": {"/v1/models": _drip(TRICKLED, headers_too=True)},
    "metrics-trickle": {"/metrics": _drip(_metrics(1).encode()[:240])},
    "health-trickle": {"/health": _drip(b" " * 240, headers_too=True)},
    "models-redirect-other-port": {"/v1/models": _redirect(
        lambda prefix: f"http://127.0.0.1:{OTHER.port}/healthy{prefix[prefix.rfind('/'):]}/v1/models")},
    "models-redirect-same-server": {"/v1/models": _redirect(
        lambda prefix: f"/healthy{prefix[prefix.rfind('/'):]}/v1/models", 307)},
    "models-redirect-malformed": {"/v1/models": _redirect(lambda _prefix: "http://[::1")},
    "models-redirect-loop": {"/v1/models": _redirect(lambda prefix: f"{prefix}/v1/models")},
    "models-charset-unknown": {"/v1/models": _body(MODELS, "application/json; charset=x-no-such")},
    "metrics-charset-unknown": {"/metrics": _body(b"", "text/plain; charset=\x1b[2J")},
}
