"""One way to run engine workers (verify/engine_worker.py) for every script that starts them
(mtp_smoke.py, bench.py, and profile.py through bench): each worker in a process group of its own
with its log captured to a file, waited on with one deadline for all, and every group ended on every
way out, Ctrl-C included. A worker's own policy (bench's start timeout and barrier, its server
beside the engines) is a callback run once a second while they run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from forge.files import write_text_atomically
from forge.json_text import dump_json
from verify.machine import kill_group

WORKER = Path(__file__).with_name("engine_worker.py")
POLL_S = 1.0


@dataclass
class Worker:
    name: str
    spec: dict
    log_path: Path
    proc: subprocess.Popen
    log: IO[str]

    def running(self) -> bool:
        return self.proc.poll() is None


def start_worker(name: str, spec: dict, spec_path: Path, log_path: Path) -> Worker:
    """Write the spec, start engine_worker.py on it in a session of its own (a kill takes vLLM's
    EngineCore child too: an H200 run of 2026-11-30 left orphaned EngineCores holding 14-20 GiB
    each), its stdout and stderr into log_path."""
    write_text_atomically(spec_path, dump_json(spec, f"engine spec {spec_path}", indent=1))
    log = open(log_path, "w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": spec.get("env", {}).get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))}
    proc = subprocess.Popen([sys.executable, str(WORKER), str(spec_path)], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Worker(name, spec, log_path, proc, log)


def wait_all(workers: list[Worker], timeout: float, tick: Callable[[float], None] | None = None,
             on_timeout: Callable[[Worker], None] | None = None) -> None:
    """Wait until every worker has ended or `timeout` seconds have passed, calling tick(elapsed)
    once a second meanwhile; a worker still running then is killed with its group (on_timeout is
    told first). Ctrl-C (or any error) kills every group before it passes on. Every log is closed."""
    started = time.monotonic()
    try:
        while any(w.running() for w in workers) and time.monotonic() - started < timeout:
            if tick is not None:
                tick(time.monotonic() - started)
            time.sleep(POLL_S)
        if tick is not None:
            tick(time.monotonic() - started)
        for worker in workers:
            if worker.running():
                if on_timeout is not None:
                    on_timeout(worker)
                kill_group(worker.proc)
    except BaseException:
        # The workers run in sessions of their own (no Ctrl-C reaches them): stop them all,
        # EngineCores included, before the interrupt ends the run.
        for worker in workers:
            kill_group(worker.proc)
        raise
    finally:
        for worker in workers:
            worker.log.close()
