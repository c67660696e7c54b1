"""Numbers and strings verify takes from a server, validated where they come in (issue 35, items
3 and 6): spec-decode counters that cannot be true are a FAIL naming why, never a PASS and never a
traceback; every report is strict JSON; what a server says is shown, never obeyed by the terminal.
mtp_smoke runs against a real HTTP server on 127.0.0.1 (tests/metrics_server.py) whose counters a
test writes."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.json_text import dump_json, dump_json_lines
from forge.untrusted import visible
from tests.metrics_server import MetricsServer, prometheus
from verify import bench, mtp_smoke
from verify.metrics import MetricsError, SpecCounters, counters_from_prometheus

REPO = Path(__file__).resolve().parents[1]
ZERO = prometheus(0, 0, 0, (0, 0, 0))
# 100 drafts of 3 tokens, 240 accepted: 80%, mean length 3.4, well inside the H200 thresholds.
GOOD = prometheus(100, 300, 240, (95, 80, 65))
ACCEPTANCE, SAMPLING = "acceptance (temperature 0)", "acceptance (recipe sampling)"


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as every reader but Python's does."""
    def refuse(constant):
        raise AssertionError(f"{constant} in the JSON: not JSON")
    return json.loads(text, parse_constant=refuse)


def smoke(tmp_path: Path, readings: list[str], **server) -> tuple[int, dict, dict]:
    """mtp_smoke --endpoint against a server answering /metrics with `readings` in turn (greedy
    window: before, after; recipe sampling window: before, after)."""
    with MetricsServer(readings, **server) as running:
        code = mtp_smoke.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--endpoint",
                               running.url, "--out", str(tmp_path), "--max-tokens", "4"])
    report = strict_json((tmp_path / "mtp_smoke.json").read_text())
    return code, report, {c["name"]: c for c in report["checks"]}


def test_a_true_window_passes_the_gate(tmp_path):
    """The control of the tests below: the same server and recipe, counters that can be true."""
    _, report, checks = smoke(tmp_path, [ZERO, GOOD, GOOD, GOOD])
    assert checks[ACCEPTANCE]["status"] == "PASS", checks[ACCEPTANCE]
    assert report["windows"]["greedy"]["acceptance_rate"] == pytest.approx(0.8)


@pytest.mark.parametrize("after, cause", [
    # Before: "rate 1666.7% ... 5000/300 draft tokens accepted", RESULT: PASS.
    (prometheus(100, 300, 5000, (95, 80, 65)), "5000 tokens accepted (vllm:spec_decode_num_"
                                               "accepted_tokens) of only 300 drafted"),
    # Before: per position [150%, 80%, 65%], PASS.
    (prometheus(100, 300, 240, (150, 60, 30)), "draft position 0 accepted 150 times in only "
                                               "100 drafts"),
    # Before: int(nan) raised ValueError out of the gate: a traceback and no report.
    (prometheus(100, 300, "NaN", (95, 80, 65)), "vllm:spec_decode_num_accepted_tokens_total"
                                                "{engine='0',model_name='gemma-4-26b-a4b-it'} is nan"),
    (prometheus(100, "+Inf", 240, (95, 80, 65)), "is inf: a counter is a finite number, 0 or more"),
])
def test_counters_that_cannot_be_true_fail_the_gate(tmp_path, after, cause):
    code, report, checks = smoke(tmp_path, [ZERO, after, after, after])
    assert code == 1 and report["passed"] is False
    assert checks[ACCEPTANCE]["status"] == "FAIL"
    assert cause in checks[ACCEPTANCE]["detail"], checks[ACCEPTANCE]["detail"]
    assert "greedy" not in report["windows"]  # no figures from counters that cannot be true


def test_negative_readings_fail_even_when_their_delta_looks_good(tmp_path):
    """Before: readings of -100 drafts, -300 tokens, -240 accepted, then 0: a window of 100/300/240,
    PASS at 80%."""
    before = prometheus(-100, -300, -240, (-95, -80, -65))
    code, _, checks = smoke(tmp_path, [before, ZERO, ZERO, ZERO])
    assert code == 1 and checks[ACCEPTANCE]["status"] == "FAIL"
    assert "is -100.0: a counter is a finite number, 0 or more" in checks[ACCEPTANCE]["detail"]
    assert "before the greedy window" in checks[ACCEPTANCE]["detail"]


def test_a_counter_going_down_between_readings_fails_the_gate(tmp_path):
    code, _, checks = smoke(tmp_path, [GOOD, prometheus(100, 300, 200, (95, 80, 25)), GOOD, GOOD])
    assert code == 1 and checks[ACCEPTANCE]["status"] == "FAIL"
    assert "went down from 240 to 200" in checks[ACCEPTANCE]["detail"]


