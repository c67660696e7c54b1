#!/usr/bin/env python3
"""Time `.ci/run` as CI runs it and keep the result as a record.

    python3 -m benchmarks.ci_run --cache warm    # the machine keeps ~/.cache/vllm-forge
    python3 -m benchmarks.ci_run --cache cold    # an empty VLLM_FORGE_CACHE and pip cache: every
                                                 # vLLM sdist, tree, environment and rootfs made
                                                 # anew, every wheel downloaded
    python3 -m benchmarks.ci_run --cache cold --engine fresh
                                                 # and Docker engines with no data, as on a new
                                                 # CI machine (none may be running: the tests
                                                 # start them in folders of the run's own)

A fresh clone of HEAD runs `bash .ci/run` with CI=true, no stdin, as root, with
PYTHONDONTWRITEBYTECODE unset (as a newcomer's shell has it). The record goes to
benchmarks/results/ci-<cache>-<commit>/ (`result.json`, kind `suite`): the machine (cores,
memory, CPU model, Python), each `.ci/run` phase's seconds, pytest's counts, the verdict (pass when
.ci/run exited 0), and beside it `ci-run.log`, the run's whole output (a few hundred lines).
The README quotes the suite's time from such a record, by id.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from forge import REPO_ROOT
from forge.errors import exit_on_interrupt
from forge.evidence.records import RECORD_FILE, RESULTS, SCHEMA, load_record
from forge.evidence.suite import LOG_NAME, read_log
from forge.files import write_text_atomically
from forge.json_text import dump_json
from forge.schema import validate


def machine() -> dict[str, object]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:"))
    return {"cores": os.cpu_count() or 0, "memory_gib": round(memory_kib / 2**20),
            "cpu": cpu, "os": f"{platform.system()} {platform.release()}"}


ENGINE_STATE_VARIABLES = ("DOCKER_STATE_DIR", "DOCKER26_STATE_DIR")   # tests/infra/start-dockerd*.sh


def engine_sockets() -> tuple[Path, ...]:
    """The sockets of the engines the tests start (tests/infra/start-dockerd*.sh: the Engine 26
    one in its state folder, by default under the project's cache)."""
    from forge.upstream.releases import cache_dir

    state26 = os.environ.get("DOCKER26_STATE_DIR") or cache_dir() / "engines" / "dockerd26"
    return (Path("/var/run/docker.sock"), Path(state26) / "docker.sock")


ENGINE_SOCKETS = engine_sockets()


def running_engine() -> Path | None:
    """The socket of a Docker engine that answers, or None: the tests reuse an engine that
    answers, so a run on fresh engine data needs none running."""
    import socket

    for path in ENGINE_SOCKETS:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
                return path
            except OSError:
                continue
    return None


def run_ci(repo: Path, work: Path, cache: str, engine: str) -> tuple[int, str, str]:
    """(.ci/run's exit status, its whole output, the commit) for a fresh clone of `repo`'s HEAD."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short=7", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "VLLM_FORGE_CACHE")}
    env["CI"] = "true"
    if cache == "cold":
        env["VLLM_FORGE_CACHE"] = str(work / "cache")
        env["PIP_CACHE_DIR"] = str(work / "pip-cache")     # pip's own is empty on a new machine too
    if engine == "fresh":
        for name in ENGINE_STATE_VARIABLES:
            env[name] = str(work / name.lower())
    done = subprocess.run(["bash", ".ci/run"], cwd=clone, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    return done.returncode, done.stdout, commit


def pytest_options() -> dict:
    """PYTEST_ADDOPTS, which the clone's .ci/run inherits, as a setting when set: options added to
    the README's command (a JUnit XML file of per-test times, say) are part of what ran."""
    given = os.environ.get("PYTEST_ADDOPTS", "").strip()
    return {"pytest_addopts": given} if given else {}


def write_record(results: Path, cache: str, engine: str, commit: str, status: int, log: str,
                 when: datetime) -> Path:
    """benchmarks/results/ci-<cache>-<commit>/: result.json and ci-run.log, validated as a record
    before it takes its name (a record that would not load is never left under one)."""
    figures = read_log(log)
    facts = machine()
    record_id = f"ci-{cache}-{commit}"     # one per commit and cache: a run again replaces it
    record = {
        "schema": 1, "id": record_id, "kind": "suite", "date": when.date().isoformat(),
        "command": f"python3 -m benchmarks.ci_run --cache {cache} --engine {engine}",
        "versions": {"python": platform.python_version()},
        "settings": {"cache": cache, "engine_data": engine, "commit": commit, "cpu": str(facts["cpu"]), "os": str(facts["os"]),
                     "started_utc": when.strftime("%Y-%m-%dT%H:%MZ"), **pytest_options()},
        "figures": {"cores": facts["cores"], "memory_gib": facts["memory_gib"], "exit_status": status,
                    **figures},
        "verdict": "pass" if status == 0 else "fail",
        "summary": f".ci/run on a fresh clone, {cache} cache, {engine} engine data, {facts['cores']} cores",
        "files": [LOG_NAME],
    }
    return save_record(results, record, {LOG_NAME: log})


def save_record(results: Path, record: dict, raw: dict[str, str]) -> Path:
    """results/<id>/: result.json and the raw files beside it, validated as a record before it takes
    its name (a record that would not load is never left under one); a record of the same id (a
    second run of the same commit) is replaced."""
    folder = results / record["id"]
    validate(record, SCHEMA, str(folder / RECORD_FILE))   # refused before anything is written
    staging = Path(tempfile.mkdtemp(prefix=f".{record['id']}.", dir=results))
    try:
        for name, text in raw.items():
            write_text_atomically(staging / name, text if text.endswith("\n") or not text else text + "\n")
        write_text_atomically(staging / RECORD_FILE,
                              dump_json(record, str(folder / RECORD_FILE), indent=2) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    load_record(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", choices=("warm", "cold"), required=True,
                        help="warm: the machine's ~/.cache/vllm-forge; cold: an empty one")
    parser.add_argument("--engine", choices=("kept", "fresh"), default="kept",
                        help="kept: the Docker engines and data the machine has; fresh: new ones "
                             "with no data, started and stopped by the tests")
    parser.add_argument("--repo", type=Path, default=REPO_ROOT, help="the repository to clone (default: this one)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the record goes")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"--results: no such directory: {args.results}")
    if args.engine == "fresh" and (socket_path := running_engine()):
        parser.error(f"--engine fresh: an engine answers on {socket_path}; stop it first "
                     "(bash tests/infra/stop-dockerd.sh, stop-dockerd26.sh)")
    when = datetime.now(timezone.utc)
    # an engine's data may keep files its own processes made read-only or in use: best effort
    with tempfile.TemporaryDirectory(prefix="vllm-forge-ci-run-", ignore_cleanup_errors=True) as work:
        os.chmod(work, 0o755)    # a checkout others may read: tests run commands as nobody
        status, log, commit = run_ci(args.repo, Path(work), args.cache, args.engine)
    folder = write_record(args.results, args.cache, args.engine, commit, status, log, when)
    print(f"{folder / RECORD_FILE}: .ci/run exited {status}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
