"""The Docker build context: exactly the files the image needs, packed into a byte-reproducible tar.

Same commit + same lock -> same tar bytes -> same context hash: entries are sorted, owned by 0:0,
with normalized modes and every mtime set to SOURCE_DATE_EPOCH (the commit time), to the second.
The files are the ones git knows about (tracked, or untracked and not ignored) under CONTEXT_PATHS,
so caches and build outputs never leak into an image.

A file's mtime carries a fraction of a second taken from its content (file_mtime): BuildKit sends a
context to the builder incrementally and takes a file whose size and mtime it has seen before for
unchanged, whichever directory it comes from, so two same-size versions of a file (an uncommitted
edit, a build record naming another revision) would otherwise build from the stale one (seen
2026-11-30 on Docker 20.10.24 + buildx 0.13.1: tests/test_images_build.py::
test_a_same_size_edit_reaches_the_image fails with whole-second mtimes).
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.files import SOURCE, read_bytes
from forge.json_text import dump_json

DOCKERFILE = "images/Dockerfile"
# What the image carries, lightest-changing first is the Dockerfile's business; here only the set.
CONTEXT_PATHS = ("build.py", "forge", "patches", "verify", "models", "recipes", "images/targets.yaml")
RECORD_NAME = "build-record.json"
SKIPPED_PARTS = {"__pycache__", ".pytest_cache"}


@dataclass(frozen=True)
class Source:
    revision: str        # commit sha, "+dirty" when context files differ from it; "unknown" outside git
    epoch: int           # SOURCE_DATE_EPOCH: the commit time (or $SOURCE_DATE_EPOCH)
    dirty: bool


def _git(*args: str, root: Path = REPO_ROOT) -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                                timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


# The latest SOURCE_DATE_EPOCH taken: 9999-12-31 23:59:59 UTC (a date that every tool downstream,
# BuildKit and the OCI labels' RFC 3339 dates included, can still write with a four-digit year).
EPOCH_MAX = 253402300799


def source_date_epoch() -> int | None:
    """$SOURCE_DATE_EPOCH as the reproducible-builds spec defines it: a whole number of seconds
    since 1970, 0 .. EPOCH_MAX, digits only; None where it is unset (or empty). Anything else is
    one line naming the variable: a typo must not build an image dated from a wrong number."""
    text = os.environ.get("SOURCE_DATE_EPOCH")
    if not text:
        return None
    if not re.fullmatch(r"[0-9]{1,12}", text) or int(text) > EPOCH_MAX:
        raise ForgeError(f"$SOURCE_DATE_EPOCH={text!r}: not a whole number of seconds "
                         f"since 1970 from 0 to {EPOCH_MAX} (9999-12-31); unset it to use the "
                         "commit's time")
    return int(text)


def source_info(root: Path = REPO_ROOT) -> Source:
    head = (_git("rev-parse", "HEAD", root=root) or "").strip()
    override = source_date_epoch()
    if not head:
        return Source("unknown", override or 0, dirty=False)
    epoch = override if override is not None else \
        int((_git("log", "-1", "--format=%ct", root=root) or "0").strip())
    status = _git("status", "--porcelain", "--untracked-files=all", "--", DOCKERFILE,
                  *CONTEXT_PATHS, root=root) or ""
    # Byte-code caches never reach the context, so they do not make a checkout dirty either.
    changed = [line for line in status.splitlines()
               if not SKIPPED_PARTS & set(Path(line[3:]).parts) and not line.endswith(".pyc")]
    dirty = bool(changed)
    return Source(head + ("+dirty" if dirty else ""), epoch, dirty)


def context_files(root: Path = REPO_ROOT) -> list[str]:
    """Repository-relative paths of every file the image gets, sorted."""
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                  *CONTEXT_PATHS, root=root)
    if listed is None:  # not a git checkout (e.g. an unpacked tarball): walk the directories
        found = []
        for top in CONTEXT_PATHS:
            base = root / top
            candidates = [base] if base.is_file() else (p for p in base.rglob("*") if p.is_file())
            found += [str(p.relative_to(root)) for p in candidates]
        names = found
    else:
        names = [n for n in listed.split("\0") if n]
    return sorted(n for n in set(names)
                  if (root / n).is_file() and not SKIPPED_PARTS & set(Path(n).parts)
                  and not n.endswith(".pyc"))


def file_mtime(data: bytes, epoch: int) -> float:
    """SOURCE_DATE_EPOCH plus a fraction of a second (whole microseconds) from the content's sha256:
    the same for the same bytes, different (but for one chance in a million) for other bytes."""
    micros = int.from_bytes(hashlib.sha256(data).digest()[:8], "big") % 1_000_000
    return epoch + micros / 1_000_000


def _add(archive: tarfile.TarFile, name: str, data: bytes, mode: int, epoch: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, file_mtime(data, epoch)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    archive.addfile(info, io.BytesIO(data))


def _add_dir(archive: tarfile.TarFile, name: str, epoch: int) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    archive.addfile(info)


def build_context(record: dict, epoch: int, root: Path = REPO_ROOT) -> tuple[bytes, str]:
    """(tar bytes, sha256 hex) of the context: Dockerfile, the CONTEXT_PATHS files, the build record."""
    files = context_files(root)
    entries: dict[str, tuple[bytes, int]] = {
        "Dockerfile": (read_bytes(root / DOCKERFILE, SOURCE), 0o644),
        RECORD_NAME: ((dump_json(record, indent=1, sort_keys=True) + "\n").encode(), 0o644),
    }
    for name in files:
        path = root / name
        entries[name] = (read_bytes(path, SOURCE), 0o755 if os.access(path, os.X_OK) else 0o644)
    # Every directory the Dockerfile copies must exist even when empty (COPY fails on a missing path).
    directories = {p for p in CONTEXT_PATHS if not (root / p).is_file()}
    for name in entries:
        parents = Path(name).parents
        directories.update(str(p) for p in parents if str(p) != ".")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(set(entries) | directories):
            if name in entries:
                _add(archive, name, *entries[name], epoch)
            else:
                _add_dir(archive, name, epoch)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()