def test_nan_in_the_ungated_window_is_a_failed_check_and_strict_json(tmp_path):
    """Before: the recipe-sampling window's NaN and Infinity were written into mtp_smoke.json as
    `NaN` / `Infinity` (not JSON: strict_json refuses them)."""
    sampled = prometheus(200, "+Inf", "NaN", (195, 180, 165))
    code, report, checks = smoke(tmp_path, [ZERO, GOOD, GOOD, sampled])
    assert checks[ACCEPTANCE]["status"] == "PASS"
    assert checks[SAMPLING]["status"] == "FAIL"
    assert "recipe_sampling" not in report["windows"]
    assert code == 1 and report["passed"] is False


def test_a_reading_is_refused_where_it_is_made():
    with pytest.raises(MetricsError, match="is -1: a counter is a finite number"):
        SpecCounters(10, 30, -1)
    with pytest.raises(MetricsError, match="is 'many', not a number"):
        SpecCounters(10, 30, "many")
    with pytest.raises(MetricsError, match="31 tokens accepted .* of only 30 drafted"):
        SpecCounters(10, 30, 31)
    with pytest.raises(MetricsError, match="draft position 1 accepted 11 times in only 10 drafts"):
        SpecCounters(10, 30, 20, (9, 11))
    # a negative sample summed with a positive one (two engines) is still a negative sample
    text = prometheus(10, 30, 20, (9, 11)).replace(
        "vllm:spec_decode_num_drafts_total", 'vllm:spec_decode_num_drafts_total{engine="1"} -5\n'
        "vllm:spec_decode_num_drafts_total", 1)
    with pytest.raises(MetricsError, match=r"drafts_total\{engine='1'\} is -5.0"):
        counters_from_prometheus(text)
    # one sample twice: its counts would be summed twice
    line = next(t for t in prometheus(10, 30, 20).splitlines() if t.startswith("vllm:spec_decode_num_drafts"))
    with pytest.raises(MetricsError, match="drafts_total.* the same sample appears twice"):
        counters_from_prometheus(prometheus(10, 30, 20) + line + "\n")


def snapshot(drafts, tokens, accepted, per_position):
    return {"vllm:spec_decode_num_drafts": drafts, "vllm:spec_decode_num_draft_tokens": tokens,
            "vllm:spec_decode_num_accepted_tokens": accepted,
            "vllm:spec_decode_num_accepted_tokens_per_pos": per_position}


def test_in_process_windows_are_refused_the_same_way():
    """The in-process engine's counters (LLM.get_metrics(), as engine_worker.py records them): a
    window that cannot be true is kept as its refusal, to be a FAIL; the others are measured."""
    zero = snapshot(0, 0, 0, [0, 0, 0])
    result = {"windows": {
        "greedy_agree": {"metrics_before": zero, "metrics_after": snapshot(100, 300, 300, [100] * 3)},
        "greedy_random": {"metrics_before": zero,
                          "metrics_after": snapshot(100, 300, 5000, [0, 0, 0])},
        "recipe_sampling": {"metrics_before": zero, "metrics_after": snapshot(1, 3, None, [])}}}
    measured = mtp_smoke.windows_measured(result, ["greedy_agree", "greedy_random",
                                                   "recipe_sampling", "absent"])
    assert measured["greedy_agree"].acceptance_rate == 1.0
    assert isinstance(measured["greedy_random"], MetricsError)
    assert str(measured["greedy_random"]).startswith("greedy_random window: 5000 tokens accepted")
    assert "is None, not a number" in str(measured["recipe_sampling"])
    assert measured["absent"] is None
    assert mtp_smoke.window_summary(measured["greedy_random"]) == {
        "refused": str(measured["greedy_random"])}


def test_a_refused_window_is_never_a_passed_negative_control():
    """negative_control passes a gate that failed: refused counters must not reach it."""
    from verify import checks

    refused = checks.counters_refused(checks.NEGATIVE_CONTROL, "5000 tokens accepted of only 300")
    assert refused.status == "FAIL" and refused.name == checks.NEGATIVE_CONTROL
    assert checks.negative_control(checks.check_acceptance(None, 0.5, 2.0)).status == "NOT CHECKED"


def test_bench_counts_an_engine_with_impossible_counters_as_failed():
    from verify.vllm_logs import EngineLogFacts

    window = {"requests": [{"tokens": 9, "tpot_s": 0.01, "ttft_s": 0.1}], "wall_s": [0.2],
              "metrics_before": snapshot(0, 0, 0, [0]), "metrics_after": snapshot(4, 4, math.nan, [4])}
    figures, error = bench.engine_outcome({"engine": {"started": True},
                                           "windows": {"sustained": window}}, EngineLogFacts())
    assert figures is None
    assert error.startswith("the spec-decode counters cannot be true: counter "
                            "vllm:spec_decode_num_accepted_tokens is nan")


