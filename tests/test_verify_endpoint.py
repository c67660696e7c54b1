"""mtp_smoke --endpoint and bench --endpoint against a real HTTP server on 127.0.0.1 that serves
Prometheus text captured from vLLM 0.25.0 on an H200 (a stand-in for a vLLM server's HTTP
surface: /v1/models, /v1/completions, /metrics; vLLM's own parser is not replaced)."""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests import loopback
from tests.loopback import serve_in_background
from verify import bench, mtp_smoke

REPO_ROOT = Path(__file__).resolve().parents[1]
GPU = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "h200-0.25.0-smoke-26b-a4b-v1-l6-patched"
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
        text = pattern.sub(lambda m, count=count: f"{m[1]} {float(m[2]) + count}", text)
    return text


SERVED_RELEASE = "0.25.0"  # the release the captured metrics and log come from


class FakeServer:
    """Metrics advance one window per GATE_PROMPTS completions, like a server the verify script
    alone is using. `faults` maps a path to fault(server) -> (status, body) or None: a misbehaving
    answer in place of the normal one (None: answer normally), e.g. after some completions."""

    def __init__(self, metric_texts, faults=None, release=SERVED_RELEASE):
        self.metric_texts, self.completions, self.lock = metric_texts, 0, threading.Lock()
        self.faults, self.release = faults or {}, release
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: str, kind="application/json", status=200):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _fault(self) -> bool:
                fault = server.faults.get(self.path)
                answer = fault(server) if fault else None
                if answer is not None:
                    self._send(answer[1], "text/plain", answer[0])
                return answer is not None

            def do_GET(self):
                if self._fault():
                    return
                if self.path == "/v1/models":
                    self._send(json.dumps({"data": [{"id": "gemma-4-26b-a4b-it"}]}))
                elif self.path == "/version":
                    self._send(json.dumps({"version": server.release}))
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
                if not self._fault():
                    self._send(json.dumps({"choices": [{"index": 0, "text": "ok"}]}))

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # the burst connects all at once

            def handle_error(self, request, client_address):
                pass  # a client that timed out and left: nothing to report

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        serve_in_background(self.httpd)
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
    # The H200 recipe expects vLLM's default MoE config (its tune was withdrawn): reported.
    assert checks["tuned MoE config"]["status"] == "INFO"
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
    assert checks["tuned MoE config"]["status"] == "INFO"  # a file used where none is expected
    assert "/opt/vllm-forge/moe-configs/" in checks["tuned MoE config"]["detail"]
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
    assert code == 1 and report["passed"] is False
    assert [n for n, c in checks.items() if c["status"] == "NOT CHECKED" and c["gating"]] == [
        "architectures", "draft shares target embedding", "CUDA graphs", "tuned MoE config",
        "quantization", "MoE backend", "attention backend"]


# ------------------------------------------------------------------------------------------
# Every way the server can misbehave is a FAIL check naming the cause, in a report always written.

GOOD_WINDOW = with_acceptance(AFTER, 200, 0.8)
REQUIRED = ("architectures", "draft shares target embedding", "CUDA graphs",
            "acceptance (temperature 0)")


def help_flags(*command) -> set[str]:
    """The flags a command's own --help lists."""
    text = subprocess.run([sys.executable, *command, "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", text))


MTP_SMOKE_FLAGS = help_flags("-m", "verify.mtp_smoke")


def assert_named_flags_exist(detail: str) -> None:
    """A flag a message names is one of mtp_smoke.py's, or, where it speaks of how the server was
    started, one `vllm serve` of the served release accepts."""
    from forge.serving.vllm_args import release_args

    for flag in re.findall(r"--[a-z][a-z0-9-]*", detail):
        assert flag in MTP_SMOKE_FLAGS or (
            "server started without" in detail and release_args(SERVED_RELEASE).has_flag(flag)), (
            f"{flag} named in {detail!r} is no flag of mtp_smoke.py")


def failing_smoke(tmp_path, server_url, *extra):
    """Run the gate; assert it failed, wrote a full report whose messages name real flags."""
    code, report = smoke(server_url, tmp_path, *extra)
    assert code == 1 and report["passed"] is False
    assert set(REQUIRED) <= set(by_name(report))  # every gate is accounted for, run or not
    for check in report["checks"]:
        assert_named_flags_exist(check["detail"])
    return report


