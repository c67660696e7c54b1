"""The GitHub workflows (linted by the real actionlint, with shellcheck on every `run:` block), the
release matrix they run on, and .ci/run's agreement with the README."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge.commands.cli import build_parser
from forge.targets import load_targets

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
WORKFLOW_NAMES = ["ci.yml", "release.yml", "upstream-watch.yml", "gpu-verify.yml"]


def tool(name: str) -> str:
    """A required linter; missing is a failure (CI installs both: requirements-dev.txt, apt)."""
    path = shutil.which(name)
    assert path, (f"{name} is not installed: `python3 -m pip install -r requirements-dev.txt` "
                  f"(actionlint) and `apt-get install shellcheck`")
    return path


def actionlint(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([tool("actionlint"), "-no-color", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_every_workflow_exists():
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == sorted(WORKFLOW_NAMES)


def test_actionlint_passes_on_the_workflows():
    tool("shellcheck")  # actionlint checks `run:` scripts only when shellcheck is on PATH
    result = actionlint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_actionlint_really_catches_mistakes(tmp_path):
    """The lint is not a no-op: a broken copy of ci.yml fails on an unknown step output and on a
    shell bug that only shellcheck sees."""
    shutil.copytree(REPO_ROOT / ".github", tmp_path / ".github")
    broken = tmp_path / ".github" / "workflows" / "ci.yml"
    broken.write_text(broken.read_text().replace(
        "        run: bash .ci/run\n",
        "        run: bash .ci/run ${{ steps.nothing.outputs.here }}\n"
        "      - run: cd $UNQUOTED_DIR; rm -rf $UNQUOTED_DIR/*\n"))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    tool("shellcheck")
    result = actionlint(cwd=tmp_path)
    assert result.returncode == 1
    assert 'property "nothing" is not defined' in result.stdout
    assert "shellcheck reported issue" in result.stdout


def test_workflows_call_only_real_build_py_commands():
    commands = set(build_parser()._subparsers._group_actions[0].choices)  # noqa: SLF001
    used = set()
    for name in WORKFLOW_NAMES:
        used |= set(re.findall(r"python3? build\.py ([a-z][a-z-]*)", (WORKFLOWS / name).read_text()))
    assert used, "the workflows run no build.py command"
    assert used <= commands, f"unknown build.py commands in workflows: {sorted(used - commands)}"
    assert {"release-matrix", "bake", "publish", "upstream-watch", "lock", "readme-table"} <= used


def test_ci_workflow_runs_ci_run():
    assert "run: bash .ci/run" in (WORKFLOWS / "ci.yml").read_text()


def test_release_pushes_only_the_immutable_tag_before_verify():
    text = (WORKFLOWS / "release.yml").read_text()
    assert "${{ matrix.target }}.tags=${{ matrix.immutable_ref }}" in text
    assert "sbom: true" in text and "provenance: mode=max" in text
    assert 'cosign sign --yes "$REPOSITORY@$DIGEST"' in text
    # The moving tag is moved only by `build.py publish --move-tag`, after verify, in `publish`.
    assert text.count("--move-tag") == 1
    assert text.index("--move-tag") > text.index("\n  publish:\n")
    assert "imagetools create" not in text


def readme_block(heading: str) -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split(f"## {heading}", 1)[1]
    return re.search(r"```sh\n(.*?)\n```", section, re.S).group(1).strip()


def test_ci_run_runs_exactly_the_readme_test_command():
    command = readme_block("Run the tests (one command)")
    assert command == "python3 -m pytest"
    ci_run = (REPO_ROOT / ".ci" / "run").read_text()
    invocations = [line for line in ci_run.splitlines() if "-m pytest" in line
                   and not line.lstrip().startswith("#")]
    assert len(invocations) == 1
    assert invocations[0].rstrip().endswith(command)


def test_readme_setup_command_installs_what_ci_installs():
    setup = readme_block("Set up (one command)")
    for needed in (".ci/apt-packages.txt", "requirements.txt", "requirements-dev.txt"):
        assert needed in setup
        assert (REPO_ROOT / needed).is_file()
    ci_run = (REPO_ROOT / ".ci" / "run").read_text()
    assert "-r requirements.txt -r requirements-dev.txt" in ci_run
    assert ".ci/apt-packages.txt" in ci_run


def test_ci_run_is_valid_bash_and_shellcheck_clean():
    script = REPO_ROOT / ".ci" / "run"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    result = subprocess.run([tool("shellcheck"), str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def release_matrix(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "build.py", "release-matrix", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def actions_env(tmp_path_factory) -> dict:
    """This environment as a GitHub Actions job of owner Example-Org sees it, with 0.27.1 locked
    (immutable tags name the base digest; the committed lock is empty: no registry here)."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_FORGE_REPOSITORY"}
    env["GITHUB_REPOSITORY_OWNER"] = "Example-Org"
    env["VLLM_FORGE_LOCK"] = str(_lock_for("0.27.1", tmp_path_factory.mktemp("workflows") / "lock.yaml"))
    return env


