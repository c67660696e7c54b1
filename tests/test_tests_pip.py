"""Set-up leaves the interpreter's pip alone (requirements-dev.txt pins none), and the tests still
run pip 26.3 (tests/tests_pip.py): an interpreter with an older pip, a real venv with the pip
its Python bundles, gets pip 26.3 from the project's cache through $PYTHONPATH, fetched from the
package index and hash-checked; the venv's own pip is what it was."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.build_cli import REPO_ROOT
from tests.tests_pip import VERSION

pytestmark = [pytest.mark.slow]     # a venv with pip, and a download into an empty cache


def test_requirements_pin_no_pip():
    for name in ("requirements.txt", "requirements-dev.txt"):
        lines = [line.split("#")[0].strip() for line in (REPO_ROOT / name).read_text().splitlines()]
        assert not [line for line in lines if line.replace(" ", "").lower().startswith("pip=")], name


def _pip_version(python: Path, env: dict) -> str:
    done = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True,
                          timeout=120, env=env, check=True)
    return done.stdout


def test_an_older_interpreter_pip_gets_the_tests_pip_and_keeps_its_own(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   timeout=300, capture_output=True)
    python = venv / "bin" / "python"
    env = {**os.environ, "VLLM_FORGE_CACHE": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    own = _pip_version(python, env)
    assert not own.startswith(f"pip {VERSION} ") and str(venv) in own, own   # ensurepip's, older
    code = ("import os; from tests.tests_pip import use_tests_pip; print(use_tests_pip()); "
            "print(os.environ['PYTHONPATH'])")
    done = subprocess.run([str(python), "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600, env={**env, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    said, path = done.stdout.splitlines()
    folder = tmp_path / "cache" / "pip" / VERSION
    assert said == f"pip {VERSION} from {folder} (the interpreter's pip {own.split()[1]} stays as it is)"
    assert path.split(os.pathsep) == [str(folder), str(REPO_ROOT)]
    assert _pip_version(python, {**env, "PYTHONPATH": path}).startswith(f"pip {VERSION} from {folder}/pip")
    assert _pip_version(python, env) == own                      # the venv's own pip, untouched
    assert sorted(p.name for p in folder.parent.iterdir()) == [VERSION]   # no staging left
