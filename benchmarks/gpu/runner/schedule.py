"""What starts next, decided from the jobs' states alone (no clock, no processes), so the run and
the dry run share one rule:

- a job starts once every job it depends on passed; one whose dependency failed, was cut or was
  skipped is skipped itself, with the reason;
- untimed jobs start side by side while their reservations fit in the plan's GPU memory; one that
  does not fit waits, and a later one that fits may start before it;
- a timed job starts only when nothing runs, and nothing starts beside it (the measure lock:
  no other engine's kernels in its timings). Once it is ready, no later job starts before it, so
  a stream of small untimed jobs cannot hold it back.
Plan order is the priority.
"""
from __future__ import annotations

from benchmarks.gpu.runner.plan import Job, Plan

PENDING, RUNNING, PASSED, FAILED, CUT, SKIPPED, STOPPED = (
    "pending", "running", "passed", "failed", "cut", "skipped", "stopped")
DONE = {PASSED, FAILED, CUT, SKIPPED, STOPPED}


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
    running = [job for job in plan.jobs if status[job.id] == RUNNING]
    if any(job.timed for job in running):
        return []
    used = sum(job.gpu_memory_gib for job in running)
    chosen: list[Job] = []
    for job in plan.jobs:
        if status[job.id] != PENDING or not all(status[d] == PASSED for d in job.depends_on):
            continue
        if job.timed:
            if not running and not chosen:
                chosen.append(job)
            return chosen
        if used + job.gpu_memory_gib <= plan.gpu_memory_gib:
            chosen.append(job)
            used += job.gpu_memory_gib
    return chosen


def dry_run(plan: Plan) -> list[tuple[float, Job]]:
    """(start offset in seconds, job) for every job, as if each passed at its timeout: the
    schedule's order and its worst-case length."""
    status = {job.id: PENDING for job in plan.jobs}
    ends: dict[str, float] = {}
    starts: list[tuple[float, Job]] = []
    clock = 0.0
    while True:
        for job in to_start(plan, status):
            status[job.id] = RUNNING
            starts.append((clock, job))
            ends[job.id] = clock + job.timeout_s
        running = [job_id for job_id, state in status.items() if state == RUNNING]
        if not running:
            return starts
        clock = min(ends[job_id] for job_id in running)
        for job_id in running:
            if ends[job_id] <= clock:
                status[job_id] = PASSED
