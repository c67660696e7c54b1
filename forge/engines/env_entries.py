"""A CPU engine environment's JSON files as typed models (forge.typed):

    cpu-engines/<env>/forge-env.json   CpuEnvMarker  forge.engines.cpu_env.marker_text (written last:
                                                     a marker the model refuses is no finished
                                                     environment, made again)
    .forge-build/resolved.json         PipReport     pip's own `install --dry-run --report`: of it,
                                                     only what is pinned from it (name, version,
                                                     sha256) is modelled

Imported only where a file is read."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from forge.typed import FOREIGN, MAX_ITEMS, STRICT, Name, Names, Sha256, VersionText


class CpuEnvMarker(BaseModel):
    model_config = STRICT
    package: Name
    version: VersionText
    wheel: Name
    sha256: Sha256
    python: Name
    versions: Annotated[dict[Name, Name], Field(max_length=16)]   # vllm, torch, transformers
    constraints: Names
    left_out: Names
    fixes: Names
    installed: Names
    pinned_by: Literal["lock", "resolution"]   # images/cpu-engines-lock.yaml, or pip on the day


class PipMetadata(BaseModel):
    model_config = FOREIGN
    name: Name
    version: VersionText


class PipArchive(BaseModel):
    model_config = FOREIGN
    hashes: Annotated[dict[Name, Name], Field(max_length=16)] = {}


class PipDownload(BaseModel):
    model_config = FOREIGN
    archive_info: PipArchive | None = None


class PipInstall(BaseModel):
    model_config = FOREIGN
    metadata: PipMetadata
    download_info: PipDownload | None = None

    @property
    def sha256(self) -> str | None:
        """The sha256 of the wheel pip chose, where its index (or pip, for a local file) gave one."""
        archive = self.download_info.archive_info if self.download_info else None
        return archive.hashes.get("sha256") if archive else None


class PipReport(BaseModel):
    model_config = FOREIGN
    install: Annotated[list[PipInstall], Field(max_length=MAX_ITEMS)]
