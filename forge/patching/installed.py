"""Find an installed vLLM without importing it (importing vllm pulls in torch and CUDA).

The version comes from the `vllm-*.dist-info/METADATA` pip wrote (read through
importlib.metadata), falling back to `vllm/_version.py` for source checkouts and editable
installs that have no dist-info next to the package.
"""
from __future__ import annotations

import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError

# setuptools-scm writes `__version__ = version = '0.25.0'` (older: `__version__ = "0.25.0"`).
VERSION_LINE = re.compile(r"""^(?:__version__|version)\s*(?:=\s*\w+\s*)*=\s*['"]([^'"]+)['"]""",
                          re.MULTILINE)


@dataclass(frozen=True)
class InstalledVllm:
    site_dir: Path       # the directory that holds vllm/ (site-packages)
    package_dir: Path    # site_dir / "vllm"
    version: Version
    on_sys_path: bool = False   # found on sys.path (its dependencies may sit in other dirs)

    @property
    def search_path(self) -> list[str]:
        """Where this install's other packages (transformers, ...) are found: the whole sys.path
        for the running environment, only the given directory for a --site-packages target."""
        return [p for p in sys.path if p] if self.on_sys_path else [str(self.site_dir)]


def find_vllm(site_packages: str | Path | None = None) -> InstalledVllm:
    """The vLLM package in `site_packages`, or the first one on sys.path."""
    if site_packages is not None:
        site_dir = Path(site_packages)
        if not site_dir.is_dir():
            raise ForgeError(f"--site-packages {site_dir}: no such directory")
        if not (site_dir / "vllm" / "__init__.py").is_file():
            raise ForgeError(f"--site-packages {site_dir}: no vllm package in it (no vllm/__init__.py)")
        candidates = [site_dir]
    else:
        candidates = [Path(entry or ".") for entry in sys.path
                      if (Path(entry or ".") / "vllm" / "__init__.py").is_file()]
        if not candidates:
            raise ForgeError("no vLLM found: no vllm/__init__.py on sys.path "
                             "(pass --site-packages DIR)")
    site_dir = candidates[0].resolve()
    return InstalledVllm(site_dir, site_dir / "vllm", installed_version(site_dir),
                         on_sys_path=site_packages is None)


def installed_version(site_dir: Path) -> Version:
    text = _metadata_version(site_dir) or _version_file(site_dir)
    if text is None:
        raise ForgeError(f"{site_dir}/vllm: cannot tell its version "
                         "(no vllm-*.dist-info/METADATA and no vllm/_version.py)")
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise ForgeError(f"{site_dir}/vllm: installed version {text!r} is not a PEP 440 version") \
            from exc


def _metadata_version(site_dir: Path) -> str | None:
    # Only the dist-info in this very directory: another site dir may hold a different vllm.
    for dist in importlib.metadata.distributions(path=[str(site_dir)]):
        if (dist.metadata["Name"] or "").lower() == "vllm":
            return dist.version
    return None


def _version_file(site_dir: Path) -> str | None:
    path = site_dir / "vllm" / "_version.py"
    if not path.is_file():
        return None
    match = VERSION_LINE.search(path.read_text(errors="replace"))
    return match[1] if match else None
