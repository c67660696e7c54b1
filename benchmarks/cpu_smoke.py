#!/usr/bin/env python3
"""Time the engine tier (the tests marked `engine`: real vLLM CPU engines) and keep the result as a
record.

    python3 -m benchmarks.cpu_smoke --cache warm   # the machine's ~/.cache/vllm-forge (environments made)
    python3 -m benchmarks.cpu_smoke --cache cold   # an empty VLLM_FORGE_CACHE: every CPU environment,
                                                   # its ~3-6 GB of wheels, made anew

The tier runs alone on two of pytest-xdist's workers, as its two units run in the suite (the 0.26.0
runs; those of 0.27.1 and the newest CPU build: tests/markers.py). The record goes to benchmarks/results/cpu-smoke-<cache>-<commit>/ (kind `suite`): the
machine, the tier's seconds, each test's seconds (pytest's JUnit file), the largest engine's peak RSS
among the runs' reports, and the verdict (pass when every test passed); beside it `pytest.log`.
Budgets (issue #49): at most 4 minutes warm and 8 minutes cold on the 2-core machine, at most 5 GB
RSS per engine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.ci_run import machine, save_record
from forge import REPO_ROOT
from forge.errors import exit_on_interrupt
from forge.evidence.records import RECORD_FILE, RESULTS

TIER = ("-m", "engine", "tests")
WORKERS = ("-n", "2", "--dist", "loadgroup")
LOG_NAME = "pytest.log"


def run_tier(work: Path, cache: str) -> tuple[int, str, float]:
    """(pytest's exit status, its output, wall seconds) of the tier."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_FORGE_CACHE"}
    if cache == "cold":
        env["VLLM_FORGE_CACHE"] = str(work / "cache")
    command = [sys.executable, "-m", "pytest", *WORKERS, "-q", "-p", "no:cacheprovider",
               f"--basetemp={work / 'tmp'}", f"--junitxml={work / 'junit.xml'}", *TIER]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    return done.returncode, done.stdout, time.monotonic() - started


def junit_figures(junit: Path) -> dict[str, float]:
    """Each test's seconds and the counts, from pytest's JUnit file."""
    if not junit.is_file():
        return {}
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {f"tests_{key}": int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")} \
        if suite is not None else {}
    return {**counts, **{f"{case.get('name', '?')}_s": round(float(case.get("time", 0)), 1)
                         for case in root.iter("testcase")}}


def peak_rss_mib(work: Path) -> int:
    """The largest engine peak RSS any run's report recorded (verify/engine_worker.py)."""
    peaks = [0]
    for report in (work / "tmp").rglob("mtp_smoke.json"):
        engine = json.loads(report.read_text()).get("engine", {})
        if isinstance(engine.get("max_rss_mib"), int):
            peaks.append(engine["max_rss_mib"])
    return max(peaks)


def commit() -> str:
    return subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=7", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def write_record(results: Path, cache: str, status: int, log: str, seconds: float, tests: dict,
                 rss: int, when: datetime) -> Path:
    facts = machine()
    record_id = f"cpu-smoke-{cache}-{commit()}"
    record = {
        "schema": 1, "id": record_id, "kind": "suite", "date": when.date().isoformat(),
        "command": f"python3 -m benchmarks.cpu_smoke --cache {cache}",
        "versions": {"python": platform.python_version()},
        "settings": {"cache": cache, "tier": " ".join((*WORKERS, *TIER)), "cpu": str(facts["cpu"]), "os": str(facts["os"]),
                     "started_utc": when.strftime("%Y-%m-%dT%H:%MZ")},
        "figures": {"cores": facts["cores"], "memory_gib": facts["memory_gib"], "exit_status": status,
                    "tier_s": round(seconds, 1), "max_engine_rss_mib": rss, **tests},
        "verdict": "pass" if status == 0 else "fail",
        "summary": f"the engine tier alone, {cache} cache, {facts['cores']} cores",
        "files": [LOG_NAME],
    }
    return save_record(results, record, {LOG_NAME: log})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", choices=("warm", "cold"), required=True)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the record goes")
    args = parser.parse_args(argv)
    when = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(prefix="vllm-forge-cpu-smoke-", ignore_cleanup_errors=True) as work:
        status, log, seconds = run_tier(Path(work), args.cache)
        tests, rss = junit_figures(Path(work) / "junit.xml"), peak_rss_mib(Path(work))
    folder = write_record(args.results, args.cache, status, log, seconds, tests, rss, when)
    print(f"{folder / RECORD_FILE}: the tier took {seconds:.0f} s, exit {status}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
