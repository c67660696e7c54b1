"""A `suite` record's figures, read from `ci-run.log` beside it: what `.ci/run` printed of its
phases (`=== [ci] tests took 761 s`, `=== [ci] total 777 s`), pytest's closing line
(`==== 2428 passed, 1 failed in 759.52s (0:12:39) ====`) and the CPU of the tests phase
(`=== [ci] tests cpu: suite 419 s (cgroup), machine busy 612 s, idle 98 s, stolen 3 s`): the
suite's own CPU-seconds, counted in a cgroup of its own (or, where none can be made, over the
processes pytest waited for: "process tree"), then what every core of the machine did, other
work included. Logs from before the suite figure (`tests cpu: busy 612 s, idle ...`) give the
machine's figures alone.
benchmarks/ci_run.py keeps the run's whole output there (pytest's names of what failed, what came
after the summary) and writes the record; tests/test_evidence.py checks every record's figures
against what this makes of its log."""
from __future__ import annotations

import re

from forge import files
from forge.evidence.records import Record

LOG_NAME = "ci-run.log"
PHASE_TOOK = re.compile(r"^=== \[ci\] (?P<phase>.+?) took (?P<seconds>\d+) s$")
PHASE_CPU = re.compile(r"^=== \[ci\] (?P<phase>.+?) cpu: (?:suite (?P<suite>\d+) s "
                       r"\((?P<counted>cgroup|process tree)\), machine )?busy (?P<busy>\d+) s, "
                       r"idle (?P<idle>\d+) s, stolen (?P<stolen>\d+) s$")
TOTAL = re.compile(r"^=== \[ci\] total (?P<seconds>\d+) s$")
PYTEST_SUMMARY = re.compile(r"^=+ (?P<counts>\d+ [a-z]+.*) in (?P<seconds>\d+(?:\.\d+)?)s\b.*=+$")
SINGULAR = {"errors": "error", "warnings": "warning"}   # pytest writes "1 error", "2 errors"
COUNT = re.compile(r"(?P<n>\d+) (?P<what>passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)\b")


def figure_name(phase: str) -> str:
    """'vLLM source cache' -> 'phase.vllm_source_cache_s'."""
    return "phase." + re.sub(r"[^a-z0-9]+", "_", phase.lower()).strip("_") + "_s"


def read_log(text: str) -> dict[str, float]:
    """The figures in a `.ci/run` log."""
    figures: dict[str, float] = {}
    for line in text.splitlines():
        if match := PHASE_TOOK.match(line):
            figures[figure_name(match["phase"])] = int(match["seconds"])
        elif match := PHASE_CPU.match(line):
            for spent in ("suite", "busy", "idle", "stolen"):
                if match[spent] is not None:
                    figures[figure_name(f"{match['phase']} cpu {spent}")] = int(match[spent])
        elif match := TOTAL.match(line):
            figures["total_s"] = int(match["seconds"])
        elif match := PYTEST_SUMMARY.match(line):
            figures["pytest_s"] = float(match["seconds"])
            for count in COUNT.finditer(match["counts"]):
                figures[SINGULAR.get(count["what"], count["what"])] = int(count["n"])
    if "pytest_s" in figures:
        for what in ("passed", "failed", "error"):
            figures.setdefault(what, 0)
    return figures


def suite_figures(record: Record) -> dict:
    text = files.decode_utf8(files.read_bytes(record.raw(LOG_NAME), files.REPORT), str(record.raw(LOG_NAME)))
    return read_log(text)