def closed_port_url() -> str:
    """A 127.0.0.1 port nothing listens on: connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_connection_refused_is_a_failed_check_and_a_full_report(tmp_path):
    report = failing_smoke(tmp_path, closed_port_url())
    checks = by_name(report)
    assert checks["server answers"]["status"] == "FAIL"
    assert checks["server answers"]["detail"].startswith("GET /v1/models: cannot connect: [Errno 111]")
    assert "Connection refused" in checks["server answers"]["detail"]
    assert {checks[name]["status"] for name in REQUIRED} == {"NOT CHECKED"}
    assert report["endpoint"].startswith("http://127.0.0.1:") and report["vllm"] is None
    assert report["versions"] == dict.fromkeys(("vllm", "torch", "transformers"),
                                               "unknown: the server did not answer")


@pytest.mark.parametrize("answer, cause", [
    ((200, json.dumps({"object": "list", "data": []})), "GET /v1/models: the server lists no model"),
    ((503, "Service Unavailable: loading"), "GET /v1/models: HTTP 503 Service Unavailable: 'Service Unavailable: loading'"),
    ((200, "<html>proxy</html>"), "GET /v1/models: the answer is not JSON: '<html>proxy</html>'"),
    ((200, json.dumps({"data": [{"object": "model"}]})), "GET /v1/models: data[0] names no model id"),
])
def test_bad_model_list_is_a_failed_server_check(tmp_path, answer, cause):
    with FakeServer([AFTER, GOOD_WINDOW], faults={"/v1/models": lambda s: answer}) as server:
        report = failing_smoke(tmp_path, server.url, "--server-log", str(log_with_tuned_config(tmp_path)))
        completions = server.completions
    assert by_name(report)["server answers"] == {"name": "server answers", "status": "FAIL",
                                                 "detail": cause, "gating": True}
    assert completions == 0  # nothing measured against a server that serves nothing


def fail_from_completion(number, answer):
    """A server whose completions go wrong from the `number`th on."""
    return {"/v1/completions": lambda s: answer if s.completions >= number else None}


@pytest.mark.parametrize("answer, cause", [
    ((500, "Internal Server Error"),
     "POST /v1/completions (greedy window, prompt 3 of 8): HTTP 500 Internal Server Error: 'Internal Server Error'"),
    ((200, '{"choices": [{"text": "trunc'),
     "POST /v1/completions (greedy window, prompt 3 of 8): the answer is not JSON: '{\"choices\": [{\"text\": \"trunc'"),
    ((200, json.dumps({"object": "error", "message": "no"})),
     "POST /v1/completions (greedy window, prompt 3 of 8): the answer has no choices: "),
])
def test_failed_completion_is_a_failed_acceptance_check(tmp_path, answer, cause):
    with FakeServer([AFTER, GOOD_WINDOW, GOOD_WINDOW], faults=fail_from_completion(3, answer)) as server:
        report = failing_smoke(tmp_path, server.url, "--server-log", str(log_with_tuned_config(tmp_path)))
    checks = by_name(report)
    assert checks["acceptance (temperature 0)"]["status"] == "FAIL"
    assert checks["acceptance (temperature 0)"]["detail"].startswith(cause)
    assert checks["acceptance (recipe sampling)"]["status"] == "NOT CHECKED"
    assert checks["server answers"]["status"] == checks["CUDA graphs"]["status"] == "PASS"


def test_completion_timeout_is_a_failed_acceptance_check(tmp_path):
    def hang(server):
        time.sleep(3)  # past the client's --timeout 1
        return 200, json.dumps({"choices": [{"text": "late"}]})

    with FakeServer([AFTER, GOOD_WINDOW], faults={"/v1/completions": hang}) as server:
        report = failing_smoke(tmp_path, server.url, "--timeout", "1")
    assert by_name(report)["acceptance (temperature 0)"]["detail"] == (
        "POST /v1/completions (greedy window, prompt 1 of 8): no answer within 1 s (--timeout)")


WITHOUT_SPEC_COUNTERS = "\n".join(line for line in AFTER.splitlines() if "spec_decode" not in line)


@pytest.mark.parametrize("metrics, fault, cause", [
    ([AFTER], lambda s: (503, "metrics disabled"),
     "GET /metrics (before the greedy window): HTTP 503 Service Unavailable: 'metrics disabled'"),
    ([AFTER], lambda s: (200, "<html><body>Sign in</body></html>"),
     "GET /metrics (before the greedy window): not a Prometheus sample line: '<html><body>Sign in</body></html>'"),
    ([WITHOUT_SPEC_COUNTERS], None,
     "GET /metrics (before the greedy window): no vllm:spec_decode_num_drafts_total, "
     "vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total in the "
     "metrics (a server started without --speculative-config, or not a vLLM server)"),
    ([AFTER, BEFORE], None,  # restarted mid-window: its lifetime totals start again from 0
     "greedy window: counter vllm:spec_decode_num_drafts went down from 1016 to 0 between the two "
     "readings (the server restarted during the window?)"),
])
def test_bad_metrics_answer_is_a_failed_acceptance_check(tmp_path, metrics, fault, cause):
    faults = {"/metrics": fault} if fault else {}
    with FakeServer(metrics, faults=faults) as server:
        report = failing_smoke(tmp_path, server.url, "--server-log", str(log_with_tuned_config(tmp_path)))
    assert by_name(report)["acceptance (temperature 0)"] == {
        "name": "acceptance (temperature 0)", "status": "FAIL", "detail": cause, "gating": True}


def test_failed_recipe_sampling_window_fails_the_report(tmp_path):
    # The greedy window passes; the server then errors on the recipe's own sampling settings.
    sampled = with_acceptance(GOOD_WINDOW, 200, 0.5)
    faults = fail_from_completion(GATE_PROMPTS + 1, (400, '{"message": "top_k out of range"}'))
    with FakeServer([AFTER, GOOD_WINDOW, sampled], faults=faults) as server:
        report = failing_smoke(tmp_path, server.url, "--server-log", str(log_with_tuned_config(tmp_path)))
    checks = by_name(report)
    assert checks["acceptance (temperature 0)"]["status"] == "PASS"
    assert checks["acceptance (recipe sampling)"]["status"] == "FAIL"
    assert checks["acceptance (recipe sampling)"]["detail"].startswith(
        "POST /v1/completions (recipe_sampling window, prompt 1 of 8): HTTP 400 Bad Request")


def test_unreadable_server_log_is_a_failed_check(tmp_path):
    with FakeServer([AFTER, GOOD_WINDOW, GOOD_WINDOW]) as server:
        report = failing_smoke(tmp_path, server.url, "--server-log", str(tmp_path / "no-such.log"))
    checks = by_name(report)
    assert checks["server log"]["detail"] == (
        f"--server-log {tmp_path / 'no-such.log'}: cannot read it: no such file or directory")
    assert checks["CUDA graphs"]["status"] == "NOT CHECKED"


# ------------------------------------------------------------------------------------------
# What the report says it verified, for build.py publish

DIGEST = "sha256:" + "c" * 64


def test_report_names_target_release_and_image_digest(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_IMAGE_DIGEST", f"ghcr.io/acme/vllm-forge@{DIGEST}")
    with FakeServer([AFTER, GOOD_WINDOW, GOOD_WINDOW]) as server:
        _, report = smoke(server.url, tmp_path, "--server-log", str(log_with_tuned_config(tmp_path)))
    assert (report["target"], report["vllm"], report["image_digest"]) == ("h200", SERVED_RELEASE, DIGEST)
    # The server is another process: its release from GET /version, the rest said to be unknown.
    elsewhere = f"unknown: --endpoint: the server's GET /version names only vLLM (vLLM {SERVED_RELEASE})"
    assert report["versions"] == {"vllm": SERVED_RELEASE, "torch": elsewhere, "transformers": elsewhere}
    assert f"serves gemma-4-26b-a4b-it, vLLM {SERVED_RELEASE}" in by_name(report)["server answers"]["detail"]


def test_a_server_without_version_leaves_the_release_unknown(tmp_path):
    with FakeServer([AFTER, GOOD_WINDOW, GOOD_WINDOW], faults={"/version": lambda s: (404, "")}) as server:
        _, report = smoke(server.url, tmp_path, "--image-digest", DIGEST)
    assert report["vllm"] is None and report["image_digest"] == DIGEST
    assert report["versions"]["vllm"].startswith("unknown: --endpoint: the server's GET /version "
                                                 "names only vLLM (vLLM release unknown (GET /version: HTTP 404")
    assert "vLLM release unknown (GET /version: HTTP 404 Not Found" in by_name(report)["server answers"]["detail"]


def test_bad_image_digest_is_a_one_line_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        mtp_smoke.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--endpoint",
                        closed_port_url(), "--out", str(tmp_path), "--image-digest", "sha256:abc"])
    assert exit_.value.code == 2
    [err] = capsys.readouterr().err.strip().splitlines()   # one line, not argparse's usage block
    assert ("argument --image-digest: not sha256:<64 hex> or NAME@sha256:<64 hex> "
            "(from --image-digest or $VLLM_FORGE_IMAGE_DIGEST): 'sha256:abc'") in err


def test_bench_burst_every_request_answered(tmp_path):
    with FakeServer([AFTER]) as server:
        code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--endpoint",
                           server.url, "--burst", "500", "--out", str(tmp_path)])
        completions = server.completions
    report = json.loads((tmp_path / "bench.json").read_text())
    assert code == 0 and completions == 500
    assert report["server_burst"]["answered"] == 500 and report["server_burst"]["failed"] == 0
    assert "500/500 answered (0 failed)" in (tmp_path / "bench.md").read_text()
    # The server's release from its GET /version; its torch and transformers are another process's.
    assert report["machine"]["vllm"] == SERVED_RELEASE and report["machine"]["device"] is None
    assert report["machine"]["torch"] == report["machine"]["transformers"] == \
        f"unknown: --endpoint: the server's GET /version names only vLLM (vLLM {SERVED_RELEASE})"
    assert f"- ran on: vllm {SERVED_RELEASE}, torch unknown" in (tmp_path / "bench.md").read_text()


# ------------------------------------------------------------------------------------------
# Hostile input (issue 20): a failed check in a written report, or one line and nothing written

PER_POSITION = re.compile(r'^(vllm:spec_decode_num_accepted_tokens_per_pos_total\{.*),position="0"\}', re.M)


@pytest.mark.parametrize("labels, cause", [
    (r"\1}", "vllm:spec_decode_num_accepted_tokens_per_pos_total: a sample has no position label"),
    (r'\1,position="first"}', "vllm:spec_decode_num_accepted_tokens_per_pos_total: "
                              "position='first' is not a draft position (0, 1, ...)"),
])
def test_metrics_position_label_missing_or_not_a_number_is_a_failed_check_in_a_written_report(
        tmp_path, labels, cause):
    bad = PER_POSITION.sub(labels, AFTER, count=1)
    assert bad != AFTER
    with FakeServer([bad]) as server:
        report = failing_smoke(tmp_path, server.url, "--server-log", str(log_with_tuned_config(tmp_path)))
    assert by_name(report)["acceptance (temperature 0)"]["status"] == "FAIL"
    assert by_name(report)["acceptance (temperature 0)"]["detail"] == (
        f"GET /metrics (before the greedy window): {cause}")


def run_smoke_cli(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, "-m", "verify.mtp_smoke", "--recipe", "gemma-4-26b-a4b-it",
                           "--target", "h200", "--endpoint", closed_port_url(), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value, problem", [("0", "must be 1 second or more (got 0)"),
                                            ("-5", "must be 1 second or more (got -5)"),
                                            ("soon", "not a whole number of seconds: 'soon'"),
                                            ("10000000000", "must be at most 604800 seconds "
                                                            "(got 10000000000)")])
def test_mtp_smoke_timeout_out_of_range_is_refused_naming_the_flag(tmp_path, value, problem):
    out = tmp_path / "out"
    result = run_smoke_cli("--timeout", value, "--out", str(out))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [err] = result.stderr.strip().splitlines()
    assert f"argument --timeout: {problem}" in err
    assert not out.exists()


def test_mtp_smoke_out_naming_an_existing_file_is_one_line_and_the_file_is_kept(tmp_path):
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    result = run_smoke_cli("--out", str(taken))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: --out {taken}: is not a directory"]
    assert taken.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_mtp_smoke_out_below_a_file_is_one_line(tmp_path):
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    result = run_smoke_cli("--out", str(taken / "run1"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: --out {taken / 'run1'}: is not a directory ({taken} is a file)"]
    assert taken.read_text() == "mine\n"


def test_bench_out_naming_an_existing_file_is_one_line_and_the_file_is_kept(tmp_path):
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    result = subprocess.run([sys.executable, "-m", "verify.bench", "--recipe", "gemma-4-26b-a4b-it",
                             "--target", "h200", "--endpoint", closed_port_url(), "--out", str(taken)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: --out {taken}: is not a directory"]
    assert taken.read_text() == "mine\n"


# --expect-control: a server started with the controls plugin (serve_local.py --control) serves one
# control model; the acceptance gate is then a positive or a negative control, as in-process.

def test_expect_control_agree_is_the_positive_control_of_the_gate(tmp_path):
    with FakeServer([AFTER, GOOD_WINDOW, GOOD_WINDOW]) as server:
        code, report = smoke(server.url, tmp_path, "--dummy", "--expect-control", "agree",
                             "--server-log", str(log_with_tuned_config(tmp_path)))
    gate_check = by_name(report)["acceptance (temperature 0)"]
    assert gate_check["status"] == "PASS"
    assert gate_check["detail"].startswith("agreeing model (positive control): ")
    assert code == 0 and report["passed"] is True and report["verify_broken"] is False
    assert report["control"] == "agree" and report["dummy"] is True


def test_expect_control_random_is_the_negative_control_and_no_pass(tmp_path):
    # the collapsed drafter of an H200 capture: nothing accepted, as on vLLM's own dummy weights
    with FakeServer([BEFORE, AFTER, AFTER]) as server:
        code, report = smoke(server.url, tmp_path, "--dummy", "--expect-control", "random",
                             "--server-log", str(log_with_tuned_config(tmp_path)))
    checks = by_name(report)
    negative = checks["acceptance, random model (negative control)"]
    assert negative["status"] == "PASS" and "the gate failed it, as it must" in negative["detail"]
    assert checks["acceptance (temperature 0)"]["status"] == "NOT CHECKED"
    assert "--expect-control random" in checks["acceptance (temperature 0)"]["detail"]
    assert_named_flags_exist(checks["acceptance (temperature 0)"]["detail"])
    assert code == 1 and report["passed"] is False and report["verify_broken"] is False


@pytest.mark.parametrize("control, windows", [("agree", [BEFORE, AFTER, AFTER]),
                                              ("random", [AFTER, GOOD_WINDOW, GOOD_WINDOW])])
def test_a_control_going_the_wrong_way_is_a_broken_verify(tmp_path, control, windows):
    with FakeServer(windows) as server:
        code, report = smoke(server.url, tmp_path, "--dummy", "--expect-control", control,
                             "--server-log", str(log_with_tuned_config(tmp_path)))
    broken = [c for c in report["checks"] if c["detail"].startswith("verify is broken: ")]
    assert code == 3 and report["verify_broken"] is True
    assert [c["status"] for c in broken] == ["FAIL"]


@pytest.mark.parametrize("extra", [["--endpoint", "http://127.0.0.1:9"], ["--dummy"]])
def test_expect_control_needs_endpoint_and_dummy(tmp_path, capsys, extra):
    with pytest.raises(SystemExit) as exit_:
        mtp_smoke.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--out", str(tmp_path),
                        "--expect-control", "agree", *extra])
    assert exit_.value.code == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("error: ") and (
        "--expect-control needs --endpoint and --dummy (in-process, --dummy runs both controls)" in err)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def hostile_server():
    with loopback.hostile_server() as url:
        yield url


def test_one_wait_server_probe_ends_at_its_deadline_whatever_the_server_trickles(hostile_server):
    """bench --wait-server's probe of a health URL whose server drips its answer a byte at a time
    (its headers and 240 bytes, 0.1 s apart: 30 s in all, each read answered well within a per-read
    timeout: urllib took the headers after 8 s and counted the server ready) ends
    at its own 2 s deadline, the server counted neither ready nor failed while its process lives."""
    alive = str(os.getpid())
    started = time.monotonic()
    assert bench._server_state(f"{hostile_server}/health-trickle/a/health", alive) is None
    assert time.monotonic() - started < 12          # the drip takes 30 s
    assert bench._server_state(f"{hostile_server}/healthy/a/health", alive) == "ready"
    assert bench._server_state(f"{hostile_server}/no-such/a/health", alive) is None      # 404
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert bench._server_state(f"{hostile_server}/health-trickle/b/health", gone) == "failed"