def test_the_engine_worker_writes_strict_json_and_says_what_it_refused(tmp_path):
    from verify.engine_worker import _write, read_result

    path = tmp_path / "engine.result.json"
    _write(path, {"engine": {"started": True}, "windows": {"greedy": {"wall_s": [math.inf]}}})
    result = strict_json(path.read_text())
    assert result["windows"] == {} and result["engine"] == {"started": True}
    assert result["error"].startswith(f"engine result {path}: windows.greedy.wall_s[0] is inf")
    assert read_result(path) == result
    path.write_text('{"engine": {"started": tr')   # not the worker's (it writes atomically)
    assert read_result(path)["engine"] == {"started": False}
    assert "not the worker's result" in read_result(path)["error"]


def test_dump_json_names_the_field_that_is_no_number():
    assert dump_json({"a": [1.5, {"b": 2}]}) == '{"a": [1.5, {"b": 2}]}'
    with pytest.raises(ForgeError, match=r"^report: windows\.greedy\.per_position_rates\[1\] is "
                                         r"-inf, not a finite number"):
        dump_json({"windows": {"greedy": {"per_position_rates": [0.5, -math.inf]}}}, "report")
    with pytest.raises(ForgeError, match=r"^JSON: \[1\]\[0\]\.x is nan"):
        dump_json([0, [{"x": math.nan}]])


def test_dump_json_lines_puts_each_flat_entry_on_a_line_of_its_own_and_is_as_strict():
    record = {"state": "applied", "applied": ["a", "b"], "files": [{"path": "x", "sha": None}, {}],
              "later": [{"files": [{"path": "é"}]}], "created_dirs": [], 1: [[True]]}
    text = dump_json_lines(record)
    assert json.loads(text) == json.loads(json.dumps(record))
    assert text.splitlines() == [
        '{', ' "state": "applied",', ' "applied": ["a", "b"],', ' "files": [',
        '  {"path": "x", "sha": null},', '  {}', ' ],', ' "later": [', '  {', '   "files": [',
        '    {"path": "\\u00e9"}', '   ]', '  }', ' ],', ' "created_dirs": [],', ' "1": [',
        '  [true]', ' ]', '}']
    with pytest.raises(ForgeError, match=r"^the record: files\[0\]\.size is inf, not a finite"):
        dump_json_lines({"files": [{"size": math.inf}]}, "the record")


def test_every_json_the_project_writes_goes_through_dump_json():
    """No json.dump/json.dumps in forge/, verify/, benchmarks/ or build.py but forge.json_text's
    own, the probe (it imports nothing from forge: it says allow_nan=False itself) and the one
    that quotes a server's answer inside a message."""
    found = subprocess.run(["grep", "-rn", "--include=*.py", r"json\.dumps\?(",
                            "forge", "verify", "benchmarks", "build.py"],
                           cwd=REPO, capture_output=True, text=True).stdout.splitlines()
    # benchmarks/results/ holds what ran on a GPU host, as it ran: raw files, not the project's code
    others = [line for line in found if not line.startswith(("forge/json_text.py:", "benchmarks/results/"))
              and not ("forge/watch/drift_probe.py:" in line and "allow_nan=False" in line)
              and "excerpt(json.dumps(answer" not in line]
    assert others == []


# --- what a server says is shown, never obeyed ----------------------------------------------

HOSTILE = "gemma\x1b]0;owned\x07\x1b[2J\r\nRESULT: PASS (11 passed, 0 failed)"


def test_visible_escapes_what_a_terminal_would_act_on():
    assert visible("gemma-4-26b-a4b-it é ü") == "gemma-4-26b-a4b-it é ü"
    assert visible(HOSTILE) == ("gemma\\x1b]0;owned\\x07\\x1b[2J\\r\\nRESULT: PASS "
                                "(11 passed, 0 failed)")
    assert visible("right\u202eleft\tx\x7f") == "right\\u202eleft\\tx\\x7f"


