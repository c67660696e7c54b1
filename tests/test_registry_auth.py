"""The bearer-token flow that Docker Hub and GHCR use, against a real HTTP server on 127.0.0.1
that challenges like they do: 401 + WWW-Authenticate, a token endpoint, then the manifest."""
import base64
import http.server
import json
import threading

import pytest

from forge.errors import ForgeError
from forge.registry import manifest_digest

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def token_registry(monkeypatch):
    seen = {"token_requests": [], "manifest_auth": [], "realm": None}

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
                return self._reply(200, json.dumps({"token": "t0k"}).encode())
            return self.do_HEAD()

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
    threading.Thread(target=server.serve_forever, daemon=True).start()
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


def test_token_endpoint_down_is_a_one_line_error(token_registry):
    host, seen = token_registry
    seen["realm"] = "http://127.0.0.1:9/token"  # the challenge names a token server nobody runs
    with pytest.raises(ForgeError) as failure:
        manifest_digest(f"{host}/acme/forge:v1")
    assert "cannot get a registry token from http://127.0.0.1:9/token" in str(failure.value)
    assert "\n" not in str(failure.value)
