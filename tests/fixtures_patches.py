"""Installed-vLLM stand-ins for the patch tests: real release trees copied into a tmp
site-packages directory, with the dist-info pip writes (METADATA, INSTALLER, WHEEL, RECORD).

Register with `pytest_plugins = ["tests.fixtures_patches"]` (conftest) or import directly.
"""
from __future__ import annotations

import base64
import csv
import functools
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from forge.errors import ForgeError
from forge.files import files_under, one_maker
from forge.patching.record import RECORD_DIR, RECORD_FILE
from forge.upstream import releases

# Real pure-Python wheels from PyPI, by package, the version a constraint keeps out first:
# transformers 5.15.0 breaks Gemma 4 on vLLM < 0.28 (5.14.1 is the newest below it); fastapi
# 0.137.0 fails every request of vLLM 0.21-0.23 (0.136.3 is the newest below it). fastapi's 58
# files, against transformers' 3,500, make the cheap install for the crash-safety tests.
WHEELS = {"transformers": ("5.15.0", "5.14.1"), "fastapi": ("0.137.0", "0.136.3")}
TRANSFORMERS_WHEELS = WHEELS["transformers"]


def applied_record(site: Path) -> dict:
    """The record `build.py apply` keeps in an install it patched (vllm/.vllm-forge/applied.json)."""
    return json.loads((site / "vllm" / RECORD_DIR / RECORD_FILE).read_text())


def make_site_packages(version: str, destination: Path, dist_info: bool = True) -> Path:
    """Copy release `version`'s real vllm/ tree into `destination` (a site-packages dir)."""
    source = releases.release_tree(version)
    destination.mkdir(parents=True, exist_ok=True)
    copy_tree(source / "vllm", destination / "vllm")
    if dist_info:
        write_dist_info(destination, version, _tree_rows(source))
    return destination


def copy_tree(source: Path, destination: Path) -> None:
    """`source`'s contents into `destination` (made or merged into), links as links, modes and
    times kept: cp -a, a third quicker than shutil.copytree on the 2,500-5,200 files of a vLLM
    or transformers tree, which some 90 tests copy."""
    destination.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", f"{source}/.", str(destination)], check=True)


@functools.cache
def _tree_rows(tree: Path) -> tuple[str, ...]:
    """RECORD rows of a release tree's vllm/ files, hashed once per run: a copy of the (never
    edited) cached tree has the same rows, and some 60 tests make one."""
    return tuple(_record_row(tree, path) for path in sorted((tree / "vllm").rglob("*"))
                 if path.is_file())


def write_dist_info(site_dir: Path, version: str, tree_rows: tuple[str, ...] | None = None) -> Path:
    from forge.patching.dependencies import release_requirements

    info = site_dir / f"vllm-{version}.dist-info"
    info.mkdir()
    # Requires-Dist as the CUDA wheel carries it: the release's own requirements/cuda.txt (a
    # made-up version, such as a release newer than any on PyPI, declares nothing).
    try:
        lines = release_requirements(Version(version).public)
    except ForgeError:
        lines = []
    requires = "".join(f"Requires-Dist: {line}\n" for line in lines)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\n"
        "Name: vllm\n"
        f"Version: {version}\n"
        "Summary: A high-throughput and memory-efficient inference and serving engine for LLMs\n"
        "Requires-Python: >=3.10\n"
        "License: Apache-2.0\n"
        f"{requires}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: setuptools\n"
                                "Root-Is-Purelib: false\nTag: cp38-abi3-linux_x86_64\n\n")
    (info / "top_level.txt").write_text("vllm\n")
    rows = list(tree_rows) if tree_rows is not None else [
        _record_row(site_dir, path) for path in sorted((site_dir / "vllm").rglob("*")) if path.is_file()]
    rows += [_record_row(site_dir, info / name)
             for name in ("METADATA", "INSTALLER", "WHEEL", "top_level.txt")]
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return info


def _record_row(site_dir: Path, path: Path) -> str:
    """A CSV row as pip writes it (a path with a comma, as MoE config names have, is quoted)."""
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(
        [path.relative_to(site_dir).as_posix(), f"sha256={digest}", len(data)])
    return out.getvalue()


def statuses_on_checked_releases(patch_id: str):
    """(version, release tree, computed status) of one patch on every release the series checks,
    each computed from the release's own source (what the candidate tests compare with their table)."""
    from forge.patching.readme_table import checked_releases
    from forge.patching.series import load_series
    from forge.patching.status import status_of

    series = load_series()
    patch = series.get(patch_id)
    for version in checked_releases(series):
        tree = releases.release_tree(version)
        yield version, tree, status_of(patch, tree, Version(version))


# (device, inode, size, mtime, ctime) -> sha256 of the bytes: a file whose status is unchanged
# since it was hashed holds the same bytes (every write moves ctime, which no process can set
# back), so a test that snapshots a site of 7,700 files before and after each step hashes only
# what the step wrote, as git's index does.
_DIGESTS: dict[tuple, str] = {}


