"""The patching layer's JSON files as typed models (forge.typed): exactly what each writer writes
loads, and nothing else.

    <cache>/requirements/X.json            RequirementLines  forge.patching.dependencies
    <cache>/patch-status/<key>/X.json      PatchStatuses     forge.patching.status
    build/patch-work/<id>/patch-work.json  WorkState         forge.patching.work_tree.create
    build/patch-work/<id>/finish.json      Journal           forge.patching.journal.write_all

A cache entry the model refuses is damaged (computed again); a work tree's file it refuses is
refused in one line naming the file and the field. Imported only where a file is read."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, RootModel

from forge.patching.series import patch_id_problem
from forge.patching.vocabulary import Kind, Status
from forge.typed import MAX_ITEMS, STRICT, STRICT_ROOT, Name, Text, VersionText, one_of


def _patch_id(text: str) -> str:
    problem = patch_id_problem(text)
    if problem:
        raise ValueError(problem)
    return text


# A patch id as patches/series.yaml has one (series.patch_id_problem).
PatchId = Annotated[str, AfterValidator(_patch_id)]


class RequirementLines(RootModel[Annotated[list[Name], Field(max_length=MAX_ITEMS)]]):
    """The requirement lines of a release's requirements/cuda.txt, includes followed."""
    model_config = STRICT_ROOT


class StatusEntry(BaseModel):
    """One PatchStatus as its to_dict writes it."""
    model_config = STRICT
    id: PatchId
    kind: Annotated[str, one_of(tuple(str(k) for k in Kind))]
    status: Annotated[str, one_of(tuple(str(s) for s in Status))]
    detail: Text


class PatchStatuses(RootModel[Annotated[list[StatusEntry], Field(max_length=10_000)]]):
    """A release's statuses (the series has tens of patches; 10,000 is far past any)."""
    model_config = STRICT_ROOT


class WorkState(BaseModel):
    """Which command made a work tree, for which patch and release."""
    model_config = STRICT
    id: PatchId
    vllm: VersionText
    command: Literal["new-patch", "refresh-patch"]


# A finish writes a diff and the manifest (and the diff's headers): a handful of files; the
# contents are bounded by the journal's own cap (forge.files.INDEX).
class Journal(RootModel[Annotated[dict[Annotated[Name, Field(min_length=1)], str], Field(max_length=1_000)]]):
    """path -> the new contents (UTF-8 with surrogate escapes), in the order to write them."""
    model_config = STRICT_ROOT
