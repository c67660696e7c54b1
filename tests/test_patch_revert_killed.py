"""`apply --revert` is as crash-safe as apply: a revert killed with SIGKILL at any point is
recognised by the next `apply`, `apply --revert` and `patches --site-packages`, and the next run
finishes it (killed while restoring files) or forgets it (killed while staging), leaving no temp
file, no empty directory and no half-installed dist-info. Real vLLM 0.23.0 tree (three source
patches in four files), real fastapi wheels (the series' fastapi-included-router-path: the revert
puts 0.137.0 back over 0.136.3, some 60 files), real killed processes. The revert's code is the
same for any package; transformers' 3,500 files go through it in test_patch_apply_dependencies."""
from __future__ import annotations

import json
import os
import shutil
import signal

import pytest

from forge.patching.apply import KILL_AFTER_ENV, KILL_AFTER_STAGED_ENV, RECORD_DIR, TEMP_SUFFIX
from tests.fixtures_patches import (
    copy_tree,
    install_wheel,
    make_site_packages,
    snapshot,
    source_patches_applying,
    wheelhouse,
)
from tests.test_patch_apply_dependencies import (
    SMALL_BROKEN,
    SMALL_CONSTRAINT,
    SMALL_PACKAGE,
    SMALL_PINNED,
    SMALL_RELEASE,
    SMALL_SOURCE_PATCH,
    carries_the_small_patch,
    installed_version,
    leftovers,
)
from tests.test_patch_series import run_build

# slow: each case applies and reverts real fastapi wheels through pip.
pytestmark = pytest.mark.slow


def empty_dirs(site) -> set[str]:
    """The empty directories under `site` (one os.walk; a link to an empty directory counts, as
    for rglob("*") and is_dir)."""
    found = set()
    for folder, folders, files in os.walk(site):
        if folder != str(site) and not folders and not files:
            found.add(os.path.relpath(folder, site))
        found |= {os.path.relpath(os.path.join(folder, name), site) for name in folders
                  if os.path.islink(os.path.join(folder, name))
                  and not os.listdir(os.path.join(folder, name))}
    return found


@pytest.fixture(scope="module")
def applied_template(tmp_path_factory):
    """vLLM 0.23.0 with fastapi 0.137.0, then applied (the patches in, fastapi 0.136.3),
    made once for the module: its path, a copy of it, and what the install was before apply.
    Each case starts from an exact copy at the same path (the record names its site by path)."""
    base = tmp_path_factory.mktemp("applied")
    site = make_site_packages(SMALL_RELEASE, base / "site")
    install_wheel(site, SMALL_PACKAGE, SMALL_BROKEN)
    original, empty = snapshot(site), empty_dirs(site)
    applied = run_build("apply", "--site-packages", str(site), "--find-links", str(wheelhouse()))
    assert applied.returncode == 0, applied.stderr
    assert installed_version(site, SMALL_PACKAGE) == SMALL_PINNED and carries_the_small_patch(site)
    copy_tree(site, base / "template")
    return site, base / "template", original, empty


@pytest.fixture
def patched_install(applied_template):
    """The applied install, as `apply` left it (cp -a keeps bytes, modes and times)."""
    site, template, original, empty = applied_template
    shutil.rmtree(site, ignore_errors=True)
    copy_tree(template, site)
    return site, original, empty


