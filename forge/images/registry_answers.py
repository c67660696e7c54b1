"""What `lock` and `--plan` read from a registry, as typed models (pydantic, forge/typed.py): an
OCI image index or image manifest and an image's config blob. Only the fields read are modelled,
strictly; the rest of the registry's answer is its own. A platform part (os, architecture) must be
a lowercase word as images/lock.yaml records it (forge.images.lock.PLATFORM), so a registry's answer
never writes an odd name into the lock or the terminal. The registry's bytes are hash-checked
against the digest asked for before they are read: a hostile registry serves a hostile answer
under its own digest, which is why the answer is typed too.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from forge.typed import FOREIGN

Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
# os/architecture as the lock writes them ("linux", "amd64", "arm64"); attestation entries say
# "unknown".
Word = Annotated[str, Field(pattern=r"^[a-z0-9_.]{1,64}$")]
# vLLM's index lists 2 platforms and their attestations; a few hundred is far past any real one.
MAX_ENTRIES = 1000


class Platform(BaseModel):
    model_config = FOREIGN
    os: Word = "unknown"
    architecture: Word = "unknown"


class Entry(BaseModel):
    model_config = FOREIGN
    digest: Digest
    platform: Platform = Platform()


class Descriptor(BaseModel):
    model_config = FOREIGN
    digest: Digest


class Manifest(BaseModel):
    """An image index (its `manifests`) or a single image's manifest (its `config`)."""
    model_config = FOREIGN
    manifests: Annotated[list[Entry], Field(max_length=MAX_ENTRIES)] | None = None
    config: Descriptor | None = None


class ImageConfig(BaseModel):
    model_config = FOREIGN
    os: Word = "unknown"
    architecture: Word = "unknown"
