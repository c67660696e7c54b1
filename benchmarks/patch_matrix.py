#!/usr/bin/env python3
"""Time `build.py patches --all` (every release from checked_from to the newest on PyPI).

Each figure is the wall clock of the real command in a fresh process, best of --repeat:
  warm            status cache, trees and index all cached (the everyday case; goal < 5 s)
  trees-warm      trees cached, status cache empty: the diff engine runs on every release
  cold-extract    sdists cached, nothing extracted: every tree unpacked from its sdist
  cold-download   an empty cache: index read and every sdist downloaded from PyPI (--download)

Usage: python -m benchmarks.patch_matrix [--repeat 3] [--download] [--write]
--write replaces benchmarks/results/patch_matrix.md with the figures, machine and date.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forge import REPO_ROOT as REPO
from forge.errors import exit_on_interrupt
from forge.files import write_text_atomically
from forge.patching.series import load_series
from forge.upstream import releases

RESULTS = REPO / "benchmarks" / "results" / "patch_matrix.md"


def run_matrix(cache: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "build.py", "patches", "--all", "--json"], cwd=REPO,
                            capture_output=True, text=True,
                            env={**os.environ, "VLLM_FORGE_CACHE": str(cache)})
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"build.py patches --all failed: {result.stderr.strip()}")
    return elapsed


def prepared_cache(root: Path, base: Path, with_trees: bool, with_sdists: bool) -> Path:
    """A cache directory holding links to (not copies of) the shared cache's parts."""
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=root))
    shutil.copy2(base / "index.json", cache / "index.json")
    if with_sdists:
        (cache / "sdists").mkdir()
        for sdist in (base / "sdists").glob("vllm-*.tar.gz"):
            os.link(sdist, cache / "sdists" / sdist.name)
    if with_trees:
        (cache / "trees").symlink_to(base / "trees")
    return cache


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--download", action="store_true", help="also time an empty cache")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    args = parser.parse_args()

    series = load_series()
    base = releases.cache_dir()
    versions = releases.list_releases(minimum=series.checked_from)
    for version in versions:            # make the shared cache warm first
        releases.release_tree(str(version))
    run_matrix(base)
    figures: list[tuple[str, float, str]] = []
    figures.append(("warm", min(run_matrix(base) for _ in range(args.repeat)),
                    f"best of {args.repeat}"))
    with tempfile.TemporaryDirectory(dir=base) as scratch:
        scratch = Path(scratch)
        trees_warm = [run_matrix(prepared_cache(scratch, base, True, True))
                      for _ in range(args.repeat)]
        figures.append(("trees-warm", min(trees_warm), f"best of {args.repeat}"))
        extract = run_matrix(prepared_cache(scratch, base, False, True))
        figures.append(("cold-extract", extract, "once"))
        if args.download:
            empty = Path(tempfile.mkdtemp(prefix="empty-", dir=scratch))
            figures.append(("cold-download", run_matrix(empty), "once"))
    report = render(figures, len(versions), versions, series)
    print(report)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(RESULTS, report)
    warm = figures[0][1]
    return 0 if warm < 5.0 else 1


def render(figures, count, versions, series) -> str:
    lines = [
        "# Patch matrix timing (`python3 build.py patches --all --json`)",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {machine()}",
        f"- releases: {count} ({versions[0]} .. {versions[-1]}), patches: {len(series.patches)}",
        "- command: `python -m benchmarks.patch_matrix --download --write`",
        "- each figure: wall clock of the real command in a fresh Python process",
        "",
        "| case | seconds | runs | what is cached |",
        "|---|---|---|---|",
    ]
    cached = {"warm": "index, sdists, trees, per-release statuses",
              "trees-warm": "index, sdists, trees (statuses recomputed by the diff engine)",
              "cold-extract": "index, sdists (every tree extracted)",
              "cold-download": "nothing (index and every sdist fetched from PyPI)"}
    for name, seconds, runs in figures:
        lines.append(f"| {name} | {seconds:.2f} | {runs} | {cached[name]} |")
    warm = figures[0][1]
    lines += ["", f"Goal: warm under 5 s for every release: {'met' if warm < 5 else 'MISSED'} "
                  f"({warm:.2f} s).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
