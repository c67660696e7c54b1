"""`.ci/run` end to end on small stand-in suites: the real script (Debian and Python packages
really installed, which is quick when already there), then the README's test command on a
`tests/` directory that collects nothing, or fails."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# What .ci/run reads; the tests/ directory is the stand-in's own.
CI_FILES = [".ci/run", ".ci/apt-packages.txt", ".ci/missing-packages.sh", ".ci/missing-requirements.py",
            "requirements.txt",
            "requirements-dev.txt", "pyproject.toml"]


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    """mypy's cache, kept between the module's runs as a CI machine keeps its checkout's: the
    standard library's stubs are analysed once (a second of CPU per run), and each stand-in's
    own files, new at their path, are checked afresh."""
    return tmp_path_factory.mktemp("mypy-cache")


def run_ci(tmp_path: Path, tests: dict[str, str], mypy_cache: Path,
           package: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """The real .ci/run in a stand-in checkout: `tests` its tests/, `package` the text of its
    forge/__init__.py (what lint and type checks read)."""
    checkout = tmp_path / "checkout"
    for name in CI_FILES:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, checkout / name)
    for name in ("forge", "verify"):
        (checkout / name).mkdir()
        (checkout / name / "__init__.py").write_text(package if name == "forge" else "")
    (checkout / "tests").mkdir()
    for name, text in tests.items():
        (checkout / "tests" / name).write_text(text)
    return subprocess.run(["bash", ".ci/run"], cwd=checkout, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "CI": "true", "MYPY_CACHE_DIR": str(mypy_cache), **(env or {})})


def test_a_run_that_collects_no_test_fails(tmp_path, mypy_cache):
    result = run_ci(tmp_path, {"__init__.py": "", "helpers.py": "VALUE = 1\n"}, mypy_cache)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "no tests ran" in result.stdout
    assert ("[ci] FAILED: pytest collected no tests (exit 5); a run that tests nothing is not a pass"
            in result.stderr)


def suite_cgroups() -> set[Path]:
    """Every cgroup a .ci/run made for its tests, at any depth: a run inside CI's own .ci/run (this
    suite's) makes its cgroup inside the outer run's, which stays while the suite runs."""
    return {path for mount in (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup")) if mount.is_dir()
            for path in mount.rglob("vllm-forge-ci-*")}


def test_a_failing_test_fails_the_run_with_pytest_status_and_phase_times(tmp_path, mypy_cache):
    before = suite_cgroups()
    result = run_ci(tmp_path, {"__init__.py": "",
                               "test_sample.py": "def test_fails():\n    assert 1 + 1 == 3\n"}, mypy_cache)
    assert result.returncode == 1
    assert "[ci] FAILED: pytest exited 1" in result.stderr
    assert "1 failed" in result.stdout
    # this machine has every listed package (the suite's set-up installed them): no apt run
    assert f"[ci] all {len(apt_packages())} Debian packages are installed" in result.stdout
    # and every Python requirement (the suite runs under them): no pip run
    assert "[ci] every Python requirement is installed" in result.stdout
    for phase in ("Debian packages", "Python packages", "lint and types", "vLLM source cache", "tests"):
        assert f"=== [ci] {phase} took " in result.stdout
    assert "=== [ci] total " in result.stdout
    # root here may make a cgroup (cgroup v1's cpuacct or v2): the suite's own is counted there
    assert_the_tests_cpu_is_the_phase_on_every_core(result.stdout, "cgroup" if can_make_a_cgroup()
                                                    else "process tree")
    assert suite_cgroups() == before, "a cgroup was left"


def can_make_a_cgroup() -> bool:
    for parent in (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup")):
        if (parent / "cpuacct.usage").exists() or (parent / "cgroup.controllers").exists():
            return os.access(parent, os.W_OK)
    return False


def test_without_a_cgroup_the_suite_cpu_is_its_process_tree(tmp_path, mypy_cache):
    result = run_ci(tmp_path, {"__init__.py": "", "test_sample.py": "def test_passes():\n    pass\n"},
                    mypy_cache, env={"VLLM_FORGE_CI_NO_CGROUP": "1"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert_the_tests_cpu_is_the_phase_on_every_core(result.stdout, "process tree")


def assert_the_tests_cpu_is_the_phase_on_every_core(output: str, counted: str) -> None:
    """The suite's own CPU-seconds, counted as `counted` says, are some of the machine's busy ones
    (pytest and its workers use a few; the machine's other work is not theirs); the cores' busy,
    idle and stolen seconds during the tests, as a suite record reads them, add up to the phase's
    seconds on every core: each figure is truncated to whole seconds, the phase to whole seconds
    at both ends."""
    from forge.evidence.suite import read_log

    assert output.count("=== [ci] tests cpu: ") == 1, output
    assert re.search(rf"^=== \[ci\] tests cpu: suite \d+ s \({counted}\), machine busy ", output, re.M)
    figures = read_log(output)
    cpu = [figures[f"phase.tests_cpu_{spent}_s"] for spent in ("busy", "idle", "stolen")]
    took, cores = figures["phase.tests_s"], os.cpu_count() or 1
    assert cores * (took - 1) - 3 <= sum(cpu) <= cores * (took + 1), (cpu, took, cores)
    assert 1 <= figures["phase.tests_cpu_suite_s"] <= cpu[0] + 1, (figures, cpu)


def test_lint_and_type_errors_fail_a_run_whose_tests_pass_and_both_are_named(tmp_path, mypy_cache):
    passing = {"__init__.py": "", "test_sample.py": "def test_passes():\n    assert 1 + 1 == 2\n"}
    run = run_ci(tmp_path, passing, mypy_cache, package="import os\nCOUNT: int = 'three'\n")
    assert "1 passed" in run.stdout
    assert run.returncode == 1
    assert run.stderr.endswith("[ci] FAILED: ruff found lint errors (tests passed)\n"
                               "[ci] FAILED: mypy found type errors (tests passed)\n"), run.stderr
    assert "F401" in run.stdout     # ruff names the unused import
    assert "Incompatible types in assignment" in run.stdout


def apt_packages() -> list[str]:
    lines = (REPO_ROOT / ".ci" / "apt-packages.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def test_only_packages_dpkg_lacks_are_named_for_install():
    """.ci/run runs apt only when this names a package: the listed ones are installed here (the
    suite's set-up), a made-up one never is."""
    listed = apt_packages()
    named = subprocess.run(["bash", str(REPO_ROOT / ".ci" / "missing-packages.sh"), *listed,
                            "vllm-forge-no-such-package"], capture_output=True, text=True, check=True)
    assert named.stdout.split() == ["vllm-forge-no-such-package"]


def missing_requirements(tmp_path: Path, text: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    listed = tmp_path / "requirements.txt"
    listed.write_text(text)
    return subprocess.run([python, str(REPO_ROOT / ".ci" / "missing-requirements.py"), str(listed)],
                          capture_output=True, text=True, timeout=60)


def test_missing_requirements_prints_what_this_python_lacks_and_only_that(tmp_path):
    result = missing_requirements(tmp_path, "# a comment\n\npytest>=8  # installed\npytest>=999\n"
                                            "vllm-forge-no-such-package==1\nPyYAML>=6\n"
                                            "numpy>=1; python_version < '3'\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["pytest>=999", "vllm-forge-no-such-package==1"]


def test_missing_requirements_without_packaging_names_every_requirement(tmp_path):
    """A fresh machine's Python may lack packaging: nothing is judged, so pip installs."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    result = missing_requirements(tmp_path, "pytest>=8\nPyYAML>=6\n", str(bare / "bin" / "python"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["pytest>=8", "PyYAML>=6"]
