"""`build.py apply`: patch an installed vLLM (a real release tree copied into a site-packages
directory with pip's dist-info), all or nothing, and revert byte for byte."""
from __future__ import annotations

import contextlib
import csv
import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from forge.errors import ConflictError, ForgeError
from forge.patching import diffs
from forge.patching.apply import FAIL_AFTER_ENV, KILL_AFTER_ENV, RECORD_DIR, apply_series
from forge.patching.installed import find_vllm
from forge.patching.series import load_series
from tests.fixtures_patches import (
    applied_record,
    real_patch_entry,
    snapshot,
    source_patches_applying,
    write_dist_info,
    write_series,
)
from tests.test_patch_series import REPO, run_build

TARGET = "vllm/v1/spec_decode/llm_base_proposer.py"
FIXED_LINE = b'            if share_embeddings and hasattr(self.model, "has_own_embed_tokens"):\n'


def test_apply_then_revert_restores_the_tree_byte_for_byte(vllm_site):
    site = vllm_site("0.25.0")
    wanted = source_patches_applying("0.25.0")
    assert "gemma4-mtp-share-embeddings" in wanted
    targets = {rel for patch_id in wanted
               for rel in diffs.target_paths(load_series().get(patch_id).diffs)}
    original = snapshot(site)
    applied = run_build("apply", "--site-packages", str(site), "--vllm", "0.25.0")
    assert applied.returncode == 0, applied.stderr
    assert f"applied {len(wanted)} patch(es)" in applied.stdout
    assert all(patch_id in applied.stdout for patch_id in wanted)
    patched = (site / TARGET).read_bytes()
    assert FIXED_LINE in patched and b"# Only share when both models use the same" not in patched
    changed = {k for k, v in snapshot(site).items() if original.get(k) != v}
    # The patched files, pip's RECORD (listing them with their new hashes) and the record:
    # applied.json, the run's file list and each changed file's original (RECORD's is 0).
    ours = {f"vllm/{RECORD_DIR}/{name}" for name in
            ("applied.json", "originals/files.json",
             *(f"originals/{i}" for i in range(len(targets) + 1)))}
    assert changed == targets | {"vllm-0.25.0.dist-info/RECORD"} | ours
    # pip uninstall removes every file vllm-forge added.
    rows = {row[0]: row for row in csv.reader(
        (site / "vllm-0.25.0.dist-info" / "RECORD").read_text().splitlines())}
    assert ours <= set(rows) and rows[TARGET][2] == str(len(patched))
    record = applied_record(site)
    assert record["applied"] == wanted and record["vllm"] == "0.25.0"
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert "restored byte for byte" in reverted.stdout
    assert snapshot(site) == original
    assert not list(site.rglob("*vllm-forge*"))     # no temp files, no record left behind


def test_patched_file_matches_git_apply_and_upstreams_fix(vllm_site, tmp_path):
    site = vllm_site("0.26.0")
    reference = tmp_path / "git"
    (reference / TARGET).parent.mkdir(parents=True)
    (reference / TARGET).write_bytes((site / TARGET).read_bytes())
    diff_file = load_series().get("gemma4-mtp-share-embeddings").files[0].absolute
    subprocess.run(["git", "apply", str(diff_file)], cwd=reference, check=True)
    apply_series(site_packages=site)
    assert (site / TARGET).read_bytes() == (reference / TARGET).read_bytes()


def test_second_apply_is_a_no_op_that_says_so(vllm_site):
    site = vllm_site("0.25.1")
    assert apply_series(site_packages=site).action == "applied"
    after_first = snapshot(site)
    second = run_build("apply", "--site-packages", str(site))
    assert second.returncode == 0
    assert "already carries this patch series" in second.stdout and "nothing to do" in second.stdout
    assert snapshot(site) == after_first


def test_release_that_needs_nothing_is_left_untouched(vllm_site):
    # 0.32.0: every source patch of the series is upstream's or not needed there (0.27.0 was,
    # until gemma4-mtp-draft-kv-scales, >=0.26.0,<0.32.0)
    site = vllm_site("0.32.0")
    original = snapshot(site)
    result = run_build("apply", "--site-packages", str(site))
    assert result.returncode == 0 and "nothing to apply" in result.stdout
    assert "already-upstream" in result.stdout
    assert snapshot(site) == original
    assert "nothing to revert" in run_build("apply", "--site-packages", str(site),
                                            "--revert").stdout


def test_edited_install_is_a_conflict_and_nothing_is_written(vllm_site):
    site = vllm_site("0.25.0")
    text = (site / TARGET).read_bytes()
    (site / TARGET).write_bytes(text.replace(b"            if share_embeddings:\n",
                                             b"            if share_embeddings:  # local edit\n"))
    before = snapshot(site)
    result = run_build("apply", "--site-packages", str(site))
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert f"{TARGET}: hunk 1 (line 1468): its old lines match nowhere" in result.stderr
    assert "nothing changed" in result.stderr
    assert snapshot(site) == before


