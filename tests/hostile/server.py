"""A real HTTP server on 127.0.0.1 that answers as a hostile vLLM server would.

`python3 -m tests.hostile.server` prints its port and serves until its stdin closes. A case names
its scenario in the URL: `http://127.0.0.1:PORT/<scenario>/<case id>` is a server whose
/v1/models, /version, /v1/completions and /metrics answer as SCENARIOS[scenario] says; the
counters advance with the completions that case sent (state per URL prefix, so every case sees
a fresh server). The default answers are those of a healthy server whose drafter accepts 80 %.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.hostile.server_network import NETWORK_SCENARIOS, OTHER
from tests.loopback import serve_in_background

MODEL = "gemma-4-26b-a4b-it"
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[1;1H\r\nRESULT: PASS\n"
LABELS = 'engine="0",model_name="m"'


def counters(drafts, draft_tokens, accepted, per_position) -> bytes:
    lines = []
    for name, value in (("drafts", drafts), ("draft_tokens", draft_tokens),
                        ("accepted_tokens", accepted)):
        lines += [f"# TYPE vllm:spec_decode_num_{name}_total counter",
                  f"vllm:spec_decode_num_{name}_total{{{LABELS}}} {value}"]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}} {v}'
              for i, v in enumerate(per_position)]
    return ("\n".join(lines) + "\n").encode()


def healthy(n: int) -> bytes:
    """n completions in: 10 drafts of 3 tokens each, 24 accepted (9, 8, 7 per position)."""
    return counters(10.0 * n, 30.0 * n, 24.0 * n, [9.0 * n, 8.0 * n, 7.0 * n])


def endless(line: bytes) -> Callable[[int], Iterator[bytes]]:
    """A body that never ends (no Content-Length): a reader must stop on its own."""
    def body(_n: int) -> Iterator[bytes]:
        chunk = line * (65536 // len(line))
        for _ in range(20000):              # 1.3 GB at most, then the server gives up
            yield chunk
    return body


def deep_json(_n: int) -> bytes:
    return b"[" * 200000 + b"]" * 200000


def stall(seconds: float, then: Callable[[int], bytes]) -> Callable[[int], bytes]:
    def body(n: int) -> bytes:
        time.sleep(seconds)
        return then(n)
    return body


def fixed(text: str | bytes) -> Callable[[int], bytes]:
    data = text.encode() if isinstance(text, str) else text
    return lambda _n: data


MODELS_OK = fixed(json.dumps({"data": [{"id": MODEL}]}))
VERSION_OK = fixed(json.dumps({"version": "0.27.1"}))
COMPLETION_OK = fixed(json.dumps({"choices": [{"text": "ok", "index": 0}]}))

# scenario -> {path: body(n) or (status, body(n))}; paths left out answer as a healthy server.
SCENARIOS: dict[str, dict] = {
    "healthy": {},
    # /metrics: numbers that cannot be true
    "metrics-over-accepted": {"/metrics": lambda n: counters(100 * n, 300 * n, 5000 * n,
                                                               [100 * n, 100 * n, 100 * n])},
    "metrics-per-position-over-drafts": {"/metrics": lambda n: counters(
        10 * n, 30 * n, 24 * n, [90 * n, 80 * n, 70 * n])},
    "metrics-negative": {"/metrics": lambda n: counters(-100 - n, -300 - n, -240 - n, [-9, -8, -7])},
    "metrics-negative-deltas-hidden": {"/metrics": lambda n: counters(
        -1000 + 10 * n, -3000 + 30 * n, -2400 + 24 * n, [9 * n, 8 * n, 7 * n])},
    "metrics-nan-accepted": {"/metrics": lambda n: counters(10 * n, 30 * n, "NaN", [9 * n, 8 * n, 7 * n])},
    "metrics-nan-drafts": {"/metrics": lambda n: counters("NaN", 30 * n, 24 * n, [9 * n, 8 * n, 7 * n])},
    "metrics-inf-draft-tokens": {"/metrics": lambda n: counters(10 * n, "+Inf", 24 * n, [9 * n, 8 * n, 7 * n])},
    "metrics-inf-accepted": {"/metrics": lambda n: counters(10 * n, 30 * n, "+Inf", [9 * n, 8 * n, 7 * n])},
    "metrics-minus-inf": {"/metrics": lambda n: counters(10 * n, 30 * n, "-Inf", [9 * n, 8 * n, 7 * n])},
    "metrics-nan-position": {"/metrics": lambda n: counters(10 * n, 30 * n, 24 * n, ["NaN", 8 * n, 7 * n])},
    "metrics-going-down": {"/metrics": lambda n: counters(1e6 - n, 3e6 - n, 2e6 - n, [9, 8, 7])},
    "metrics-huge-values": {"/metrics": lambda n: counters(1e308 * (n + 1), 1e308, 1e308, [1e308])},
    "metrics-not-prometheus": {"/metrics": fixed("<html>\x1b[2J not metrics</html>\n")},
    "metrics-binary": {"/metrics": fixed(b"\xff\xfe\x00\x01\x80" * 100)},
    "metrics-missing-counters": {"/metrics": fixed("# nothing here\nvllm:other_total 1\n")},
    "metrics-ansi-position": {"/metrics": fixed(counters(1, 3, 2, [1]).replace(
        b'position="0"', b'position="\x1b[2J"'))},
    "metrics-endless": {"/metrics": endless(b"# padding padding padding padding padding padding\n")},
    "metrics-http-500-ansi": {"/metrics": (500, fixed(ESCAPES))},
    "metrics-stall": {"/metrics": stall(30, healthy)},
    # /v1/models: what the server says it serves
    "models-ansi-id": {"/v1/models": fixed(json.dumps({"data": [{"id": ESCAPES}]}))},
    "models-not-json": {"/v1/models": fixed("<html>\x1b[31mnope</html>")},
    "models-list": {"/v1/models": fixed("[1, 2, 3]")},
    "models-empty": {"/v1/models": fixed('{"data": []}')},
    "models-id-number": {"/v1/models": fixed('{"data": [{"id": 5}]}')},
    "models-id-nan": {"/v1/models": fixed('{"data": [{"id": NaN}]}')},
    "models-data-string": {"/v1/models": fixed('{"data": "' + "x" * 1000 + '"}')},
    "models-duplicate-keys": {"/v1/models": fixed('{"data": [{"id": "a"}], "data": 7}')},
    "models-deep": {"/v1/models": deep_json},
    "models-invalid-utf8": {"/v1/models": fixed(b'{"data": [{"id": "\xff\xfe\x1b[2J"}]}')},
    "models-endless": {"/v1/models": endless(b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[")},
    "models-http-500-ansi": {"/v1/models": (500, fixed(ESCAPES))},
    "models-http-404": {"/v1/models": (404, fixed("not found"))},
    "models-stall": {"/v1/models": stall(30, MODELS_OK)},
    # /version
    "version-ansi": {"/version": fixed(json.dumps({"version": ESCAPES}))},
    "version-number": {"/version": fixed('{"version": 0.27}')},
    "version-nan": {"/version": fixed('{"version": NaN}')},
    "version-deep": {"/version": deep_json},
    "version-endless": {"/version": endless(b'"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')},
    "version-http-500": {"/version": (500, fixed(ESCAPES))},
    # /v1/completions
    "completions-no-choices": {"/v1/completions": fixed('{"choices": []}')},
    "completions-ansi-text": {"/v1/completions": fixed(json.dumps({"choices": [{"text": ESCAPES}]}))},
    "completions-not-json": {"/v1/completions": fixed(b"\xff\x1b[2J")},
    "completions-deep": {"/v1/completions": deep_json},
    "completions-http-500-ansi": {"/v1/completions": (500, fixed(ESCAPES))},
    "completions-stall": {"/v1/completions": stall(30, COMPLETION_OK)},
    "completions-endless": {"/v1/completions": endless(b'{"choices": [{"text": "xxxxxxxxxxxxxxxxxxxxx"}]')},
    "health-stall": {"/health": stall(30, fixed(""))},
}
DEFAULTS = {"/v1/models": MODELS_OK, "/version": VERSION_OK, "/v1/completions": COMPLETION_OK,
            "/metrics": healthy, "/health": fixed("")}


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.completions: dict[str, int] = {}

    def completed(self, prefix: str, add: int) -> int:
        with self.lock:
            self.completions[prefix] = self.completions.get(prefix, 0) + add
            return self.completions[prefix]


STATE = State()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _route(self) -> tuple[str, str, str]:
        parts = self.path.split("/", 3)      # "", scenario, case id, rest
        if len(parts) < 4:
            return "", "", self.path
        return parts[1], f"/{parts[1]}/{parts[2]}", "/" + parts[3]

    def _answer(self, method: str) -> None:
        scenario, prefix, path = self._route()
        if method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
        n = STATE.completed(prefix, 1 if path == "/v1/completions" else 0)
        network = NETWORK_SCENARIOS.get(scenario, {})
        respond = network.get(path, network.get("*"))
        if respond is not None:
            return respond.write(self, prefix, n)
        if (scenario not in SCENARIOS and not network) or path not in DEFAULTS:
            return self._send(404, b"no such scenario or path")
        answer = SCENARIOS.get(scenario, {}).get(path, DEFAULTS[path])
        status, body = answer if isinstance(answer, tuple) else (200, answer)
        self._send(status, body(n))

    def _send(self, status: int, data) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if isinstance(data, bytes):
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for chunk in data:
                self.wfile.write(chunk)
        except OSError:
            pass                             # the reader gave up: what it should do
        self.close_connection = True

    def do_GET(self):
        self._answer("GET")

    def do_POST(self):
        self._answer("POST")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # Connections waiting to be accepted: socketserver's 5 resets some of a 64-request burst's.
    request_queue_size = 256


def main() -> None:
    server = Server(("127.0.0.1", 0), Handler)
    serve_in_background(server)
    # A second server on another port: where a hostile redirect sends a client (server_network.py).
    other = Server(("127.0.0.1", 0), Handler)
    serve_in_background(other)
    OTHER.port = other.server_address[1]
    print(server.server_address[1], flush=True)
    sys.stdin.read()                         # until the test session closes the pipe


if __name__ == "__main__":
    main()
