"""Whether a recipe's evidence covers a release: the result records its target cites
(`targets.<target>.evidence: [id, ...]`, else `defaults.evidence`) whose `versions.vllm` is that
release. The records are read by forge.evidence's loader, so each is validated whole (a bad one
is a one-line error naming its file and field). A recipe that cites none is "not measured" on
every release.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from forge.evidence.records import RECORD_FILE, RESULTS, Record, load_records
from forge.schema import load_yaml
from forge.serving.recipes import Recipe, merged

RESULTS_DIR = RESULTS
__all__ = ["RECORD_FILE", "RESULTS_DIR", "Coverage", "cited_ids", "coverage", "coverage_in",
           "coverage_of", "missing_in", "missing_records", "record_releases", "records_of"]
MEASURED, NOT_MEASURED = "measured", "not measured"


@dataclass(frozen=True)
class Coverage:
    release: str
    state: str                                  # MEASURED or NOT_MEASURED
    records: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"release": self.release, "state": self.state, "records": self.records}

    def line(self) -> str:
        return f"{self.release}: {self.state}" + (f" ({', '.join(self.records)})" if self.records else "")


def cited_ids(recipe: Recipe) -> list[str]:
    """The record ids the recipe's target cites (its file's target entry over `defaults`)."""
    if recipe.path is None:
        return []
    data = load_yaml(recipe.path)
    if not isinstance(data, dict):
        return []
    target = (data.get("targets") or {}).get(recipe.target) or {}
    values = merged(data.get("defaults") or {}, target)
    ids = values.get("evidence") if isinstance(values, dict) else None
    return [str(i) for i in ids] if isinstance(ids, list) else []


def record_releases(results: Path = RESULTS_DIR) -> dict[str, str | None]:
    """Each record's id -> the vLLM release it was measured on (None where it names none).
    Every record is read and validated: a report reads them once and looks each recipe up here."""
    return {record_id: record.vllm for record_id, record in load_records(results).items()}


def coverage(recipe: Recipe, release: str, results: Path = RESULTS_DIR) -> Coverage:
    return coverage_of(cited_ids(recipe), release, results)


def coverage_of(ids: list[str], release: str, results: Path = RESULTS_DIR) -> Coverage:
    return coverage_in(ids, release, record_releases(results))


def coverage_in(ids: list[str], release: str, releases: Mapping[str, str | None]) -> Coverage:
    """coverage_of over the records' releases already read (record_releases)."""
    measured = [i for i in ids if releases.get(i) == str(release)]
    return Coverage(str(release), MEASURED if measured else NOT_MEASURED, measured)


def missing_records(ids: list[str], results: Path = RESULTS_DIR) -> list[str]:
    """Cited ids with no record (or one naming no vLLM release)."""
    return missing_in(ids, record_releases(results))


def missing_in(ids: list[str], releases: Mapping[str, str | None]) -> list[str]:
    """missing_records over the records' releases already read (record_releases)."""
    return [i for i in ids if releases.get(i) is None]


def records_of(kind: str, release: str, results: Path = RESULTS_DIR) -> list[Record]:
    """Every record of `kind` measured on `release` (e.g. the drift checks run against it), in
    id order."""
    return [r for _, r in sorted(load_records(results).items())
            if r.kind == kind and r.vllm == str(release)]
