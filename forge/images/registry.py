"""The container registry HTTP API (distribution spec v2), just what forge needs: the digest a tag
points to, manifests, config blobs (and, in forge.images.retag, putting a manifest under a tag).

Credentials are the user's Docker ones, found as the Docker CLI finds them (`docker login` works):
credential helpers (`credHelpers`, `credsStore`) and `auths` of ~/.docker/config.json
($DOCKER_CONFIG), or $VLLM_FORGE_REGISTRY_USER / $VLLM_FORGE_REGISTRY_TOKEN before them (CI). They
answer a registry's Basic or Bearer challenge (anonymous bearer tokens for public images). One
client per registry keeps one session: connections are reused and transient failures retried
(forge.http_session).

Loopback registries (127.0.0.0/8, localhost, ::1) speak plain http, as the Docker engine allows;
add others to $VLLM_FORGE_INSECURE_REGISTRIES (comma-separated host[:port]).
"""
from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass

from forge.data_formats import load_json
from forge.errors import ForgeError
from forge.files import CACHE
from forge.http_session import retrying_session

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


@dataclass(frozen=True)
class Credentials:
    """What the user logged in with for one registry, and where it was found (for messages)."""
    username: str
    password: str = ""
    identity_token: str = ""     # an OAuth2 refresh token (`docker login` to Azure ACR and alike)
    source: str = ""


def registry_credentials(registry: str) -> Credentials | None:
    """The credentials the Docker CLI would use for `registry` (a host as in references; docker.io
    for Docker Hub): $VLLM_FORGE_REGISTRY_USER + $VLLM_FORGE_REGISTRY_TOKEN first, then the Docker
    config ($DOCKER_CONFIG/config.json or ~/.docker/config.json): its `credHelpers` entry for the
    host, its `credsStore`, then its `auths` entry. None when there are none."""
    user = os.environ.get("VLLM_FORGE_REGISTRY_USER")
    token = os.environ.get("VLLM_FORGE_REGISTRY_TOKEN")
    if user and token:
        return Credentials(user, token, source="$VLLM_FORGE_REGISTRY_USER/$VLLM_FORGE_REGISTRY_TOKEN")
    import docker.auth
    import docker.errors
    from docker.utils.config import find_config_file

    config_file = find_config_file()
    if not config_file:
        return None
    try:
        config = docker.auth.load_config(config_dict=load_json(config_file, CACHE))
        helper = config.get_credential_store(registry)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK warns of a missing helper, then raises: one says it
            entry = config.resolve_authconfig(registry)
    except ForgeError as exc:            # no regular file, too big, not JSON: one line already
        raise ForgeError(f"{exc}; cannot read the Docker credentials for {registry}") from exc
    except (OSError, ValueError) as exc:  # an `auth` that is not base64
        raise ForgeError(f"{config_file}: cannot read the Docker credentials for {registry}: "
                         f"{_short(exc)}") from exc
    except docker.errors.DockerException as exc:  # a credential helper missing or failing
        raise ForgeError(f"{config_file}: credential helper docker-credential-{helper} failed "
                         f"for {registry}: {_short(exc.__cause__ or exc)}") from exc
    if not entry:
        return None
    # A helper's answer carries ServerAddress and capitalised keys; an `auths` entry does not.
    source = (f"credential helper docker-credential-{helper}" if "ServerAddress" in entry
              else f"{config_file} auths")
    username = entry.get("Username") or entry.get("username") or ""
    password = entry.get("Password") or entry.get("password") or ""
    identity_token = entry.get("IdentityToken") or ""
    if not (password or identity_token):
        return None  # an empty `auths` entry: docker login keeps the secret in a store
    return Credentials(username, password, identity_token, source)


class RegistryUnreachable(ForgeError):
    """No answer from the registry at all (DNS, connection, TLS, timeout): not a refusal."""


def registry_name(registry: str) -> str:
    """A registry host as users know it: Docker Hub for docker.io."""
    return f"Docker Hub ({DOCKER_HUB_API})" if registry == DOCKER_HUB else registry


