"""One job's process: the leader of a new process group (start_new_session), so that stopping
the group stops everything it started (vLLM's engine cores, a server and its workers)."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def start(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        handle.write(f"+ {shlex.join(argv)}\n")
        handle.flush()
        try:
            return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=handle,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as error:
            handle.write(f"cannot start {argv[0]}: {error.strerror}\n")
            raise


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the job's process group, SIGKILL to whatever is left after grace_s; returns
    once the leader is reaped and the group is gone (or SIGKILL was sent)."""
    pgid = process.pid     # start_new_session: the leader's pid is the group's id
    _signal(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        process.poll()
        if process.returncode is not None and not group_alive(pgid):
            return
        time.sleep(0.05)
    _signal(pgid, signal.SIGKILL)
    process.wait()


def leftovers(process: subprocess.Popen) -> bool:
    """Whether a job that ended left processes behind in its group (a server it did not stop)."""
    return group_alive(process.pid)


def _signal(pgid: int, number: int) -> None:
    try:
        os.killpg(pgid, number)
    except ProcessLookupError:
        pass


def answers(url: str) -> bool:
    """Whether a server answers `url` with a success (its health route once it is up)."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
