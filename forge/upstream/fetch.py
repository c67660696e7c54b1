"""Answers from a package index or a file host, read within bounds: at most a stated number of
bytes (counted after any Content-Encoding is undone, so a compressed answer cannot grow past the
cap), within a total deadline, and a file streamed to disk removed on any exit (an error, a
refusal, Ctrl-C) unless it was read whole.

An index or mirror ($VLLM_FORGE_INDEX, $VLLM_FORGE_PYPI) is a server anyone may run: an endless
page, an sdist larger than the index declared, a body that trickles in forever are answered with
one line naming the URL, never by reading on.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forge.errors import ForgeError
from forge.http_session import Deadline, retrying_session
from forge.untrusted import visible

CHUNK = 1 << 16


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size} bytes"


def get_capped(url: str, cap: int, what: str, headers: dict | None = None, timeout: float = 60,
               deadline_s: float = 300) -> Answer:
    """GET `url`: its status, content type and body, the body at most `cap` bytes (ForgeError
    beyond). requests' exceptions pass through for the caller to word."""
    # The deadline's watchdog shuts the connection down when the time is up (forge.http_session):
    # a server that trickles its answer a byte at a time is cut off, not waited on a read at a time.
    with Deadline(deadline_s) as deadline, retrying_session() as session, \
            session.get(url, stream=True, timeout=min(timeout, deadline.left()), headers=headers or {}) as response:
        body = bytearray()
        if response.ok:
            _refuse_declared(response, cap, what, url)
            for chunk in response.iter_content(CHUNK):
                body += chunk
                if len(body) > cap:
                    raise ForgeError(f"{what} {visible(url)}: more than {_mib(cap)}, far more than any real "
                                     "one; is the index right?")
                _check_deadline(deadline, what, url)
            _check_deadline(deadline, what, url)     # its shutdown may have ended the body early
        return Answer(response.status_code, response.headers.get("Content-Type", ""), bytes(body))


def download(url: str, partial: Path, cap: int, what: str, cap_says: str,
             advance: Callable[[int, int | None], None] | None = None, timeout: float = 300,
             deadline_s: float = 3600) -> None:
    """Stream `url` into `partial` (a new file), at most `cap` bytes (`cap_says`: where the cap
    comes from, for the refusal); `advance(bytes, total)` is told of each block. On any exit but
    success `partial` is removed."""
    try:
        with Deadline(deadline_s) as deadline, retrying_session() as session, \
                session.get(url, stream=True, timeout=min(timeout, deadline.left())) as response:
            response.raise_for_status()
            total = _refuse_declared(response, cap, what, url)
            written = 0
            # The partial file its caller made: written as it is, never through a link put there.
            with os.fdopen(os.open(partial, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC),
                           "wb") as out:
                for block in response.iter_content(CHUNK):
                    written += len(block)
                    if written > cap:
                        raise ForgeError(f"{what} {visible(url)}: more than {cap_says} ({_mib(cap)}); "
                                         "refused before reading on to check its sha256")
                    out.write(block)
                    if advance is not None:
                        advance(len(block), total)
                    _check_deadline(deadline, what, url)
                _check_deadline(deadline, what, url)
    except BaseException:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise


def _refuse_declared(response, cap: int, what: str, url: str) -> int | None:
    """The Content-Length the server declares, refused at once when over `cap`."""
    try:
        declared = int(response.headers.get("Content-Length") or "")
    except ValueError:
        return None
    if declared > cap:
        raise ForgeError(f"{what} {visible(url)}: the server declares {_mib(declared)}, more than the "
                         f"{_mib(cap)} expected")
    return declared if declared >= 0 else None


def _check_deadline(deadline: Deadline, what: str, url: str) -> None:
    if deadline.passed():
        raise ForgeError(f"{what} {visible(url)}: not read whole in {deadline.seconds:.0f} s; try again later")
