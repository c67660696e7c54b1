"""The committed analyses of the H200's s24 profiles (2026-12-02, vLLM 0.27.1, the shipped series,
dummy weights, tests/gpu/session/s24.sh): the 26B-A4B recipe's k=4 step at 30 layers (against s18's
plain step), its plain step at 10 layers and Qwen's plain step at all 40, rebuilt on the CPU from
tests/fixtures/gpu/s24-h200-2026-12-02/ with verify/profile.py's --report code (`--roofline auto`),
and docs/roofline.md's figures what the analyses hold."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gpu_evidence import (
    assert_profile_report_rebuilds,
    profile_analysis,
    profile_pair_figures,
    profile_report_args,
)

S24 = "tests/fixtures/gpu/s24-h200-2026-12-02"
PLAIN30 = "tests/fixtures/gpu/s18-h200-2026-12-01/profile-plain/profile.json"
# report name: (recipe, layers, k, the plain profile it is compared with, or None)
REPORTS = {"26b-k4": ("gemma-4-26b-a4b-it", 30, 4, PLAIN30),
           "26b10-plain": ("gemma-4-26b-a4b-it", 10, 0, None),
           "qwen40-plain": ("qwen3.6-35b-a3b", 40, 0, None)}


def _args(which: str) -> list[str]:
    return profile_report_args(f"{S24}/profile-{which}/profile.json", f"profile-{which}-s24-h200-vllm0.27.1",
                               REPORTS[which][3])


def analysis(which: str) -> dict:
    return profile_analysis(f"profile-{which}-s24-h200-vllm0.27.1")


def roofline_doc() -> str:
    return " ".join(Path("docs/roofline.md").read_text().split())


@pytest.mark.parametrize("which", list(REPORTS))
def test_committed_profile_report_is_what_the_code_makes_of_the_raw_data(at_root, which):
    assert_profile_report_rebuilds(_args(which))


@pytest.mark.parametrize("which", list(REPORTS))
def test_each_profile_ran_its_recipe_at_its_depth_and_k_under_cuda_graphs(at_root, which):
    raw = json.loads(Path(_args(which)[1]).read_text())
    recipe, layers, k, _ = REPORTS[which]
    assert raw["phase"] == "done" and raw["error"] is None and raw["dummy"]
    assert (raw["recipe"], raw["layers"], raw["k"], raw["machine"]["vllm"]) == (recipe, layers, k, "0.27.1")
    assert raw["engine"]["cudagraph_mode"] == "FULL_AND_PIECEWISE" and not raw["engine"]["enforce_eager"]


@pytest.mark.parametrize("which", list(REPORTS))
def test_no_profile_ran_faster_than_its_byte_floor(at_root, which):
    a = analysis(which)
    assert a["wall_us_per_step"] > a["floor"]["step_floor_us"] > 0
    assert a["busy_us_per_step"] > a["floor"]["step_floor_us"]


def test_the_26b_spec_step_figures_in_the_docs_are_the_analyses(at_root):
    section = roofline_doc().split("### gemma-4-26b-a4b-it's spec step on the shipped series", 1)[1]
    section = section.split("### ", 1)[0]
    plain = profile_analysis("profile-plain-s18-h200-vllm0.27.1")
    missing = [f for f in profile_pair_figures(plain, analysis("26b-k4")) if " ".join(f.split()) not in section]
    assert missing == []


def test_the_host_bound_finding_is_what_the_two_plain_profiles_measured(at_root):
    short, full = analysis("26b10-plain"), analysis("qwen40-plain")
    doc = roofline_doc()
    assert (f"runs {short['kernel_us_per_step'] / 1e3:.3f} ms of kernels in a "
            f"{short['wall_us_per_step'] / 1e3:.3f} ms wall step, the GPU busy {short['busy_pct']:.0f}%") in doc
    assert (f"takes {full['wall_us_per_step'] / 1e3:.3f} ms in wall time with the GPU busy "
            f"{full['busy_pct']:.0f}% of it") in doc
    # the 10-layer GPU idles; at 40 layers Qwen's kernels, counted once where streams overlap, fill the step
    assert short["busy_pct"] < 60 and full["busy_pct"] > 95
    assert full["kernel_us_per_step"] > 1.1 * full["busy_us_per_step"]
