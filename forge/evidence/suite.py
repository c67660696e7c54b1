"""A `suite` record's figures, read from `ci-run.log` beside it: what `.ci/run` printed of its
phases (`=== [ci] tests took 761 s`, `=== [ci] total 777 s`), pytest's closing line
(`==== 2428 passed, 1 failed in 759.52s (0:12:39) ====`) and what the cores did during the
tests (`=== [ci] tests cpu: busy 612 s, idle 98 s, stolen 3 s`, CPU-seconds over every core).
benchmarks/ci_run.py keeps the run's whole output there (pytest's names of what failed, what came
after the summary) and writes the record; tests/test_evidence.py checks every record's figures
against what this makes of its log."""
from __future__ import annotations

import re

from forge import files
from forge.evidence.records import Record

LOG_NAME = "ci-run.log"
PHASE_TOOK = re.compile(r"^=== \[ci\] (?P<phase>.+?) took (?P<seconds>\d+) s$")
PHASE_CPU = re.compile(r"^=== \[ci\] (?P<phase>.+?) cpu: busy (?P<busy>\d+) s, idle (?P<idle>\d+) s, "
                       r"stolen (?P<stolen>\d+) s$")
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
            for spent in ("busy", "idle", "stolen"):
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
