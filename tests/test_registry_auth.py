"""The bearer-token flow that Docker Hub and GHCR use, against a real HTTP server on 127.0.0.1
that challenges like they do: 401 + WWW-Authenticate, a token endpoint, then the manifest."""
import base64
import http.server
import json

import pytest

from forge import http_session
from forge.errors import ForgeError
from forge.images.registry import manifest_digest
from forge.images.retag import move_tag
from tests.loopback import serve_in_background

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def token_registry(monkeypatch):
    seen = {"token_requests": [], "token_posts": [], "manifest_auth": [], "realm": None}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self):
            if self.path.startswith("/token"):
                seen["token_requests"].append((self.path, self.headers.get("Authorization")))
                if seen.get("refuse_tokens"):  # as Docker Hub and GHCR answer a wrong password
                    return self._reply(401, b'{"details":"incorrect username or password"}')
                return self._reply(200, json.dumps({"token": "t0k"}).encode())
            return self.do_HEAD()

        def do_POST(self):
            from urllib.parse import parse_qs

            length = int(self.headers.get("Content-Length", 0))
            seen["token_posts"].append(parse_qs(self.rfile.read(length).decode()))
            return self._reply(200, json.dumps({"access_token": "t0k"}).encode())

        def do_HEAD(self):
            auth = self.headers.get("Authorization")
            seen["manifest_auth"].append(auth)
            if auth != "Bearer t0k":
                realm = seen["realm"] or f"http://127.0.0.1:{self.server.server_port}/token"
                challenge = (f'Bearer realm="{realm}",service="registry.test",'
                             f'scope="repository:acme/forge:pull"')
                return self._reply(401, headers=[("WWW-Authenticate", challenge)])
            if self.path.endswith("/missing"):
                return self._reply(404)
            return self._reply(200, headers=[("Docker-Content-Digest", DIGEST)])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_background(server)
    monkeypatch.setenv("VLLM_FORGE_REGISTRY_USER", "robot")
    monkeypatch.setenv("VLLM_FORGE_REGISTRY_TOKEN", "secret")
    yield f"127.0.0.1:{server.server_port}", seen
    server.shutdown()


def test_challenge_is_answered_with_a_scoped_token(token_registry):
    host, seen = token_registry
    assert manifest_digest(f"{host}/acme/forge:v1") == DIGEST
    assert seen["manifest_auth"] == [None, "Bearer t0k"]
    (path, basic), = seen["token_requests"]
    assert "service=registry.test" in path and "scope=repository%3Aacme%2Fforge%3Apull" in path
    assert basic == "Basic " + base64.b64encode(b"robot:secret").decode()


def test_missing_tag_after_the_challenge_is_none(token_registry):
    host, _ = token_registry
    assert manifest_digest(f"{host}/acme/forge:missing") is None


def test_token_server_refusing_the_password_names_user_and_source(token_registry):
    host, seen = token_registry
    seen["refuse_tokens"] = True
    with pytest.raises(ForgeError) as failure:
        manifest_digest(f"{host}/acme/forge:v1")
    assert str(failure.value) == (
        f"registry {host}'s token server http://{host}/token refused (HTTP 401) for user 'robot' "
        f"(credentials from $VLLM_FORGE_REGISTRY_USER/$VLLM_FORGE_REGISTRY_TOKEN)")


def test_token_endpoint_down_is_a_one_line_error(token_registry, monkeypatch):
    host, seen = token_registry
    monkeypatch.setattr(http_session, "BACKOFF_S", 0)  # refused connections are retried: no waits
    seen["realm"] = "http://127.0.0.1:9/token"  # the challenge names a token server nobody runs
    with pytest.raises(ForgeError) as failure:
        manifest_digest(f"{host}/acme/forge:v1")
    assert "cannot get a registry token from http://127.0.0.1:9/token" in str(failure.value)
    assert "\n" not in str(failure.value)


# --- the user's Docker credentials against the real registry with authentication on -----------

USER, PASSWORD = "robot", "s3cret"
REPOSITORY = "acme/app"


def _bcrypt(password: str) -> str:
    """An htpasswd line's hash: the registry accepts bcrypt only (glibc's crypt makes it)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # crypt: deprecated, not yet removed
        import crypt
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))  # cost 4: fast


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory):
    """Debian's docker-registry with htpasswd authentication (Basic challenges), one image in it."""
    from tests.fixtures_docker import start_registry

    root = tmp_path_factory.mktemp("auth-registry")
    (root / "htpasswd").write_text(f"{USER}:{_bcrypt(PASSWORD)}\n")
    registry = start_registry(auth={"htpasswd": {"realm": "forge-test", "path": str(root / "htpasswd")}})
    digest = _upload_image(registry.host, (USER, PASSWORD), REPOSITORY, "v1")
    yield registry.host, digest
    registry.stop()


