"""Running build.py as a user does: its own process in a checkout, with an exit status, stdout
and stderr.

A fresh interpreter costs about 0.3 CPU-seconds before a command does anything (the interpreter,
site, forge's imports: `python3 -X importtime build.py patches`, 2-core test machine,
2026-12-04), and the suite runs build.py several hundred times. So `run_build` forks the command
from a process that imported forge and its dependencies once (tests/hostile/forkserver.py, the
hostile corpus' server): the child sets the environment, working directory and umask, points fds
0/1/2 where a fresh process would have them, calls the entry point build.py calls and exits with
its status. It starts a fresh `python3 build.py` instead wherever a fork could differ:
  - another checkout (`cwd`): its own forge must be imported;
  - a variable the interpreter reads as it starts (PYTHON*, LANG, LC_*, TZ) set otherwise than
    when the server started;
  - a call from another thread, or while a fork is in flight (concurrency tests run concurrently);
  - $VLLM_FORGE_TESTS_FRESH_PYTHON=1, for the whole run.
tests/test_build_cli.py runs commands both ways and compares what they print and return.
"""
from __future__ import annotations

import atexit
import io
import locale
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FRESH_ENV = "VLLM_FORGE_TESTS_FRESH_PYTHON"
# What Python reads from the environment as it starts (a fork keeps the server's).
STARTUP_VARIABLES = re.compile(r"PYTHON.*|LANG|LANGUAGE|LC_.*|TZ")


def run_build(*args: str, cwd: Path | str | None = None, env: dict | None = None,
              timeout: int = 1800) -> subprocess.CompletedProcess:
    """`python3 build.py ARGS` in `cwd` (default this repository), `env` on top of ours."""
    full_env = {**os.environ, **(env or {})}
    here = Path(cwd or REPO_ROOT)
    if _FORKS.usable(here, full_env) and _FORKS.busy.acquire(blocking=False):
        try:
            return _FORKS.run(list(args), here, full_env, timeout)
        finally:
            _FORKS.busy.release()
    return fresh_build(*args, cwd=here, env=env, timeout=timeout)


def fresh_build(*args: str, cwd: Path | str | None = None, env: dict | None = None,
                timeout: int = 1800) -> subprocess.CompletedProcess:
    """`python3 build.py ARGS` in a fresh interpreter, always."""
    return subprocess.run([sys.executable, "build.py", *args], cwd=cwd or REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


class _ForkedBuilds:
    """This process's fork server over the repository, started at its first use."""

    def __init__(self) -> None:
        self.busy = threading.Lock()
        self.server = None
        self.owner = 0              # the pid that started the server (a forked test process must not use it)
        self.startup_env: dict[str, str] = {}
        self.captures: Path | None = None
        self.forked = 0             # commands run forked (tests/test_build_cli.py reads it)

    def usable(self, cwd: Path, env: dict[str, str]) -> bool:
        if env.get(FRESH_ENV) == "1" or threading.current_thread() is not threading.main_thread():
            return False
        if cwd.resolve() != REPO_ROOT or (self.server is not None and self.owner != os.getpid()):
            return False
        reference = self.startup_env if self.server is not None else dict(os.environ)
        return all(env.get(name) == reference.get(name)
                   for name in {*env, *reference} if STARTUP_VARIABLES.fullmatch(name))

    def _start(self) -> None:
        from tests.hostile.forkserver import ForkServer

        self.startup_env = dict(os.environ)
        self.captures = Path(tempfile.mkdtemp(prefix="vllm-forge-build-cli-"))
        self.server = ForkServer(REPO_ROOT, REPO_ROOT)
        self.owner = os.getpid()
        atexit.register(self.close)

    def run(self, args: list[str], cwd: Path, env: dict[str, str], timeout: int
            ) -> subprocess.CompletedProcess:
        if self.server is None:
            self._start()
        assert self.server is not None and self.captures is not None
        stdout, stderr = self.captures / "stdout", self.captures / "stderr"
        umask = os.umask(0)
        os.umask(umask)
        answer = self.server.run({
            "entry": "build", "argv": args, "env": env, "cwd": str(cwd), "stdout": str(stdout),
            "stderr": str(stderr), "timeout": timeout, "sigint_after": None, "user": "root",
            "memory": None, "umask": umask})
        self.forked += 1
        command = [sys.executable, "build.py", *args]
        out, err = _text(stdout.read_bytes()), _text(stderr.read_bytes())
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(command, timeout, out, err)
        # as subprocess reports it: a signal's death is its negative number
        status = -answer["signal"] if answer["signal"] else answer["status"]
        return subprocess.CompletedProcess(command, status, out, err)

    def close(self) -> None:
        if self.server is not None and self.owner == os.getpid():
            self.server.close()
            self.server = None
        if self.captures is not None:
            shutil.rmtree(self.captures, ignore_errors=True)


def _text(data: bytes) -> str:
    # subprocess's text=True: the locale's encoding, universal newlines
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()


_FORKS = _ForkedBuilds()


def copy_checkout(into: Path) -> Path:
    """The parts of this checkout that build.py reads (code and patches/), copied into `into`:
    a command run there writes only there (forge finds its data beside its own code)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("forge", "patches"):
        shutil.copytree(REPO_ROOT / name, into / name, ignore=ignore)
    shutil.copy2(REPO_ROOT / "build.py", into / "build.py")
    return into
