"""The upstream cache entries as typed models (forge.typed): exactly what each writer writes loads,
and nothing else; an entry a model refuses is damaged, made again from the index or the sdist.

    pypi/<name>.json          PypiEntry       forge.upstream.pypi._write_cache
    index.json                ReleaseIndex    forge.upstream.releases.load_index
    tree-manifests/X.json     TreeManifest    forge.upstream.releases._manifest_entry
    envs/<env>/forge-env.json EnvMarker       forge.upstream.pyenvs._build

Imported only where an entry is read (pydantic stays off build.py's start-up path)."""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from forge.typed import MAX_ITEMS, STRICT, Name, Names, Seconds, Sha256, VersionText

# PyPI's most prolific projects publish a few thousand versions; vLLM a few hundred releases.
Versions = Annotated[list[VersionText], Field(max_length=100_000)]


class PypiEntry(BaseModel):
    model_config = STRICT
    index: Name                     # the simple index it was read from: another index's is not used
    fetched_at: Seconds
    versions: Versions


class SdistEntry(BaseModel):
    model_config = STRICT
    url: Name
    sha256: Sha256
    size: Annotated[int, Field(ge=0, le=1 << 40)] | None = None   # what the JSON index declared


class ReleaseIndex(BaseModel):
    model_config = STRICT
    fetched_at: Seconds
    index_url: Name
    releases: Annotated[dict[VersionText, SdistEntry], Field(max_length=100_000)]


class TreeManifest(BaseModel):
    model_config = STRICT
    version: VersionText
    sdist_sha256: Sha256
    files: Annotated[dict[Name, Sha256], Field(max_length=MAX_ITEMS)]


class EnvMarker(BaseModel):
    model_config = STRICT
    package: Name
    version: VersionText
    python: Name
    installed: Names                # pip freeze's lines
