"""A whole run (`python3 -m pytest`, no paths given) on an empty cache starts what it will wait for
in the background as soon as it knows its tests, so downloads, pip and dpkg under qemu overlap
with the tests that need none of them:

  trees   the sdist and package tree of every vLLM release from the series' checked_from on
          (most test files read some), three downloads at a time
  envs    the drift check's transformers environments (5.14.1, 5.15.0, PyPI's newest), when a
          selected slow-marked test's module runs the drift check
  wheels  the two real vLLM wheels of tests/test_patch_wheel.py (250 MB each), when it is selected
  rootfs  the stand-in bases' rootfs tarballs (amd64, and arm64 under qemu), when a selected
          test is docker-marked (tests/fixtures_docker.py start_rootfs)

Nothing here is a check and nothing is skipped: each maker is safe to run beside the tests
(forge.files.one_maker: a test that needs a tree, an environment or a wheel the background is making
waits for it, then reads it; rootfs_tarball waits for the process making its tarball). If the
background fails, the test that needs the entry makes it itself and fails with its own error.
A run given paths (a developer's single file) prefetches nothing.

Run as `python3 -m tests.prefetch trees envs` it makes those entries in the foreground.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PARALLEL_DOWNLOADS = 3
_BACKGROUND: list[subprocess.Popen] = []


def make_trees() -> None:
    from forge.patching.series import load_series
    from forge.upstream import releases

    versions = releases.list_releases(minimum=load_series(check_index=False).checked_from)
    with ThreadPoolExecutor(PARALLEL_DOWNLOADS) as pool:
        list(pool.map(lambda v: releases.release_tree(str(v)), versions))


def make_envs() -> None:
    from forge.upstream import pyenvs
    from forge.watch import drift
    from tests.fixtures_patches import TRANSFORMERS_WHEELS

    for version in (*TRANSFORMERS_WHEELS, drift.newest_version("transformers")):
        try:
            pyenvs.package_env("transformers", version)
        except pyenvs.UninstallableError:
            pass    # PyPI's newest may need what PyPI lacks: the tests that use it say so


def make_wheels() -> None:
    from tests import test_patch_wheel

    for version in (test_patch_wheel.VERSION, test_patch_wheel.OTHER):
        test_patch_wheel.cached_wheel(version)


MAKERS = {"trees": make_trees, "envs": make_envs, "wheels": make_wheels}


def _whole_run(config: pytest.Config) -> bool:
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _whole_run(session.config) or not session.items:
        return
    from tests.fixtures_docker import start_rootfs
    from tests.markers import uses_drift_environments

    log_dir = Path(tempfile.mkdtemp(prefix="vllm-forge-prefetch-"))
    if any(item.get_closest_marker("docker") for item in session.items):
        for arch in ("amd64", "arm64"):
            start_rootfs(arch, log_dir)
    runs_drift = any(uses_drift_environments(item) and item.get_closest_marker("slow")
                     for item in session.items)
    wheel_tests = any(item.path.name == "test_patch_wheel.py" and item.get_closest_marker("slow")
                      for item in session.items)
    wanted = ["trees"] + (["envs"] if runs_drift else []) + (["wheels"] if wheel_tests else [])
    with open(log_dir / "prefetch.log", "w") as log:
        _BACKGROUND.append(subprocess.Popen(
            [sys.executable, "-m", "tests.prefetch", *wanted], cwd=REPO, stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, start_new_session=True))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A short run can end before the background does: stop it the way Ctrl-C would (its
    staging directories are removed, nothing half made is left under a cache entry's name)."""
    from tests.fixtures_docker import stop_group, stop_rootfs_makers

    for process in _BACKGROUND:
        stop_group(process, signal.SIGINT, 60)
    _BACKGROUND.clear()
    stop_rootfs_makers()


if __name__ == "__main__":
    for name in sys.argv[1:]:
        MAKERS[name]()
