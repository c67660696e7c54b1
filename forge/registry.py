"""The container registry HTTP API (distribution spec v2), just what forge needs: the digest a tag
points to. Anonymous bearer tokens (Docker Hub, GHCR public images) are fetched when a registry asks
for them; $VLLM_FORGE_REGISTRY_USER / $VLLM_FORGE_REGISTRY_TOKEN give credentials where needed.

Loopback registries (127.0.0.0/8, localhost, ::1) speak plain http, as the Docker engine allows;
add others to $VLLM_FORGE_INSECURE_REGISTRIES (comma-separated host[:port]).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from forge.errors import ForgeError

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
TIMEOUT_S = 30


@dataclass(frozen=True)
class Reference:
    """A parsed image reference: registry host, repository path, tag."""
    registry: str
    repository: str
    tag: str

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def name(self) -> str:
        """The repository as the engine spells it (docker.io names stay short)."""
        if self.registry == DOCKER_HUB:
            return self.repository.removeprefix("library/")
        return f"{self.registry}/{self.repository}"

    def __str__(self) -> str:
        return f"{self.name}:{self.tag}"


def parse_reference(ref: str) -> Reference:
    """Split `[registry/]repo[:tag]` the way the Docker engine does (first part with '.', ':' or
    'localhost' is a registry; otherwise Docker Hub, with `library/` for one-part names)."""
    if "@" in ref:
        raise ForgeError(f"expected a tag reference, got a digest reference: {ref}")
    name, tag = ref, "latest"
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = ref.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name if "/" in name else f"library/{name}"
    if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", repository):
        raise ForgeError(f"not a valid image repository: {ref}")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag):
        raise ForgeError(f"not a valid image tag: {ref}")
    return Reference(registry, repository, tag)


def _scheme(host: str) -> str:
    hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    insecure = {h.strip() for h in os.environ.get("VLLM_FORGE_INSECURE_REGISTRIES", "").split(",")}
    loopback = hostname in ("localhost", "[::1]") or hostname.startswith("127.")
    return "http" if loopback or host in insecure else "https"


def _credentials():
    user = os.environ.get("VLLM_FORGE_REGISTRY_USER")
    token = os.environ.get("VLLM_FORGE_REGISTRY_TOKEN")
    return (user, token) if user and token else None


def _bearer_token(challenge: str, session) -> str | None:
    """Answer a `WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge."""
    import requests

    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if not challenge.lower().startswith("bearer") or "realm" not in fields:
        return None
    params = {k: v for k, v in fields.items() if k in ("service", "scope")}
    try:
        response = session.get(fields["realm"], params=params, auth=_credentials(), timeout=TIMEOUT_S)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise ForgeError(f"cannot get a registry token from {fields['realm']}: {exc}") from exc
    body = response.json()
    return body.get("token") or body.get("access_token")


def authorized_request(session, method: str, url: str, headers: dict, **kwargs):
    """One registry API request; a 401 bearer challenge is answered once with a token."""
    response = session.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)
    if response.status_code == 401:
        token = _bearer_token(response.headers.get("WWW-Authenticate", ""), session)
        if token:
            headers = {**headers, "Authorization": f"Bearer {token}"}
            response = session.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)
    return response


def _get_manifest(reference: Reference, what: str, method: str = "HEAD"):
    """HEAD or GET /v2/<repo>/manifests/<what> (a tag or digest), answering a bearer challenge."""
    import requests

    url = (f"{_scheme(reference.api_host)}://{reference.api_host}/v2/"
           f"{reference.repository}/manifests/{what}")
    headers = {"Accept": MANIFEST_TYPES}
    with requests.Session() as session:
        try:
            response = authorized_request(session, method, url, headers)
            if method == "HEAD" and response.status_code == 200 and \
                    not response.headers.get("Docker-Content-Digest"):
                # Some registries answer HEAD without the digest: hash the manifest bytes ourselves.
                response = authorized_request(session, "GET", url, headers)
                response.headers["Docker-Content-Digest"] = _sha256_digest(response.content)
        except requests.RequestException as exc:
            raise ForgeError(f"registry {reference.registry} unreachable while reading "
                             f"{reference.name}:{what}: {_short(exc)}") from exc
    if response.status_code not in (200, 404):
        raise ForgeError(f"registry {reference.registry} answered HTTP {response.status_code} "
                         f"for {reference.name}:{what}")
    return response


def manifest_digest(ref: str | Reference) -> str | None:
    """The digest `ref` points to now (an index digest for multi-platform tags), or None when the
    registry has no such tag. ForgeError when the registry cannot be reached or refuses us."""
    reference = ref if isinstance(ref, Reference) else parse_reference(ref)
    response = _get_manifest(reference, reference.tag)
    return None if response.status_code == 404 else response.headers["Docker-Content-Digest"]


def image_config(ref: str | Reference, digest: str, platform: str) -> dict | None:
    """The config blob (os, architecture, rootfs.diff_ids, config.Labels, ...) of `platform`'s image
    inside the manifest `digest` of `ref`'s repository: an index / manifest list entry, or `digest`
    itself for a single image of that platform; None when it offers no `platform` image. Manifest
    and blob bytes are checked against their digests."""
    reference = ref if isinstance(ref, Reference) else parse_reference(ref)
    offered = _platform_entries(reference, digest)
    if platform not in offered:
        return None
    manifest = _verified_manifest(reference, offered[platform])
    return _blob_json(reference, manifest["config"]["digest"])


def manifest_platforms(ref: str | Reference, digest: str) -> list[str]:
    """The os/arch platforms the manifest `digest` of `ref`'s repository offers, sorted."""
    reference = ref if isinstance(ref, Reference) else parse_reference(ref)
    return sorted(_platform_entries(reference, digest))


def _platform_entries(reference: Reference, digest: str) -> dict[str, str]:
    """platform -> image manifest digest, for an index (its entries; attestation entries, whose
    platform is unknown/unknown, left out) or a single image (read from its config blob)."""
    manifest = _verified_manifest(reference, digest)
    entries = manifest.get("manifests")
    if entries is None:
        config = manifest.get("config", {}).get("digest")
        image = _blob_json(reference, config) if config else {}
        return {f"{image.get('os', 'unknown')}/{image.get('architecture', 'unknown')}": digest}
    offered = {}
    for entry in entries:
        wanted = entry.get("platform", {})
        name = f"{wanted.get('os', 'unknown')}/{wanted.get('architecture', 'unknown')}"
        if "unknown" not in name:
            offered.setdefault(name, entry["digest"])
    return offered


def _verified_manifest(reference: Reference, digest: str) -> dict:
    import json

    response = _get_manifest(reference, digest, method="GET")
    if response.status_code == 404:
        raise ForgeError(f"registry {reference.registry} has no manifest {reference.name}@{digest}")
    if _sha256_digest(response.content) != digest:
        raise ForgeError(f"registry {reference.registry} served {reference.name}@{digest} with other content")
    return json.loads(response.content)


def _blob_json(reference: Reference, digest: str) -> dict:
    import json

    import requests

    url = (f"{_scheme(reference.api_host)}://{reference.api_host}/v2/"
           f"{reference.repository}/blobs/{digest}")
    with requests.Session() as session:
        try:
            response = authorized_request(session, "GET", url, {})
        except requests.RequestException as exc:
            raise ForgeError(f"registry {reference.registry} unreachable while reading "
                             f"{reference.name}@{digest}: {_short(exc)}") from exc
    if response.status_code != 200 or _sha256_digest(response.content) != digest:
        raise ForgeError(f"registry {reference.registry} did not serve blob {reference.name}@{digest} "
                         f"(HTTP {response.status_code})")
    return json.loads(response.content)


def _sha256_digest(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def _short(exc: Exception) -> str:
    # requests' connection errors nest several reprs; the innermost reason is what users need.
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\] [^'\"\)]+", text)
    return match.group(0) if match else text.splitlines()[0][:200]
