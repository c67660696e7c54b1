"""Tuned MoE configs are per GPU: an image for one GPU carries only its own, and its patch-set
hash (the immutable tag) does not move when another GPU's tune changes."""
import json

from forge.patching.apply import apply_series
from forge.patching.series import load_series
from forge.patching.status import for_moe_device, moe_devices_of, patch_set_hash, release_status
from tests.build_cli import run_build
from tests.fixtures_patches import real_patch_entry, write_series

H200_BF16 = "E=128,N=704,device_name=NVIDIA_H200.json"
A100 = "NVIDIA_A100-SXM4-80GB"


def _series_with_h200_config(directory, config: dict):
    source, diff = real_patch_entry()
    moe = {"id": "h200-bf16", "title": "t", "kind": "moe-config", "releases": ">=0.24.0",
           "why": "w", "files": [{"path": f"moe-configs/{H200_BF16}"}]}
    return load_series(write_series(directory, [source, moe], {
        "source/p.diff": diff, f"moe-configs/{H200_BF16}": json.dumps(config).encode()}))


TUNE = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
              "num_warps": 4, "num_stages": 3}}


def test_device_of_a_config_comes_from_its_vllm_file_name(tmp_path):
    series = _series_with_h200_config(tmp_path, TUNE)
    assert moe_devices_of(series.patches[1]) == {"NVIDIA_H200"}
    assert moe_devices_of(series.patches[0]) == set()


def test_other_gpus_config_is_not_needed_and_leaves_their_hash_alone(tmp_path):
    first = _series_with_h200_config(tmp_path / "a", TUNE)
    retuned = _series_with_h200_config(tmp_path / "b", {"1": {**TUNE["1"], "num_warps": 8}})
    for_a100 = [release_status("0.25.0", series=s, moe_device=A100) for s in (first, retuned)]
    for_h200 = [release_status("0.25.0", series=s, moe_device="NVIDIA_H200") for s in (first, retuned)]
    assert [s.status for s in for_a100[0]] == ["applies", "not-needed"]
    assert "tuned for NVIDIA_H200, not NVIDIA_A100-SXM4-80GB" in for_a100[0][1].detail
    assert [s.status for s in for_h200[0]] == ["applies", "applies"]
    assert patch_set_hash(for_a100[0], first) == patch_set_hash(for_a100[1], retuned)
    assert patch_set_hash(for_h200[0], first) != patch_set_hash(for_h200[1], retuned)


def test_without_a_device_every_config_is_kept(tmp_path):
    series = _series_with_h200_config(tmp_path, TUNE)
    statuses = release_status("0.25.0", series=series)
    assert for_moe_device(statuses, series, None) == statuses
    assert [s.status for s in statuses] == ["applies", "applies"]


def test_apply_for_another_gpu_installs_no_config(vllm_site, tmp_path):
    series = _series_with_h200_config(tmp_path / "series", TUNE)
    for device, expected in ((A100, []), ("NVIDIA_H200", [H200_BF16])):
        site, moe_dir = vllm_site("0.25.0"), tmp_path / f"moe-{device}"
        report = apply_series(site_packages=site, series_path=series.path, moe_config_dir=moe_dir,
                              moe_device=device)
        assert report.action == "applied"
        assert ("h200-bf16" in report.applied) == bool(expected)
        assert sorted(p.name for p in moe_dir.glob("*.json")) == expected


def test_apply_cli_takes_moe_device(vllm_site, tmp_path):
    site, moe_dir = vllm_site("0.25.0"), tmp_path / "moe"
    result = run_build("apply", "--site-packages", str(site), "--moe-config-dir", str(moe_dir),
                       "--moe-device", A100, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not list(moe_dir.glob("*.json"))
    shipped = {f.name for p in load_series().patches if p.kind == "moe-config" for f in p.files}
    assert shipped, "the series ships tuned configs (H200) that this A100 apply left out"
