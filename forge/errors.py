"""The one error type users see: a single line naming what is wrong and where; and how a script
stopped by Ctrl-C says so."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable


class ForgeError(Exception):
    """A user-facing failure. build.py prints `error: <message>` and exits non-zero.

    Messages are one line and name the file and field (or release, target, path) at fault.
    """

    exit_code = 2

    def __str__(self) -> str:
        # Guarantee the one-line promise even when a message is built from multi-line text.
        return " ".join(super().__str__().split())


class ConflictError(ForgeError):
    """A patch that should apply to a release fits neither forward nor reverse."""

    exit_code = 3


# The exit status of a program stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


def exit_on_interrupt(main: Callable[[], int | None]) -> int:
    """Run a script's `main()` and return its exit status; Ctrl-C is one line on stderr and exit
    130, not a traceback. The process ends there and then (os._exit, after flushing): a thread
    still waiting on a server or an engine cannot hold the exit. Whatever main writes must be
    atomic for this to leave nothing half-written (forge.files)."""
    try:
        return main() or 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(INTERRUPTED)
