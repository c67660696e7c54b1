"""One `requests.Session` per client, retrying transient failures with backoff.

Retried: read errors (a connection dropped mid-answer) and HTTP 429 / 500 / 502 / 503 / 504,
RETRIES times with exponential backoff (waits 0, 2, 4, 8 x BACKOFF_S: 3.5 s in all) or as long as
the server's Retry-After says; the last answer is returned as it is, so callers report the final
status code. A connection that cannot be made (refused, no such host) is tried CONNECT_RETRIES more
time, at once: nothing listening is an answer, and waiting 3.5 s for it four times over only
delays the one-line error that names the host. Requests through one session reuse its pooled
connections (HTTP keep-alive).

A Deadline bounds a request in all (requests' own timeout is per read: a server that drips a
byte at a time passes every read's), and read_capped bounds its body in bytes.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import os
import socket
import threading
import time

from forge.errors import ForgeError

RETRIES = 4
CONNECT_RETRIES = 1
BACKOFF_S = 0.25
RETRY_STATUSES = (429, 500, 502, 503, 504)


def retrying_session():
    retry = _deadline_retry()(total=RETRIES, connect=CONNECT_RETRIES, backoff_factor=BACKOFF_S,
                              status_forcelist=RETRY_STATUSES,
                              respect_retry_after_header=True, raise_on_status=False)
    return watched_session(retry)


@functools.cache
def _deadline_retry():
    """urllib3's Retry within the thread's current Deadline: no retry once it has passed, and no
    wait (backoff, a server's Retry-After) past it."""
    from urllib3.exceptions import MaxRetryError
    from urllib3.util.retry import Retry

    def current() -> Deadline | None:
        return getattr(Deadline._current, "deadline", None)

    class DeadlineRetry(Retry):
        def increment(self, method=None, url=None, response=None, error=None, _pool=None,
                      _stacktrace=None):
            deadline = current()
            if deadline is not None and deadline.passed():
                raise MaxRetryError(_pool, url or "", error)    # type: ignore[arg-type]
            return super().increment(method, url, response, error, _pool, _stacktrace)

        def get_backoff_time(self) -> float:
            deadline = current()
            wait = super().get_backoff_time()
            return min(wait, deadline.left()) if deadline is not None else wait

        def get_retry_after(self, response):
            deadline = current()
            wait = super().get_retry_after(response)
            return min(wait, deadline.left()) if deadline is not None and wait is not None else wait

    return DeadlineRetry


class AnswerError(ForgeError):
    """A body over its cap or past its deadline; the message names the URL and the limit."""


def read_capped(response, cap: int, deadline: Deadline | None = None) -> bytes:
    """A streamed response's body (decoded bytes: a gzip answer counts what it inflates to),
    refused past `cap` bytes or past `deadline`."""
    from forge.untrusted import visible

    body = bytearray()
    for chunk in response.iter_content(65536):
        body += chunk
        if len(body) > cap:
            raise AnswerError(f"{visible(response.url)}: the answer is over {cap // 1024} KiB "
                              "(the cap on a server's answer); not read further")
        if deadline is not None and deadline.passed():
            break
    if deadline is not None and deadline.passed():   # its shutdown may end a body early
        raise AnswerError(f"{visible(response.url)}: the answer took over {deadline.seconds:g} s")
    return bytes(body)


class Deadline:
    """A request's total time: its connection's socket is shut down when the time is up, which
    ends whatever read is waiting on it (the connect, the headers, a body trickled a byte at a
    time). The sockets are the ones opened on this thread while the deadline is entered."""

    _current = threading.local()

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self._sockets: list[tuple[int, int]] = []     # (descriptor, its socket's inode)
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
            fd = sock.fileno()
            with deadline._lock:
                deadline._sockets.append((fd, os.fstat(fd).st_ino))
            if deadline.passed():
                # a retry's new connection after the time is up: ended as the first was
                deadline.shut()

    def shut(self) -> None:
        with self._lock:
            for fd, inode in self._sockets:
                # A duplicate of the descriptor: shutdown acts on the connection (which a TLS
                # wrapper may now own), and closing the duplicate leaves the original to its owner.
                # The inode: a descriptor closed meanwhile and reused by another thread's socket
                # is not that connection.
                try:
                    with socket.socket(fileno=os.dup(fd)) as dup:
                        if os.fstat(dup.fileno()).st_ino == inode:
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


def watched_session(retry=None):
    """A requests.Session whose connections a Deadline can end (`retry`: urllib3's Retry, as
    retrying_session gives; none by default)."""
    import requests

    session = requests.Session()
    adapter = _watched_adapter()(max_retries=retry or 0)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session

