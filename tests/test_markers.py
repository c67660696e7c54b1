"""The `docker` marker is on every test that reaches the engine (tests/markers.py refuses the run
otherwise), and the run order puts the docker files last in one process and first on xdist's
workers. Checked on a small project of its own that uses the suite's real plugins, collected by a real pytest in a subprocess (no engine starts:
collection runs no fixture)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGINS = 'pytest_plugins = ["tests.fixtures_docker", "tests.markers"]\n'
INI = "[pytest]\nmarkers =\n    docker: d\n    slow: s\naddopts = -p no:cacheprovider\n"


def pytest_in(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """A real pytest on `project` alone, with the suite's plugins importable; its temporary
    folders in this run's (tests/conftest.py), not in the system's /tmp."""
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(project / "pytest.ini"),
                           "--rootdir", str(project), *args, str(project)],
                          capture_output=True, text=True, timeout=300, cwd=project,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                               "TMPDIR": tempfile.gettempdir(), **env})


def collect(project: Path, *args: str) -> subprocess.CompletedProcess:
    return pytest_in(project, "--collect-only", "-q", *args)


def project_with(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "conftest.py").write_text(PLUGINS)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_test_using_the_engine_without_the_marker_stops_the_run(tmp_path):
    project = project_with(tmp_path, {"test_build.py": (
        "import pytest\n\n"
        "@pytest.mark.docker\ndef test_marked(docker_engine):\n    pass\n\n"
        "def test_forgot(local_registry):\n    pass\n\n"
        "def test_emulated(arm64_emulation):\n    pass\n\n"
        "def test_plain():\n    pass\n")})
    result = collect(project)
    assert result.returncode != 0, result.stdout
    named = result.stdout + result.stderr
    assert "not marked @pytest.mark.docker: test_build.py::test_forgot, test_build.py::test_emulated" \
        in named, named
    # deselecting the docker tests does not hide the missing marker
    assert collect(project, "-m", "not docker").returncode != 0


def test_marked_tests_collect_and_docker_files_run_last(tmp_path):
    project = project_with(tmp_path, {
        "test_a_images.py": "import pytest\n\npytestmark = [pytest.mark.docker]\n\n"
                            "def test_one(docker_engine):\n    pass\n\ndef test_two():\n    pass\n",
        "test_b_plain.py": "def test_three():\n    pass\n",
        "test_c_plain.py": "def test_four():\n    pass\n"})
    result = collect(project)
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    assert ids == ["test_b_plain.py::test_three", "test_c_plain.py::test_four",
                   "test_a_images.py::test_one", "test_a_images.py::test_two"]
    fast = collect(project, "-m", "not docker")
    assert [line for line in fast.stdout.splitlines() if "::" in line] == [
        "test_b_plain.py::test_three", "test_c_plain.py::test_four"]


def test_distributed_the_docker_tests_go_first_then_files_with_slow_tests(tmp_path):
    """On pytest-xdist's workers the longest units start first (tests/markers.py run_order)."""
    project = project_with(tmp_path, {
        "test_a_plain.py": "def test_one():\n    pass\n",
        "test_b_slow.py": "import pytest\n\n@pytest.mark.slow\ndef test_two():\n    pass\n\n"
                          "def test_three():\n    pass\n",
        "test_c_images.py": "import pytest\n\n@pytest.mark.docker\ndef test_four(docker_engine):\n"
                            "    pass\n\ndef test_five():\n    pass\n"})
    result = collect(project, "-p", "xdist", "-n", "2", "--dist", "loadgroup")
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    assert ids == ["test_c_images.py::test_four", "test_b_slow.py::test_two", "test_b_slow.py::test_three",
                   "test_a_plain.py::test_one", "test_c_images.py::test_five"]


def test_auto_starts_a_worker_more_than_the_cores_unless_xdists_own_variable_says(tmp_path):
    project = project_with(tmp_path, {"test_a_plain.py": "def test_one():\n    pass\n"})
    cores = len(os.sched_getaffinity(0))

    def run(**env: str) -> str:
        done = pytest_in(project, "-p", "xdist", "-n", "auto", **env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert f"created: {cores + 1}/{cores + 1} workers" in run()
    assert "created: 1/1 worker" in run(PYTEST_XDIST_AUTO_NUM_WORKERS="1")


def test_the_owner_of_a_run_stops_a_background_group_whose_leader_it_did_not_start():
    """The controller stops the prefetch a worker started (and that worker may have exited)."""
    from tests.prefetch import stop_background_group

    # A shell in a new session starts a sleeper in its group, prints the group and exits: the
    # group lives on, led by nobody this process waits on. A shell's background job ignores
    # SIGINT, so this also shows the escalation to SIGKILL.
    script = "sleep 300 >/dev/null 2>&1 & echo $$"
    shell = subprocess.run(["setsid", "bash", "-c", script], capture_output=True, text=True,
                           timeout=30, stdin=subprocess.DEVNULL)
    pgid = int(shell.stdout.split()[0])
    os.killpg(pgid, 0)                       # the sleeper is alive in that group
    stop_background_group(pgid, signal.SIGINT, 2)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


# A child that sends itself SIGINT: it dies by the signal when it hears it, exits 0 when it is ignored.
SELF_INTERRUPT = "import os, signal; os.kill(os.getpid(), signal.SIGINT)"


def test_a_run_started_with_ctrl_c_ignored_gives_its_commands_ctrl_c_back():
    """The suite's own set-up (tests/conftest.hear_ctrl_c), in a process started as `cmd &` in a
    script starts it: SIGINT ignored, as its children would inherit it."""
    script = ("import subprocess, sys\n"
              "from tests.conftest import hear_ctrl_c\n"
              f"before = subprocess.run([sys.executable, '-c', {SELF_INTERRUPT!r}]).returncode\n"
              "hear_ctrl_c()\n"
              f"after = subprocess.run([sys.executable, '-c', {SELF_INTERRUPT!r}]).returncode\n"
              "print(before, after)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.split()
    assert before == "0"          # ignored: the child never heard its own Ctrl-C
    assert after == str(-signal.SIGINT)    # an uncaught KeyboardInterrupt: Python dies by the signal


def test_files_that_name_one_unit_run_as_one_unit_on_the_workers(tmp_path):
    """A file's UNIT puts its tests in that unit (tests/markers.py group_units): the engine tier's
    Qwen tests run on the worker that made the newest CPU build's environment, after its smoke."""
    project = project_with(tmp_path, {
        "test_a_first.py": 'UNIT = "shared"\n\ndef test_one():\n    pass\n',
        "test_b_own.py": "def test_two():\n    pass\n",
        "test_c_second.py": 'UNIT = "shared"\n\ndef test_three():\n    pass\n'})
    result = pytest_in(project, "-p", "xdist", "-n", "2", "--dist", "loadgroup", "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    ran = {line.split()[-1] for line in result.stdout.splitlines() if " PASSED " in line}
    assert ran == {"test_a_first.py::test_one@shared", "test_b_own.py::test_two@test_b_own.py",
                        "test_c_second.py::test_three@shared"}, result.stdout
