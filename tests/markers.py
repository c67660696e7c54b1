"""The suite's markers, kept true, and the order the tests run in.

`docker`: the test reaches the Docker engine (through the fixtures of tests/fixtures_docker.py, all of
which depend on `docker_engine` or `arm64_emulation`). A test that uses one without the marker
stops the run at collection, so `-m "not docker"` never starts an engine it did not ask for.

Order: test files with a docker-marked test run after all the others, and files that run the
drift check (its pip environments) just before them, each group in the usual order. On an empty
cache the rootfs tarballs and the environments are made in the background meanwhile
(tests/prefetch.py), instead of the run waiting for them at its fourth file.
"""
from __future__ import annotations

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


def run_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """Whole files keep their place within their group: module fixtures are set up once."""
    docker_files = {item.path for item in items if item.get_closest_marker("docker")}
    drift_files = {item.path for item in items if uses_drift_environments(item)}
    return sorted(items, key=lambda item: 2 if item.path in docker_files else
                  1 if item.path in drift_files else 0)


@pytest.hookimpl(tryfirst=True)   # before -m deselects anything: the check covers every test
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = unmarked_docker_tests(items)
    if unmarked:
        raise pytest.UsageError(
            "these tests use the Docker engine (a fixture of tests/fixtures_docker.py) but are not "
            f"marked @pytest.mark.docker: {', '.join(unmarked)}")
    items[:] = run_order(items)
