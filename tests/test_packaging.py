"""forge is an installable package: `pip install .` gives the `vllm-forge` command (the same
commands as build.py) and the verify entry points; the requirements files say what pyproject says."""
import re
import shutil
import subprocess
import sys

import tomllib

from forge import REPO_ROOT
from tests.build_cli import run_build

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _requirements(name: str) -> list[str]:
    lines = (REPO_ROOT / name).read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def test_requirements_files_list_what_pyproject_declares():
    project = PYPROJECT["project"]
    assert _requirements("requirements.txt") == project["dependencies"]
    assert _requirements("requirements-dev.txt") == project["optional-dependencies"]["dev"]
    # The test tools are not runtime dependencies.
    assert not any(re.match(r"(pytest|ruff|mypy)\b", dep) for dep in project["dependencies"])


# The one module allowed to: a verify script run as a file imports it to find the repository.
SYS_PATH_HELPER = "verify/_repository_on_path.py"


# The only other edits of sys.path, each for a reason the helper cannot serve:
PATH_EDITS_WITH_A_REASON = {
    # run as a file on a GPU host (`python3 benchmarks/gpu/run.py PLAN`), outside verify/
    "benchmarks/gpu/run.py",
    # the corpus imports the case tree's own copy of forge and verify, never the checkout's
    "tests/hostile/forkserver.py",
}


def test_no_module_edits_sys_path_but_the_one_helper():
    offenders = [f"{path.relative_to(REPO_ROOT)}:{number}"
                 for top in ("forge", "verify", "tests", "benchmarks")
                 for path in sorted((REPO_ROOT / top).rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"sys\.path(\.(insert|append|extend)\(|\[.*\] =)", line)
                 and path.name != "test_packaging.py"
                 and str(path.relative_to(REPO_ROOT)) not in (SYS_PATH_HELPER, *PATH_EDITS_WITH_A_REASON)]
    assert offenders == []
    importers = sorted(path.name for path in (REPO_ROOT / "verify").glob("*.py")
                       if "import _repository_on_path" in path.read_text())
    assert importers == ["bench.py", "engine_worker.py", "mtp_smoke.py", "profile.py"]


def test_pip_install_gives_the_vllm_forge_commands(tmp_path):
    """A fresh venv (the host's docker, yaml, ... visible, forge itself not), `pip install .` of a
    copy of the sources (the build leaves build/ and *.egg-info behind), then the installed
    commands run from outside the checkout."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    for package in ("forge", "verify"):
        shutil.copytree(REPO_ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    # without a pip of its own: the host's pip, seen through the system site-packages, installs
    # into the venv all the same (bootstrapping a pip into it was 6 s of this test's 14)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                              str(source)],
                             cwd=tmp_path, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr

    def run(*command):
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)

    where = run(str(python), "-c", "import forge; print(forge.__file__)")
    assert where.stdout.startswith(str(venv)), where   # the installed copy, not the checkout
    installed = run(str(venv / "bin" / "vllm-forge"), "--help")
    checkout = run_build("--help")
    assert installed.returncode == 0, installed.stderr
    # Each names itself as typed (before, the installed command said `usage: build.py`).
    assert installed.stdout.startswith("usage: vllm-forge [-h] COMMAND ...\n")
    assert "Without a command, vllm-forge builds: vllm-forge --target" in " ".join(installed.stdout.split())
    assert checkout.stdout.startswith("usage: build.py [-h] COMMAND ...\n")
    assert _commands(installed.stdout) == _commands(checkout.stdout)
    # Outside a checkout the data comes from $VLLM_FORGE_HOME: an error about it says so (before:
    # only "cannot read .../patches/series.yaml").
    lost = run(str(venv / "bin" / "vllm-forge"), "patches", "--vllm", "0.25.0", "--offline")
    assert lost.returncode == 2
    line = lost.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {tmp_path}/patches/series.yaml: ")
    assert "set $VLLM_FORGE_HOME to a checkout's root" in line and "is not set" in line
    home = run("env", f"VLLM_FORGE_HOME={REPO_ROOT}", str(venv / "bin" / "vllm-forge"), "patches",
               "--vllm", "0.25.0")
    assert home.returncode == 0 and "gemma4-mtp-share-embeddings" in home.stdout, home.stderr
    for script in ("vllm-forge-mtp-smoke", "vllm-forge-bench", "vllm-forge-profile"):
        result = run(str(venv / "bin" / script), "--help")
        assert result.returncode == 0 and "--recipe" in result.stdout, (script, result.stderr)


def _commands(help_text: str) -> list[str]:
    """The command lines of a --help listing (what both names must offer alike)."""
    return [line for line in help_text.splitlines() if line.startswith("    ")]
