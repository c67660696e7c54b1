"""Real file-system faults for tests: a small full tmpfs, a read-only bind mount, a command run as
an unprivileged user (the tests run as root, whom permission bits do not stop), a FIFO.

    with full_tmpfs(tmp_path / "full") as folder: ...     # ENOSPC on the next write there
    with read_only(folder): ...                           # EROFS
    run_as_nobody([sys.executable, "-c", ...])            # EACCES on root's 0755 folders
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _umount(folder: Path) -> None:
    subprocess.run(["umount", str(folder)], check=True, capture_output=True)


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `folder` (made if missing), unmounted afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder))
    try:
        yield folder
    finally:
        _umount(folder)


def fill(folder: Path) -> None:
    """Write into `folder` until its file system says ENOSPC."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def full_tmpfs(folder: Path, keep: dict[str, bytes] | None = None) -> Iterator[Path]:
    """A small tmpfs holding the `keep` files (name -> bytes), then filled to the last block."""
    with small_tmpfs(folder) as mounted:
        for name, data in (keep or {}).items():
            (mounted / name).write_bytes(data)
        fill(mounted)
        yield mounted


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """`folder` bind-mounted read-only over itself (EROFS for every write below it)."""
    _mount("--bind", str(folder), str(folder))
    try:
        _mount("-o", "remount,ro,bind", str(folder))
        yield folder
    finally:
        _umount(folder)


def run_as_nobody(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`command` as uid/gid 65534 with no supplementary groups (setpriv), from the checkout."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": "/nonexistent"}
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                           *command], capture_output=True, text=True, cwd=REPO,
                          env={**env, **kwargs.pop("env", {})}, **kwargs)


def python_as_nobody(code: str) -> subprocess.CompletedProcess:
    return run_as_nobody([sys.executable, "-c", code])


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path
