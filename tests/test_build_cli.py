"""tests/build_cli.py: a forked build.py prints, writes and returns what a fresh one does, and
the calls a fork could get wrong go to a fresh interpreter."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tests import build_cli
from tests.build_cli import REPO_ROOT, copy_checkout, fresh_build, run_build


def forks_so_far() -> int:
    return build_cli._FORKS.forked


@pytest.fixture(autouse=True)
def forks_allowed(monkeypatch):
    """These tests are about the forked path: a run that asked for fresh interpreters everywhere
    ($VLLM_FORGE_TESTS_FRESH_PYTHON=1) still takes it here."""
    monkeypatch.delenv(build_cli.FRESH_ENV, raising=False)


COMMANDS = [
    pytest.param(("patches", "--vllm", "0.25.0", "--offline"), id="patches"),
    pytest.param(("--help",), id="help"),
    pytest.param(("--bogus",), id="unknown-flag"),
    pytest.param(("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", "0.25.0"),
                 id="serve"),
    pytest.param(("apply", "--site-packages", "/nonexistent"), id="error"),
    pytest.param((), id="no-arguments"),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_a_forked_command_prints_and_returns_what_a_fresh_one_does(args):
    before = forks_so_far()
    forked = run_build(*args)
    assert forks_so_far() == before + 1
    fresh = fresh_build(*args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr)


def test_the_environment_and_umask_are_the_callers(tmp_path):
    page = tmp_path / "evidence.md"
    old = os.umask(0o077)
    try:
        before = forks_so_far()
        result = run_build("evidence", "--page", str(page))
        assert forks_so_far() == before + 1
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(page.stat().st_mode) == 0o600    # 0666 under the caller's umask 077
    # and the environment given: a cache that is a file is refused by its variable's name
    (tmp_path / "file").write_text("")
    refused = run_build("patches", "--vllm", "0.25.0", env={"VLLM_FORGE_CACHE": str(tmp_path / "file")})
    assert refused.returncode != 0 and "VLLM_FORGE_CACHE" in refused.stderr


def test_a_self_inflicted_kill_reads_as_subprocess_reports_it(vllm_site):
    from forge.patching.apply import KILL_AFTER_ENV

    site = vllm_site("0.25.0")
    killed = run_build("apply", "--site-packages", str(site), env={KILL_AFTER_ENV: "0"})
    assert killed.returncode == -9


def test_calls_a_fork_could_get_wrong_run_a_fresh_interpreter(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    before = forks_so_far()
    assert run_build("--help", cwd=checkout).returncode == 0
    assert run_build("--help", env={"LANG": "C", "LC_ALL": "C"}).returncode == 0
    assert run_build("--help", env={"PYTHONHASHSEED": "7"}).returncode == 0
    assert run_build("--help", env={build_cli.FRESH_ENV: "1"}).returncode == 0
    results = []
    thread = threading.Thread(target=lambda: results.append(run_build("--help")))
    thread.start()
    thread.join()
    assert results[0].returncode == 0
    assert forks_so_far() == before
    assert Path(checkout, "build.py").is_file()
    assert run_build("--help", cwd=REPO_ROOT).returncode == 0 and forks_so_far() == before + 1
