"""One process that imports forge and verify once, then forks a child per case.

A fresh `python3 build.py` costs about a second of imports on a 2-core machine; 400 cases of that
would be most of the corpus' time. The server (`ForkServer`, started once per pytest session)
imports every forge and verify module from the case tree's repository copy, so their REPO_ROOT is
the case tree, and answers one request per line on a pipe:

  request  {"entry": "build", "argv": [...], "env": {...}, "cwd": DIR, "stdout": F, "stderr": F,
            "timeout": S, "sigint_after": S | null, "user": "nobody" | "root", "memory": BYTES,
            "umask": N}         (memory: none when absent or null; umask: 0o022 when absent)
  answer   {"status": N, "signal": N | null, "maxrss_kb": N, "timed_out": bool, "wall_s": S}

The child sets up what a shell would (its own process group, fds 0/1/2, the environment, the
umask, an address-space cap so a runaway read ends in MemoryError instead of eating the
machine), drops to the user, calls the entry point (its script's function) in-process and exits with its
code. An uncaught exception is printed as the interpreter prints it (so "Traceback" shows), and
an uncaught KeyboardInterrupt ends the child by SIGINT as the interpreter does. The parent waits
with os.wait4 (exit status and the child's peak RSS), interrupts it on request, and kills its
process group at the timeout.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ENTRY_POINTS = {
    # name: (module, program name as typed, the function its script runs: pyproject.toml's
    # [project.scripts]; verify's `run` is main under exit_on_interrupt, reading sys.argv)
    "build": ("forge.commands.cli", "build.py", "main"),
    "mtp_smoke": ("verify.mtp_smoke", "mtp_smoke.py", "run"),
    "bench": ("verify.bench", "bench.py", "run"),
    "profile": ("verify.profile", "profile.py", "run"),
}
# Imported by no entry point at module level but by the functions they call: import them now, in
# the server, so no child pays for them (modules that need vLLM or torch fail and are left out).
SKIPPED_MODULES = {"verify.engine_worker"}
NOBODY = 65534


# --- the server side (runs in its own process) ----------------------------------------------------

def imported_names(repo: Path) -> set[str]:
    """Every module forge and verify import, at the top or inside a function (the children run
    as nobody, who cannot read root's Python installation: what they import must be in memory)."""
    import ast

    names = set()
    for source in (*repo.glob("forge/**/*.py"), *repo.glob("verify/**/*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return {n for n in names if not n.startswith(("forge", "verify"))}


def preload(repo: Path) -> dict:
    import importlib
    import pkgutil

    sys.dont_write_bytecode = True
    sys.path[:0] = [str(repo)]
    for name in sorted(imported_names(repo)) + ["http.server", "requests.adapters", "urllib3.util"]:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (vllm, torch, matplotlib: not on this host)
            pass
    for package in ("forge", "verify"):
        root = importlib.import_module(package)
        assert Path(root.__file__).resolve().is_relative_to(repo.resolve()), root.__file__
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name in SKIPPED_MODULES:
                continue
            try:
                importlib.import_module(info.name)
            except Exception:   # noqa: BLE001 (a module that needs vLLM: its child imports it)
                pass
    return {name: getattr(importlib.import_module(module), function)
            for name, (module, _, function) in ENTRY_POINTS.items()}


def serve(repo: str) -> None:
    requests_in = os.fdopen(os.dup(0), "r")
    answers_out = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)      # nothing the server imports may write into the protocol pipe
    entries = preload(Path(repo))
    answers_out.write(json.dumps({"ready": True}) + "\n")
    answers_out.flush()
    for line in requests_in:
        request = json.loads(line)
        answer = run_case(entries, request, (requests_in.fileno(), answers_out.fileno()))
        answers_out.write(json.dumps(answer) + "\n")
        answers_out.flush()


def run_case(entries: dict, request: dict, protocol_fds: tuple[int, int]) -> dict:
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        for fd in protocol_fds:
            os.close(fd)
        child(entries, request)     # never returns
    return wait_for(pid, request, started)


def child(entries: dict, request: dict) -> None:
    import resource
    import tempfile
    import traceback

    code = 1
    try:
        os.setpgid(0, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if request.get("memory"):
            resource.setrlimit(resource.RLIMIT_AS, (request["memory"], request["memory"]))
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        os.umask(request.get("umask", 0o022))
        os.chdir(request["cwd"])
        if request["user"] == "nobody":
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        _module, program, function = ENTRY_POINTS[request["entry"]]
        sys.argv = [program, *request["argv"]]
        entry = entries[request["entry"]]
        code = entry(list(request["argv"])) if function == "main" else entry()
    except SystemExit as exc:           # argparse, and scripts that end by sys.exit
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 (what the interpreter would print for it)
        traceback.print_exc()
        code = 1
    _flush()
    os._exit(code if isinstance(code, int) else 1)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 (a full disk or a closed fd: the status says enough)
            pass


def wait_for(pid: int, request: dict, started: float) -> dict:
    deadline = started + request["timeout"]
    interrupt_at = started + request["sigint_after"] if request.get("sigint_after") else None
    pidfd = os.pidfd_open(pid)
    timed_out = False
    try:
        while True:
            now = time.monotonic()
            wake = min(t for t in (deadline, interrupt_at) if t is not None)
            ready, _, _ = select.select([pidfd], [], [], max(0.0, wake - now))
            if ready:
                break
            now = time.monotonic()
            if interrupt_at is not None and now >= interrupt_at:
                _signal_group(pid, signal.SIGINT)
                interrupt_at = None
            if now >= deadline:
                timed_out = True
                _signal_group(pid, signal.SIGKILL)
                break
        _, status, usage = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
    _signal_group(pid, signal.SIGKILL)      # whatever the child left running
    signaled = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    return {"status": 128 + signaled if signaled else os.WEXITSTATUS(status), "signal": signaled,
            "maxrss_kb": usage.ru_maxrss, "timed_out": timed_out,
            "wall_s": round(time.monotonic() - started, 3)}


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- the client side (the pytest process) -------------------------------------------------------

class ForkServer:
    """The pytest side: starts the server on the repository copy and sends it one case at a time."""

    def __init__(self, repo: Path, cwd: Path):
        worktree = Path(__file__).resolve().parents[2]
        code = (f"import sys; sys.path[:0] = [{str(repo)!r}, {str(worktree)!r}]; "
                f"from tests.hostile.forkserver import serve; serve({str(repo)!r})")
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTHONPATH", None)
        self.process = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self._answer()
        assert ready == {"ready": True}, ready

    def _answer(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ended (exit {self.process.wait()})")
        return json.loads(line)

    def run(self, request: dict) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)
