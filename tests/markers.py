"""The suite's markers, kept true, and the order the tests run in.

`docker`: the test reaches the Docker engine (through the fixtures of tests/fixtures_docker.py, all of
which depend on `docker_engine` or `arm64_emulation`). A test that uses one without the marker
stops the run at collection, so `-m "not docker"` never starts an engine it did not ask for.

Order and distribution. The README's command runs on pytest-xdist's workers (pyproject's addopts:
`-n auto --dist loadgroup`; `auto` is one worker more than the cores here, see
auto_workers). Each test file is one unit of work (module fixtures are set up
once), except that every docker-marked test is in one unit, "docker": one worker owns the engine,
the registry and the stand-in bases, and the engine is started and stopped by that worker alone.
Distributed, the units that take longest go first (docker, then files with slow-marked tests),
so no worker is left with a long unit at the end while the others idle. In one process (`-n 0`),
the docker files run last and the drift files just before them, so the background prefetch
(tests/prefetch.py) makes the rootfs tarballs and environments while the rest of the suite runs.
"""
from __future__ import annotations

import os

import pytest

# Every fixture that reaches the engine depends on one of these (tests/fixtures_docker.py).
DOCKER_FIXTURES = frozenset({"docker_engine", "arm64_emulation"})


def reaches_docker(item: pytest.Item) -> bool:
    return bool(DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())))


def unmarked_docker_tests(items: list[pytest.Item]) -> list[str]:
    return [item.nodeid for item in items
            if reaches_docker(item) and item.get_closest_marker("docker") is None]


def uses_drift_environments(item: pytest.Item) -> bool:
    """The test's module runs the drift check, which needs a transformers environment."""
    from forge.upstream import pyenvs
    from forge.watch import drift

    module = getattr(item, "module", None)
    return module is not None and any(value is drift or value is pyenvs
                                      for value in vars(module).values())


DOCKER_GROUP = "docker"


def run_order(items: list[pytest.Item], distributed: bool = False) -> list[pytest.Item]:
    """Whole files keep their place within their rank: module fixtures are set up once."""
    if distributed:
        slow_files = {item.path for item in items if item.get_closest_marker("slow")}

        def rank(item: pytest.Item) -> int:
            # the engine tier is the longest unit, then the docker one
            if item.get_closest_marker("engine"):
                return -1
            return 0 if item.get_closest_marker("docker") else 1 if item.path in slow_files else 2
    else:
        docker_files = {item.path for item in items if item.get_closest_marker("docker")}
        drift_files = {item.path for item in items if uses_drift_environments(item)}

        def rank(item: pytest.Item) -> int:
            return 2 if item.path in docker_files else 1 if item.path in drift_files else 0
    return sorted(items, key=rank)


def distributed(config: pytest.Config) -> bool:
    """pytest-xdist hands tests to workers (`-n N`, N > 0): true in its controller and workers."""
    return bool(getattr(config.option, "numprocesses", None)) or hasattr(config, "workerinput")


def group_units(items: list[pytest.Item]) -> None:
    """`--dist loadgroup` units: the docker tests together, files that name a UNIT of theirs
    together (tests/test_engine_cpu_qwen.py runs after the newest CPU build's smoke, whose
    environment it reads), every other file on its own."""
    for item in items:
        name = DOCKER_GROUP if item.get_closest_marker("docker") else \
            getattr(getattr(item, "module", None), "UNIT", None) or item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(name))


@pytest.hookimpl(tryfirst=True)   # before -m deselects anything: the check covers every test
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = unmarked_docker_tests(items)
    if unmarked:
        raise pytest.UsageError(
            "these tests use the Docker engine (a fixture of tests/fixtures_docker.py) but are not "
            f"marked @pytest.mark.docker: {', '.join(unmarked)}")
    items[:] = run_order(items, distributed(config))
    if distributed(config):
        group_units(items)


def auto_workers(cores: int) -> int:
    """Workers for `-n auto`: one more than the cores. A worker often waits with its core free (a
    build in the Docker engine, a download, a child's timer), and a third worker's tests fill
    that time: on the 2-core test machine (2026-12-04, warm cache) two workers kept 1.66 cores
    busy on average, three 1.77, and the run took 328 s instead of 339-364 s."""
    return cores + 1


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """pytest-xdist asks this for `-n auto`; its own PYTEST_XDIST_AUTO_NUM_WORKERS still wins
    (None: xdist's own answer, which reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return auto_workers(len(os.sched_getaffinity(0)))
