"""The pip the tests run, without replacing the system's.

The tests run real pip a few hundred times (environments, pins, wheels), always as
`sys.executable -m pip`. pip 26 weighs an index's wheel links in about half the CPU of Debian 12's
pip 23 (`pip install --target T transformers==5.15.0`: 11.1 -> 5.0 user-seconds on the 2-core test
machine, 2026-12-04). Set-up used to pin pip==26.3 in requirements-dev.txt, which replaced the
interpreter's own pip; now a run whose interpreter has an older pip unpacks pip 26.3's wheel
(hash-checked) into the project's cache, `~/.cache/vllm-forge/pip/26.3`, and puts that folder
first on $PYTHONPATH for everything it starts, so `python3 -m pip` there is 26.3 and the system's
pip is untouched. forge itself runs whatever pip an install has; the image tests' stand-in bases
carry pip 24.3.1.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.version import Version

VERSION = "26.3"
# pip-26.3-py3-none-any.whl from PyPI; pip checks it (--require-hashes) before it is unpacked
SHA256 = "f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13"
DOWNLOAD_TIMEOUT_S = 300


def interpreter_pip() -> Version | None:
    try:
        return Version(metadata.version("pip"))
    except metadata.PackageNotFoundError:
        return None


def pip_folder() -> Path:
    from forge.upstream.releases import cache_dir

    return cache_dir() / "pip" / VERSION


def make_pip_folder() -> Path:
    """The cache folder holding pip VERSION (made once, by one process at a time)."""
    from forge.files import one_maker
    from forge.upstream.releases import locks_dir

    folder = pip_folder()
    if (folder / "pip" / "__init__.py").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with one_maker(folder, locks_dir()):
        if (folder / "pip" / "__init__.py").is_file():
            return folder
        staging = Path(tempfile.mkdtemp(prefix=f".{VERSION}-", dir=folder.parent))
        try:
            wanted = staging / "requirements.txt"
            wanted.write_text(f"pip=={VERSION} --hash=sha256:{SHA256}\n")
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--only-binary=:all:", "--require-hashes", "-r", str(wanted),
                            "-d", str(staging / "wheel")], check=True, capture_output=True,
                           timeout=DOWNLOAD_TIMEOUT_S, stdin=subprocess.DEVNULL)
            (wheel,) = (staging / "wheel").glob("pip-*.whl")
            with zipfile.ZipFile(wheel) as archive:    # zipfile keeps every member inside "tree"
                archive.extractall(staging / "tree")
            os.rename(staging / "tree", folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def use_tests_pip() -> str:
    """Put pip VERSION first on $PYTHONPATH where the interpreter's is older; what was done, in
    one line for the run's header."""
    have = interpreter_pip()
    if have is not None and have >= Version(VERSION):
        return f"pip {have} (the interpreter's)"
    try:
        folder = make_pip_folder()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        detail = exc.stderr.decode(errors="replace").strip().splitlines()[-1:] \
            if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else [str(exc)]
        return (f"pip {have} (the interpreter's: pip {VERSION} could not be fetched into "
                f"{pip_folder()}: {' '.join(detail)}); pip runs take about twice the CPU")
    paths = [str(folder), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return f"pip {VERSION} from {folder} (the interpreter's pip {have} stays as it is)"
