"""One job's process: the leader of a new process group (start_new_session), so that stopping
the group stops everything it started (vLLM's engine cores, a server and its workers)."""
from __future__ import annotations

import http.client
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

from forge.http_session import Deadline

# How long a readiness probe may take in all (connect, request, status line and headers): the
# loop that watches every job waits on it, so a server that drips its answer must not hold it.
PROBE_TIMEOUT_S = 1.0
# How long a SIGKILLed leader may take to be reaped: a process in uninterruptible sleep (a GPU
# driver call) outlives SIGKILL for a while; the runner records it and goes on.
REAP_S = 30.0


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
    try:
        process.wait(timeout=REAP_S)
    except subprocess.TimeoutExpired:
        pass                # its returncode stays None: the record says it was not reaped


def leftovers(process: subprocess.Popen) -> bool:
    """Whether a job that ended left processes behind in its group (a server it did not stop)."""
    return group_alive(process.pid)


def _signal(pgid: int, number: int) -> None:
    try:
        os.killpg(pgid, number)
    except ProcessLookupError:
        pass


def answers(url: str) -> bool:
    """Whether a server answers `url` with a success (its health route once it is up), within
    PROBE_TIMEOUT_S in all."""
    try:
        parts = urlsplit(url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        with Deadline(PROBE_TIMEOUT_S):
            connection = kind(parts.hostname or "", parts.port, timeout=PROBE_TIMEOUT_S)
            try:
                connection.connect()
                Deadline.opened(connection.sock)
                connection.request("GET", path)
                status = connection.getresponse().status
            finally:
                connection.close()
    except (OSError, http.client.HTTPException, ValueError):
        return False
    return 200 <= status < 300
