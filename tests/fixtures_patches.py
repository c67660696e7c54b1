"""Installed-vLLM stand-ins for the patch tests: real release trees copied into a tmp
site-packages directory, with the dist-info pip writes (METADATA, INSTALLER, WHEEL, RECORD).

Register with `pytest_plugins = ["tests.fixtures_patches"]` (conftest) or import directly.
"""
from __future__ import annotations

import base64
import hashlib
import shutil
from pathlib import Path

import pytest

from forge import releases


def make_site_packages(version: str, destination: Path, dist_info: bool = True) -> Path:
    """Copy release `version`'s real vllm/ tree into `destination` (a site-packages dir)."""
    source = releases.release_tree(version)
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source / "vllm", destination / "vllm", symlinks=True)
    if dist_info:
        write_dist_info(destination, version)
    return destination


def write_dist_info(site_dir: Path, version: str) -> Path:
    info = site_dir / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\n"
        "Name: vllm\n"
        f"Version: {version}\n"
        "Summary: A high-throughput and memory-efficient inference and serving engine for LLMs\n"
        "Requires-Python: >=3.10\n"
        "License: Apache-2.0\n\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: setuptools\n"
                                "Root-Is-Purelib: false\nTag: cp38-abi3-linux_x86_64\n\n")
    (info / "top_level.txt").write_text("vllm\n")
    rows = [_record_row(site_dir, path) for path in sorted((site_dir / "vllm").rglob("*"))
            if path.is_file()]
    rows += [_record_row(site_dir, info / name)
             for name in ("METADATA", "INSTALLER", "WHEEL", "top_level.txt")]
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return info


def _record_row(site_dir: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(site_dir).as_posix()},sha256={digest},{len(data)}"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes): compare trees byte for byte."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


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
