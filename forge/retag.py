"""Point a tag at an existing manifest by digest, through the registry HTTP API (distribution v2).

The manifest's exact bytes are fetched by digest and PUT under the new tag, so the tag names the
very digest that was verified and signed; tools that re-wrap a single image in a new index would
give the moving tag a digest of its own. Credentials and bearer tokens as in forge.registry
($VLLM_FORGE_REGISTRY_USER / $VLLM_FORGE_REGISTRY_TOKEN; loopback registries speak plain http).
"""
from __future__ import annotations

from forge.errors import ForgeError
from forge.registry import MANIFEST_TYPES, _scheme, authorized_request, parse_reference


def move_tag(target_ref: str, digest: str) -> None:
    """Make `target_ref` (registry/repo:tag) point at `digest` in the same repository."""
    import requests

    reference = parse_reference(target_ref)
    base = f"{_scheme(reference.api_host)}://{reference.api_host}/v2/{reference.repository}/manifests"
    with requests.Session() as session:
        try:
            manifest = authorized_request(session, "GET", f"{base}/{digest}",
                                          {"Accept": MANIFEST_TYPES})
            if manifest.status_code != 200:
                raise ForgeError(f"registry {reference.registry} has no manifest {digest} in "
                                 f"{reference.name} (HTTP {manifest.status_code})")
            stored = authorized_request(session, "PUT", f"{base}/{reference.tag}",
                                        {"Content-Type": manifest.headers["Content-Type"]},
                                        data=manifest.content)
        except requests.RequestException as exc:
            raise ForgeError(f"registry {reference.registry} unreachable while moving "
                             f"{reference}: {exc}") from exc
    if stored.status_code not in (200, 201):
        raise ForgeError(f"registry {reference.registry} refused to move {reference} to {digest} "
                         f"(HTTP {stored.status_code}: {stored.text[:200].strip()})")
    moved_to = stored.headers.get("Docker-Content-Digest")
    if moved_to and moved_to != digest:
        raise ForgeError(f"registry {reference.registry} stored {reference} as {moved_to}, not {digest}")
