"""A running vLLM server's HTTP surface, every answer checked (mtp_smoke.py --endpoint checks a
server through it; bench.py --endpoint asks it which release the server runs)."""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass


class EndpointError(Exception):
    """A request the server did not answer as a vLLM server does; the message names it and why."""


# What a server may answer, at most: a vLLM /metrics page is ~100 KB, a model list, a version or a
# completion of a few hundred tokens a few KB. A reply over its cap is refused (a hostile or
# broken server streaming without end would otherwise fill the memory).
METRICS_CAP = 8 * 1024 * 1024
JSON_CAP = 1024 * 1024
# JSON nesting an answer may have (vLLM's answers nest 4 deep): deeper is refused before it is
# decoded, as the decoder recurses (RecursionError on a few thousand levels).
JSON_DEPTH = 64
_BRACKET_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


@dataclass(frozen=True)
class Reply:
    """A server's answer, read whole within its cap."""

    status: int
    text: str


class Endpoint:
    """The server's HTTP surface with every answer checked: any failure is an EndpointError whose
    one-line message becomes a FAIL check, never a traceback."""

    def __init__(self, url: str, timeout: int):
        self.url, self.timeout = url.rstrip("/"), timeout

    def get(self, path: str, what: str, cap: int = METRICS_CAP) -> Reply:
        return self._request("GET", path, what, cap)

    def get_json(self, path: str, what: str) -> dict:
        return self._json(self._request("GET", path, what, JSON_CAP), what)

    def post_json(self, path: str, what: str, body: dict) -> dict:
        return self._json(self._request("POST", path, what, JSON_CAP, json=body), what)

    def _request(self, method: str, path: str, what: str, cap: int, **kwargs) -> Reply:
        import requests

        try:
            with requests.request(method, self.url + path, timeout=self.timeout, stream=True,
                                  **kwargs) as response:
                body = self._read_capped(response, what, cap)
                reply = Reply(response.status_code, body.decode(response.encoding or "utf-8",
                                                                errors="replace"))
                ok, reason = response.ok, response.reason
        except requests.Timeout:
            raise EndpointError(f"{what}: no answer within {self.timeout} s (--timeout)") from None
        except requests.RequestException as exc:
            raise EndpointError(f"{what}: {_connection_reason(exc)}") from None
        if not ok:
            raise EndpointError(f"{what}: HTTP {reply.status} {reason}: {excerpt(reply.text)}")
        return reply

    def _read_capped(self, response, what: str, cap: int) -> bytes:
        """The body, refused past `cap` bytes or past --timeout in all (a server that drips a byte
        at a time would pass every read's own timeout)."""
        deadline = time.monotonic() + self.timeout
        body = bytearray()
        for chunk in response.iter_content(65536):
            body += chunk
            if len(body) > cap:
                raise EndpointError(f"{what}: {self.url}: the answer is over {cap // 1024} KiB "
                                    "(the cap on a server's answer); not read further")
            if time.monotonic() > deadline:
                raise EndpointError(f"{what}: {self.url}: the answer took over {self.timeout} s "
                                    "(--timeout)")
        return bytes(body)

    def _json(self, reply: Reply, what: str) -> dict:
        depth = nesting_depth(reply.text)
        if depth > JSON_DEPTH:
            raise EndpointError(f"{what}: {self.url}: the answer nests over {JSON_DEPTH} levels "
                                "deep (the cap on a server's JSON); not decoded")
        try:
            body = json.loads(reply.text)
        except ValueError:
            raise EndpointError(f"{what}: the answer is not JSON: {excerpt(reply.text)}") from None
        if not isinstance(body, dict):
            raise EndpointError(f"{what}: the answer is not a JSON object: {excerpt(reply.text)}")
        return body


def nesting_depth(text: str) -> int:
    """How deep the JSON text's arrays and objects nest, counted without recursion (brackets
    inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKET_OR_STRING.finditer(text):
        token = match[0]
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


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
