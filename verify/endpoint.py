"""A running vLLM server's HTTP surface, every answer checked (mtp_smoke.py --endpoint checks a
server through it; bench.py --endpoint asks it which release the server runs)."""
from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from forge.http_session import AnswerError, Deadline, read_capped, watched_session
from forge.untrusted import visible


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


# Redirects a request follows, each to the server it was sent to (same scheme, host and port):
# one to another server would make the report name a server that did not answer.
MAX_REDIRECTS = 5


@dataclass(frozen=True)
class Reply:
    """A server's answer, read whole within its cap; `url` is the one that answered (a redirect
    on the same server may have moved it)."""

    status: int
    text: str
    url: str = ""


class Endpoint:
    """The server's HTTP surface with every answer checked: any failure is an EndpointError whose
    one-line message becomes a FAIL check, never a traceback. Each request, redirects included,
    has --timeout in all (not per read: a server that drips a byte at a time passes every read's
    own timeout)."""

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

        url = self.url + path
        with Deadline(self.timeout) as deadline:
            try:
                for _ in range(MAX_REDIRECTS + 1):
                    reply, location, ok, reason = self._one(method, url, what, cap, deadline,
                                                            **kwargs)
                    if location is None:
                        break
                    url = self._redirect(url, location, what)
                else:
                    raise EndpointError(f"{what}: {visible(url)}: over {MAX_REDIRECTS} redirects")
            except requests.RequestException as exc:
                # Past the deadline, the error is the shut socket's (a reset, a short body).
                if deadline.passed() or isinstance(exc, requests.Timeout):
                    raise EndpointError(f"{what}: no answer within {self.timeout} s "
                                        "(--timeout)") from None
                raise EndpointError(f"{what}: {_connection_reason(exc)}") from None
        if not ok:
            raise EndpointError(f"{what}: HTTP {reply.status} {reason}{_from(url, self.url + path)}"
                                f": {excerpt(reply.text)}")
        return reply

    def _one(self, method: str, url: str, what: str, cap: int, deadline: Deadline, **kwargs):
        """One request, no redirect followed: (reply, Location or None, ok, reason)."""
        import requests

        left = deadline.left()
        with watched_session() as session:
            try:
                response = session.request(method, url, timeout=(left, left), stream=True,
                                           allow_redirects=False, **kwargs)
            except ValueError as exc:
                if isinstance(exc, requests.RequestException):
                    raise
                # requests parses a redirect's Location even when it is not to follow it (for
                # Response.next): a ValueError here is a Location that is not a URL.
                raise EndpointError(f"{what}: {visible(url)} redirects to a malformed Location "
                                    f"({exc})") from None
            with response:
                return self._answer(response, what, cap, deadline, url)

    def _answer(self, response, what: str, cap: int, deadline: Deadline, url: str):
        """(reply, Location or None, ok, reason) of one response."""
        if response.is_redirect:
            return Reply(response.status_code, "", url), response.headers["location"], False, ""
        body = self._read_capped(response, what, cap, deadline)
        text = body.decode(_charset(response, what, url), errors="replace")
        return Reply(response.status_code, text, url), None, response.ok, response.reason

    def _redirect(self, url: str, location: str, what: str) -> str:
        """Where a redirect sends the request: on the same server, or refused in one line."""
        try:
            target = urljoin(url, location)
            origin, there = _origin(url), _origin(target)
        except ValueError:
            raise EndpointError(f"{what}: {visible(url)} redirects to a malformed Location: "
                                f"{excerpt(location)}") from None
        if there != origin:
            raise EndpointError(f"{what}: {visible(url)} redirects to another server "
                                f"({visible(target)}); a redirect is followed only on the server "
                                "--endpoint names")
        return target

    def _read_capped(self, response, what: str, cap: int, deadline: Deadline) -> bytes:
        """The body, refused past `cap` bytes or past the request's deadline."""
        try:
            return read_capped(response, cap, deadline)
        except AnswerError as exc:
            if deadline.passed():
                raise EndpointError(f"{what}: {visible(response.url)}: the answer took over "
                                    f"{self.timeout} s (--timeout)") from None
            raise EndpointError(f"{what}: {exc}") from None

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


def _origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL; ValueError for one that is not."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise ValueError(url)
    return parts.scheme, parts.hostname.lower(), port


def _from(url: str, asked: str) -> str:
    """' (from URL)' when a redirect moved the request, so an error names who answered."""
    return f" (from {visible(url)})" if url != asked else ""


def _charset(response, what: str, url: str) -> str:
    """The answer's declared charset (UTF-8 if none), refused in one line if Python has no codec
    of that name."""
    charset = response.encoding or "utf-8"
    try:
        codecs.lookup(charset)
    except (LookupError, ValueError):
        raise EndpointError(f"{what}: {visible(url)}: the answer's charset {excerpt(charset)} "
                            "is not a known text encoding") from None
    return charset


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
