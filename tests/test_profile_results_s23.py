"""The committed analyses of the H200's decode profiles of the Gemma 4 31B and Qwen3.6-35B-A3B
recipes (2026-12-02, vLLM 0.27.1, dummy weights, online FP8, TRITON_ATTN, Inductor; tests/gpu/session/
s23.sh's second lease), rebuilt on the CPU from the raw profile.json files with verify/profile.py's
own --report code, each floor derived from its own record (`--roofline auto`):
benchmarks/results/profile-{31b,qwen}-*-s23-h200-vllm0.27.1.{md,json} must be what the code makes of
tests/fixtures/gpu/s23-h200-2026-12-02/, and docs/roofline.md's figures what the analyses hold.
After a change to the kernel map or the report, rebuild them with the command each .md names."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu_evidence import (
    assert_profile_report_rebuilds,
    profile_analysis,
    profile_pair_figures,
    profile_report_args,
)
from verify import profile

ROOT = Path(__file__).resolve().parents[1]
S23 = "tests/fixtures/gpu/s23-h200-2026-12-02"
RESULTS = "benchmarks/results"
# report name: (its profile folder, the plain profile it is compared with, or None)
REPORTS = {
    "31b-plain": ("profile-31b-plain", None),
    "31b-k3": ("profile-31b-k3", "profile-31b-plain"),
    "qwen-plain": ("profile-qwen-plain", None),
    "qwen-k2": ("profile-qwen-k2", "profile-qwen-plain"),
}
# recipe of each family's reports and the k its spec step ran
FAMILIES = {"31b": ("gemma-4-31b-it", "31b-k3"), "qwen": ("qwen3.6-35b-a3b", "qwen-k2")}


def _args(which: str) -> list[str]:
    folder, baseline = REPORTS[which]
    return profile_report_args(f"{S23}/{folder}/profile.json", f"profile-{which}-s23-h200-vllm0.27.1",
                               f"{S23}/{baseline}/profile.json" if baseline else None)


def _analysis(which: str) -> dict:
    return profile_analysis(f"profile-{which}-s23-h200-vllm0.27.1")


@pytest.mark.parametrize("which", list(REPORTS))
def test_committed_profile_report_is_what_the_code_makes_of_the_raw_data(at_root, which):
    assert_profile_report_rebuilds(_args(which))


@pytest.mark.parametrize("which", list(REPORTS))
def test_each_profile_ran_its_recipes_own_model_at_its_k_on_the_shipped_series(at_root, which):
    raw = json.loads(Path(_args(which)[1]).read_text())
    recipe, spec = FAMILIES[which.split("-")[0]]
    assert raw["phase"] == "done" and raw["error"] is None and raw["dummy"]
    assert raw["recipe"] == recipe and raw["machine"]["vllm"] == "0.27.1"
    assert raw["k"] == (int(spec.rsplit("k", 1)[1]) if which == spec else 0)
    assert raw["engine"]["cudagraph_mode"] == "FULL_AND_PIECEWISE" and not raw["engine"]["enforce_eager"]
    text = Path(_args(which)[-3]).read_text()
    assert f"`{profile.report_command(profile.parse_args(_args(which)))}`" in text
    assert f"`{raw['command']}`" in text and raw["date"] in text and "dummy weights" in text
    # the series it ran on: tests/test_gpu_evidence_s23.py holds the apply log to the shipped patch


@pytest.mark.parametrize("which", list(REPORTS))
def test_each_floor_is_build_pys_at_the_recorded_depth_and_context(at_root, which):
    raw = json.loads(Path(_args(which)[1]).read_text())
    floor = _analysis(which)["floor"]
    context = round(raw["prompt_tokens"] + (raw["wall"]["short"]["tokens"] + raw["wall"]["long"]["tokens"]) / 2)
    command = (f"build.py roofline --recipe {raw['recipe']} --target h200 --vllm 0.27.1 "
               f"--layers {raw['layers']} --context {context}")
    assert floor["source"] == command
    done = subprocess.run([sys.executable, *shlex.split(command), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert floor["bytes_per_step"] == printed["bytes_per_token"]
    assert floor["step_floor_us"] == pytest.approx(printed["floor_ms"] * 1e3)
    assert floor["unmatched_byte_groups"] == []  # every byte group has its kernel group


def test_the_qwen_kernel_map_names_every_kernel_of_its_first_recorded_plain_step(at_root):
    plain = _analysis("qwen-plain")
    assert plain["family"] == "qwen3_5_moe" and plain["other_us_per_step"] == 0.0
    assert plain["groups"]["linear_attention"]["launches_per_step"] > 0
    # the spec step leaves under 1% of its kernel time unnamed (a concat and a gather)
    spec = _analysis("qwen-k2")
    assert 0 < spec["other_us_per_step"] < 0.01 * spec["kernel_us_per_step"]


def _figures(family: str) -> list[str]:
    """What docs/roofline.md says of one family's two profiles."""
    return profile_pair_figures(_analysis(f"{family}-plain"), _analysis(FAMILIES[family][1]))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_docs_measured_on_the_h200_are_the_committed_figures(at_root, family):
    doc = Path("docs/roofline.md").read_text()
    start = doc.index(f"### {FAMILIES[family][0]}")
    ends = [i for i in (doc.find("\n### ", start + 1), doc.find("\n## ", start)) if i > 0]
    section = " ".join(doc[start:min(ends)].split())
    missing = [f for f in _figures(family) if " ".join(f.split()) not in section]
    assert missing == []


