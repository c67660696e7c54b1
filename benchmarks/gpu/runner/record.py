"""What a run leaves under --out: run.json (the machine-readable summary, rewritten after every
event so that a run stopped from outside still has one), timeline.txt (the lines printed, one per
job event) and, where the plan asks, results.tgz (everything but the plan's pack.exclude)."""
from __future__ import annotations

import fnmatch
import os
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.gpu.runner.plan import Job, Plan
from forge.errors import FileError
from forge.files import FileKind, append_text, read_tail
from forge.json_text import dump_json
from forge.untrusted import visible

LOG_TAIL = FileKind("job log's end", 8192)   # enough for a failed job's last line

ARCHIVE = "results.tgz"


@dataclass
class JobRecord:
    id: str
    command: list[str]
    timed: bool
    gpu_memory_gib: float
    timeout_s: float
    depends_on: list[str]
    status: str = "pending"
    start: float | None = None       # seconds since the epoch
    end: float | None = None
    exit: int | None = None          # negative: the signal that ended it
    reason: str | None = None        # why it failed, was cut or skipped
    log: str = ""
    out: str = ""
    kept: list[str] | None = None    # a cut job: the partial output kept under out/
    ready: float | None = None       # a server: when its ready_url first answered

    @classmethod
    def of(cls, job: Job, argv: list[str]) -> JobRecord:
        return cls(job.id, argv, job.timed, job.gpu_memory_gib, job.timeout_s, list(job.depends_on),
                   log=f"logs/{job.id}.log", out=job.id)


@dataclass
class RunRecord:
    plan: str
    vllm_expected: str
    gpu_memory_gib: float
    jobs: list[JobRecord]
    versions: dict = field(default_factory=dict)
    gpus: list | None = None
    start: float = field(default_factory=time.time)
    end: float | None = None
    schema: int = 1

    def job(self, job_id: str) -> JobRecord:
        return next(job for job in self.jobs if job.id == job_id)

    def write(self, out: Path) -> None:
        temporary = out / "run.json.tmp"
        temporary.write_text(dump_json(asdict(self), indent=1) + "\n")
        os.replace(temporary, out / "run.json")


class Timeline:
    """One line per event, printed and appended to timeline.txt."""

    def __init__(self, out: Path | None):
        self.path = out / "timeline.txt" if out else None

    def say(self, text: str) -> None:
        # visible: an event quotes a job's log line and the plan's own strings, whose escape
        # sequences would act on the terminal as raw text.
        line = f"{time.strftime('%H:%M:%S', time.gmtime())} {visible(text)}"
        print(line, flush=True)
        if self.path:
            append_text(self.path, line + "\n")


def last_line(log: Path, width: int = 160) -> str:
    """The log's last non-empty line: a failed job's event names its cause."""
    try:
        whole = os.path.getsize(log) <= LOG_TAIL.cap
        tail = read_tail(log, LOG_TAIL)
    except (OSError, FileError):
        return ""
    lines = [line.strip() for line in tail.decode(errors="replace").splitlines()]
    if whole:
        lines = lines[1:]        # the command the runner wrote first, not the job's output
    lines = [line for line in lines if line]
    return lines[-1][:width] if lines else ""


def keep_partial(folder: Path, patterns: tuple[str, ...]) -> list[str]:
    """A cut job's folder reduced to what its keep_when_cut globs match; the kept paths."""
    kept = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        relative = path.relative_to(folder).as_posix()
        if any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns):
            kept.append(relative)
        else:
            path.unlink()
    for path in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
    return kept


def pack(plan: Plan, out: Path) -> Path | None:
    """out/results.tgz: the run folder without the plan's pack.exclude (models, caches, traces),
    written whole or not at all."""
    if plan.pack_exclude is None:
        return None
    patterns = plan.pack_exclude

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        relative = info.name.split("/", 1)[1] if "/" in info.name else ""
        if relative in (ARCHIVE, ARCHIVE + ".tmp"):
            return None
        parts = relative.split("/")
        if relative and any(fnmatch.fnmatchcase(relative, p) or any(fnmatch.fnmatchcase(part, p) for part in parts)
                            for p in patterns):
            return None
        return info

    temporary = out / (ARCHIVE + ".tmp")
    try:
        with tarfile.open(temporary, "w:gz") as archive:
            archive.add(out, arcname=out.name, filter=keep)
    except OSError as error:
        print(visible(f"cannot pack {out}: {error}"), file=sys.stderr)
        return None
    os.replace(temporary, out / ARCHIVE)
    return out / ARCHIVE
