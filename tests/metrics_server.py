"""A real HTTP server on 127.0.0.1 with a vLLM server's surface as verify reads it (/v1/models,
/version, /v1/completions, /metrics), whose answers a test writes: the spec-decode counters of
each /metrics reading, the model id, the version. Used to show what verify does with numbers and
strings no honest vLLM would send."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.loopback import serve_in_background

MODEL = "gemma-4-26b-a4b-it"
LABELS = f'engine="0",model_name="{MODEL}"'


def prometheus(drafts, draft_tokens, accepted, per_position=()) -> str:
    """Prometheus text of vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py's names),
    each value written as given (a float, 'NaN', '+Inf', '-5')."""
    lines = []
    for name, value in (("vllm:spec_decode_num_drafts", drafts),
                        ("vllm:spec_decode_num_draft_tokens", draft_tokens),
                        ("vllm:spec_decode_num_accepted_tokens", accepted)):
        lines += [f"# TYPE {name} counter", f"{name}_total{{{LABELS}}} {value}"]
    name = "vllm:spec_decode_num_accepted_tokens_per_pos"
    lines.append(f"# TYPE {name} counter")
    lines += [f'{name}_total{{{LABELS},position="{i}"}} {v}' for i, v in enumerate(per_position)]
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Answers /metrics with `readings` in turn (the last one again once they run out: a window
    reads twice, before and after its prompts). With `hang`, a completion is never answered
    until the server stops (a Ctrl-C test interrupts the client waiting on it)."""

    def __init__(self, readings: list[str], model: str = MODEL, version: str = "0.27.1",
                 hang: bool = False):
        self.readings, self.model, self.version, self.hang = readings, model, version, hang
        self.metric_reads, self.completions = 0, 0
        self.lock, self.stopped = threading.Lock(), threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: str, kind: str = "application/json") -> None:
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(json.dumps({"data": [{"id": server.model}]}))
                elif self.path == "/version":
                    self._send(json.dumps({"version": server.version}))
                elif self.path == "/metrics":
                    with server.lock:
                        index = min(server.metric_reads, len(server.readings) - 1)
                        server.metric_reads += 1
                    self._send(server.readings[index], "text/plain")
                else:
                    self.send_error(404)

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                with server.lock:
                    server.completions += 1
                if server.hang:
                    server.stopped.wait(60)
                    return
                self._send(json.dumps({"choices": [{"index": 0, "text": "ok"}]}))

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a client that was interrupted and left: nothing to report

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> MetricsServer:
        serve_in_background(self.httpd)
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.httpd.shutdown()
        self.httpd.server_close()
