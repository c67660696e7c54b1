"""`build.py apply` takes the release from the code it patches: vllm/_version.py and the one vllm
dist-info beside it must agree; two vllm dist-infos, a patch target that is no regular file, a
binary RECORD or METADATA are each one line, and nothing changes. Real release trees (0.25.0,
0.27.1) copied into a site-packages directory with the dist-info pip writes."""
from __future__ import annotations

import os

import pytest
from packaging.version import Version

from forge.errors import ForgeError
from forge.patching.apply import apply_series
from forge.patching.installed import find_vllm
from forge.patching.series import load_series
from tests.fixtures_patches import snapshot, source_patches_applying, write_dist_info
from tests.test_patch_series import run_build


def one_line_refusal(site, *parts: str) -> str:
    """`build.py apply --site-packages SITE`: exit 2, one error line holding every part."""
    result = run_build("apply", "--site-packages", str(site))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def test_a_stale_second_dist_info_is_refused_naming_both(vllm_site):
    site = vllm_site("0.27.1")
    write_dist_info(site, "0.25.0")        # left by an earlier install; sorts first
    assert source_patches_applying("0.27.1") != source_patches_applying("0.25.0")
    before = snapshot(site)
    with pytest.raises(ForgeError) as caught:
        find_vllm(site)
    assert str(caught.value) == (
        f"{site.resolve()}: two vllm dist-infos, vllm-0.25.0.dist-info (vLLM 0.25.0) and "
        "vllm-0.27.1.dist-info (vLLM 0.27.1); remove the stale one (the one whose RECORD does not "
        "list these files)")
    one_line_refusal(site, "two vllm dist-infos", "vllm-0.25.0.dist-info", "vllm-0.27.1.dist-info")
    assert snapshot(site) == before


def test_a_dist_info_that_disagrees_with_the_code_is_refused_naming_both(vllm_site):
    site = vllm_site("0.27.1", dist_info=False)
    write_dist_info(site, "0.25.0")        # the only dist-info, but not this code's
    before = snapshot(site)
    version_file = site.resolve() / "vllm" / "_version.py"
    metadata = site.resolve() / "vllm-0.25.0.dist-info" / "METADATA"
    line = one_line_refusal(site, f"{version_file} says vLLM 0.27.1 but {metadata} says 0.25.0")
    assert "reinstall vLLM" in line and "nothing changed" in line
    assert snapshot(site) == before


def test_a_wheel_local_build_agrees_with_its_release(vllm_site):
    site = vllm_site("0.26.0", dist_info=False)
    write_dist_info(site, "0.26.0+cu130")  # _version.py of the sdist says 0.26.0
    assert find_vllm(site).version == Version("0.26.0+cu130")
    (site / "vllm" / "_version.py").write_text("__version__ = version = '0.26.0+cu129'\n")
    with pytest.raises(ForgeError, match=r"says vLLM 0.26.0\+cu129 but .* says 0.26.0\+cu130"):
        find_vllm(site)


def _first_target(version: str) -> str:
    patch = load_series().get(source_patches_applying(version)[0])
    return next(d.old_path for d in patch.diffs if d.old_path)


@pytest.mark.parametrize("make", ["directory", "fifo"])
def test_a_patch_target_that_is_no_regular_file_is_an_error_not_absent(vllm_site, make):
    site = vllm_site("0.25.0")
    target = site / _first_target("0.25.0")
    target.unlink()
    if make == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)
    before = snapshot(site)
    what = "a directory" if make == "directory" else "a FIFO (named pipe)"
    one_line_refusal(site, f"{target.resolve()}: is {what}, not a regular file")
    assert snapshot(site) == before
    assert not (site / "vllm" / ".vllm-forge").exists()


@pytest.mark.parametrize("name", ["RECORD", "METADATA"])
def test_a_binary_record_or_metadata_is_one_line(vllm_site, name):
    site = vllm_site("0.25.0")
    path = site / "vllm-0.25.0.dist-info" / name
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 20)
    before = snapshot(site)
    one_line_refusal(site, f"{path.resolve()}: line ", "not UTF-8 text (byte 0x89)")
    assert snapshot(site) == before


def test_a_record_that_is_a_directory_is_one_line(vllm_site):
    site = vllm_site("0.25.0")
    record = site / "vllm-0.25.0.dist-info" / "RECORD"
    record.unlink()
    record.mkdir()
    before = snapshot(site)
    one_line_refusal(site, f"{record.resolve()}: is a directory, not a regular file")
    assert snapshot(site) == before


def test_the_release_read_from_the_code_decides_what_is_applied(vllm_site):
    site = vllm_site("0.27.1", dist_info=False)
    report = apply_series(site_packages=site)
    assert report.installed.version == Version("0.27.1")
    assert report.applied == source_patches_applying("0.27.1") != []
