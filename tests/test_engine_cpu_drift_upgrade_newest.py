"""The engine tier (tests/test_engine_cpu.py says what each run is) for vLLM 0.27.1 and the newest CPU
build: 0.27.1 fails under transformers 5.15 until the series pins it back, `build.py upgrade --run`
on a host without a GPU gives the CPU verdict of 0.27.1 first, the newest CPU build passes, and a
CPU report cannot publish an image. A unit of its own beside the 0.26.0 runs (tests/markers.py), so
the two make and use their environments side by side.
"""
from __future__ import annotations

import shutil

import pytest

from forge.engines.cpu_builds import cpu_releases
from forge.images.published import VerifyNotPassed, verify_result
from tests.engine_runs import UPGRADE, assert_controls, assert_controls_and_lossless, outside_state

pytestmark = [pytest.mark.engine, pytest.mark.slow]
# One unit of the suite's workers with the other file that needs 0.27.1 or newer (tests/markers.py).
UNIT = "engine-0.27.1-on"


def test_0_27_1_fails_on_transformers_5_15_until_the_series_pins_it_back(runs):
    broken = runs("0.27.1-drift-unpatched")
    assert broken.status == 1, broken.output[-4000:]
    started = broken.check("engine started")
    assert started["status"] == "FAIL" and "AmbiguousGlobalPerLayerAttributeError" in started["detail"]
    assert broken.report["versions"]["transformers"] == "5.15.0"
    fixed = runs("0.27.1-drift")
    assert fixed.status == 0, fixed.output[-4000:]
    assert_controls(fixed)
    assert fixed.report["versions"]["transformers"] == "5.14.1"
    assert "transformers-gemma4-per-layer-config" in fixed.report["patches_applied"]


def test_upgrade_run_without_a_gpu_gives_the_cpu_verdict_first(runs):
    run = runs("upgrade")
    assert shutil.which("nvidia-smi") is None      # the host this test runs on has no GPU
    to = UPGRADE[1]
    assert f"--run: CPU verdict PASS for the gemma4 family on vLLM {to}" in run.output, run.output[-4000:]
    # the CPU verdict came before any image step, and the image steps followed it
    assert run.output.index("CPU verdict PASS") < run.output.index(f"--run: step 1: build the {to} image")
    assert_controls_and_lossless(run)
    assert run.report["vllm"] == to and run.report["target"] == "a100"


def test_the_newest_cpu_build_passes(runs):
    run = runs("newest")
    assert run.status == 0, run.output[-4000:]
    assert_controls_and_lossless(run)
    assert run.report["vllm"] == cpu_releases()[-1]


def test_a_cpu_report_cannot_publish_an_image(runs):
    run = runs("newest")
    assert run.report is not None, run.output[-4000:]
    with pytest.raises(VerifyNotPassed, match="device: the report ran on cpu, not a GPU"):
        verify_result([str(run.out / "mtp_smoke.json")], run.report["target"], run.report["vllm"],
                      "sha256:" + "0" * 64)


def test_the_later_engines_wrote_nothing_outside_the_project_cache(runs, before_the_tier):
    """Last in the file: after every run above, vLLM's and Inductor's default caches are as they were."""
    for name in ('0.27.1-drift-unpatched', '0.27.1-drift', 'upgrade', 'newest'):
        runs(name)
    assert outside_state() == before_the_tier
