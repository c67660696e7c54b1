"""A running vLLM server's HTTP surface, every answer checked (mtp_smoke.py --endpoint checks a
server through it; bench.py --endpoint asks it which release the server runs)."""
from __future__ import annotations

import codecs
import functools
import heapq
import itertools
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

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
        with _session() as session:
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
        """The body, refused past `cap` bytes (decoded bytes: a gzip answer counts what it
        inflates to) or past the request's deadline."""
        body = bytearray()
        for chunk in response.iter_content(65536):
            body += chunk
            if len(body) > cap:
                raise EndpointError(f"{what}: {visible(response.url)}: the answer is over "
                                    f"{cap // 1024} KiB (the cap on a server's answer); not read "
                                    "further")
            if deadline.passed():
                raise EndpointError(f"{what}: {visible(response.url)}: the answer took over "
                                    f"{self.timeout} s (--timeout)")
        if deadline.passed():     # the deadline's shutdown ends a body read to the close early
            raise EndpointError(f"{what}: {visible(response.url)}: the answer took over "
                                f"{self.timeout} s (--timeout)")
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


class Deadline:
    """A request's total time: its connection's socket is shut down when the time is up, which
    ends whatever read is waiting on it (the connect, the headers, a body trickled a byte at a
    time). The sockets are the ones opened on this thread while the deadline is entered."""

    _current = threading.local()

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self._sockets: list[int] = []
        self._lock = threading.Lock()
        self.done = False

    def __enter__(self) -> Deadline:
        Deadline._current.deadline = self
        _WATCHDOG.add(self)
        return self

    def __exit__(self, *_exc) -> None:
        Deadline._current.deadline = None
        with self._lock:
            self.done, self._sockets = True, []     # nothing is shut down from here on

    def left(self) -> float:
        """Seconds left, at least a little (requests refuses a timeout of 0)."""
        return max(0.01, self.ends - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.ends

    @classmethod
    def opened(cls, sock: socket.socket) -> None:
        """A connection made on this thread: shut down when the current deadline passes."""
        deadline = getattr(cls._current, "deadline", None)
        if deadline is not None:
            with deadline._lock:
                deadline._sockets.append(sock.fileno())

    def shut(self) -> None:
        with self._lock:
            for fd in self._sockets:
                # A duplicate of the descriptor: shutdown acts on the connection (which a TLS
                # wrapper may now own), and closing the duplicate leaves the original to its owner.
                try:
                    with socket.socket(fileno=os.dup(fd)) as dup:
                        dup.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Watchdog:
    """One daemon thread for every Deadline of the process (a burst's requests would otherwise
    be a timer thread each): it sleeps until the earliest one and shuts its sockets down."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._due: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline) -> None:
        with self._wake:
            heapq.heappush(self._due, (deadline.ends, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="endpoint-deadlines",
                                                daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._due and self._due[0][2].done:
                    heapq.heappop(self._due)
                if not self._due:
                    self._wake.wait()
                    continue
                wait = self._due[0][0] - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                deadline = heapq.heappop(self._due)[2]
            deadline.shut()


_WATCHDOG = _Watchdog()


@functools.cache
def _watched_adapter():
    """A requests adapter whose connections report their socket to the thread's current Deadline
    as urllib3 makes it (HTTPConnection._new_conn, for http and https alike; through an HTTP proxy
    too). Made once, on the first request (requests is imported when first used)."""
    from requests.adapters import HTTPAdapter
    from urllib3 import ProxyManager
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Watched(HTTPConnection):
        def _new_conn(self):
            sock = super()._new_conn()
            Deadline.opened(sock)
            return sock

    class WatchedTLS(HTTPSConnection):
        def _new_conn(self):
            sock = super()._new_conn()
            Deadline.opened(sock)
            return sock

    class Pool(HTTPConnectionPool):
        ConnectionCls = Watched

    class TLSPool(HTTPSConnectionPool):
        ConnectionCls = WatchedTLS

    pools = {"http": Pool, "https": TLSPool}

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy, **kwargs):
            manager = super().proxy_manager_for(proxy, **kwargs)
            if type(manager) is ProxyManager:      # a SOCKS proxy keeps its own connections
                manager.pool_classes_by_scheme = pools
            return manager

    return Adapter


def _session():
    import requests

    session = requests.Session()
    adapter = _watched_adapter()()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


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
