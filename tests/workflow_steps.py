"""Helpers to run a workflow step's own `run:` script as GitHub Actions would (`bash -e`), in a copy
of the working tree laid out like the job's checkout."""
import shutil
import subprocess
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"


def step_script(workflow: str, job: str, key: str) -> str:
    """The `run:` text of the step whose id or name is `key`."""
    steps = yaml.safe_load((WORKFLOWS / workflow).read_text())["jobs"][job]["steps"]
    return next(step["run"] for step in steps if key in (step.get("id"), step.get("name")))


def workflow_checkout(tmp_path: Path) -> Path:
    """The tracked files as they are in this working tree, like the job's actions/checkout."""
    checkout = tmp_path / "checkout"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        source = REPO_ROOT / name
        if source.is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / name)
    return checkout


def run_step(script: str, cwd: Path, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
