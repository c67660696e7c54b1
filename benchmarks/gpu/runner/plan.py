"""A run plan: YAML validated on load, every problem one line naming the plan file and the field.

    vllm: "0.27.1"            # the release the host must have installed (checked before any job)
    gpu_memory_gib: 140       # what the jobs may reserve together
    env: {NAME: value}        # optional, for every job (PYTHONPATH goes before the host's)
    kill_grace_s: 10          # optional: seconds between SIGTERM and SIGKILL for a cut job
    pack: {exclude: [glob]}   # optional: OUT/results.tgz of everything but these paths
    jobs:
      - id: smoke-26b         # [a-z0-9][a-z0-9.-]*: its folder OUT/<id>, its log OUT/logs/<id>.log
        command: ["{python}", "{repo}/verify/mtp_smoke.py", "--out", "{out}"]   # or one string
        gpu_memory_gib: 14    # its reservation
        timed: false          # true: runs alone, nothing beside it
        timeout_s: 480        # then its process group is killed and it is `cut`
        depends_on: [apply]   # optional: runs once these passed, skipped when one did not
        keep_when_cut: ["**"] # optional: globs under OUT/<id> kept when cut (default all)
        env: {NAME: value}    # optional, templated like the command
        ready_url: http://127.0.0.1:8012/health   # optional: a server (see schedule.py)

A command names only the fields {out} (the job's own folder), {repo} (the repository root) and
{python} (the interpreter running the plan); any other {word} is refused. Other braces (a JSON
value such as --speculative-config '{"method": "mtp"}') are left as they are.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from forge.data_formats import load_yaml
from forge.errors import ForgeError

FIELDS = ("out", "repo", "python")
TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Checked with fullmatch: `$` would let a trailing newline through (into a folder name, a log).
JOB_ID = re.compile(r"[a-z0-9][a-z0-9.-]*")
RELEASE = re.compile(r"\d+\.\d+\.\d+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
URL = re.compile(r"https?://\S+")
# The largest value each number may take: finite, and far past any real run (a plan's memory is
# one host's GPUs; a job's timeout at most a week; the grace before SIGKILL at most an hour). A
# NaN timeout never passes, so a job that hangs would be waited on for ever; an infinite grace
# would wait for ever on a process that ignores SIGTERM.
MOST = {"gpu_memory_gib": 1e5, "timeout_s": 7 * 24 * 3600.0, "kill_grace_s": 3600.0}
PLAN_KEYS = {"vllm", "gpu_memory_gib", "env", "kill_grace_s", "pack", "jobs"}
JOB_KEYS = {"id", "command", "gpu_memory_gib", "timed", "timeout_s", "depends_on", "keep_when_cut", "env",
            "ready_url"}


class PlanError(ValueError):
    """A plan that cannot run: the message is one line naming the file and the field."""


@dataclass(frozen=True)
class Job:
    id: str
    command: tuple[str, ...]          # argv, fields not yet filled in
    gpu_memory_gib: float
    timed: bool
    timeout_s: float
    depends_on: tuple[str, ...] = ()
    keep_when_cut: tuple[str, ...] = ("**",)
    env: dict[str, str] = field(default_factory=dict)
    ready_url: str | None = None      # a server: its dependants start once this URL answers

    def argv(self, fields: dict[str, str]) -> list[str]:
        return [fill(part, fields) for part in self.command]


@dataclass(frozen=True)
class Plan:
    path: Path
    vllm: str
    gpu_memory_gib: float
    jobs: tuple[Job, ...]
    env: dict[str, str] = field(default_factory=dict)
    kill_grace_s: float = 10.0
    pack_exclude: tuple[str, ...] | None = None    # None: no archive

    @property
    def name(self) -> str:
        return self.path.stem

    def job(self, job_id: str) -> Job:
        return next(job for job in self.jobs if job.id == job_id)


def fill(text: str, fields: dict[str, str]) -> str:
    return TEMPLATE_FIELD.sub(lambda m: fields[m[1]], text)


def load_plan(path: Path | str) -> Plan:
    path = Path(path)
    try:
        data = load_yaml(path)   # the file layer's one-line refusals, naming the plan file
    except ForgeError as error:
        raise PlanError(str(error)) from None
    return _plan(path, data)


def _plan(path: Path, data) -> Plan:
    def fail(name: str, problem: str):
        raise PlanError(f"{path}: {name}: {problem}")

    if not isinstance(data, dict):
        fail("(top)", "a plan is a mapping with vllm, gpu_memory_gib and jobs")
    _no_unknown(data, PLAN_KEYS, "", fail)
    vllm = data.get("vllm")
    if not isinstance(vllm, str) or not RELEASE.fullmatch(vllm):
        fail("vllm", f"a release as a quoted string like \"0.27.1\", not {vllm!r}")
    budget = _number(data.get("gpu_memory_gib"), "gpu_memory_gib", fail, positive=True,
                     most=MOST["gpu_memory_gib"])
    grace = _number(data.get("kill_grace_s", 10), "kill_grace_s", fail, positive=False,
                    most=MOST["kill_grace_s"])
    env = _env(data.get("env", {}), "env", fail)
    jobs_data = data.get("jobs")
    if not isinstance(jobs_data, list) or not jobs_data:
        fail("jobs", "a non-empty list of jobs")
    jobs = tuple(_job(item, f"jobs[{index}]", budget, fail) for index, item in enumerate(jobs_data))
    _check_ids(jobs, fail)
    return Plan(path, vllm, budget, jobs, env, grace, _pack(data.get("pack"), fail))


def _job(item, where: str, budget: float, fail) -> Job:
    if not isinstance(item, dict):
        fail(where, "a job is a mapping with id, command, gpu_memory_gib and timeout_s")
    job_id = item.get("id")
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        fail(f"{where}.id", f"[a-z0-9][a-z0-9.-]* (it names a folder), not {job_id!r}")
    where = f"{where} ({job_id})"
    _no_unknown(item, JOB_KEYS, where + ".", fail)
    reservation = _number(item.get("gpu_memory_gib"), f"{where}.gpu_memory_gib", fail, positive=False,
                          most=MOST["gpu_memory_gib"])
    if reservation > budget:
        fail(f"{where}.gpu_memory_gib", f"{reservation:g} GiB is more than the plan's gpu_memory_gib ({budget:g})")
    timed = item.get("timed", False)
    if not isinstance(timed, bool):
        fail(f"{where}.timed", f"true or false, not {timed!r}")
    ready_url = item.get("ready_url")
    if ready_url is not None and (not isinstance(ready_url, str) or not URL.fullmatch(ready_url)):
        fail(f"{where}.ready_url", f"an http:// URL the server answers once it is up, not {ready_url!r}")
    if ready_url is not None and timed:
        fail(f"{where}.timed", "a server (ready_url) is untimed: its clients run beside it")
    return Job(job_id, _command(item.get("command"), f"{where}.command", fail), reservation, timed,
               _number(item.get("timeout_s"), f"{where}.timeout_s", fail, positive=True,
                       most=MOST["timeout_s"]),
               tuple(_strings(item.get("depends_on", []), f"{where}.depends_on", fail)),
               tuple(_strings(item.get("keep_when_cut", ["**"]), f"{where}.keep_when_cut", fail)),
               _env(item.get("env", {}), f"{where}.env", fail), ready_url)


def _command(value, where: str, fail) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as error:
            fail(where, f"cannot split the command: {error}")
    argv = _strings(value, where, fail)
    if not argv:
        fail(where, "an argv list of strings or one command string, not empty")
    for part in argv:
        _check_fields(part, where, fail)
    return tuple(argv)


def _check_fields(text: str, where: str, fail) -> None:
    unknown = [name for name in TEMPLATE_FIELD.findall(text) if name not in FIELDS]
    if unknown:
        named = ", ".join("{" + name + "}" for name in FIELDS)
        fail(where, f"{{{unknown[0]}}} is not a field a command may name ({named})")


def _strings(value, where: str, fail) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        fail(where, f"a list of strings, not {value!r}")
    return value


def _number(value, where: str, fail, positive: bool, most: float) -> float:
    kind = f"a {'positive' if positive else 'non-negative'} number up to {most:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(where, f"{kind}, not {_shown(value)}")
    # compared as they are: a 400-digit int is no float, and NaN compares false to everything
    if not (0 <= value <= most) or (positive and value == 0):
        fail(where, f"{kind}, not {_shown(value)}")
    return float(value)


def _shown(value) -> str:
    """A value as an error names it: a huge integer by its size (repr of one over 4300 digits
    raises), anything else as repr, cut short."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 18:
        return f"an integer of about {value.bit_length() * 3 // 10} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _env(value, where: str, fail) -> dict[str, str]:
    if not isinstance(value, dict):
        fail(where, f"a mapping of NAME: value, not {value!r}")
    env = {}
    for name, setting in value.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            fail(where, f"{name!r} is not an environment variable name")
        if isinstance(setting, bool) or not isinstance(setting, (str, int, float)):
            fail(f"{where}.{name}", f"a string or a number, not {setting!r}")
        _check_fields(str(setting), f"{where}.{name}", fail)
        env[name] = str(setting)
    return env