@pytest.mark.parametrize("renames_before_failure", [0, 1, 2, 3])
def test_failure_in_the_middle_of_apply_leaves_the_tree_untouched(vllm_site, renames_before_failure):
    """Renames: 1 marks the record applying, 2 puts pip's RECORD in place, 3 the patched file,
    4 marks the record applied."""
    site = vllm_site("0.25.0")
    original = snapshot(site)
    result = run_build("apply", "--site-packages", str(site),
                       **{FAIL_AFTER_ENV: str(renames_before_failure)})
    assert result.returncode == 2
    assert f"injected failure after {renames_before_failure} rename(s)" in result.stderr
    assert f"rolled back {renames_before_failure} step(s), nothing changed" in result.stderr
    assert result.stderr.count("\n") == 1
    assert snapshot(site) == original
    assert apply_series(site_packages=site).action == "applied"   # and a clean retry works


def test_apply_killed_mid_way_is_refused_then_reverted_byte_for_byte(vllm_site):
    site = vllm_site("0.25.0")
    original = snapshot(site)
    killed = run_build("apply", "--site-packages", str(site), **{KILL_AFTER_ENV: "3"})
    assert killed.returncode == -signal.SIGKILL
    assert FIXED_LINE in (site / TARGET).read_bytes()          # the kill hit after the rename
    again = run_build("apply", "--site-packages", str(site))
    assert again.returncode == 2 and "an earlier apply was interrupted" in again.stderr
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original


def test_failure_in_the_middle_of_revert_keeps_the_patched_tree(vllm_site):
    site = vllm_site("0.25.0")
    apply_series(site_packages=site)
    patched = snapshot(site)
    result = run_build("apply", "--site-packages", str(site), "--revert", **{FAIL_AFTER_ENV: "1"})
    assert result.returncode == 2 and "rolled back 1 step(s)" in result.stderr
    assert snapshot(site) == patched


@contextlib.contextmanager
def read_only_bind_mount(path: Path):
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_read_only_site_packages_is_refused_with_nothing_changed(vllm_site):
    site = vllm_site("0.25.0")
    original = snapshot(site)
    with read_only_bind_mount(site):
        with pytest.raises(OSError) as refused:   # root ignores modes; the mount really refuses
            (site / TARGET).open("ab").close()
        assert refused.value.errno == errno.EROFS
        result = run_build("apply", "--site-packages", str(site))
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1
        assert "Read-only file system; nothing changed" in result.stderr
        # The record is written first (so a killed run can be cleaned up): it is what fails.
        assert f"cannot write {site / 'vllm' / RECORD_DIR}:" in result.stderr
    assert snapshot(site) == original


def test_a_patched_install_on_a_read_only_mount_is_reported_not_crashed(vllm_site):
    """The leftover cleanup every run starts with must not write where there is nothing to
    clean: a patched, read-only install says it is patched; a revert there fails in one line."""
    site = vllm_site("0.25.0")
    apply_series(site_packages=site)
    patched = snapshot(site)
    with read_only_bind_mount(site):
        again = run_build("apply", "--site-packages", str(site))
        assert again.returncode == 0, again.stderr
        assert "already carries this patch series" in again.stdout
        revert = run_build("apply", "--site-packages", str(site), "--revert")
        assert revert.returncode == 2 and revert.stderr.count("\n") == 1
        assert "Read-only file system; nothing changed" in revert.stderr
    assert snapshot(site) == patched


def test_missing_or_empty_site_packages_and_no_vllm_on_sys_path(tmp_path):
    missing = run_build("apply", "--site-packages", str(tmp_path / "nope"))
    assert (missing.returncode, missing.stderr) == (
        2, f"error: --site-packages {tmp_path / 'nope'}: no such directory\n")
    empty = run_build("apply", "--site-packages", str(tmp_path))
    assert empty.returncode == 2 and "no vllm package in it" in empty.stderr
    assert subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode
    nowhere = run_build("apply")
    assert nowhere.returncode == 2
    assert nowhere.stderr == ("error: no vLLM found: no vllm/__init__.py on sys.path "
                              "(pass --site-packages DIR)\n")


