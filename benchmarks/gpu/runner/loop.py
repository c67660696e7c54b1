"""One run of a plan: the loop that starts jobs as schedule.to_start says, watches them (exit,
timeout, a server's readiness), stops a server once its clients ended, and records each event
(run.json, the timeline)."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu.runner import host, processes, record, schedule
from benchmarks.gpu.runner.plan import Job, Plan

REPO = Path(__file__).resolve().parents[3]
POLL_S = 0.05
PROBE_S = 1.0
# Every job names one lock file: verify's engines take it alone for each timed window and shared
# while they start (verify/engine_worker.py, gpu_turn), so two verify runs that do share the GPU
# never time a window while the other's engine starts. The schedule already keeps timed jobs alone.
MEASURE_LOCK_ENV = "VLLM_FORGE_MEASURE_LOCK"


@dataclass
class Running:
    job: Job
    process: subprocess.Popen
    started: float      # time.monotonic()
    probed: float = 0.0  # a server's last readiness probe (time.monotonic())


class Run:
    def __init__(self, plan: Plan, out: Path, python: str, run: record.RunRecord, timeline: record.Timeline):
        self.plan, self.out, self.python, self.run, self.timeline = plan, out, python, run, timeline
        self.status = {job.id: schedule.PENDING for job in plan.jobs}
        self.running: dict[str, Running] = {}
        self.stop_reason: str | None = None    # set by a signal; the loop stops at its next turn

    def fields(self, job: Job) -> dict[str, str]:
        return {"out": str(self.out / job.id), "repo": str(REPO), "python": self.python}

    def loop(self) -> None:
        while self.stop_reason is None:
            self.skip_blocked()
            ready = schedule.to_start(self.plan, self.status)
            for job in ready:
                self.start(job)
            if not self.running:
                if ready:       # each failed to start: what depends on it is skipped next
                    continue
                return
            time.sleep(POLL_S)
            if self.stop_reason is not None:
                break
            for item in list(self.running.values()):
                if item.process.poll() is not None:
                    self.finish(item)
                elif time.monotonic() - item.started > item.job.timeout_s:
                    self.cut(item)
                elif item.job.ready_url and self.status[item.job.id] == schedule.RUNNING:
                    self.probe(item)
            for server in schedule.servers_done(self.plan, self.status):
                self.retire(self.running[server.id])

    def skip_blocked(self) -> None:
        while True:
            reasons = schedule.blocked(self.plan, self.status)
            if not reasons:
                return
            for job_id, reason in reasons.items():
                self.set(job_id, schedule.SKIPPED, reason=reason)
                self.timeline.say(f"skipped {job_id}: {reason}")

    def start(self, job: Job) -> None:
        fields = self.fields(job)
        Path(fields["out"]).mkdir(parents=True, exist_ok=True)
        env = host.job_env(self.plan, job.env, fields, dict(os.environ))
        env[MEASURE_LOCK_ENV] = str(self.out / "measure.lock")
        try:
            process = processes.start(job.argv(fields), env, REPO, self.out / "logs" / f"{job.id}.log")
        except OSError as error:
            reason = f"cannot start {job.argv(fields)[0]}: {error.strerror}"
            self.set(job.id, schedule.FAILED, start=time.time(), end=time.time(), reason=reason)
            self.timeline.say(f"failed {job.id}: {reason}")
            return
        self.running[job.id] = Running(job, process, time.monotonic())
        self.set(job.id, schedule.RUNNING, start=time.time())
        used = sum(item.job.gpu_memory_gib for item in self.running.values())
        kind = "timed, alone" if job.timed else "untimed"
        self.timeline.say(f"start {job.id} ({kind}, {job.gpu_memory_gib:g} GiB reserved, "
                          f"{used:g} of {self.plan.gpu_memory_gib:g} in use, at most {job.timeout_s:g} s)")

    def finish(self, item: Running) -> None:
        job, process = item.job, item.process
        left = processes.leftovers(process)
        if left:   # a server it left running would hold GPU memory its reservation no longer counts
            processes.stop_group(process, self.plan.kill_grace_s)
        del self.running[job.id]
        elapsed = time.monotonic() - item.started
        code = process.returncode
        log = self.out / "logs" / f"{job.id}.log"
        last = record.last_line(log)     # a verify script's verdict is its last line
        if code == 0:
            self.set(job.id, schedule.PASSED, end=time.time(), exit=code)
            self.timeline.say(f"passed {job.id} exit 0 after {elapsed:.1f} s"
                              + (" (its leftover processes stopped)" if left else "") + f": {last}")
        else:
            reason = last
            self.set(job.id, schedule.FAILED, end=time.time(), exit=code, reason=reason)
            self.timeline.say(f"failed {job.id} exit {code} after {elapsed:.1f} s: {reason}")
        record.pack(self.plan, self.out)

    def probe(self, item: Running) -> None:
        """Once a second: a server whose URL answers is serving, and its clients may start."""
        now = time.monotonic()
        if now - item.probed < PROBE_S:
            return
        item.probed = now
        if not processes.answers(str(item.job.ready_url)):
            return
        self.set(item.job.id, schedule.SERVING, ready=time.time())
        self.timeline.say(f"serving {item.job.id}: {item.job.ready_url} answered after {now - item.started:.1f} s")

    def retire(self, item: Running) -> None:
        """A server whose clients have all ended: stopped, and it passed."""
        processes.stop_group(item.process, self.plan.kill_grace_s)
        del self.running[item.job.id]
        self.set(item.job.id, schedule.PASSED, end=time.time(), exit=item.process.returncode)
        self.timeline.say(f"passed {item.job.id}: stopped once its clients ended, after "
                          f"{time.monotonic() - item.started:.1f} s")
        record.pack(self.plan, self.out)

    def cut(self, item: Running) -> None:
        job = item.job
        processes.stop_group(item.process, self.plan.kill_grace_s)
        del self.running[job.id]
        kept = record.keep_partial(self.out / job.id, job.keep_when_cut)
        reason = f"cut at its timeout of {job.timeout_s:g} s: its process group killed"
        self.set(job.id, schedule.CUT, end=time.time(), exit=item.process.returncode, reason=reason, kept=kept)
        self.timeline.say(f"cut {job.id}: {reason}; partial output kept: {job.id}/ ({len(kept)} files), "
                          f"logs/{job.id}.log")
        record.pack(self.plan, self.out)

    def stop(self, why: str) -> None:
        # Every process group first, the records after: a record that cannot be written (a full
        # disk) must not leave a job running.
        stopped = list(self.running.values())
        self.running.clear()
        for item in stopped:
            processes.stop_group(item.process, self.plan.kill_grace_s)
        for item in stopped:
            self.set(item.job.id, schedule.STOPPED, end=time.time(), exit=item.process.returncode, reason=why)
            self.timeline.say(f"stopped {item.job.id}: {why}")
        for job_id, state in self.status.items():
            if state == schedule.PENDING:
                self.set(job_id, schedule.SKIPPED, reason=why)
                self.timeline.say(f"skipped {job_id}: {why}")

    def set(self, job_id: str, status: str, **values) -> None:
        self.status[job_id] = status
        entry = self.run.job(job_id)
        entry.status = status
        for name, value in values.items():
            setattr(entry, name, value)
        self.run.write(self.out)