def _upload_image(host: str, auth, repository: str, tag: str) -> str:
    """Put a one-layer image into the registry through its HTTP API; returns the manifest digest."""
    import hashlib
    import os

    import requests

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        started = requests.post(f"http://{host}/v2/{repository}/blobs/uploads/", auth=auth, timeout=10)
        assert started.status_code == 202, started.text
        location = started.headers["Location"]
        done = requests.put(location, params={"digest": digest}, data=data, auth=auth, timeout=10,
                            headers={"Content-Type": "application/octet-stream"})
        assert done.status_code == 201, done.text
        return {"digest": digest, "size": len(data)}

    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **blob(config)},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    **blob(os.urandom(4096))}]}).encode()
    stored = requests.put(f"http://{host}/v2/{repository}/manifests/{tag}", data=manifest, auth=auth,
                          headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"},
                          timeout=10)
    assert stored.status_code == 201, stored.text
    return stored.headers["Docker-Content-Digest"]


@pytest.fixture
def docker_config(tmp_path, monkeypatch):
    """A fresh $DOCKER_CONFIG the test fills in; CI's environment credentials out of the way."""
    monkeypatch.delenv("VLLM_FORGE_REGISTRY_USER", raising=False)
    monkeypatch.delenv("VLLM_FORGE_REGISTRY_TOKEN", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    (tmp_path / "docker").mkdir()

    def write(config: dict):
        (tmp_path / "docker" / "config.json").write_text(json.dumps(config))
        return tmp_path / "docker" / "config.json"
    return write


@pytest.fixture
def credential_helper(tmp_path, monkeypatch):
    """docker-credential-forgetest, a real executable on PATH speaking the helper protocol
    (`get`, server URL on stdin, JSON out) for the auth registry; it logs every call."""
    import os
    import stat
    import sys

    bin_dir, calls = tmp_path / "bin", tmp_path / "helper-calls.log"
    bin_dir.mkdir()
    script = bin_dir / "docker-credential-forgetest"
    script.write_text(f"""#!{sys.executable}
import json, sys
server = sys.stdin.read().strip()
with open({str(calls)!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + " " + server + "\\n")
secrets = json.load(open({str(tmp_path / "helper-secrets.json")!r}))
if sys.argv[1] != "get" or server not in secrets:
    print("credentials not found in native keychain")
    sys.exit(1)
print(json.dumps({{"ServerURL": server, "Username": secrets[server][0], "Secret": secrets[server][1]}}))
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def store(server: str, username: str, secret: str):
        (tmp_path / "helper-secrets.json").write_text(json.dumps({server: [username, secret]}))
        return calls
    return store


@pytest.mark.parametrize("config_key", ["credHelpers", "credsStore"])
def test_credential_helper_on_path_answers_the_registry(auth_registry, docker_config,
                                                        credential_helper, config_key):
    host, digest = auth_registry
    calls = credential_helper(host, USER, PASSWORD)
    docker_config({"credHelpers": {host: "forgetest"}} if config_key == "credHelpers"
                  else {"credsStore": "forgetest", "auths": {host: {}}})
    assert manifest_digest(f"{host}/{REPOSITORY}:v1") == digest          # the immutable-tag check
    assert manifest_digest(f"{host}/{REPOSITORY}:absent") is None
    move_tag(f"{host}/{REPOSITORY}:moving-{config_key.lower()}", digest)  # the retag, a PUT
    assert manifest_digest(f"{host}/{REPOSITORY}:moving-{config_key.lower()}") == digest
    # One client per registry: the helper is asked once, however many requests follow.
    assert calls.read_text().splitlines() == [f"get {host}"]


def test_plain_auths_entry_answers_the_registry(auth_registry, docker_config):
    host, digest = auth_registry
    docker_config({"auths": {host: {"auth": base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}}})
    assert manifest_digest(f"{host}/{REPOSITORY}:v1") == digest
    move_tag(f"{host}/{REPOSITORY}:moving-auths", digest)
    assert manifest_digest(f"{host}/{REPOSITORY}:moving-auths") == digest


def test_wrong_password_is_a_one_line_error_naming_user_and_source(auth_registry, docker_config):
    host, _ = auth_registry
    config = docker_config({"auths": {host: {"auth": base64.b64encode(f"{USER}:wrong".encode()).decode()}}})
    with pytest.raises(ForgeError) as failure:
        manifest_digest(f"{host}/{REPOSITORY}:v1")
    assert str(failure.value) == (f"registry {host} denied reading {host}/{REPOSITORY}:v1 (HTTP 401) "
                                  f"for user 'robot' (credentials from {config} auths)")


def test_no_credentials_says_to_log_in(auth_registry, docker_config):
    host, _ = auth_registry
    docker_config({"auths": {}})
    with pytest.raises(ForgeError) as failure:
        manifest_digest(f"{host}/{REPOSITORY}:v1")
    assert f"needs credentials for reading {host}/{REPOSITORY}:v1: run `docker login {host}`" \
        in str(failure.value)


@pytest.mark.parametrize("config, cause", [
    ({"credHelpers": {"HOST": "nothere"}}, "credential helper docker-credential-nothere failed"),
    ({"auths": {"HOST": {"auth": "not base64!"}}}, "cannot read the Docker credentials"),
])
def test_broken_credentials_are_one_line_errors_naming_the_config(auth_registry, docker_config,
                                                                  config, cause):
    host, _ = auth_registry
    path = docker_config(json.loads(json.dumps(config).replace("HOST", host)))
    with pytest.raises(ForgeError) as failure:
        manifest_digest(f"{host}/{REPOSITORY}:v1")
    message = str(failure.value)
    assert message.startswith(f"{path}: {cause}") and "\n" not in message, message


# --- transient failures and reused connections, against a real flaky server on 127.0.0.1 -------

@pytest.fixture
def flaky_registry():
    """Answers each manifest HEAD with the next status of `plan["statuses"]` (then 200), over
    HTTP/1.1 keep-alive; records the client port of every request (one port: one connection)."""
    plan = {"statuses": [], "ports": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_HEAD(self):
            plan["ports"].append(self.client_address[1])
            status = plan["statuses"].pop(0) if plan["statuses"] else 200
            self.send_response(status)
            if status == 200:
                self.send_header("Docker-Content-Digest", DIGEST)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_background(server)
    yield f"127.0.0.1:{server.server_port}", plan
    server.shutdown()


def test_transient_failures_are_retried_on_one_reused_connection(flaky_registry):
    host, plan = flaky_registry
    plan["statuses"] = [503, 502]
    assert manifest_digest(f"{host}/acme/forge:v1") == DIGEST
    assert len(plan["ports"]) == 3, "two failures, then the answer"
    plan["statuses"] = [429]
    assert manifest_digest(f"{host}/acme/forge:v2") == DIGEST
    assert len(plan["ports"]) == 5 and len(set(plan["ports"])) == 1, plan["ports"]


def test_retries_are_bounded_and_the_last_status_is_reported(flaky_registry, monkeypatch):
    host, plan = flaky_registry
    monkeypatch.setattr(http_session, "BACKOFF_S", 0)
    plan["statuses"] = [503] * 10
    with pytest.raises(ForgeError) as failure:
        manifest_digest(f"{host}/acme/forge:v1")
    assert str(failure.value) == f"registry {host} answered HTTP 503 for {host}/acme/forge:v1"
    assert len(plan["ports"]) == 1 + http_session.RETRIES


def test_identity_token_is_exchanged_through_oauth2(token_registry, docker_config):
    """`docker login` to registries with OAuth2 (Azure ACR and alike) stores an identity token:
    it is sent as a refresh token to the realm, whose access token then reads the manifest."""
    host, seen = token_registry
    docker_config({"auths": {host: {"identitytoken": "refresh-me"}}})
    assert manifest_digest(f"{host}/acme/forge:v1") == DIGEST
    (form,) = seen["token_posts"]
    assert form["grant_type"] == ["refresh_token"] and form["refresh_token"] == ["refresh-me"]
    assert form["scope"] == ["repository:acme/forge:pull"] and form["service"] == ["registry.test"]


def test_a_refused_connection_is_tried_once_more_at_once_and_named(monkeypatch):
    """Nothing listens at 127.0.0.1:9: forge's session connects twice (CONNECT_RETRIES) and does
    not wait between (BACKOFF_S as shipped), then the caller's one-line error names the host.
    urllib3's own connect and sleep are watched, not replaced."""
    import time

    from urllib3.util import connection

    attempts, waits = [], []
    real_connect, real_sleep = connection.create_connection, time.sleep

    def connect(address, *args, **kwargs):
        attempts.append(address)
        return real_connect(address, *args, **kwargs)

    def sleep(seconds):
        waits.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(connection, "create_connection", connect)
    monkeypatch.setattr(time, "sleep", sleep)
    with pytest.raises(ForgeError) as failure:
        manifest_digest("127.0.0.1:9/acme/forge:v1")
    assert attempts == [("127.0.0.1", 9)] * (1 + http_session.CONNECT_RETRIES)
    assert [w for w in waits if w > 0] == []
    assert "127.0.0.1:9" in str(failure.value) and "\n" not in str(failure.value)