def test_vllm_is_found_on_sys_path_without_importing_it(vllm_site):
    site = vllm_site("0.26.0")
    # vllm/__init__.py imports torch, which this host lacks: finding it must not import it.
    result = subprocess.run([sys.executable, "build.py", "apply"], cwd=REPO, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    assert f"vLLM 0.26.0 at {site / 'vllm'}" in result.stdout
    assert FIXED_LINE in (site / TARGET).read_bytes()


def test_version_comes_from_dist_info_then_from_version_file(vllm_site, tmp_path):
    with_metadata = vllm_site("0.25.0")
    assert find_vllm(with_metadata).version == Version("0.25.0")
    bare = vllm_site("0.25.1", dist_info=False)
    assert find_vllm(bare).version == Version("0.25.1")       # vllm/_version.py
    local = vllm_site("0.26.0", dist_info=False)
    write_dist_info(local, "0.26.0+cu130")
    assert find_vllm(local).version == Version("0.26.0+cu130")
    with pytest.raises(ForgeError, match=r"--vllm 0.26.0\+cu129: the vLLM installed at .* is "
                                         r"0.26.0\+cu130"):
        apply_series(site_packages=local, expected_version="0.26.0+cu129")
    report = apply_series(site_packages=local, expected_version="0.26.0")   # the release it names
    assert report.applied == source_patches_applying("0.26.0")


def test_uncovered_or_unexpected_version_is_refused(vllm_site):
    checked = Version(load_series().checked_through)
    unchecked = f"{checked.major}.{checked.minor + 1}.0"
    site = vllm_site("0.33.0", dist_info=False)
    # newer than checked_through: unchecked (code and dist-info say so alike, as a real one would)
    (site / "vllm" / "_version.py").write_text(f"__version__ = version = '{unchecked}'\n")
    write_dist_info(site, unchecked)
    before = snapshot(site)
    result = run_build("apply", "--site-packages", str(site))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"vLLM {unchecked}" in result.stderr and "not covered by the manifest" in result.stderr
    assert snapshot(site) == before
    old = vllm_site("0.21.0", dist_info=False)
    (old / "vllm" / "_version.py").write_text("__version__ = version = '0.20.2.dev7'\n")
    write_dist_info(old, "0.20.2.dev7")      # a dev build of a release before checked_from
    with pytest.raises(ForgeError, match=r"vLLM 0.20.2.dev7 .* not covered"):
        apply_series(site_packages=old)
    other = vllm_site("0.25.0")
    mismatch = run_build("apply", "--site-packages", str(other), "--vllm", "0.26.0")
    assert mismatch.returncode == 2
    assert "--vllm 0.26.0: the vLLM installed at" in mismatch.stderr and "is 0.25.0" in mismatch.stderr


def test_revert_refuses_a_file_changed_since_apply(vllm_site):
    site = vllm_site("0.25.0")
    apply_series(site_packages=site)
    (site / TARGET).write_bytes((site / TARGET).read_bytes() + b"# edited later\n")
    before = snapshot(site)
    with pytest.raises(ForgeError, match="changed since vllm-forge patched it; not reverting"):
        apply_series(site_packages=site, revert=True)
    assert snapshot(site) == before


def saved_original_of(site: Path, rel: str) -> Path:
    [entry] = [e for e in applied_record(site)["files"] if e["path"] == rel]
    return site / "vllm" / RECORD_DIR / entry["original"]


def test_revert_puts_each_file_back_with_its_mode_and_a_fresh_time(vllm_site):
    """A saved original only the record holds is linked back into place: it gets the file's mode
    and the time of the revert (a bytecode cache compares a source's mtime and size), never the
    time it was saved at."""
    site = vllm_site("0.25.0")
    os.chmod(site / TARGET, 0o640)
    original = snapshot(site)
    apply_series(site_packages=site)
    saved = saved_original_of(site, TARGET)
    os.utime(saved, ns=(0, 0))
    apply_series(site_packages=site, revert=True)
    restored = os.stat(site / TARGET)
    assert snapshot(site) == original
    assert stat.S_IMODE(restored.st_mode) == 0o640 and restored.st_mtime_ns != 0
    assert restored.st_nlink == 1        # the record's name for it went with the record


def test_revert_copies_a_saved_original_that_has_another_name(vllm_site, tmp_path):
    """A saved original with a second name is read and written, not linked: putting the file
    back changes nothing about the other name (its mode, its time)."""
    site = vllm_site("0.25.0")
    os.chmod(site / TARGET, 0o640)
    original = snapshot(site)
    apply_series(site_packages=site)
    saved = saved_original_of(site, TARGET)
    os.chmod(saved, 0o600)
    os.utime(saved, ns=(0, 0))
    other = tmp_path / "other-name"
    os.link(saved, other)
    apply_series(site_packages=site, revert=True)
    assert snapshot(site) == original
    restored = os.stat(site / TARGET)
    assert stat.S_IMODE(restored.st_mode) == 0o640 and restored.st_nlink == 1
    kept = os.stat(other)
    assert (stat.S_IMODE(kept.st_mode), kept.st_mtime_ns, kept.st_nlink) == (0o600, 0, 1)


def test_apply_saves_a_file_with_another_name_as_a_copy_and_revert_leaves_that_name_alone(
        vllm_site, tmp_path):
    """An installed file with a second name (an installer that links files from its cache) is
    saved as a copy, not a link, so nothing apply or revert does touches the other name."""
    site = vllm_site("0.25.0")
    cached = tmp_path / "installer-cache-entry"
    os.link(site / TARGET, cached)
    os.utime(cached, ns=(0, 0))
    original = snapshot(site)
    record_inode = os.stat(site / "vllm-0.25.0.dist-info" / "RECORD").st_ino
    apply_series(site_packages=site)
    saved = saved_original_of(site, TARGET)
    assert os.stat(saved).st_ino != os.stat(cached).st_ino
    # RECORD has no other name: its original is kept as the very file, not read and written
    assert os.stat(saved_original_of(site, "vllm-0.25.0.dist-info/RECORD")).st_ino == record_inode
    apply_series(site_packages=site, revert=True)
    assert snapshot(site) == original
    kept = os.stat(cached)
    assert (kept.st_mtime_ns, kept.st_nlink) == (0, 1)


def test_moe_configs_go_to_the_config_dir_and_revert_removes_them(vllm_site, tmp_path):
    name = "E=128,N=704,device_name=NVIDIA_H200.json"
    config = b'{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, ' \
             b'"GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}\n'
    source, diff = real_patch_entry()
    moe = {"id": "h200-bf16", "title": "t", "kind": "moe-config", "releases": ">=0.24.0",
           "why": "w", "files": [{"path": f"moe-configs/{name}"}]}
    series = write_series(tmp_path / "series", [source, moe],
                          {"source/p.diff": diff, f"moe-configs/{name}": config})
    site = vllm_site("0.25.0")
    original = snapshot(site)
    without = apply_series(site_packages=site, series_path=series)
    assert without.applied == ["gemma4-mtp-share-embeddings"]
    assert "h200-bf16: not installed: pass --moe-config-dir" in "\n".join(without.lines())
    apply_series(site_packages=site, revert=True)
    moe_dir = tmp_path / "moe"
    report = apply_series(site_packages=site, series_path=series, moe_config_dir=moe_dir)
    assert report.applied == ["gemma4-mtp-share-embeddings", "h200-bf16"]
    assert (moe_dir / name).read_bytes() == config
    apply_series(site_packages=site, revert=True)
    assert not (moe_dir / name).exists() and snapshot(site) == original


def test_apply_with_another_series_is_refused_until_reverted(vllm_site, tmp_path):
    site = vllm_site("0.25.0")
    apply_series(site_packages=site)
    entry, diff = real_patch_entry()
    other = write_series(tmp_path / "other", [entry], {"source/p.diff": diff + b"\n"})
    with pytest.raises(ForgeError, match="patched by a different patch series"):
        apply_series(site_packages=site, series_path=other)


def test_conflict_error_type_and_exit_code(vllm_site):
    site = vllm_site("0.26.0")
    (site / TARGET).write_bytes(b"# emptied\n" + b"differs from draft\n")
    with pytest.raises(ConflictError) as caught:
        apply_series(site_packages=site)
    assert caught.value.exit_code == 3


def test_apply_runs_with_only_python_pyyaml_packaging_and_pydantic(vllm_site, tmp_path):
    """As in vLLM's image with nothing of ours installed: no site-packages but PyYAML, packaging and
    pydantic v2 with what it needs (vLLM requires pydantic; forge.schema validates the series with
    it), no requests, no docker."""
    import annotated_types
    import packaging
    import pydantic
    import pydantic_core
    import typing_extensions
    import typing_inspection
    import yaml

    bare = tmp_path / "bare"
    bare.mkdir()
    for module in (yaml, packaging, pydantic, pydantic_core, annotated_types, typing_inspection):
        package_dir = Path(module.__file__).parent
        (bare / package_dir.name).symlink_to(package_dir)
    single_file = Path(typing_extensions.__file__)
    (bare / single_file.name).symlink_to(single_file)
    site = vllm_site("0.25.0")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(bare)}
    probe = subprocess.run([sys.executable, "-S", "-c", "import requests"], env=env,
                           capture_output=True)
    assert probe.returncode != 0           # the environment really is bare
    result = subprocess.run([sys.executable, "-S", "build.py", "apply", "--site-packages",
                             str(site)], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert FIXED_LINE in (site / TARGET).read_bytes()


def test_a_second_apply_at_the_same_time_is_refused(vllm_site):
    import fcntl

    site = vllm_site("0.25.0")
    before = snapshot(site)
    fd = os.open(site / "vllm", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)     # as a running `build.py apply` holds it
        result = run_build("apply", "--site-packages", str(site))
    finally:
        os.close(fd)
    assert result.returncode == 2
    assert "another `build.py apply` is running on this vLLM; nothing changed" in result.stderr
    assert snapshot(site) == before
    assert apply_series(site_packages=site).action == "applied"   # free again once released
