"""Progress for long work: one updating line on a real terminal (a pty); when stderr is not a
terminal nothing, or with $VLLM_FORGE_PROGRESS=lines a start and an end line (logs). Sweeps
through track(); pushes fed by the real engine's stream."""
import io
import os
import re
import tarfile

import pytest

from forge import progress
from forge.progress import CLEAR_LINE, PushProgress
from tests.terminal import TerminalStream, run_python

SWEEP = """
import forge.progress as progress
progress.REDRAW_S = 0  # draw every update: the test reads each one
for m in progress.track([1, 16, 256], "tune-moe bf16", unit="token counts"):
    {body}
print("result on stdout")
"""
DONE = re.compile(r"tune-moe bf16: (\w+), (.*) in \d+\.\d s")
LOGGED = {"VLLM_FORGE_PROGRESS": "lines"}
DEFAULT = {"VLLM_FORGE_PROGRESS": ""}


def test_a_sweep_on_a_terminal_rewrites_one_line():
    code, stdout, stderr = run_python(SWEEP.format(body="pass"), terminal=True)
    assert code == 0 and stdout == "result on stdout\n"
    for step in ("1 of 3 token counts (33%)", "2 of 3 token counts (67%)"):
        assert f"{CLEAR_LINE}tune-moe bf16: {step}" in stderr, stderr
    assert stderr.count("\n") == 1, "only the end line ends a line"
    assert DONE.fullmatch(stderr.rsplit(CLEAR_LINE, 1)[1].rstrip("\r\n")).groups() == (
        "done", "3 token counts")


def test_a_sweep_piped_says_nothing_by_default():
    """A pipe or a file gets no progress: stderr keeps only the command's own messages (before, a
    cold cache put download lines before a refusal's one `error:` line)."""
    code, stdout, stderr = run_python(SWEEP.format(body="pass"), terminal=False, env=DEFAULT)
    assert code == 0 and stdout == "result on stdout\n"
    assert stderr == ""


def test_an_unknown_progress_mode_is_one_line():
    code, _, stderr = run_python("from forge.progress import Progress\nProgress('x')",
                                 terminal=False, env={"VLLM_FORGE_PROGRESS": "verbose"})
    assert code != 0
    assert "$VLLM_FORGE_PROGRESS: must be `lines`" in stderr and "got 'verbose'" in stderr


def test_a_sweep_logged_says_only_start_and_end():
    code, stdout, stderr = run_python(SWEEP.format(body="pass"), terminal=False, env=LOGGED)
    assert code == 0 and stdout == "result on stdout\n"
    start, end = stderr.splitlines()
    assert start == "tune-moe bf16 ..." and "\r" not in stderr
    assert DONE.fullmatch(end).groups() == ("done", "3 token counts")


def test_a_sweep_left_early_says_how_far_it_got():
    # A loop left by break or by an exception closes the generator: the end line says so.
    for body in ("if m == 16: break", "if m == 16: raise ValueError"):
        code = "try:\n" + "\n".join("    " + line for line in SWEEP.format(body=body).splitlines()) + \
            "\nexcept ValueError:\n    pass\n"
        _, _, stderr = run_python(code, terminal=False, env=LOGGED)
        end = stderr.splitlines()[1]
        assert DONE.fullmatch(end).groups() == ("stopped", "1 of 3 token counts (33%)"), stderr


def test_results_said_during_a_sweep_print_above_the_progress_line():
    body = "progress.say(f'M={m}: best found')"
    code, _, shown = run_python(SWEEP.format(body=body), terminal=True, stdout_too=True)
    assert code == 0
    for done, m in ((0, 1), (1, 16), (2, 256)):
        # The line is cleared, the result printed on a line of its own, the progress redrawn.
        redrawn = f"tune-moe bf16: {done} of 3 token counts ({round(100 * done / 3)}%)"
        assert f"{CLEAR_LINE}M={m}: best found\r\n{CLEAR_LINE}{redrawn}" in shown, shown
    _, said, stderr = run_python(SWEEP.format(body=body), terminal=False, env=LOGGED)
    assert said == "M=1: best found\nM=16: best found\nM=256: best found\nresult on stdout\n"
    assert len(stderr.splitlines()) == 2


def _two_layer_image(client) -> str:
    """Two layers of random bytes (nothing the registry could already hold)."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        files = [("Dockerfile", b"FROM scratch\nCOPY one /one\nCOPY two /two\n"),
                 ("one", os.urandom(3 << 20)), ("two", os.urandom(2 << 20))]
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    image, _ = client.images.build(fileobj=io.BytesIO(context.getvalue()), custom_context=True, rm=True)
    return image.id


@pytest.mark.docker
def test_a_push_is_one_line_of_summed_layer_bytes(docker_engine, local_registry, monkeypatch):
    monkeypatch.setattr(progress, "REDRAW_S", 0)  # a local push is quick: draw every message
    monkeypatch.setenv("VLLM_FORGE_PROGRESS", "lines")  # the piped copy logs its start and end
    remote = f"{local_registry.host}/forge-test/progress:push"
    image = _two_layer_image(docker_engine)
    repo, tag = remote.rsplit(":", 1)
    docker_engine.api.tag(image, repo, tag)
    terminal, piped = TerminalStream(), io.StringIO()
    shown, logged = PushProgress(remote, stream=terminal.stream), PushProgress(remote, stream=piped)
    for chunk in docker_engine.api.push(repo, tag=tag, stream=True, decode=True):
        shown.feed(chunk)
        logged.feed(chunk)
    on_terminal = terminal.close()

    assert on_terminal.count("\n") == 1, "no line per finished layer"
    assert re.search(rf"{re.escape(CLEAR_LINE)}pushing {remote}: [\d.]+ MB of 5\.\d MB \(\d+%\), "
                     r"[01] of 2 layers", on_terminal), on_terminal
    end = on_terminal.rsplit(CLEAR_LINE, 1)[1]
    assert re.fullmatch(rf"pushing {remote}: done, 5\.\d MB, 2 of 2 layers in \d+\.\d s\r\n", end), end
    start, end = piped.getvalue().splitlines()
    assert start == f"pushing {remote} ..."
    assert re.fullmatch(rf"pushing {remote}: done, 5\.\d MB, 2 of 2 layers in \d+\.\d s", end), end
