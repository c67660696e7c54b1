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


def copy_checkout(into: Path) -> Path:
    """The parts of this checkout that build.py reads (code and patches/), copied into `into`:
    a command run there writes only there (forge finds its data beside its own code)."""
    import shutil

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("forge", "patches"):
        shutil.copytree(REPO_ROOT / name, into / name, ignore=ignore)
    shutil.copy2(REPO_ROOT / "build.py", into / "build.py")
    return into
