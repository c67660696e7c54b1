"""build.py as users type it: the default command, help, and output into a closed pipe."""
import os
import subprocess
import sys

from forge import REPO_ROOT
from tests.build_cli import run_build


def run(*args):
    return run_build(*args, timeout=120)


def test_no_arguments_prints_help_and_fails():
    result = run()
    assert result.returncode == 2 and "usage: build.py" in result.stdout


def test_target_without_command_word_means_build():
    result = run("--target", "no-such-target", "--vllm", "0.27.1", "--plan")
    assert result.returncode != 0
    assert result.stderr.startswith("error: ") and "no-such-target" in result.stderr
    assert result.stderr.count("\n") == 1


def test_every_command_has_help():
    listing = run("--help").stdout
    for command in ("build", "patches", "apply", "lock", "bake", "serve", "tune-moe"):
        assert command in listing
        assert run(command, "--help").returncode == 0


def test_output_into_a_closed_pipe_is_not_a_traceback():
    # The reader is gone before the first line is written (as with `| head` on a long table).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        writer = subprocess.run([sys.executable, "build.py", "patches", "--all"], cwd=REPO_ROOT,
                                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in writer.stderr and "BrokenPipeError" not in writer.stderr
    assert writer.returncode == 0
