"""A test run leaves nothing of itself in its scratch space (tests/conftest.py): before, a passing
run kept its whole pytest folder under /dev/shm, 1.6 GB with tests/test_patch_wheel.py's venv of
two vLLM installs, and the two runs before it. Real pytest runs of a real test file, each in a
process of its own, with their scratch parent pointed at a folder of this test."""
import subprocess
import sys

from tests.build_cli import REPO_ROOT
from tests.conftest import SCRATCH_ENV, mounts_under
from tests.file_faults import small_tmpfs


def inner_run(parent, *args: str) -> subprocess.CompletedProcess:
    # one xdist worker: the workers' folders live in the run's folder too
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider",
                           *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                          env={**_env(), SCRATCH_ENV: str(parent)})


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VLLM_FORGE_PREFETCH"))}


def test_a_failed_run_keeps_its_folder_and_a_passing_one_leaves_nothing(tmp_path):
    parent = tmp_path / "scratch"
    parent.mkdir()
    failed = inner_run(parent, "tests/test_output_width.py", "-k", "no_test_is_named_so")
    assert failed.returncode == 5, failed.stdout[-2000:]          # nothing collected: not a pass
    (kept,) = parent.iterdir()
    assert kept.name.startswith("r-")
    assert f"the run's scratch folder stays (the run did not pass): {kept}" in failed.stdout
    passed = inner_run(parent, "tests/test_output_width.py")
    assert passed.returncode == 0, passed.stdout[-2000:]
    assert "passed" in passed.stdout and "scratch folder stays" not in passed.stdout
    assert list(parent.iterdir()) == [kept]                        # its own folder is gone


def test_a_folder_with_a_mount_inside_is_never_removed(tmp_path):
    run = tmp_path / "run-x"
    (run / "case").mkdir(parents=True)
    assert mounts_under(run) == []
    with small_tmpfs(run / "case" / "disk") as disk:
        assert mounts_under(run) == [str(disk.resolve())]
        assert mounts_under(tmp_path / "run") == []                # a sibling's prefix is not inside
    assert mounts_under(run) == []
