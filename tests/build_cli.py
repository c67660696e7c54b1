"""Running build.py as a user does: a fresh Python process in a checkout."""
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_build(*args: str, cwd: Path | str | None = None, env: dict | None = None,
              timeout: int = 1800) -> subprocess.CompletedProcess:
    """`python build.py ARGS` in `cwd` (default this repository), `env` on top of ours."""
    return subprocess.run([sys.executable, "build.py", *args], cwd=cwd or REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