def run_smoke_process(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "verify/mtp_smoke.py", "--recipe", "gemma-4-26b-a4b-it",
                           "--target", "h200", "--endpoint", url, "--out", str(tmp_path / "out"),
                           "--max-tokens", "4", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_hostile_model_id_and_version_cannot_forge_the_result(tmp_path):
    """Before: the model id's escapes reached the terminal (clear screen, window title) and its
    newline printed a `RESULT: PASS` line of its own above the real RESULT: FAIL."""
    log = tmp_path / "server.log"
    log.write_text("INFO 12-01 21:27:15 [eagle.py:1] Keeping separate embedding weights "
                   "\x1b[2J\rRESULT: PASS\n")
    with MetricsServer([ZERO, GOOD, GOOD, GOOD], model=HOSTILE,
                       version="0.27.1\x1b[31m\nRESULT: PASS") as server:
        done = run_smoke_process(tmp_path, server.url, "--server-log", str(log))
    assert done.returncode == 1, done.stderr
    for control in ("\x1b", "\r", "\x07"):
        assert control not in done.stdout + done.stderr
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT:")]
    assert len(results) == 1 and results[0].startswith("RESULT: FAIL")
    assert "serves gemma\\x1b]0;owned\\x07\\x1b[2J\\r\\nRESULT: PASS" in done.stdout
    assert "vllm 0.27.1\\x1b[31m\\nRESULT: PASS" in done.stdout   # the ran-on line
    # (a lone \r ends a line as Python reads text: the log's "RESULT: PASS" is a line of its own)
    assert "draft keeps its own embedding: Keeping separate embedding weights \\x1b[2J" in done.stdout
    # the report keeps what the server said, as JSON escapes it
    report = strict_json((tmp_path / "out" / "mtp_smoke.json").read_text())
    assert report["model"] == HOSTILE


# --- Ctrl-C: one line, exit 130, nothing half-written ---------------------------------------

def interrupted(command: list[str], server: MetricsServer, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run `command`, send it SIGINT once the server holds its first completion, wait."""
    import signal
    import time

    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 120
    while server.completions == 0 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert server.completions, "the command never reached the server"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def test_ctrl_c_in_mtp_smoke_is_one_line_and_exit_130(tmp_path):
    """Before: a KeyboardInterrupt traceback."""
    out = tmp_path / "out"
    with MetricsServer([ZERO, GOOD], hang=True) as server:
        done = interrupted([sys.executable, "verify/mtp_smoke.py", "--recipe", "gemma-4-26b-a4b-it",
                            "--target", "h200", "--endpoint", server.url, "--out", str(out)], server)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "error: interrupted\n"
    assert not out.exists()   # no report, no temp file: with --endpoint the folder comes with the report


def test_ctrl_c_in_a_bench_burst_is_one_line_and_exit_130(tmp_path):
    """Before: a traceback, after the burst's threads had waited out their 900 s timeout."""
    out = tmp_path / "out"
    with MetricsServer([ZERO], hang=True) as server:
        done = interrupted([sys.executable, "verify/bench.py", "--recipe", "gemma-4-26b-a4b-it",
                            "--target", "h200", "--endpoint", server.url, "--burst", "4",
                            "--out", str(out)], server)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "error: interrupted\n"
    assert not out.exists() or list(out.iterdir()) == []


def entry_points() -> list[Path]:
    """Every script of verify/ and benchmarks/ that runs as a program."""
    scripts = [p for top in ("verify", "benchmarks") for p in sorted((REPO / top).rglob("*.py"))
               if 'if __name__ == "__main__":\n    sys.exit(' in p.read_text()]
    assert len(scripts) >= 8
    return scripts


@pytest.mark.parametrize("script", entry_points(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_entry_point_ends_a_ctrl_c_in_one_line(script):
    """Each script's main runs under forge.errors.exit_on_interrupt, run as a file or as the
    installed command (the engine worker runs in a session of its own, which no Ctrl-C reaches:
    its parent kills it)."""
    text = script.read_text()
    if script.name == "engine_worker.py":
        assert "start_new_session=True" in (REPO / "verify/supervisor.py").read_text()
        return
    assert ('if __name__ == "__main__":\n    sys.exit(exit_on_interrupt(main))' in text
            or ('if __name__ == "__main__":\n    sys.exit(run())' in text
                and "    return exit_on_interrupt(main)\n" in text)), script


def test_the_installed_commands_end_a_ctrl_c_in_one_line():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"vllm-forge": "forge.commands.cli:main",   # catches it itself
                       "vllm-forge-mtp-smoke": "verify.mtp_smoke:run",
                       "vllm-forge-bench": "verify.bench:run", "vllm-forge-profile": "verify.profile:run"}


def test_exit_on_interrupt_is_one_line_and_130_even_with_a_thread_waiting(tmp_path):
    code = ("import os, signal, threading, time\n"
            "from forge.errors import exit_on_interrupt\n"
            "def main():\n"
            "    threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(60)\n"
            "raise SystemExit(exit_on_interrupt(main))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stderr) == (130, "error: interrupted\n")
