"""Whether a recipe's evidence covers a release: the result records its target cites
(`targets.<target>.evidence: [id, ...]`, else `defaults.evidence`) whose `versions.vllm` is that
release. A record is benchmarks/results/<id>/result.json (schema 1); the fields read here are
`id` and `versions.vllm`. A recipe that cites none is "not measured" on every release.

Only what this comparison needs is read here; the records' own loader validates them whole.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from forge import REPO_ROOT
from forge.schema import load_yaml
from forge.serving.recipes import Recipe, merged

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
RECORD_FILE = "result.json"
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


def record_release(record_id: str, results: Path = RESULTS_DIR) -> str | None:
    """The vLLM release record `record_id` was measured on; None where there is no readable record."""
    path = results / record_id / RECORD_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    versions = data.get("versions") if isinstance(data, dict) else None
    release = versions.get("vllm") if isinstance(versions, dict) else None
    return str(release) if release else None


def coverage(recipe: Recipe, release: str, results: Path = RESULTS_DIR) -> Coverage:
    return coverage_of(cited_ids(recipe), release, results)


def coverage_of(ids: list[str], release: str, results: Path = RESULTS_DIR) -> Coverage:
    measured = [i for i in ids if record_release(i, results) == str(release)]
    return Coverage(str(release), MEASURED if measured else NOT_MEASURED, measured)


def missing_records(ids: list[str], results: Path = RESULTS_DIR) -> list[str]:
    """Cited ids with no readable record (or one naming no vLLM release)."""
    return [i for i in ids if record_release(i, results) is None]


def records_of(kind: str, release: str, results: Path = RESULTS_DIR) -> list[dict]:
    """Every record of `kind` measured on `release` (e.g. the drift checks run against it), as
    written, in id order."""
    found = []
    for path in sorted(results.glob(f"*/{RECORD_FILE}")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        versions = data.get("versions") if isinstance(data, dict) else None
        if isinstance(versions, dict) and data.get("kind") == kind and str(versions.get("vllm")) == str(release):
            found.append({**data, "id": str(data.get("id") or path.parent.name)})
    return found
