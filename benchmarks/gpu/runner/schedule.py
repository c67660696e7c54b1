"""What starts next, decided from the jobs' states alone (no clock, no processes), so the run and
the dry run share one rule:

- a job starts once every job it depends on passed; one whose dependency failed, was cut or was
  skipped is skipped itself, with the reason;
- untimed jobs start side by side while their reservations fit in the plan's GPU memory; one that
  does not fit waits, and a later one that fits may start before it;
- a timed job starts only when nothing runs, and nothing starts beside it (the measure lock:
  no other engine's kernels in its timings). Once it is ready, no later job starts before it, so
  a stream of small untimed jobs cannot hold it back;
- a server (a job with ready_url) is `serving` once its URL answers: the jobs that depend on it
  start then, beside it, and once every one of them has ended the runner stops it (it passed).
Plan order is the priority.
"""
from __future__ import annotations

from benchmarks.gpu.runner.plan import Job, Plan

PENDING, RUNNING, SERVING, PASSED, FAILED, CUT, SKIPPED, STOPPED = (
    "pending", "running", "serving", "passed", "failed", "cut", "skipped", "stopped")
DONE = {PASSED, FAILED, CUT, SKIPPED, STOPPED}
ACTIVE = {RUNNING, SERVING}
SATISFIED = {PASSED, SERVING}   # what a dependency must be for its dependant to start


def blocked(plan: Plan, status: dict[str, str]) -> dict[str, str]:
    """Pending jobs that can never run -> why: a dependency that ended without passing."""
    reasons = {}
    for job in plan.jobs:
        if status[job.id] != PENDING:
            continue
        for dependency in job.depends_on:
            if status[dependency] in DONE - {PASSED}:
                reasons[job.id] = f"dependency {dependency} {status[dependency]}"
                break
    return reasons


def to_start(plan: Plan, status: dict[str, str]) -> list[Job]:
    """The jobs to start now, in plan order (call blocked() first and mark those skipped)."""
    running = [job for job in plan.jobs if status[job.id] in ACTIVE]
    if any(job.timed for job in running):
        return []
    used = sum(job.gpu_memory_gib for job in running)
    chosen: list[Job] = []
    for job in plan.jobs:
        if status[job.id] != PENDING or not all(status[d] in SATISFIED for d in job.depends_on):
            continue
        if job.timed:
            if not running and not chosen:
                chosen.append(job)
            return chosen
        if used + job.gpu_memory_gib <= plan.gpu_memory_gib:
            chosen.append(job)
            used += job.gpu_memory_gib
    return chosen


def servers_done(plan: Plan, status: dict[str, str]) -> list[Job]:
    """Serving servers whose every dependant has ended: the runner stops them now."""
    return [job for job in plan.jobs if status[job.id] == SERVING
            and all(status[other.id] in DONE for other in plan.jobs if job.id in other.depends_on)]


def dry_run(plan: Plan) -> list[tuple[float, Job]]:
    """(start offset in seconds, job) for every job, as if each passed at its timeout and each
    server answered at once: the schedule's order and its worst-case length."""
    status = {job.id: PENDING for job in plan.jobs}
    ends: dict[str, float] = {}
    starts: list[tuple[float, Job]] = []
    clock = 0.0
    while True:
        for server in servers_done(plan, status):
            status[server.id] = PASSED
        for job in to_start(plan, status):
            status[job.id] = SERVING if job.ready_url else RUNNING
            starts.append((clock, job))
            ends[job.id] = clock + job.timeout_s
        active = [job_id for job_id, state in status.items() if state in ACTIVE]
        if not active:
            return starts
        if to_start(plan, status):
            continue
        clock = min(ends[job_id] for job_id in active)
        for job_id in active:
            if ends[job_id] <= clock:
                status[job_id] = PASSED
