"""Shared test setup. Fixtures that start real services live in their own modules, listed here.

Scratch space: a run writes about 9 GB of copies (release trees, site-packages, wheels installed
by pip) and the atomic writes under test fsync every file. Where /dev/shm is a tmpfs with room,
the run's temporary folder ($TMPDIR, pytest's tmp_path, the workers' too) lives there, in memory;
elsewhere it is the system's. A passing test's tmp_path is emptied as it ends (empty_when_passed),
so a run holds a few hundred MB at a time, not 9 GB. The folder itself stays: pytest numbers the
next test's folder after the existing ones, and a reused path would meet whatever a cache keyed by
path kept from the test before (pytest's own `tmp_path_retention_policy = "failed"` reuses them).
"""
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path

import pytest

from forge.upstream import releases

RAM_TMP = Path("/dev/shm")
RAM_TMP_NEEDED = 4 << 30          # a worker's largest test holds ~0.6 GB; three workers at once


def ram_scratch(root: Path = RAM_TMP, needed: int = RAM_TMP_NEEDED) -> Path | None:
    """A temporary folder in memory (under a tmpfs with `needed` bytes free), or None."""
    try:
        stats = os.statvfs(root)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < needed:
        return None
    # short: unix socket paths under a test's tmp_path must stay within 107 bytes
    folder = root / f"vft-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    # like /tmp: commands the tests run as nobody make their own temporary files here too
    os.chmod(folder, 0o777 | stat.S_ISVTX)
    return folder


def hear_ctrl_c() -> None:
    """SIGINT back to Python's KeyboardInterrupt where the run was started with it ignored (`cmd &`
    in a script, nohup): an ignored signal stays ignored across exec, and the tests that press
    Ctrl-C on a command (test_verify_numbers, the background's stop in tests/prefetch) would wait
    on children that cannot hear it. A handler, unlike SIG_IGN, resets to the default at exec."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    """Before pytest-xdist starts its workers (they inherit $TMPDIR) and before tmp_path's
    base folder is made."""
    hear_ctrl_c()
    if hasattr(config, "workerinput"):
        return                      # the controller chose; the variable came with the worker
    scratch = ram_scratch()
    if scratch is not None:
        os.environ["TMPDIR"] = str(scratch)
        tempfile.tempdir = None     # gettempdir() reads $TMPDIR again


pytest_plugins = ["tests.fixtures_docker", "tests.fixtures_patches", "tests.markers", "tests.prefetch"]


@pytest.fixture(scope="session")
def release_tree():
    """Real vLLM release package trees from PyPI sdists (downloaded once, cached, sha256-checked)."""
    return releases.release_tree


@pytest.fixture
def at_root(monkeypatch):
    """Run from the repository root: committed reports name their files relative to it."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])


_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when in ("setup", "call"):
        item.stash[_PASSED] = item.stash.get(_PASSED, True) and report.passed
    return report


@pytest.fixture(autouse=True)
def empty_when_passed(request):
    """After a passing test, what it wrote in its tmp_path goes (a failing test's stays to read)."""
    yield
    folder = request.node.funcargs.get("tmp_path")
    if folder is not None and request.node.stash.get(_PASSED, False):
        for entry in list(folder.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
