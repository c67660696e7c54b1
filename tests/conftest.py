"""Shared test setup. Fixtures that start real services live in their own modules, listed here.

Scratch space: a run writes about 9 GB of copies (release trees, site-packages, wheels installed
by pip) and the atomic writes under test fsync every file. Each run has a folder of its own for
them, $TMPDIR for the run (pytest's tmp_path, the workers', every command the tests start): under
/dev/shm where it is a tmpfs with room, in memory, elsewhere under the system's temporary folder.
A passing test's tmp_path is emptied as it ends (empty_when_passed), so a run holds a few hundred
MB at a time, not 9 GB; the folders themselves stay while the run lasts: pytest numbers the next
test's folder after the existing ones, and a reused path would meet whatever a cache keyed by path
kept from the test before (pytest's own `tmp_path_retention_policy = "failed"` reuses them).
After a run that passed, its folder goes whole (module- and session-wide folders too, such as
tests/test_patch_wheel.py's venv of two vLLM installs); after a failure it stays, to read, and the
run's summary names it.
"""
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path

import pytest

from forge.upstream import releases
from tests.tests_pip import use_tests_pip

RAM_TMP = Path("/dev/shm")
RAM_TMP_NEEDED = 4 << 30          # a worker's largest test holds ~0.6 GB; three workers at once
# The folder under which a run makes its own scratch folder (default: RAM_TMP's, else the system's
# temporary folder); tests/test_scratch_cleanup.py points runs it starts elsewhere.
SCRATCH_ENV = "VLLM_FORGE_TESTS_SCRATCH"


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


def run_scratch(parent: Path) -> Path:
    """This run's own temporary folder under `parent`, which no other run shares."""
    # short: unix socket paths under a test's tmp_path must stay within 107 bytes
    folder = Path(tempfile.mkdtemp(prefix="r-", dir=parent))
    # like /tmp: commands the tests run as nobody make their own temporary files here too
    os.chmod(folder, 0o777 | stat.S_ISVTX)
    return folder


def mounts_under(folder: Path) -> list[str]:
    """Mount points inside `folder` (a test's tmpfs or read-only bind mount left mounted): a
    folder holding one is never removed, which would reach through a bind mount."""
    inside = str(folder.resolve()) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        points = [line.split()[4].replace("\\040", " ") for line in table]
    return [point for point in points if point.startswith(inside)]


_SCRATCH = pytest.StashKey[Path]()
_PIP = pytest.StashKey[str]()


def pytest_configure(config):
    """Before pytest-xdist starts its workers (they inherit $TMPDIR) and before tmp_path's
    base folder is made."""
    hear_ctrl_c()
    if hasattr(config, "workerinput"):
        return                      # the controller chose; the variable came with the worker
    parent = os.environ.get(SCRATCH_ENV)
    scratch = run_scratch(Path(parent) if parent else ram_scratch() or Path(tempfile.gettempdir()))
    config.stash[_SCRATCH] = scratch
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = None         # gettempdir() reads $TMPDIR again
    config.stash[_PIP] = use_tests_pip()


def pytest_report_header(config):
    return [config.stash[_PIP]] if _PIP in config.stash else []


@pytest.hookimpl(trylast=True)      # after the background makers (tests/prefetch.py) stopped
def pytest_sessionfinish(session, exitstatus):
    """A run that passed leaves nothing of its scratch behind; one that failed keeps it."""
    scratch = session.config.stash.get(_SCRATCH, None)
    if scratch is None or not scratch.is_dir():
        return
    mounted = mounts_under(scratch)
    if exitstatus == 0 and not mounted:
        shutil.rmtree(scratch, ignore_errors=True)
        return
    why = f"still mounted there: {', '.join(mounted)}" if mounted else "the run did not pass"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"the run's scratch folder stays ({why}): {scratch}")


pytest_plugins = ["tests.engine_runs", "tests.fixtures_docker", "tests.fixtures_patches", "tests.markers", "tests.prefetch"]


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
