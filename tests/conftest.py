"""Shared test setup. Fixtures that start real services live in their own modules, listed here."""
import pytest

from forge.upstream import releases

pytest_plugins = ["tests.fixtures_docker", "tests.fixtures_patches"]


@pytest.fixture(scope="session")
def release_tree():
    """Real vLLM release package trees from PyPI sdists (downloaded once, cached, sha256-checked)."""
    return releases.release_tree
