"""Point a tag at an existing manifest by digest, through the registry HTTP API (distribution v2).

The manifest's exact bytes are fetched by digest and PUT under the new tag, so the tag names the
very digest that was verified and signed; tools that re-wrap a single image in a new index would
give the moving tag a digest of its own. Credentials, retries and the reused session are
forge.images.registry's (the user's Docker credentials; loopback registries speak plain http).
"""
from __future__ import annotations

from forge.errors import ForgeError
from forge.images.registry import MANIFEST_TYPES, client_for, parse_reference


def move_tag(target_ref: str, digest: str) -> None:
    """Make `target_ref` (registry/repo:tag) point at `digest` in the same repository."""
    reference = parse_reference(target_ref)
    client = client_for(reference.registry)
    manifests = f"{reference.repository}/manifests"
    push_scope = f"repository:{reference.repository}:pull,push"
    manifest = client.request("GET", f"{manifests}/{digest}", f"reading {reference.name}@{digest}",
                              push_scope, {"Accept": MANIFEST_TYPES})
    if manifest.status_code != 200:
        raise ForgeError(f"registry {reference.registry} has no manifest {digest} in "
                         f"{reference.name} (HTTP {manifest.status_code})")
    stored = client.request("PUT", f"{manifests}/{reference.tag}", f"moving {reference} to {digest}",
                            push_scope, {"Content-Type": manifest.headers["Content-Type"]},
                            data=manifest.content)
    if stored.status_code not in (200, 201):
        raise ForgeError(f"registry {reference.registry} refused to move {reference} to {digest} "
                         f"(HTTP {stored.status_code}: {stored.text[:200].strip()})")
    moved_to = stored.headers.get("Docker-Content-Digest")
    if moved_to and moved_to != digest:
        raise ForgeError(f"registry {reference.registry} stored {reference} as {moved_to}, not {digest}")
