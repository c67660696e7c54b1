"""mtp_smoke --endpoint and bench --endpoint against a real HTTP server on 127.0.0.1 that serves
Prometheus text captured from vLLM 0.25.0 on an H200 (a stand-in for a vLLM server's HTTP
surface: /v1/models, /v1/completions, /metrics; vLLM's own parser is not replaced)."""
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
import json

import pytest

from verify import bench, mtp_smoke

GPU = Path(__file__).parent / "fixtures" / "gpu" / "smoke-patched-L6"
BEFORE = (GPU / "prometheus" / "greedy.before.prom").read_text()
AFTER = (GPU / "prometheus" / "greedy.after.prom").read_text()
GATE_PROMPTS = 8  # chat + code + prose in verify/prompts.yaml


def with_acceptance(text: str, extra_drafts: int, rate: float) -> str:
    """The captured text, advanced by a window of extra_drafts k=3 drafts accepted at `rate`."""
    accepted = round(extra_drafts * 3 * rate)
    per_position = [round(extra_drafts * r) for r in (rate + 0.1, rate, rate - 0.1)]

    def bump(name, amount):
        nonlocal text
        pattern = re.compile(rf"^({re.escape(name)}\{{[^}}]*\}}) (\S+)$", re.M)
        text = pattern.sub(lambda m: f"{m[1]} {float(m[2]) + amount}", text, count=1)

    bump("vllm:spec_decode_num_drafts_total", extra_drafts)
    bump("vllm:spec_decode_num_draft_tokens_total", 3 * extra_drafts)
    bump("vllm:spec_decode_num_accepted_tokens_total", accepted)
    for position, count in enumerate(per_position):
        pattern = re.compile(rf'^(vllm:spec_decode_num_accepted_tokens_per_pos_total\{{[^}}]*position="{position}"\}}) (\S+)$', re.M)
        text = pattern.sub(lambda m: f"{m[1]} {float(m[2]) + count}", text)
    return text


class FakeServer:
    """Metrics advance one window per GATE_PROMPTS completions, like a server the verify script
    alone is using."""

    def __init__(self, metric_texts):
        self.metric_texts, self.completions, self.lock = metric_texts, 0, threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: str, kind="application/json"):
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(json.dumps({"data": [{"id": "gemma-4-26b-a4b-it"}]}))
                elif self.path == "/metrics":
                    with server.lock:
                        index = min(server.completions // GATE_PROMPTS, len(server.metric_texts) - 1)
                    self._send(server.metric_texts[index], "text/plain")
                else:
                    self.send_error(404)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert "prompt" in body and "max_tokens" in body
                with server.lock:
                    server.completions += 1
                self._send(json.dumps({"choices": [{"index": 0, "text": "ok"}]}))

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # the burst connects all at once

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def smoke(url, tmp_path, *extra):
    code = mtp_smoke.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--endpoint", url,
                           "--out", str(tmp_path), "--max-tokens", "8", *extra])
    return code, json.loads((tmp_path / "mtp_smoke.json").read_text())


def by_name(report):
    return {c["name"]: c for c in report["checks"]}


def test_collapsed_drafter_fails_the_gate_over_http(tmp_path):
    with FakeServer([BEFORE, AFTER, AFTER]) as server:
        code, report = smoke(server.url, tmp_path, "--server-log", str(GPU / "engine.log"))
    checks = by_name(report)
    assert code == 1 and report["passed"] is False
    assert checks["acceptance (temperature 0)"]["status"] == "FAIL"
    assert "all rejected" in checks["acceptance (temperature 0)"]["detail"]
    assert checks["CUDA graphs"]["status"] == "PASS"  # from the server's log
    assert report["windows"]["greedy"]["drafts"] == 1016
    # The H200 recipe expects its tuned MoE config; the captured run had none exported.
    assert checks["tuned MoE config"]["status"] == "FAIL"
    assert "Config file not found" in checks["tuned MoE config"]["detail"]


def log_with_tuned_config(tmp_path) -> Path:
    """The captured log as it reads when the image exports VLLM_TUNED_CONFIG_FOLDER: vLLM's
    "Using configuration from ... for MoE layer." in place of its "Config file not found"."""
    name = "E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    text = re.sub(r"WARNING (\S+ \S+) \[fused_moe.py:\d+\] Using default MoE config[^\n]*",
                  rf"INFO \1 [fused_moe.py:1088] Using configuration from /opt/vllm-forge/moe-configs/{name} for MoE layer.",
                  (GPU / "engine.log").read_text())
    path = tmp_path / "server.log"
    path.write_text(text)
    return path


def test_window_delta_passes_where_lifetime_totals_would_fail(tmp_path):
    # Lifetime: 1016 drafts with nothing accepted, then a window of 200 drafts at 80%.
    window = with_acceptance(AFTER, 200, 0.8)
    sampled = with_acceptance(window, 200, 0.5)
    with FakeServer([AFTER, window, sampled]) as server:
        code, report = smoke(server.url, tmp_path, "--server-log", str(log_with_tuned_config(tmp_path)))
    checks = by_name(report)
    assert checks["acceptance (temperature 0)"]["status"] == "PASS", checks["acceptance (temperature 0)"]
    assert report["windows"]["greedy"]["acceptance_rate"] == pytest.approx(0.8)
    assert report["windows"]["recipe_sampling"]["acceptance_rate"] == pytest.approx(0.5)
    assert checks["acceptance (recipe sampling)"]["status"] == "INFO"
    assert checks["tuned MoE config"]["status"] == "PASS"
    assert code == 0 and report["passed"] is True


def test_without_the_server_log_the_log_checks_say_why(tmp_path):
    with FakeServer([BEFORE, AFTER, AFTER]) as server:
        _, report = smoke(server.url, tmp_path)
    assert by_name(report)["CUDA graphs"]["status"] == "NOT CHECKED"
    assert "--server-log" in by_name(report)["CUDA graphs"]["detail"]


def test_without_the_server_log_a_good_window_is_not_a_pass(tmp_path):
    # Drafts accepted well above the thresholds, but nobody read the server's log: the drafter's
    # architecture, embedding sharing, graphs and MoE config are unproven.
    window = with_acceptance(AFTER, 200, 0.8)
    with FakeServer([AFTER, window, window]) as server:
        code, report = smoke(server.url, tmp_path)
    checks = by_name(report)
    assert checks["acceptance (temperature 0)"]["status"] == "PASS"
    assert [n for n, c in checks.items() if c["status"] == "NOT CHECKED" and c["gating"]] == [
        "architectures", "draft shares target embedding", "CUDA graphs", "tuned MoE config"]
    assert code == 1 and report["passed"] is False


def test_unreachable_server_is_a_failed_check(tmp_path):
    code, report = smoke("http://127.0.0.1:9", tmp_path)
    assert code == 1 and by_name(report)["server answers"]["status"] == "FAIL"


def test_bench_burst_every_request_answered(tmp_path):
    with FakeServer([AFTER]) as server:
        code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--endpoint",
                           server.url, "--burst", "500", "--out", str(tmp_path)])
        completions = server.completions
    report = json.loads((tmp_path / "bench.json").read_text())
    assert code == 0 and completions == 500
    assert report["server_burst"]["answered"] == 500 and report["server_burst"]["failed"] == 0
    assert "500/500 answered (0 failed)" in (tmp_path / "bench.md").read_text()