def _lock_for(vllm: str, path: Path):
    from forge.images.lock import save_lock

    refs = {t.base_for(vllm).ref for t in load_targets().values()}
    return save_lock({ref: "sha256:" + "ab" * 32 for ref in refs}, path,
                     {ref: ["linux/amd64", "linux/arm64"] for ref in refs})


def test_release_matrix_builds_every_target_on_its_native_runner(tmp_path, actions_env):
    outputs = tmp_path / "github_output"
    result = release_matrix(actions_env, "--tag", "vllm-0.27.1-r2", "--github-output", str(outputs))
    assert result.returncode == 0, result.stderr
    matrix = json.loads(result.stdout)
    targets = load_targets()
    assert matrix["vllm"] == "0.27.1"
    assert [job["target"] for job in matrix["include"]] == sorted(targets)
    for job in matrix["include"]:
        expected_runner = {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}
        assert job["runner"] == expected_runner[targets[job["target"]].platform]
        assert job["moving_ref"] == f"ghcr.io/example-org/vllm-forge:vllm0.27.1-{job['target']}"
        assert re.fullmatch(rf"ghcr\.io/example-org/vllm-forge:vllm0\.27\.1-{job['target']}-[0-9a-f]{{12}}",
                            job["immutable_ref"])
        assert job["recipes"] == targets[job["target"]].recipes
    lines = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert lines["vllm"] == "0.27.1"
    assert json.loads(lines["matrix"]) == {"include": matrix["include"]}


@pytest.mark.parametrize("tag", ["v0.27.1", "vllm-", "vllm-0.27.1-final"])
def test_release_matrix_refuses_a_tag_that_names_no_release(tag, actions_env):
    result = release_matrix(actions_env, "--tag", tag)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: release tag {tag!r}: expected vllm-<version> or "
                                     "vllm-<version>-r<N> (e.g. vllm-0.27.1)")


def test_plan_steps_of_release_and_gpu_verify_give_the_matrices_the_jobs_read(tmp_path, actions_env):
    """release.yml's plan step and gpu-verify.yml's recipes step, run as the runner runs them."""
    from tests.workflow_steps import run_step, step_script

    release_out, verify_out = tmp_path / "release_output", tmp_path / "verify_output"
    plan = run_step(step_script("release.yml", "plan", "matrix"), REPO_ROOT,
                    {**actions_env, "RELEASE_TAG": "vllm-0.27.1", "GITHUB_OUTPUT": str(release_out)})
    assert plan.returncode == 0, plan.stderr
    release = dict(line.split("=", 1) for line in release_out.read_text().splitlines())
    jobs = json.loads(release["matrix"])["include"]
    assert release["vllm"] == "0.27.1" and {j["target"] for j in jobs} == set(load_targets())

    recipes = run_step(step_script("gpu-verify.yml", "recipes", "plan"), REPO_ROOT,
                       {**actions_env, "TARGET": "h200", "VLLM": "0.27.1",
                        "GITHUB_OUTPUT": str(verify_out)})
    assert recipes.returncode == 0, recipes.stderr
    matrix = json.loads(dict(line.split("=", 1) for line in verify_out.read_text().splitlines())["matrix"])
    # gpu-verify.yml's mtp-smoke job reads fromJSON(matrix).include[0].recipes
    assert matrix["include"][0]["recipes"] == load_targets()["h200"].recipes
    assert matrix["include"][0]["immutable_ref"] == next(j for j in jobs if j["target"] == "h200")["immutable_ref"]
