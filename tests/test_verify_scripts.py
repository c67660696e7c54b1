"""The verify scripts as users run them: `python3 verify/X.py` from any directory, with no
PYTHONPATH, in a checkout and in the image's layout (/opt/vllm-forge/verify/). Before, running a
file put verify/ (not the repository) on sys.path and every script died with
`ModuleNotFoundError: No module named 'forge'`; only `python3 -m verify.X` worked."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# verify/engine_worker.py is started by the scripts themselves with a spec file, never by users.
INTERNAL = {"engine_worker.py"}


def user_scripts() -> list[str]:
    """Every file in verify/ with a command line of its own (a `__main__` block)."""
    return sorted(path.name for path in (REPO / "verify").glob("*.py")
                  if '__name__ == "__main__"' in path.read_text() and path.name not in INTERNAL)


def run_file(script: Path, *args: str, cwd: str = "/") -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def image_layout(root: Path) -> Path:
    """What the Dockerfile copies into /opt/vllm-forge, at another path."""
    for name in ("forge", "verify", "recipes", "patches"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "images").mkdir()
    shutil.copy2(REPO / "images" / "targets.yaml", root / "images" / "targets.yaml")
    shutil.copy2(REPO / "build.py", root / "build.py")
    return root


def test_the_user_scripts_are_the_two_entry_points():
    assert user_scripts() == ["bench.py", "mtp_smoke.py", "profile.py"]


@pytest.mark.parametrize("script", user_scripts())
def test_a_verify_script_runs_as_a_file_from_the_filesystem_root(script):
    result = run_file(REPO / "verify" / script, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {script} ") and "--recipe" in result.stdout


@pytest.mark.parametrize("script", user_scripts())
def test_a_verify_script_runs_as_a_file_in_the_image_layout(script, tmp_path):
    home = image_layout(tmp_path / "opt" / "vllm-forge")
    result = run_file(home / "verify" / script, "--help", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {script} ")


def test_a_file_run_reads_the_recipes_beside_it_and_refuses_a_bad_one_writing_nothing(tmp_path):
    """Run as a file, mtp_smoke reads the recipes of the tree it sits in; a recipe that does not
    exist is one line naming it, exit 2, and its --out directory is not created (before, the
    directory was made first)."""
    home = image_layout(tmp_path / "opt" / "vllm-forge")
    shutil.copy(home / "recipes" / "gemma-4-e4b-it.yaml", home / "recipes" / "only-in-this-tree.yaml")
    out = tmp_path / "verify-out"
    result = run_file(home / "verify" / "mtp_smoke.py", "--recipe", "no-such-model", "--target",
                      "h200", "--out", str(out), cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no-such-model" in lines[0]
    assert "only-in-this-tree" in lines[0], "the recipes beside the script, not the checkout's"
    assert not out.exists()


def test_a_file_run_does_not_let_verify_modules_shadow_top_level_ones(tmp_path):
    """verify/ holds report.py, metrics.py, prompts.py: run as a file, those names must not
    become top-level modules for whatever the script imports (vLLM, its dependencies)."""
    probe = tmp_path / "verify" / "probe.py"
    probe.parent.mkdir()
    shutil.copy2(REPO / "verify" / "_repository_on_path.py", probe.parent / "_repository_on_path.py")
    (probe.parent / "report.py").write_text("")
    probe.write_text("import _repository_on_path  # noqa: F401\nimport sys\n"
                     "print(sys.path[0])\nimport report\n")
    result = run_file(probe)
    assert result.stdout.splitlines()[0] == str(tmp_path)
    assert re.search(r"ModuleNotFoundError: No module named 'report'", result.stderr), result.stderr


def test_mtp_smoke_refuses_a_bad_recipe_before_it_makes_out(tmp_path):
    """As a module too: before, `--out` was created first and left behind by the refusal."""
    out = tmp_path / "verify-out"
    result = subprocess.run([sys.executable, "-m", "verify.mtp_smoke", "--recipe", "no-such-model",
                             "--target", "h200", "--out", str(out)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("error: unknown recipe 'no-such-model'")
    assert not out.exists()


# What multiprocessing's spawn start method does in the child it starts (vLLM switches to it when
# CUDA is already initialised): the parent's sys.path, then the parent's main file re-run as
# __mp_main__. Run as a file, the parent had swapped verify/ for the repository on sys.path: here
# PYTHONPATH puts the repository first, -P keeps the current folder off.
SPAWNED_CHILD = """
import multiprocessing.spawn, sys
root, verify, script = sys.argv[1:]
assert root == sys.path[0] and verify not in sys.path, sys.path
multiprocessing.spawn._fixup_main_from_path(script)
print("main re-run")
"""


@pytest.mark.parametrize("script", ["bench.py", "engine_worker.py", "mtp_smoke.py", "profile.py"])
def test_a_spawned_child_re_runs_a_verify_script_with_the_parents_sys_path(script):
    """The H200 run of 2026-12-01 (a Qwen3.6-35B-A3B smoke, vLLM 0.27.1, its
    engine.log): vLLM re-spawned verify/engine_worker.py, run as a file, and the child died with
    `ModuleNotFoundError: No module named '_repository_on_path'`."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-P", "-c", SPAWNED_CHILD, str(REPO), str(REPO / "verify"),
                             str(REPO / "verify" / script)], cwd="/", env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "main re-run"
