"""The build context is byte-reproducible and carries only what the image needs."""
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from forge.images import context
from tests.build_cli import run_build

REPO = Path(__file__).resolve().parents[1]
RECORD = {"target": "a100", "vllm_version": "0.25.0"}


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name in ("forge", "patches", "images"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "build.py", root / "build.py")
    return root


def _git(root: Path, *args: str, env=None) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def test_same_inputs_same_bytes_and_normalized_entries(tmp_path):
    root = _copy(tmp_path)
    first, digest = context.build_context(RECORD, 1700000000, root)
    second, digest_again = context.build_context(RECORD, 1700000000, root)
    assert first == second and digest == digest_again
    other, other_digest = context.build_context(RECORD, 1700000001, root)
    assert other_digest != digest, "SOURCE_DATE_EPOCH is part of the context"
    with tarfile.open(fileobj=io.BytesIO(first)) as archive:
        members = archive.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {"Dockerfile", "build-record.json", "build.py", "forge/images/plan.py", "verify", "recipes"} <= set(names)
    assert all(m.uid == 0 and m.gid == 0 and int(m.mtime) == 1700000000 for m in members)


def test_same_size_other_content_gets_another_mtime(tmp_path):
    """BuildKit takes a context file of a size and mtime it has seen for unchanged: a same-size
    edit must change the mtime (below the second; the second stays SOURCE_DATE_EPOCH), and the
    same bytes must keep it."""
    root = _copy(tmp_path)
    plan_file = root / "forge" / "images" / "plan.py"
    text = plan_file.read_text()
    first, _ = context.build_context(RECORD, 1700000000, root)
    plan_file.write_text(text.replace("import hashlib", "import hashli_", 1))
    edited, _ = context.build_context(RECORD, 1700000000, root)
    plan_file.write_text(text)
    again, _ = context.build_context(RECORD, 1700000000, root)

    def member(data, name):
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            return archive.getmember(name)

    before, after = member(first, "forge/images/plan.py"), member(edited, "forge/images/plan.py")
    assert before.size == after.size and before.mtime != after.mtime
    assert int(before.mtime) == int(after.mtime) == 1700000000
    assert member(again, "forge/images/plan.py").mtime == before.mtime
    assert member(edited, "forge/images/bake.py").mtime == member(first, "forge/images/bake.py").mtime
    extracted = tmp_path / "out"
    with tarfile.open(fileobj=io.BytesIO(edited)) as archive:
        archive.extractall(extracted, filter="data")
    assert (extracted / "forge" / "images" / "plan.py").stat().st_mtime == after.mtime


def test_caches_and_untracked_ignored_files_stay_out(tmp_path):
    root = _copy(tmp_path)
    (root / "forge" / "__pycache__").mkdir()
    (root / "forge" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / ".gitignore").write_text("*.log\n")
    (root / "patches" / "debug.log").write_text("noise")
    _git(root, "init", "-q")
    names = context.context_files(root)
    assert "forge/images/plan.py" in names and "build.py" in names
    assert not any("__pycache__" in n or n.endswith(".log") for n in names)
    assert [n for n in names if n.startswith("images/")] == ["images/targets.yaml"], \
        "only the context paths are sent (of images/, the targets the recipes name)"


def test_source_revision_epoch_and_dirty(tmp_path):
    root = _copy(tmp_path)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_COMMITTER_DATE": "1700000000 +0000",
           "GIT_AUTHOR_DATE": "1700000000 +0000", "PATH": "/usr/bin:/bin"}
    _git(root, "commit", "-q", "-m", "x", env=env)
    head = _git(root, "rev-parse", "HEAD").strip()
    source = context.source_info(root)
    assert (source.revision, source.epoch, source.dirty) == (head, 1700000000, False)
    (root / "forge" / "__pycache__").mkdir()
    (root / "forge" / "__pycache__" / "plan.cpython-311.pyc").write_bytes(b"\0")
    assert not context.source_info(root).dirty, "byte-code caches are not changes"
    (root / "forge" / "images" / "plan.py").write_text("# changed\n")
    dirty = context.source_info(root)
    assert dirty.revision == head + "+dirty" and dirty.dirty


# --- SOURCE_DATE_EPOCH ------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["abc", "-5", "1.5", " 17", "1e9", "253402300800",
                                   "99999999999999999999"])
def test_a_source_date_epoch_out_of_range_is_one_line_naming_it(tmp_path, value):
    """Before: `abc` was a ValueError traceback and `-5` was taken (an image dated 1969)."""
    from forge.images.lock import save_lock
    from forge.targets import load_targets

    refs = {t.base_for("0.27.1").ref for t in load_targets().values()}
    lock = save_lock({ref: "sha256:" + "a" * 64 for ref in refs}, tmp_path / "lock.yaml",
                     {ref: ["linux/amd64", "linux/arm64"] for ref in refs})
    done = run_build("--target", "gb10", "--vllm", "0.27.1", "--plan", timeout=600,
                     env={**_environment(), "VLLM_FORGE_LOCK": str(lock), "SOURCE_DATE_EPOCH": value})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    assert done.stderr == (f"error: $SOURCE_DATE_EPOCH={value!r}: not a whole number of seconds "
                           "since 1970 from 0 to 253402300799 (9999-12-31); unset it to use the "
                           "commit's time\n")


def _environment() -> dict:
    """What the build sees on top of this environment."""
    return {"DOCKER_HOST": "unix:///nonexistent/docker.sock", "VLLM_FORGE_REPOSITORY": "ghcr.io/acme/vllm-forge"}


@pytest.mark.parametrize("value, epoch", [("0", 0), ("1790000000", 1790000000),
                                          ("253402300799", 253402300799), ("", None)])
def test_a_source_date_epoch_in_range_is_taken(monkeypatch, value, epoch):
    from forge.images.context import source_date_epoch

    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    assert source_date_epoch() == epoch
