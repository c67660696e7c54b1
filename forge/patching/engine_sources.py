"""The vLLM files a CPU engine run must share with vLLM's release for its verdict to be vLLM's:
every file the patch series patches (each source patch's `touches` in patches/series.yaml) and
the files a verify run exercises besides (patches/engine-sources.yaml). Both lists stay data in
those files; this module validates the second, joins them, and has forge.upstream.cpu_wheels
compare a CPU wheel with the release's sdist.

    engine_sources.cpu_wheel_differences(wheel, "0.27.1")   # [] when the wheel ships them all
"""
from __future__ import annotations

from pathlib import Path

from forge import REPO_ROOT
from forge.patching.series import Series, load_series
from forge.patching.vocabulary import Kind
from forge.schema import Field, ListOf, load_yaml, validate
from forge.upstream import cpu_wheels

DEFAULT_SOURCES = REPO_ROOT / "patches" / "engine-sources.yaml"


def _release_paths(value: list) -> str | None:
    """files: paths or patterns (`*`, `?`, `**/`) of files under vllm/ in the release tree."""
    for item in value:
        parts = item.split("/")
        if parts[0] != cpu_wheels.PACKAGE or len(parts) < 2 or "" in parts or ".." in parts \
                or "\\" in item:
            return f"{item!r}: must be a path under vllm/ (vllm/a/b.py, vllm/a/*.py), no '..'"
    return None


SOURCES_SCHEMA = {"files": Field(ListOf(str, min_items=1), check=_release_paths)}


def load_sources(path: Path | str | None = None) -> list[str]:
    """patches/engine-sources.yaml's `files`, validated (errors name the file and the field)."""
    path = Path(path or DEFAULT_SOURCES)
    return validate(load_yaml(path), SOURCES_SCHEMA, str(path))["files"]


def checked_paths(series: Series | None = None, sources: Path | str | None = None) -> list[str]:
    """Paths and patterns, sorted: the series' source patch targets and the engine sources
    (default: the committed series and patches/engine-sources.yaml)."""
    series = series if series is not None else load_series(check_index=False)
    found = {path for patch in series.patches if patch.kind == Kind.SOURCE
             for path in patch.touches or []}
    return sorted(found | set(load_sources(sources)))


def cpu_wheel_differences(wheel: Path | str, version: str, series: Series | None = None,
                          sources: Path | str | None = None, offline: bool = False) -> list[str]:
    """The checked files (checked_paths) whose bytes in the CPU wheel differ from vLLM
    `version`'s sdist, or that only one of the two holds; empty: the CPU run runs vLLM's code."""
    return cpu_wheels.differing_files(Path(wheel), version, checked_paths(series, sources),
                                      offline=offline)
