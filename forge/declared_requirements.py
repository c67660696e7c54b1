"""What a vLLM release itself declares for a dependency, read from its sdist's requirements files.

The CUDA builds (the `vllm/vllm-openai` images, the PyPI wheels) take their requirements from
requirements/cuda.txt, which includes requirements/common.txt with `-r` (setup.py's
get_requirements follows `-r` lines the same way). Every line naming the package narrows the
specifier; a release that names it nowhere declares no constraint (an empty SpecifierSet).
"""
from __future__ import annotations

import json
import posixpath
import tarfile
from functools import lru_cache

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from forge.errors import ForgeError
from forge.files import write_text_atomically

ENTRY_FILE = "requirements/cuda.txt"


@lru_cache(maxsize=None)
def _requirement_lines(release: str, offline: bool) -> tuple[tuple[str, str], ...]:
    """(file, line) of every requirement line reached from requirements/cuda.txt; kept beside
    the extracted tree (a release's sdist never changes) so reading one costs no decompression."""
    from forge.releases import cache_dir

    saved = cache_dir() / "declared-requirements" / f"{release}.json"
    try:
        return tuple(tuple(pair) for pair in json.loads(saved.read_text()))
    except (OSError, ValueError):
        pass
    lines = _read_sdist_lines(release, offline)
    write_text_atomically(saved, json.dumps(lines, indent=0))
    return lines


def _read_sdist_lines(release: str, offline: bool) -> tuple[tuple[str, str], ...]:
    from forge.releases import fetch_sdist

    sdist = fetch_sdist(release, offline=offline)
    prefix = f"vllm-{release}/"
    found: list[tuple[str, str]] = []
    with tarfile.open(sdist) as archive:
        def read(relative: str, seen: frozenset) -> None:
            if relative in seen:
                return
            try:
                text = archive.extractfile(prefix + relative).read().decode()
            except (KeyError, AttributeError) as exc:
                raise ForgeError(f"vLLM {release}'s sdist has no {relative}") from exc
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip()
                if line.startswith("-r"):
                    read(posixpath.normpath(posixpath.join(posixpath.dirname(relative),
                                                           line[2:].strip())), seen | {relative})
                elif line and not line.startswith("-"):
                    found.append((relative, line))

        read(ENTRY_FILE, frozenset())
    return tuple(found)


def declared_specifier(release: str, package: str, offline: bool = False) -> SpecifierSet:
    """The specifier release `release` declares for `package` (empty: no constraint)."""
    name = canonicalize_name(package)
    specifier = SpecifierSet()
    for relative, line in _requirement_lines(release, offline):
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue  # a URL or an option pip understands and this check does not need
        if canonicalize_name(requirement.name) == name:
            specifier &= requirement.specifier
    return specifier
