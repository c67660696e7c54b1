"""The engine tier's runs and what its tests assert about them (tests/test_engine_cpu*.py): each run is
one `build.py smoke --device cpu` (or `build.py upgrade --run`) as a user types it, made when a test
of the file first asks for it and shared by the file's tests (a module fixture), so each engine
starts once. The tier is two units of the suite's workers (tests/markers.py): the 0.26.0 runs, and
the runs of 0.27.1 and the newest CPU build, so that neither waits for the other's environment.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge.engines.cpu_builds import cpu_releases
from tests.build_cli import REPO_ROOT
from tests.test_upgrade import _snapshot

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
    # its environment installed the committed lock's wheels, each checked against its sha256
    assert run.report["cpu_environment"]["pinned_by"] == "lock", run.report["cpu_environment"]
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