def test_the_qwen_step_is_half_idle_and_the_31b_step_is_not(at_root):
    """The finding docs/roofline.md draws: Qwen's kernels fill half its wall time at 8 layers,
    31B's fill all of it; so Qwen's wall-time share of its floor is half its kernel-time share."""
    qwen, dense = _analysis("qwen-plain"), _analysis("31b-plain")
    assert qwen["busy_pct"] < 55 and dense["busy_pct"] > 95
    assert qwen["floor"]["pct_of_floor_wall"] < 0.6 * qwen["floor"]["pct_of_floor_kernels"]
    assert dense["floor"]["pct_of_floor_wall"] >= 40  # the 40% the issue aims at, for this recipe
    walls = json.loads(Path(S23, "profile-qwen-plain/profile.json").read_text())["wall"]["long"]["wall_s"]
    spread = f"{min(walls):.2f}-{max(walls):.2f} s"
    assert spread == "0.35-0.50 s" and spread in Path("docs/roofline.md").read_text()


def test_the_qwen_idle_is_there_in_vllms_own_engine_too(at_root):
    """§11.4's bench (multiprocess engine, the same release, runner, depth and settings) stepped the
    plain Qwen engine in well over its GPU-busy time: the idle GPU is not the in-process profile's."""
    bench = json.loads(Path(RESULTS, "verify-bench-s20-h200-vllm0.27.1-qwen-v2.json").read_text())
    engine = bench["engines"]["fp8-v2"]
    busy_ms = _analysis("qwen-plain")["busy_us_per_step"] / 1e3
    assert bench["layers"] == 8 and bench["machine"]["vllm"] == "0.27.1" and "runner=v2" in bench["command"]
    step_ms = engine["derived"]["step_ms"]
    figure = f"stepped in {step_ms:.3f} ms, {step_ms / busy_ms:.1f}x the GPU's {busy_ms:.3f} ms busy time"
    assert step_ms > 2 * busy_ms and figure in " ".join(Path("docs/roofline.md").read_text().split())


def test_the_26b_ten_layer_estimate_is_the_30_layer_profiles_and_below_the_benched_steps(at_root):
    """docs/roofline.md's inference: 10 of the 26B's 30 layers' kernels, from s18's plain profile
    (the per-layer groups over three, the lm_head and sampling once), against s22's 10-layer steps."""
    s18 = json.loads(Path(RESULTS, "profile-plain-s18-h200-vllm0.27.1.json").read_text())[0]
    lm_head = next(t for t in s18["top_kernels"] if t["name"].startswith("nvjet_sm90_tst_256x8"))
    once = lm_head["us_per_step"] + s18["groups"]["sampling"]["us_per_step"]
    estimate_ms = ((s18["kernel_us_per_step"] - once) / 3 + once) / 1e3
    steps = {n: e["derived"]["step_ms"] for n, e in json.loads(
        Path(RESULTS, "verify-bench-s22-h200-vllm0.27.1-static2.json").read_text())["engines"].items()}
    doc = " ".join(Path("docs/roofline.md").read_text().split())
    assert f"about {estimate_ms:.2f} ms" in doc and f"{s18['kernel_us_per_step'] / 1e3:.3f} ms at 30" in doc
    assert f"{steps['fp8-v2']:.3f} and {steps['fp8-v2-again']:.3f} ms" in doc
    assert estimate_ms < 0.7 * min(steps["fp8-v2"], steps["fp8-v2-again"])
    assert f"31B's {_analysis('31b-plain')['kernel_us_per_step'] / 1e3:.3f} ms at 10 layers" in doc


@pytest.mark.parametrize("which", list(REPORTS))
def test_no_profile_ran_faster_than_its_floor(at_root, which):
    """issue 19's last goal for these profiles too: the floor is never above a measured speed."""
    floor = _analysis(which)["floor"]
    # (wall and kernel shares need not order: the wall time is measured without the profiler)
    assert 0 < floor["pct_of_floor_wall"] < 100 and 0 < floor["pct_of_floor_kernels"] < 100
