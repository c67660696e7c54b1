"""The drift probe's cache entry (forge.watch.probe_cache.store) as a typed model (forge.typed):
what store writes loads, and nothing else; an entry the model refuses is damaged, and the probe
is asked again. Each role's answer is the probe's (forge.watch.drift_probe.probe), kept only when
it ran to the end: works (with the head sizes) or breaks (with the error).

Imported only where an entry is read."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from forge.typed import MAX_ITEMS, STRICT, Name, Sha256, Text, VersionText


class RaisedAt(BaseModel):
    model_config = STRICT
    file: Name
    line: Annotated[int, Field(ge=0, le=10_000_000)]
    function: Name
    code: Text


class ProbeFailure(BaseModel):
    model_config = STRICT
    type: Name
    runtime_error: bool
    message: Text
    raised_at: RaisedAt | None
    traceback: Text


class ProbeAnswer(BaseModel):
    """One role's answer; the keys a probe that ran to the end writes, those of its outcome."""
    model_config = STRICT
    # In the order the probe writes them: an answer read back is written as the probe wrote it.
    config_class: Name
    renamed_at: Name | None = None          # the assistant's role only
    convertor: Name | None = None           # where the release named one before it broke
    outcome: Literal["works", "breaks"]
    head_sizes: Annotated[list[Annotated[int, Field(ge=0, le=1 << 20)]], Field(max_length=1024)] | None = None
    per_layer: bool | None = None
    release_code: Annotated[list[Name], Field(max_length=MAX_ITEMS)] | None = None
    error: ProbeFailure | None = None

    @model_validator(mode="after")
    def _as_its_outcome(self) -> ProbeAnswer:
        works = self.outcome == "works"
        if works != (self.head_sizes is not None and self.error is None):
            raise ValueError("works has head sizes and no error; breaks has an error")
        return self


class ProbeEntry(BaseModel):
    model_config = STRICT
    format: Literal[1]          # probe_cache.FORMAT: an entry of another format is asked again
    key: Sha256
    release: VersionText
    tree: Name
    transformers: Name
    # Every file of the tree the probe read (its sha256) or looked for and did not find (null).
    read: Annotated[dict[Name, Sha256 | None], Field(max_length=MAX_ITEMS)]
    models: Annotated[dict[Name, ProbeAnswer], Field(max_length=16)]
