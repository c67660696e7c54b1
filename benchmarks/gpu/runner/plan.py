"""A run plan: YAML parsed once into a typed pydantic v2 model (strict types, no unknown field, no
NaN or infinity, every number within MOST, ids matched in full, sizes capped), every problem one
line naming the plan file and the field.

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
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError, WrapValidator
from pydantic import Field as Bounded
from pydantic_core import PydanticCustomError

from forge.data_formats import load_yaml
from forge.errors import ForgeError
from forge.schema import MAX_ITEMS, MAX_TEXT, first_error

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
_PLAN_ERROR = "plan"      # a check that says what is wrong in its own words


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


# --- the file's typed model ------------------------------------------------------------------------

def _refuse(problem: str):
    raise PydanticCustomError(_PLAN_ERROR, "{problem}", {"problem": problem})


def _matching(pattern: re.Pattern):
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(pattern.pattern)     # the field's own words say what it must be
        return value
    return AfterValidator(check)


def _names_known_fields(text: str) -> str:
    unknown = [name for name in TEMPLATE_FIELD.findall(text) if name not in FIELDS]
    if unknown:
        named = ", ".join("{" + name + "}" for name in FIELDS)
        _refuse(f"{{{unknown[0]}}} is not a field a command may name ({named})")
    return text


def _split(value: Any) -> Any:
    """One command string is split as a shell would (no shell runs it)."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as error:
            _refuse(f"cannot split the command: {error}")
    return value


def _env_text(setting: str | int | float) -> str:
    return _names_known_fields(str(setting))


def _env_name(name: Any, handler) -> str:
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        _refuse(f"{name!r:.80} is not an environment variable name")
    return handler(name)


Text = Annotated[str, Bounded(max_length=MAX_TEXT)]
Texts = Annotated[list[Text], Bounded(max_length=MAX_ITEMS)]
Template = Annotated[Text, AfterValidator(_names_known_fields)]
Command = Annotated[list[Template], Bounded(min_length=1, max_length=MAX_ITEMS), BeforeValidator(_split)]
EnvName = Annotated[str, WrapValidator(_env_name)]
EnvValue = Annotated[Text | int | float, AfterValidator(_env_text)]    # a number as its text
Env = Annotated[dict[EnvName, EnvValue], Bounded(max_length=MAX_ITEMS)]
_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)
_UNKNOWN = ("extra_forbidden", "invalid_key")


class _JobEntry(BaseModel):
    model_config = _STRICT
    id: Annotated[str, _matching(JOB_ID)]
    gpu_memory_gib: Annotated[float, Bounded(ge=0, le=MOST["gpu_memory_gib"])]
    timed: bool = False
    ready_url: Annotated[Text, _matching(URL)] | None = None
    command: Command
    timeout_s: Annotated[float, Bounded(gt=0, le=MOST["timeout_s"])]
    depends_on: Texts = []
    keep_when_cut: Texts = ["**"]
    env: Env = {}


class _Pack(BaseModel):
    model_config = _STRICT
    exclude: Texts = []


class _PlanFile(BaseModel):
    model_config = _STRICT
    vllm: Annotated[str, _matching(RELEASE)]
    gpu_memory_gib: Annotated[float, Bounded(gt=0, le=MOST["gpu_memory_gib"])]
    kill_grace_s: Annotated[float, Bounded(ge=0, le=MOST["kill_grace_s"])] = 10.0
    env: Env = {}
    jobs: Annotated[list[_JobEntry], Bounded(min_length=1, max_length=MAX_ITEMS)]
    pack: _Pack | None = None


_LISTS = "a list of strings"      # command, depends_on, keep_when_cut, pack.exclude
# What each field must be, as an error says it: "<field>: <this>, not <the value>".
_PLAN_SHAPES = {
    "vllm": 'a release as a quoted string like "0.27.1"',
    "gpu_memory_gib": f"a positive number up to {MOST['gpu_memory_gib']:g}",
    "kill_grace_s": f"a non-negative number up to {MOST['kill_grace_s']:g}",
    "env": "a mapping of NAME: value",
    "pack": "a mapping with exclude: [glob, ...]",
}
_JOB_SHAPES = {
    "id": "[a-z0-9][a-z0-9.-]* (it names a folder)",
    "gpu_memory_gib": f"a non-negative number up to {MOST['gpu_memory_gib']:g}",
    "timed": "true or false",
    "ready_url": "an http:// URL the server answers once it is up",
    "command": _LISTS,
    "timeout_s": f"a positive number up to {MOST['timeout_s']:g}",
    "env": "a mapping of NAME: value",
}


