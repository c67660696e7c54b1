"""A running vLLM server's HTTP surface, every answer checked (mtp_smoke.py --endpoint checks a
server through it; bench.py --endpoint asks it which release the server runs)."""
from __future__ import annotations

import re


class EndpointError(Exception):
    """A request the server did not answer as a vLLM server does; the message names it and why."""


class Endpoint:
    """The server's HTTP surface with every answer checked: any failure is an EndpointError whose
    one-line message becomes a FAIL check, never a traceback."""

    def __init__(self, url: str, timeout: int):
        self.url, self.timeout = url.rstrip("/"), timeout

    def get(self, path: str, what: str):
        return self._request("GET", path, what)

    def get_json(self, path: str, what: str) -> dict:
        return self._json(self._request("GET", path, what), what)

    def post_json(self, path: str, what: str, body: dict) -> dict:
        return self._json(self._request("POST", path, what, json=body), what)

    def _request(self, method: str, path: str, what: str, **kwargs):
        import requests

        try:
            response = requests.request(method, self.url + path, timeout=self.timeout, **kwargs)
        except requests.Timeout:
            raise EndpointError(f"{what}: no answer within {self.timeout} s (--timeout)") from None
        except requests.RequestException as exc:
            raise EndpointError(f"{what}: {_connection_reason(exc)}") from None
        if not response.ok:
            raise EndpointError(f"{what}: HTTP {response.status_code} {response.reason}: "
                                f"{excerpt(response.text)}")
        return response

    @staticmethod
    def _json(response, what: str) -> dict:
        try:
            body = response.json()
        except ValueError:
            raise EndpointError(f"{what}: the answer is not JSON: {excerpt(response.text)}") from None
        if not isinstance(body, dict):
            raise EndpointError(f"{what}: the answer is not a JSON object: {excerpt(response.text)}")
        return body


def excerpt(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _connection_reason(exc: Exception) -> str:
    """The OS's words ("[Errno 111] Connection refused"), not urllib3's nested repr."""
    errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
    return f"cannot connect: {errno[0]}" if errno else str(exc)


def served_model(server: Endpoint) -> str:
    what = "GET /v1/models"
    models = server.get_json("/v1/models", what).get("data")
    if not isinstance(models, list) or not models:
        raise EndpointError(f"{what}: the server lists no model")
    model = models[0].get("id") if isinstance(models[0], dict) else None
    if not isinstance(model, str) or not model:
        raise EndpointError(f"{what}: data[0] names no model id")
    return model


def server_release(server: Endpoint) -> tuple[str | None, str]:
    """(vLLM release, how the report says it) from the server's own /version (every release's
    `vllm/entrypoints/serve/instrumentator/basic.py`); None when it does not say."""
    try:
        version = server.get_json("/version", "GET /version").get("version")
    except EndpointError as exc:
        return None, f"vLLM release unknown ({exc})"
    if not isinstance(version, str) or not version:
        return None, "vLLM release unknown (GET /version names no version)"
    return version, f"vLLM {version}"
