"""Run many cases on several sessions at once (one tree, fork server and HTTP server each).

Cases are independent and each session runs one at a time, so N sessions run N cases at once;
the default is one per core, at most two (the corpus is sized for a 2-core machine). A thread
per session hands it cases from one queue: the work happens in the fork servers' children."""
from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests.hostile.harness import check_case
from tests.hostile.session import Session


def default_workers() -> int:
    given = os.environ.get("VLLM_FORGE_HOSTILE_WORKERS")
    return int(given) if given else max(1, min(2, os.cpu_count() or 1))


def run_cases(cases: list[dict], workers: int | None = None, report=None) -> dict[str, dict]:
    """case id -> {"problems": [...], "seconds": S}; `report(id, outcome)` is told of each."""
    workers = max(1, min(workers or default_workers(), len(cases) or 1))
    with ThreadPoolExecutor(workers) as pool:
        sessions = list(pool.map(lambda _: Session(), range(workers)))
    todo: queue.Queue = queue.Queue()
    for case in cases:
        todo.put(case)
    outcomes: dict[str, dict] = {}
    lock = threading.Lock()

    def work(session: Session) -> None:
        while True:
            try:
                case = todo.get_nowait()
            except queue.Empty:
                return
            started = time.monotonic()
            try:
                problems = check_case(case, session.tree, session.forks, session.fields(case["id"]))
            except Exception as exc:  # noqa: BLE001 (a setup that failed is the case's problem)
                problems = [f"the harness failed: {type(exc).__name__}: {exc}"]
            outcome = {"problems": problems, "seconds": round(time.monotonic() - started, 2)}
            with lock:
                outcomes[case["id"]] = outcome
                if report:
                    report(case["id"], outcome)

    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for session in sessions:
            session.close()
    return outcomes
