"""The README's commands on a fresh machine's empty cache (tests/sdist_mirror.py): a command
that has to download a release first still says exactly what it says on a warm cache. Before,
the download's progress lines came first on stderr, so a refusal was no longer its one line,
and tests/test_serve.py failed on every fresh machine while CI, which keeps its cache, passed."""
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.build_cli import run_build as build_cli_run
from tests.sdist_mirror import cold_cache

REPO = Path(__file__).resolve().parents[1]
# each test downloads and extracts a release into an empty cache, in a subprocess
pytestmark = [pytest.mark.slow]


def run_build(env: dict, *args: str) -> subprocess.CompletedProcess:
    return build_cli_run(*args, env=env, timeout=600)


def _recipes_with_moe_backend(tmp_path: Path) -> Path:
    root = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", root, ignore=shutil.ignore_patterns("*.md"))
    path = root / "gemma-4-26b-a4b-it.yaml"
    data = yaml.safe_load(path.read_text())
    data["targets"]["gb10"]["vllm"] = ">=0.10.0"
    data["targets"]["gb10"]["serve"]["moe_backend"] = "triton"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def test_a_refusal_after_a_cold_download_is_its_one_line(tmp_path):
    """tests/test_serve.py::test_moe_backend_refused_where_the_release_has_no_flag, cold."""
    root = _recipes_with_moe_backend(tmp_path)
    cache = tmp_path / "cold"
    with cold_cache(cache) as env:
        result = run_build(env, "serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "gb10",
                           "--vllm", "0.14.0", "--recipes-dir", str(root))
    assert (cache / "sdists" / "vllm-0.14.0.tar.gz").is_file(), "the cache was cold: it downloaded"
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: {root}/gemma-4-26b-a4b-it.yaml: targets.gb10.serve.moe_backend: needs "
                             f"--moe-backend, which vLLM 0.14.0's `vllm serve` does not have\n")


def test_a_cold_plan_prints_the_plan_and_nothing_on_stderr(tmp_path):
    cache = tmp_path / "cold"
    with cold_cache(cache) as env:
        result = run_build(env, "patches", "--vllm", "0.25.0")
    assert (cache / "trees" / "0.25.0" / "vllm" / "__init__.py").is_file()
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "gemma4-mtp-share-embeddings           source      applies" in result.stdout


def test_logs_that_ask_for_progress_get_the_download_lines(tmp_path):
    """$VLLM_FORGE_PROGRESS=lines (a CI log) still shows the cold download, timed."""
    cache = tmp_path / "cold"
    with cold_cache(cache) as env:
        result = run_build({**env, "VLLM_FORGE_PROGRESS": "lines"}, "patches", "--vllm", "0.25.0")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "downloading vLLM 0.25.0 sdist ..."
    assert lines[1].startswith("downloading vLLM 0.25.0 sdist: done, ") and lines[1].endswith(" s")
    assert lines[2] == "extracting vLLM 0.25.0's vllm/ package ..."
