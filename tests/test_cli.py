"""build.py as users type it: the default command, help, and output into a closed pipe."""
import functools
import os
import re
import subprocess
import sys

import pytest

from forge import REPO_ROOT
from forge.commands.cli import DEFAULT_COMMAND, build_parser
from forge.patching.series import load_series
from tests.build_cli import run_build

_CHECKED = load_series().checked_through.split(".")
UNCHECKED = f"{_CHECKED[0]}.{int(_CHECKED[1]) + 1}.0"  # newer than the series' checked_through


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


def test_the_parser_and_every_handler_load_without_the_docker_sdk_or_requests():
    """`build.py apply` runs inside images that need neither: the handlers cli.py imports load
    them only in the functions that use them."""
    code = ("import sys; from forge.commands import cli; cli.build_parser(); "
            "print(sorted(m for m in ('docker', 'requests') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "[]\n", "")


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


# --- every flag an error message names exists on the command it names (issue 10 item 6) ---------

QUOTED_COMMAND = re.compile(r"`(?:python3? )?build\.py ([^`|]*)[^`]*`")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@functools.cache   # building the parser each time a word was looked up took 10 s of this file's 13
def _parsers() -> dict:
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse has no API)


def _command_of(words: list[str]) -> str:
    return words[0] if words and words[0] in _parsers() else DEFAULT_COMMAND


def unknown_flags(command: str, text: str) -> list[str]:
    """Flags `text` names that do not exist: inside a quoted `build.py CMD ...` on CMD, elsewhere
    on `command` (the command that printed it)."""
    parsers, missing = _parsers(), []
    for match in QUOTED_COMMAND.finditer(text):
        quoted = _command_of(match.group(1).split())
        missing += [(quoted, f) for f in FLAG.findall(match.group(1))
                    if f not in parsers[quoted]._option_string_actions]
    rest = QUOTED_COMMAND.sub("", text)
    missing += [(command, f) for f in FLAG.findall(rest) if f not in parsers[command]._option_string_actions]
    return missing


def test_every_build_py_command_quoted_in_the_sources_exists():
    quoted = []
    for path in sorted((REPO_ROOT / "forge").rglob("*.py")):
        for match in QUOTED_COMMAND.finditer(path.read_text()):
            words = re.sub(r"\{[^}]*\}", "0.27.1", match.group(1)).replace("[", " ").replace("]", " ").split()
            quoted.append((path.name, match.group(0)))
            command = _command_of(words)
            assert not unknown_flags(command, match.group(0)), (path.name, match.group(0))
    assert len(quoted) > 10


def _lock(tmp_path, vllm="0.25.0"):
    from forge.images.lock import save_lock
    from forge.targets import load_targets

    refs = {t.base_for(vllm).ref for t in load_targets().values()}
    return save_lock({r: "sha256:" + "cd" * 32 for r in refs}, tmp_path / "lock.yaml",
                     {r: ["linux/amd64"] for r in refs})


@pytest.mark.parametrize("command, args, env", [
    ("bake", ["bake", "--locked", "--vllm", "0.25.0", "-o", "{tmp}/bake.json"], {"VLLM_FORGE_LOCK": "{tmp}/none.yaml"}),
    ("build", ["--target", "a100", "--vllm", "0.25.0", "--locked"], {"VLLM_FORGE_LOCK": "{tmp}/none.yaml"}),
    ("build", ["--target", "a100", "--vllm", "0.25.0", "--plan", "--locked"], {"VLLM_FORGE_LOCK": "{tmp}/none.yaml"}),
    ("release-matrix", ["release-matrix", "--vllm", "0.25.0"], {"VLLM_FORGE_LOCK": "{tmp}/none.yaml"}),
    ("build", ["--target", "a100", "--vllm", UNCHECKED, "--plan"], {}),
    ("bake", ["bake", "--vllm", "0.25.0", "-o", "{tmp}/bake.json"], {"VLLM_FORGE_LOCK": "{lock}"}),
    ("build", ["--target", "gb10", "--vllm", "0.25.0", "--plan"], {"VLLM_FORGE_LOCK": "{lock}"}),
    ("lock", ["lock", "--vllm", "0.25.0", "--target", "tpu"], {}),
])
def test_errors_name_only_flags_of_the_command_that_printed_them(tmp_path, command, args, env):
    """Before: `bake` told the user to pass --allow-unlocked, which `bake` does not take."""
    lock = _lock(tmp_path)
    fill = lambda text: text.format(tmp=tmp_path, lock=lock)  # noqa: E731
    result = run_build(*[fill(a) for a in args], env={k: fill(v) for k, v in env.items()}, timeout=300)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    line = result.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line
    assert not unknown_flags(command, line), line