class RegistryClient:
    """The API of one registry: one retrying session whose connections are reused for every call,
    the user's credentials (looked up once, when the registry first asks for them), and the bearer
    tokens it granted, per scope."""

    def __init__(self, registry: str):
        self.registry = registry
        api_host = DOCKER_HUB_API if registry == DOCKER_HUB else registry
        self.base_url = f"{_scheme(api_host)}://{api_host}/v2/"
        self.session = retrying_session()
        self._credentials: Credentials | None = None
        self._looked_up = False
        self._basic = False                    # the registry asked for Basic auth: send it always
        self._tokens: dict[str, str] = {}      # scope -> bearer token

    def credentials(self) -> Credentials | None:
        if not self._looked_up:
            self._credentials = registry_credentials(self.registry)
            self._looked_up = True
        return self._credentials

    def request(self, method: str, path: str, doing: str, scope: str, headers: dict | None = None,
                **kwargs):
        """`method` on /v2/`path`, authorised for `scope` (repository:NAME:ACTIONS) as the registry
        asks. ForgeError (one line, saying `doing`) when it cannot be reached or refuses us."""
        import requests

        headers = dict(headers or {})
        try:
            response = self._send(method, path, headers, scope, **kwargs)
            if response.status_code == 401:
                self._answer_challenge(response.headers.get("WWW-Authenticate", ""), scope, doing)
                response = self._send(method, path, headers, scope, **kwargs)
        except requests.RequestException as exc:
            raise RegistryUnreachable(f"registry {self.registry} unreachable while {doing}: "
                                      f"{_short(exc)}") from exc
        if response.status_code in (401, 403):
            raise ForgeError(f"registry {self.registry} denied {doing} (HTTP {response.status_code})"
                             f"{self._who()}")
        return response

    def _send(self, method: str, path: str, headers: dict, scope: str, **kwargs):
        if scope in self._tokens:
            headers["Authorization"] = f"Bearer {self._tokens[scope]}"
        credentials = self.credentials() if self._basic else None
        auth = (credentials.username, credentials.password) if credentials else None
        return self.session.request(method, self.base_url + path, headers=headers, auth=auth,
                                    timeout=TIMEOUT_S, **kwargs)

    def _answer_challenge(self, challenge: str, scope: str, doing: str) -> None:
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if not self.credentials():
                raise ForgeError(f"registry {self.registry} needs credentials for {doing}: run "
                                 f"`docker login {self.registry}` (or set $VLLM_FORGE_REGISTRY_USER "
                                 f"and $VLLM_FORGE_REGISTRY_TOKEN)")
            self._basic = True
        elif scheme == "bearer":
            fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            if "realm" in fields:
                self._tokens[scope] = self._bearer_token(fields, scope)

    def _bearer_token(self, fields: dict, scope: str) -> str:
        """A token from the challenge's realm: OAuth2 with an identity token, else a GET with the
        user's password (or anonymous, as public images on Docker Hub and GHCR allow)."""
        import requests

        realm, credentials = fields["realm"], self.credentials()
        params = {name: value for name, value in (("service", fields.get("service")),
                                                  ("scope", fields.get("scope", scope))) if value}
        try:
            if credentials and credentials.identity_token:
                response = self.session.post(realm, timeout=TIMEOUT_S, data={
                    **params, "grant_type": "refresh_token", "client_id": "vllm-forge",
                    "refresh_token": credentials.identity_token})
            else:
                auth = (credentials.username, credentials.password) if credentials else None
                response = self.session.get(realm, params=params, auth=auth, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            raise ForgeError(f"cannot get a registry token from {realm}: {_short(exc)}") from exc
        if response.status_code in (401, 403):
            raise ForgeError(f"registry {self.registry}'s token server {realm} refused "
                             f"(HTTP {response.status_code}){self._who()}")
        if response.status_code != 200:
            raise ForgeError(f"cannot get a registry token from {realm}: HTTP {response.status_code}")
        try:
            body = response.json()
            return body.get("token") or body["access_token"]
        except (ValueError, KeyError, AttributeError) as exc:
            raise ForgeError(f"cannot get a registry token from {realm}: no token in its answer") from exc

    def _who(self) -> str:
        credentials = self._credentials
        if credentials is None:
            return f"; no credentials for it: run `docker login {self.registry}`"
        return f" for user {credentials.username!r} (credentials from {credentials.source})"


_CLIENTS: dict[tuple, RegistryClient] = {}


def client_for(registry: str) -> RegistryClient:
    """The one client per registry in this process. The environment that decides credentials and
    scheme is part of the key: a change of $DOCKER_CONFIG gets a client that reads the new one."""
    key = (registry, *(os.environ.get(name) for name in (
        "DOCKER_CONFIG", "VLLM_FORGE_REGISTRY_USER", "VLLM_FORGE_REGISTRY_TOKEN",
        "VLLM_FORGE_INSECURE_REGISTRIES", "REQUESTS_CA_BUNDLE")))
    if key not in _CLIENTS:
        _CLIENTS[key] = RegistryClient(registry)
    return _CLIENTS[key]


def pull_scope(reference: Reference) -> str:
    return f"repository:{reference.repository}:pull"


def _get_manifest(reference: Reference, what: str, method: str = "HEAD"):
    """HEAD or GET /v2/<repo>/manifests/<what> (a tag or digest); the response (200 or 404)."""
    client = client_for(reference.registry)
    path, doing = f"{reference.repository}/manifests/{what}", f"reading {reference.name}:{what}"
    headers = {"Accept": MANIFEST_TYPES}
    response = client.request(method, path, doing, pull_scope(reference), headers)
    if method == "HEAD" and response.status_code == 200 and \
            not response.headers.get("Docker-Content-Digest"):
        # Some registries answer HEAD without the digest: hash the manifest bytes ourselves.
        response = client.request("GET", path, doing, pull_scope(reference), headers)
        response.headers["Docker-Content-Digest"] = _sha256_digest(response.content)
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
    from forge.data_formats import parse_json
    from forge.images.registry_answers import Manifest

    manifest = _answer(Manifest, _verified_manifest(reference, offered[platform]), reference, offered[platform])
    source = _source(reference, offered[platform])
    if manifest.config is None:
        raise ForgeError(f"{source}: config: required field is missing (an image manifest names its config)")
    config = parse_json(_blob(reference, manifest.config.digest), _source(reference, manifest.config.digest))
    if not isinstance(config, dict):
        raise ForgeError(f"{source}: its config blob is no JSON object")
    return config


def manifest_platforms(ref: str | Reference, digest: str) -> list[str]:
    """The os/arch platforms the manifest `digest` of `ref`'s repository offers, sorted."""
    reference = ref if isinstance(ref, Reference) else parse_reference(ref)
    return sorted(_platform_entries(reference, digest))


def _platform_entries(reference: Reference, digest: str) -> dict[str, str]:
    """platform -> image manifest digest, for an index (its entries; attestation entries, whose
    platform is unknown/unknown, left out) or a single image (read from its config blob)."""
    from forge.images.registry_answers import ImageConfig, Manifest

    manifest = _answer(Manifest, _verified_manifest(reference, digest), reference, digest)
    if manifest.manifests is None:
        if manifest.config is None:
            return {"unknown/unknown": digest}
        config_digest = manifest.config.digest
        image = _answer(ImageConfig, _blob(reference, config_digest), reference, config_digest)
        return {f"{image.os}/{image.architecture}": digest}
    offered: dict[str, str] = {}
    for entry in manifest.manifests:
        name = f"{entry.platform.os}/{entry.platform.architecture}"
        if "unknown" not in name:
            offered.setdefault(name, entry.digest)
    return offered


def _answer(model, content: bytes, reference: Reference, digest: str):
    """The registry's JSON answer for `digest` as `model`, or one line naming the registry, the
    manifest or blob and the field (forge/images/registry_answers.py)."""
    from forge.data_formats import parse_json
    from forge.typed import loaded

    source = _source(reference, digest)
    return loaded(model, parse_json(content, source), source)


def _source(reference: Reference, digest: str) -> str:
    """How a refusal names a registry's manifest or blob."""
    return f"registry {reference.registry} {reference.name}@{digest}"


def _verified_manifest(reference: Reference, digest: str) -> bytes:
    response = _get_manifest(reference, digest, method="GET")
    if response.status_code == 404:
        raise ForgeError(f"registry {reference.registry} has no manifest {reference.name}@{digest}")
    if _sha256_digest(response.content) != digest:
        raise ForgeError(f"registry {reference.registry} served {reference.name}@{digest} with other content")
    return response.content


def _blob(reference: Reference, digest: str) -> bytes:
    response = client_for(reference.registry).request(
        "GET", f"{reference.repository}/blobs/{digest}", f"reading {reference.name}@{digest}",
        pull_scope(reference))
    if response.status_code != 200 or _sha256_digest(response.content) != digest:
        raise ForgeError(f"registry {reference.registry} did not serve blob {reference.name}@{digest} "
                         f"(HTTP {response.status_code})")
    return response.content


def _sha256_digest(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def _short(exc: Exception) -> str:
    # requests' connection errors nest several reprs; the innermost reason is what users need.
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\] [^'\"\)]+", text)
    return match.group(0) if match else text.splitlines()[0][:200]
