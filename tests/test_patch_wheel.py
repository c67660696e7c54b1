"""`build.py apply` on vLLM as pip really installs it: the PyPI wheel (not the sdist tree),
installed by pip into a target directory, with the dist-info pip writes."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from forge.upstream import releases
from tests.fixtures_patches import source_patches_applying
from tests.test_patch_series import run_build

TARGET = "vllm/v1/spec_decode/llm_base_proposer.py"
VERSION = "0.25.0"


def pip_installed_vllm(version: str, target: Path) -> Path:
    """pip downloads the wheel once into the shared cache (pip checks the index's sha256),
    then installs it without dependencies (no torch needed to patch source files)."""
    wheels = releases.cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps",
                    "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
                    "--dest", str(wheels), "--quiet"], check=True)
    wheel = next(wheels.glob(f"vllm-{version}-*manylinux*x86_64.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
                    "--target", str(target), "--quiet", str(wheel)], check=True)
    return target


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_apply_and_revert_on_a_pip_installed_wheel(tmp_path):
    site = pip_installed_vllm(VERSION, tmp_path / "site")
    assert (site / f"vllm-{VERSION}.dist-info" / "INSTALLER").read_text() == "pip\n"
    before = digests(site)
    applied = run_build("apply", "--site-packages", str(site), "--vllm", VERSION)
    assert applied.returncode == 0, applied.stderr
    assert f"vLLM {VERSION} at {site / 'vllm'}" in applied.stdout
    assert f"applied {len(source_patches_applying(VERSION))} patch(es)" in applied.stdout
    patched = (site / TARGET).read_bytes()
    assert b'if share_embeddings and hasattr(self.model, "has_own_embed_tokens"):' in patched
    # The wheel ships the same source file as the sdist the status matrix was computed on.
    assert before[TARGET] == hashlib.sha256(
        releases.release_file(VERSION, TARGET).read_bytes()).hexdigest()
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert digests(site) == before
