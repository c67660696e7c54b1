"""GPU-host tests: run with `python -m pytest tests/gpu` where torch, a CUDA GPU and a vLLM with
this project's patches applied (`build.py apply`) are installed. The default CI run does not
collect this directory (pyproject norecursedirs). Nothing here skips: a missing GPU or vLLM fails.
"""
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(args, timeout):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_gpu_and_vllm_are_present():
    import torch
    import vllm

    assert torch.cuda.is_available(), "no CUDA GPU visible"
    assert vllm.__version__


def test_every_source_patch_this_vllm_needs_is_applied():
    """The precondition above, checked: `build.py apply` ran on this vLLM, so no source patch of
    the series (the PR #47920 backport on 0.23.0-0.26.0 among them) still merely applies."""
    import vllm

    site = Path(vllm.__file__).resolve().parents[1]
    proc = run(["build.py", "patches", "--site-packages", str(site), "--offline", "--json"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout)["patches"]
    assert [r["id"] for r in rows if r["kind"] == "source" and r["status"] == "applies"] == []


@pytest.mark.parametrize("runner, extra", [("v2", ["--lossless"]), ("v1", ["--centroids"])])
def test_smoke_passes_the_agreeing_model_and_fails_the_random_one(tmp_path, runner, extra):
    """One mtp_smoke --dummy run: the controls plugin makes target and drafter agree, then
    random, on one engine; the gate must pass the first and fail the second (exit 0), on both
    runners and with a centroid-masked drafter."""
    proc = run(["-m", "verify.mtp_smoke", "--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "6",
                "--runner", runner, "--attention-backend", "TRITON_ATTN", "--max-model-len", "4096",
                "--gpu-memory-utilization", "0.2", "--kv-cache-gib", "2",
                "--moe-config-dir", "patches/moe-configs", "--out", str(tmp_path), *extra], timeout=900)
    report = json.loads((tmp_path / "mtp_smoke.json").read_text())
    # the engine ran in a child of this interpreter: the same installed versions
    assert report["versions"] == {p: importlib.metadata.version(p)
                                  for p in ("vllm", "torch", "transformers")}
    status = {c["name"]: c for c in report["checks"]}
    assert status["engine started"]["status"] == "PASS", status["engine started"]["detail"]
    assert status["CUDA graphs"]["status"] == "PASS"
    assert status["architectures"]["status"] == "PASS"
    positive = status["acceptance (temperature 0)"]  # the gate, run on the agreeing model
    negative = status["acceptance, random model (negative control)"]
    assert positive["status"] == "PASS" and "positive control" in positive["detail"], positive
    assert "rate 100.0%" in positive["detail"]
    assert negative["status"] == "PASS" and "rate 0.0%" in negative["detail"], negative
    if "--lossless" in extra:
        assert status["lossless (greedy, draft vs none), agree model"]["status"] == "PASS"
    assert report["verify_broken"] is False and proc.returncode == 0, proc.stdout[-3000:]


def test_tune_moe_writes_a_vllm_named_config(tmp_path):
    results = tmp_path / "tune.json"
    proc = run(["build.py", "tune-moe", "--dtype", "bf16", "--batch-sizes", "1,8",
                "--results", str(results)], timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(results.read_text())
    assert data["file_name"].startswith("E=128,N=704,device_name=")
    assert [d["M"] for d in data["decisions"]] == [1, 8]
    assert all(d["tuned_us"] > 0 and d["default_us"] > 0 for d in data["decisions"])
