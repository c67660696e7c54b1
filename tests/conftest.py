"""Shared test setup. Fixtures that start real services live in their own modules, listed here."""
from pathlib import Path

import pytest

from forge.upstream import releases

pytest_plugins = ["tests.fixtures_docker", "tests.fixtures_patches", "tests.markers", "tests.prefetch"]


@pytest.fixture(scope="session")
def release_tree():
    """Real vLLM release package trees from PyPI sdists (downloaded once, cached, sha256-checked)."""
    return releases.release_tree


@pytest.fixture
def at_root(monkeypatch):
    """Run from the repository root: committed reports name their files relative to it."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