def killed_revert(site, **kill) -> None:
    killed = run_build("apply", "--site-packages", str(site), "--revert", **kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr


@pytest.mark.parametrize("kill", [{KILL_AFTER_STAGED_ENV: "0"}, {KILL_AFTER_STAGED_ENV: "30"},
                                  {KILL_AFTER_ENV: "0"}])
def test_a_revert_killed_while_staging_is_forgotten_and_leaves_no_empty_directory(
        patched_install, kill):
    site, original, empty = patched_install
    patched = snapshot(site)
    killed_revert(site, **kill)
    assert carries_the_small_patch(site)                        # no file was replaced yet
    again = run_build("apply", "--site-packages", str(site))
    assert again.returncode == 0, again.stderr
    assert "already carries this patch series" in again.stdout
    assert empty_dirs(site) == empty                            # the revert's directories are gone
    assert not (site / f"{SMALL_PACKAGE}-{SMALL_BROKEN}.dist-info").exists()
    assert installed_version(site, SMALL_PACKAGE) == SMALL_PINNED
    assert snapshot(site) == patched and not list(site.rglob(f"*{TEMP_SUFFIX}"))
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original and empty_dirs(site) == empty and leftovers(site) == []


@pytest.mark.parametrize("renames", ["1", "3", "30"])
def test_a_revert_killed_while_restoring_is_named_and_the_next_apply_finishes_it(
        patched_install, renames):
    """Renames: 1 marks the record restoring, 2 puts pip's RECORD back, 3-6 the vLLM files, then
    fastapi's files one by one (30: part 0.137.0, part 0.136.3)."""
    site, original, empty = patched_install
    killed_revert(site, **{KILL_AFTER_ENV: renames})
    record = json.loads((site / "vllm" / RECORD_DIR / "applied.json").read_text())
    assert record["reverting"]["step"] == "restoring"
    status = run_build("patches", "--site-packages", str(site), "--offline", "--json")
    assert status.returncode == 0, status.stderr
    by_id = {p["id"]: p for p in json.loads(status.stdout)["patches"]}
    for patch in (SMALL_CONSTRAINT, SMALL_SOURCE_PATCH):
        assert by_id[patch]["status"] == "interrupted", by_id[patch]
        assert "a vllm-forge revert was killed part way" in by_id[patch]["detail"]
    again = run_build("apply", "--site-packages", str(site), "--find-links", str(wheelhouse()))
    assert again.returncode == 0, again.stderr
    assert "vLLM changed after vllm-forge patched it" not in again.stderr
    assert "finished the revert that was killed part way" in again.stdout
    patches = len(source_patches_applying(SMALL_RELEASE)) + 1          # and the constraint
    assert f"applied {patches} patch(es)" in again.stdout
    assert f"{SMALL_PACKAGE} {SMALL_BROKEN} -> {SMALL_PINNED}" in again.stdout
    assert installed_version(site, SMALL_PACKAGE) == SMALL_PINNED and carries_the_small_patch(site)
    assert not list(site.rglob(f"*{TEMP_SUFFIX}"))
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original and empty_dirs(site) == empty and leftovers(site) == []


def test_a_revert_killed_while_restoring_is_finished_by_the_next_revert(patched_install):
    site, original, empty = patched_install
    killed_revert(site, **{KILL_AFTER_ENV: "30"})
    assert len(empty_dirs(site) - empty) > 0 or list(site.rglob(f"*{TEMP_SUFFIX}"))
    finished = run_build("apply", "--site-packages", str(site), "--revert")
    assert finished.returncode == 0, finished.stderr
    assert f"reverted {SMALL_SOURCE_PATCH}" in finished.stdout
    assert snapshot(site) == original and empty_dirs(site) == empty and leftovers(site) == []
    assert installed_version(site, SMALL_PACKAGE) == SMALL_BROKEN


def test_an_apply_killed_while_replacing_is_shown_as_interrupted_with_revert_as_the_way_out(
        vllm_site):
    site = vllm_site("0.25.0")
    killed = run_build("apply", "--site-packages", str(site), **{KILL_AFTER_ENV: "3"})
    assert killed.returncode == -signal.SIGKILL
    status = run_build("patches", "--site-packages", str(site), "--offline", "--json")
    assert status.returncode == 0, status.stderr
    [patch] = [p for p in json.loads(status.stdout)["patches"]
               if p["id"] == "gemma4-mtp-share-embeddings"]
    assert patch["status"] == "interrupted"
    assert "a vllm-forge apply was killed part way" in patch["detail"]
    assert "`build.py apply --revert` undoes it" in patch["detail"]
