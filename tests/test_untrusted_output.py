"""Strings from outside the project's code (a cache entry's detail, a job's log, a server's answer)
reach the terminal escaped (forge/untrusted.py): a screen clear or a carriage return is shown as
\\x1b[2J and \\r, never acted on, on three real output paths."""
from __future__ import annotations

import pytest

from tests import loopback

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
    with loopback.hostile_server() as url:
        yield url


def test_a_servers_error_answer_is_escaped_in_verifys_message(hostile_server):
    from verify.endpoint import Endpoint, EndpointError

    server = Endpoint(f"{hostile_server}/completions-http-500-ansi/a", 5)
    with pytest.raises(EndpointError) as refused:
        server.post_json("/v1/completions", "completion", {"prompt": "x"})
    assert "HTTP 500" in str(refused.value) and "\x1b" not in str(refused.value)
    assert "\\x1b[2J" in str(refused.value) and "\n" not in str(refused.value)


# --- the serve command line: meant to be pasted, so shell-quoted and free of control characters ---
# (the model id needs no case: it must be one a models/<family>.yaml lists)

TITLE = "\x1b]0;x\x07"        # sets the terminal's title; shlex quotes it and leaves it raw


def _recipes_with(tmp_path, edit):
    import shutil

    import yaml

    from tests.build_cli import REPO_ROOT

    root = tmp_path / "recipes"
    shutil.copytree(REPO_ROOT / "recipes", root, ignore=shutil.ignore_patterns("*.md"))
    path = root / "gemma-4-26b-a4b-it.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["defaults"]["serve"].update(env={"VLLM_X": f"1{TITLE}"}), "serve.env"),
    (lambda d: d["defaults"]["serve"].update(extra_args=["--served-model-name", f"g{TITLE}"]),
     "serve.extra_args"),
])
def test_a_recipe_field_with_a_control_character_is_refused_before_the_serve_command_is_shown(
        tmp_path, edit, field):
    from tests.build_cli import run_build

    root = _recipes_with(tmp_path, edit)
    result = run_build("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm",
                       "0.27.1", "--repository", "r/f", "--recipes-dir", str(root))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "gemma-4-26b-a4b-it.yaml: " in result.stderr
    assert field in result.stderr and "\\x1b]0;x\\x07" in result.stderr
    assert not any(c in result.stderr for c in "\x1b\x07")


def test_an_hf_cache_with_a_control_character_is_refused_not_pasted(tmp_path):
    from tests.build_cli import run_build

    result = run_build("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm",
                       "0.27.1", "--repository", "r/f", "--hf-cache", f"/x{TITLE}")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: --hf-cache: ") and "\\x1b]0;x\\x07" in result.stderr
    assert not any(c in result.stderr for c in "\x1b\x07")


def test_the_serve_command_line_refuses_a_token_no_terminal_may_receive():
    from forge.errors import ForgeError
    from forge.serving.serve import ServePlan

    assert ServePlan(["docker", "run", "a b"], []).shell() == "docker run 'a b'"
    with pytest.raises(ForgeError, match=r"control character: x\\x1b\]0;x\\x07") as refused:
        ServePlan(["docker", "run", f"x{TITLE}"], []).shell()
    assert "\x1b" not in str(refused.value)


# --- an engine's name from bench --engine: progress lines and file names under --out ------------

@pytest.mark.parametrize("name", [f"e{TITLE}", "../../outside", "." + "e" * 300])
def test_a_bench_engine_name_that_is_no_plain_name_is_refused_before_any_line_or_file(
        name, tmp_path, capsys):
    from verify import bench

    out = tmp_path / "a" / "out"
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--configs", "",
                       "--collect", "--engine", f"name={name}", "--out", str(out)])
    shown = capsys.readouterr()
    assert code == 2 and shown.out == "" and shown.err.startswith("error: --engine ")
    assert "name must be letters, digits" in shown.err and shown.err.count("\n") == 1
    assert not any(c in shown.err for c in "\x1b\x07")
    assert not (tmp_path / "outside").exists()


# --- the upgrade report quotes the data files ----------------------------------------------------

def test_a_known_failures_issue_is_escaped_in_the_upgrade_report(tmp_path):
    """recipes/known-failures.yaml's `issue` is a cell of the report's recipes section (the gb10
    recipes include an NVFP4 one that the entry names)."""
    import shutil
    import subprocess
    import sys

    from tests.build_cli import REPO_ROOT

    tree = tmp_path / "tree"
    for name in ("build.py", "pyproject.toml", "forge", "patches", "images", "recipes", "models",
                 "benchmarks/results"):
        source, copy = REPO_ROOT / name, tree / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
         if source.is_dir() else shutil.copy(source, copy))
    failures = tree / "recipes" / "known-failures.yaml"
    # YAML's own escapes: a screen clear and a carriage return inside the quoted string
    failures.write_text(failures.read_text().replace('issue: "vLLM #39595 (open)"',
                                                     'issue: "\\e[2J\\r#39595"'))
    for verbose in ([], ["--verbose"]):
        result = subprocess.run([sys.executable, "build.py", "upgrade", "--from", "0.25.0", "--to",
                                 "0.27.1", "--target", "gb10", *verbose], cwd=tree,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode in (0, 1), result.stderr
        assert "known failure: " in result.stdout and "(\\x1b[2J\\r#39595)" in result.stdout
        assert shown_escaped(result.stdout)
        # the brief report keeps its 100 columns, escapes counted (--verbose prints lines whole)
        assert verbose or max(len(line) for line in result.stdout.splitlines()) <= 100


def test_a_progress_line_and_a_said_line_show_their_words_escaped(monkeypatch, capsys):
    """forge.progress: what the work is (a release, an image tag), its detail and the lines said
    above it; --lines mode writes each as it goes (the terminal's own redraw codes stay codes)."""
    import io

    from forge.progress import MODE_ENV, Progress, say

    monkeypatch.setenv(MODE_ENV, "lines")
    stream = io.StringIO()
    with Progress(f"pushing r/f:x {HOSTILE}", stream=stream) as progress:
        progress.update(1, detail=HOSTILE)
        say(f"best config: {HOSTILE}")
    assert shown_escaped(stream.getvalue()) and shown_escaped(capsys.readouterr().out)