# --- loading -----------------------------------------------------------------------------------------

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

    try:
        model = _PlanFile.model_validate(data)
    except ValidationError as error:
        fail(*_describe(first_error(error.errors()), data))
    jobs = tuple(_job(entry, f"jobs[{index}] ({entry.id})", model.gpu_memory_gib, fail)
                 for index, entry in enumerate(model.jobs))
    _check_ids(jobs, fail)
    return Plan(path, model.vllm, model.gpu_memory_gib, jobs, model.env, model.kill_grace_s,
                None if model.pack is None else tuple(model.pack.exclude))


def _job(entry: _JobEntry, where: str, budget: float, fail) -> Job:
    """A job whose fields each passed: what holds between them and the plan."""
    if entry.gpu_memory_gib > budget:
        fail(f"{where}.gpu_memory_gib",
             f"{entry.gpu_memory_gib:g} GiB is more than the plan's gpu_memory_gib ({budget:g})")
    if entry.ready_url is not None and entry.timed:
        fail(f"{where}.timed", "a server (ready_url) is untimed: its clients run beside it")
    return Job(entry.id, tuple(entry.command), entry.gpu_memory_gib, entry.timed, entry.timeout_s,
               tuple(entry.depends_on), tuple(entry.keep_when_cut), entry.env, entry.ready_url)


def _describe(error: dict, data) -> tuple[str, str]:
    """pydantic's error as the field it names and the problem in the plan's words."""
    loc = error["loc"]
    if not loc:
        return "(top)", "a plan is a mapping with vllm, gpu_memory_gib and jobs"
    if loc[0] == "jobs" and len(loc) > 1:
        return _describe_job(error, loc[1], loc[2:], data["jobs"][loc[1]])
    if len(loc) == 1 and error["type"] in _UNKNOWN:
        return str(loc[0]), f"not a field of a plan (known: {', '.join(sorted(_PlanFile.model_fields))})"
    if loc[0] == "jobs":
        return "jobs", _problem(error, "a non-empty list of jobs", None, shown=False)
    if loc[0] == "pack" and loc[1:2] == ("exclude",):
        return "pack.exclude", _problem(error, _LISTS, data["pack"]["exclude"])
    if loc[0] == "env" and len(loc) > 1:
        return _describe_env("env", error, loc[1:])
    return str(loc[0]), _problem(error, _PLAN_SHAPES[loc[0]], data.get(loc[0]))


def _describe_job(error: dict, index: int, loc: tuple, item) -> tuple[str, str]:
    where = f"jobs[{index}]"
    if not loc:
        return where, "a job is a mapping with id, command, gpu_memory_gib and timeout_s"
    job_id = item.get("id")
    if loc[0] == "id":
        return f"{where}.id", _problem(error, _JOB_SHAPES["id"], job_id)
    if isinstance(job_id, str) and JOB_ID.fullmatch(job_id):
        where = f"{where} ({job_id})"
    if len(loc) == 1 and error["type"] in _UNKNOWN:
        known = ", ".join(sorted(_JobEntry.model_fields))
        return f"{where}.{loc[0]}", f"not a field of a plan job (known: {known})"
    if loc[0] == "env" and len(loc) > 1:
        return _describe_env(f"{where}.env", error, loc[1:])
    if loc == ("command",) and error["type"] == "too_short":
        return f"{where}.command", "an argv list of strings or one command string, not empty"
    return f"{where}.{loc[0]}", _problem(error, _JOB_SHAPES.get(loc[0], _LISTS), item.get(loc[0]))


def _describe_env(where: str, error: dict, loc: tuple) -> tuple[str, str]:
    if loc[-1] == "[key]":          # the name's own check said what is wrong
        return where, _problem(error, "", None)
    return f"{where}.{loc[0]}", _problem(error, "a string or a number", error["input"])


def _problem(error: dict, shape: str, value, shown: bool = True) -> str:
    kind, context = error["type"], error.get("ctx") or {}
    if kind == _PLAN_ERROR:
        return context["problem"]
    if kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"{shape}, at most {context['max_length']} {unit} long"
    return f"{shape}, not {_shown(value)}" if shown else shape


def _shown(value) -> str:
    """A value as an error names it: a huge integer by its size (repr of one over 4300 digits
    raises), anything else as repr, cut short."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10 ** 18:
        return f"an integer of about {value.bit_length() * 3 // 10} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


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
