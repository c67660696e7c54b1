"""benchmarks/gpu/run.py PLAN.yaml [--out DIR] [--dry-run] [--python PATH]: check the host's vLLM
against the plan, run its jobs (benchmarks/gpu/runner/schedule.py says when each starts), and
leave under --out one folder and one log per job, timeline.txt, run.json and, where the plan asks,
results.tgz. Exit 0 when every job passed, 1 when one did not, 2 when the plan or the host cannot
run (one line naming the plan file and the field, nothing started)."""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpu.runner import host, record, schedule
from benchmarks.gpu.runner.loop import REPO, Run
from benchmarks.gpu.runner.plan import Plan, PlanError, load_plan
from forge.untrusted import visible


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", help="the plan, e.g. benchmarks/gpu/plans/smoke.yaml")
    parser.add_argument("--out", help="the run's folder, new or empty (default: a new folder under "
                                      "the system's temporary directory)")
    parser.add_argument("--dry-run", action="store_true", help="print the schedule; run nothing")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter {python} names, whose vLLM is checked (default: this one)")
    return parser.parse_args(argv)


def print_dry_run(plan: Plan, python: str) -> None:
    # visible: the plan's path is a flag's, its jobs' ids and commands the plan file's
    print(visible(f"plan {plan.path}: vLLM {plan.vllm} expected (not checked in a dry run), "
                  f"{plan.gpu_memory_gib:g} GiB to reserve"))
    end = 0.0
    for offset, job in schedule.dry_run(plan):
        fields = {"out": f"OUT/{job.id}", "repo": str(REPO), "python": python}
        kind = "timed, alone" if job.timed else "untimed"
        after = f", after {', '.join(job.depends_on)}" if job.depends_on else ""
        print(visible(f"+{offset:.0f} s  {job.id} ({kind}, {job.gpu_memory_gib:g} GiB, at most "
                      f"{job.timeout_s:g} s{after}): {shlex.join(job.argv(fields))}"))
        end = max(end, offset + job.timeout_s)
    print(f"at most {end:.0f} s if every job runs to its timeout")


def prepare_out(plan: Plan, out: str | None) -> Path:
    if out is None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        return Path(tempfile.mkdtemp(prefix=f"{plan.name}-{stamp}-", dir=tempfile.gettempdir()))
    path = Path(out).resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise PlanError(f"--out: {path} is not an empty folder (a run never writes over another)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        plan = load_plan(args.plan)
        if args.dry_run:
            print_dry_run(plan, args.python)
            return 0
        env = host.job_env(plan, {}, {"out": "", "repo": str(REPO), "python": args.python}, dict(os.environ))
        versions = host.installed_versions(args.python, env)
        host.check_release(plan, versions, args.python)
        out = prepare_out(plan, args.out)
    except (PlanError, host.HostError) as error:
        print(f"run.py: {visible(error)}", file=sys.stderr)
        return 2
    try:
        return execute(plan, out, args.python, versions)
    except OSError as error:        # its jobs are stopped (execute); the record could not be kept
        print(f"run.py: {out}: the run stopped: {visible(error)}", file=sys.stderr)
        return 2


def execute(plan: Plan, out: Path, python: str, versions: dict) -> int:
    (out / "logs").mkdir(exist_ok=True)
    timeline = record.Timeline(out)
    jobs = [record.JobRecord.of(job, job.argv({"out": str(out / job.id), "repo": str(REPO), "python": python}))
            for job in plan.jobs]
    summary = record.RunRecord(str(plan.path), plan.vllm, plan.gpu_memory_gib, jobs, versions, host.gpus())
    run = Run(plan, out, python, summary, timeline)
    timeline.say(f"run {plan.path} into {out}: vLLM {versions.get('vllm')}, {len(plan.jobs)} jobs")

    stopped_by: list[int] = []

    def stop(number, _frame):
        stopped_by.append(number)
        run.stop_reason = f"the runner got {signal.Signals(number).name}"

    previous = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            run.loop()
        except BaseException as error:
            # Whatever ends the loop, no job outlives the runner: every process group stopped.
            run.stop(f"the runner stopped: {type(error).__name__}")
            raise
        if run.stop_reason is not None:
            run.stop(run.stop_reason)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    summary.end = time.time()
    summary.write(out)
    record.pack(plan, out)
    passed = sum(state == schedule.PASSED for state in run.status.values())
    timeline.say(f"done: {passed} of {len(plan.jobs)} jobs passed; {out / 'run.json'}")
    if stopped_by:  # the shell's convention for a program ended by a signal
        return 128 + stopped_by[0]
    return 0 if passed == len(plan.jobs) else 1
