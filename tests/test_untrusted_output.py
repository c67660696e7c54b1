"""Strings from outside the project's code (a cache entry's detail, a job's log, a server's answer)
reach the terminal escaped (forge/untrusted.py): a screen clear or a carriage return is shown as
\\x1b[2J and \\r, never acted on, on three real output paths."""
from __future__ import annotations

import pytest

from tests.loopback import serve_in_background

HOSTILE = "\x1b[2J\x1b]0;owned\x07\rRESULT: PASS"


def shown_escaped(text: str) -> bool:
    return "\\x1b[2J" in text and "\\r" in text and not any(c in text for c in "\x1b\r\x07")


def test_a_patch_status_detail_is_escaped_in_the_patches_table(capsys):
    from forge.patching.report import print_release
    from forge.patching.series import load_series
    from forge.patching.status import PatchStatus

    series = load_series(offline=True)
    first = series.patches[0]
    print_release("0.27.1", [PatchStatus(first.id, str(first.kind), "applies", f"git apply: {HOSTILE}")], series)
    out = capsys.readouterr().out
    assert shown_escaped(out) and "RESULT: PASS" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_a_jobs_log_line_is_escaped_in_the_gpu_runners_progress(tmp_path, capsys):
    from benchmarks.gpu.runner.record import Timeline, last_line

    log = tmp_path / "job.log"
    # last_line splits at a carriage return as at a newline (a progress bar's last state): the
    # line it shows holds the escapes, and the plan's command (the runner's first line) the \r.
    log.write_text(f"python3 verify/bench.py --engine 'name=\rRESULT: PASS'\nloading\n{HOSTILE[:-13]} stop\n")
    timeline = Timeline(tmp_path)
    timeline.say(f"failed bench-k4 exit 1 after 3.0 s: {last_line(log)}")
    timeline.say("start bench-k4: python3 verify/bench.py --engine 'name=\rRESULT: PASS'")
    out = capsys.readouterr().out
    assert shown_escaped(out) and shown_escaped((tmp_path / "timeline.txt").read_text())


@pytest.fixture
def hostile_server():
    from tests.hostile.server import Handler, Server

    server = Server(("127.0.0.1", 0), Handler)
    serve_in_background(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_servers_error_answer_is_escaped_in_verifys_message(hostile_server):
    from verify.endpoint import Endpoint, EndpointError

    server = Endpoint(f"{hostile_server}/completions-http-500-ansi/a", 5)
    with pytest.raises(EndpointError) as refused:
        server.post_json("/v1/completions", "completion", {"prompt": "x"})
    assert "HTTP 500" in str(refused.value) and "\x1b" not in str(refused.value)
    assert "\\x1b[2J" in str(refused.value) and "\n" not in str(refused.value)