def _pack(value, fail) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"exclude"}:
        fail("pack", f"a mapping with exclude: [glob, ...], not {value!r}")
    return tuple(_strings(value.get("exclude", []), "pack.exclude", fail))


def _no_unknown(data: dict, known: set[str], prefix: str, fail) -> None:
    unknown = sorted(str(key) for key in data if key not in known)
    if unknown:
        fail(prefix + unknown[0], f"not a field of a plan{' job' if prefix else ''} (known: {', '.join(sorted(known))})")


def _check_ids(jobs: tuple[Job, ...], fail) -> None:
    seen: dict[str, int] = {}
    for index, job in enumerate(jobs):
        if job.id in seen:
            fail(f"jobs[{index}].id", f"{job.id!r} is already the id of jobs[{seen[job.id]}]")
        seen[job.id] = index
    for index, job in enumerate(jobs):
        for dependency in job.depends_on:
            if dependency not in seen:
                fail(f"jobs[{index}] ({job.id}).depends_on", f"{dependency!r} is no job of this plan")
            if dependency == job.id:
                fail(f"jobs[{index}] ({job.id}).depends_on", "a job cannot depend on itself")
            if job.timed and jobs[seen[dependency]].ready_url:
                fail(f"jobs[{index}] ({job.id}).depends_on", f"a timed job runs alone, not beside the server {dependency}")
    cycle = _cycle(jobs)
    if cycle:
        index = seen[cycle[0]]
        fail(f"jobs[{index}] ({cycle[0]}).depends_on", f"a dependency cycle: {' -> '.join(cycle)}")


def _cycle(jobs: tuple[Job, ...]) -> list[str] | None:
    """One dependency cycle as ids (first id repeated last), or None: depth-first with colours."""
    needs = {job.id: job.depends_on for job in jobs}
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for dependency in needs[node]:
            if state.get(dependency) == "open":
                return stack[stack.index(dependency):] + [dependency]
            if dependency not in state:
                found = visit(dependency)
                if found:
                    return found
        state[node] = "done"
        stack.pop()
        return None

    for job in jobs:
        if job.id not in state:
            found = visit(job.id)
            if found:
                return found
    return None