def _digest(path: str, st: os.stat_result) -> str:
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _DIGESTS:
        with open(path, "rb") as f:
            _DIGESTS[key] = hashlib.sha256(f.read()).hexdigest()
    return _DIGESTS[key]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path -> sha256 of its bytes; the files
    sorted(rglob("*")) finds, as forge.files.files_under lists them): two snapshots are equal
    when the trees are equal byte for byte."""
    found = {}
    for relative in files_under(root):
        path = os.path.join(root, relative)
        found[relative] = _digest(path, os.stat(path))
    return found


@pytest.fixture
def vllm_site(tmp_path):
    """Factory: vllm_site("0.25.0") -> a fresh site-packages copy holding that release."""
    made = []

    def make(version: str, dist_info: bool = True) -> Path:
        site = make_site_packages(version, tmp_path / f"site-{version}-{len(made)}", dist_info)
        made.append(site)
        return site

    return make


REAL_SERIES = Path(__file__).resolve().parent.parent / "patches" / "series.yaml"


def source_patches_applying(version: str) -> list[str]:
    """Ids of the committed series' source patches whose status on release `version`'s real
    tree is `applies`, in series order: what `build.py apply` writes on a site holding that
    release (computed from the manifest, not a count kept in each test). Candidates (series.yaml
    `candidate: true`) are left out, as `build.py apply` leaves them out without --with-candidate."""
    from forge.patching.series import load_series
    from forge.patching.status import status_of
    from forge.patching.vocabulary import Kind, Status

    tree, parsed = releases.release_tree(version), Version(version)
    return [p.id for p in load_series(check_index=False).patches
            if p.kind == Kind.SOURCE and not p.candidate
            and status_of(p, tree, parsed).status == Status.APPLIES]


def write_series(directory: Path, patches: list[dict], files: dict[str, bytes],
                 checked_from: str = "0.21.0", checked_through: str = "0.33.0") -> Path:
    """A manifest in `directory` holding `patches`; `files` (relative path -> bytes) are
    written next to it and each patch's files get their real sha256 filled in."""
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_bytes(data)
    for patch in patches:
        for entry in patch.get("files", []):
            entry.setdefault("sha256", hashlib.sha256(files[entry["path"]]).hexdigest())
    path = directory / "series.yaml"
    path.write_text(yaml.safe_dump({"checked_from": checked_from,
                                    "checked_through": checked_through,
                                    "patches": patches}, sort_keys=False))
    return path


def real_patch_entry(**changes) -> tuple[dict, bytes]:
    """The committed first patch's manifest entry and diff bytes, with `changes` applied."""
    import yaml

    data = yaml.safe_load(REAL_SERIES.read_text())["patches"][0]
    diff = (REAL_SERIES.parent / data["files"][0]["path"]).read_bytes()
    data.update(changes)
    data["files"] = [{"path": "source/p.diff"}]
    return data, diff


def wheelhouse() -> Path:
    """The real WHEELS from PyPI, downloaded once into the forge cache (one maker per wheel: a
    second worker waits for the first's download rather than fetching it again)."""
    directory = releases.cache_dir() / "wheels"
    directory.mkdir(parents=True, exist_ok=True)
    for package, versions in WHEELS.items():
        for version in versions:
            wheel = directory / f"{package}-{version}-py3-none-any.whl"
            with one_maker(wheel, releases.locks_dir()):
                if not wheel.is_file():
                    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                    "--only-binary", ":all:", "--disable-pip-version-check",
                                    "--dest", str(directory), f"{package}=={version}"],
                                   check=True, capture_output=True)
    return directory


def install_wheel(site_dir: Path, package: str, version: str) -> None:
    """What `pip install --no-deps --target SITE --upgrade PKG==V` from the wheelhouse puts in
    a site-packages directory; pip runs once per version, later calls copy its result."""
    made = releases.cache_dir() / "pip-target" / f"{package}-{version}"
    # One maker per entry (forge.files.one_maker, as for release trees): a second worker that
    # needs it waits, then copies it, instead of running the same pip beside the first.
    with one_maker(made, releases.locks_dir()):
        if not made.is_dir():
            staging = made.with_name(made.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)     # a killed maker's leftover
            subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                            "--disable-pip-version-check", "--find-links", str(wheelhouse()),
                            "--target", str(staging), f"{package}=={version}"],
                           check=True, capture_output=True)
            staging.rename(made)
    copy_tree(made, site_dir)


@pytest.fixture
def site_with_transformers(vllm_site):
    """Factory: a site-packages holding vLLM `version` and the real transformers `transformers`."""
    def make(version: str = "0.25.0", transformers: str = "5.15.0") -> Path:
        site = vllm_site(version)
        install_wheel(site, "transformers", transformers)
        return site

    return make
