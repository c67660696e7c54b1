"""Running a command with its stderr on a real pseudo-terminal (pty), as a user at a terminal
would; stdout stays a pipe, as when output goes to a file or another program."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def read_all(master: int) -> bytes:
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def run_python(code: str, terminal: bool, timeout: int = 300, stdout_too: bool = False,
               env: dict | None = None) -> tuple[int, str, str]:
    """Run `python3 -c code` in the repository; returns (exit code, stdout, stderr). With
    `terminal`, stderr is a pty (its line ends read back as \\r\\n, as terminals get them);
    with `stdout_too` as well, stdout is the same pty (and what it shows is in stderr's place)."""
    command = [sys.executable, "-c", code]
    environment = {**os.environ, **(env or {})}
    if not terminal:
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                                env=environment)
        return result.returncode, result.stdout, result.stderr
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(command, cwd=REPO, stdout=slave if stdout_too else subprocess.PIPE,
                                   stderr=slave, stdin=subprocess.DEVNULL, env=environment)
    finally:
        os.close(slave)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(read_all(master)), daemon=True)
    reader.start()
    stdout, _ = process.communicate(timeout=timeout)
    reader.join(timeout)
    os.close(master)
    return process.returncode, (stdout or b"").decode(), b"".join(received).decode()


class TerminalStream:
    """A writable text stream that is a real terminal (isatty() true), with what was written
    read back by a thread, for progress objects used in this process."""

    def __init__(self):
        self._master, slave = pty.openpty()
        self.stream = os.fdopen(slave, "w")
        self._received: list[bytes] = []
        self._reader = threading.Thread(target=lambda: self._received.append(read_all(self._master)),
                                        daemon=True)
        self._reader.start()

    def close(self) -> str:
        self.stream.close()
        self._reader.join(30)
        os.close(self._master)
        return b"".join(self._received).decode()
