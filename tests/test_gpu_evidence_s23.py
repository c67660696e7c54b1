"""What docs/gpu-evidence.md §14 reads out of the H200 session of 2026-12-02 05:24-06:00 UTC
(vLLM 0.27.1, tests/gpu/session/s23.sh), rebuilt in CI from the committed raw results
(tests/fixtures/gpu/s23-h200-2026-12-02/): what went wrong in the first lease (the candidate copies
refused, the Qwen profiles stopped at cutlass's import) and the second lease's four profiles, whose
summary table §14.1 renders from the analyses that tests/test_profile_results_s23.py rebuilds."""
from __future__ import annotations

import pytest

from tests.gpu_evidence import Session, doc_section, profile_analysis

SESSION = Session("s23-h200-2026-12-02")
SECTION = doc_section(14)
FLAT = " ".join(SECTION.split())
# family: (recipe, its plain and spec profiles)
FAMILIES = {"31b": ("gemma-4-31b-it", "31b-plain", "31b-k3"),
            "qwen": ("qwen3.6-35b-a3b", "qwen-plain", "qwen-k2")}


def analysis(name: str) -> dict:
    return profile_analysis(f"profile-{name}-s23-h200-vllm0.27.1")


def summary_rows() -> list[str]:
    """§14.1's table: each profile's wall step, GPU busy, share of its floor and spec over plain."""
    rows = []
    for recipe, plain_name, spec_name in FAMILIES.values():
        plain = analysis(plain_name)
        for name in (plain_name, spec_name):
            a = analysis(name)
            floor = a["floor"]
            ratio = "–" if name == plain_name else f"{a['wall_us_per_step'] / plain['wall_us_per_step']:.2f}x"
            step = "plain" if name == plain_name else f"k={a['k']}"
            rows.append(f"| {recipe} | {step} | {a['wall_us_per_step'] / 1e3:.3f} | {a['busy_pct']:.0f}% | "
                        f"{floor['pct_of_floor_wall']:.0f}% ({floor['pct_of_floor_kernels']:.0f}%) | {ratio} |")
    return rows


def test_the_summary_table_of_section_14_is_the_data():
    for row in summary_rows():
        assert row in SECTION, row


def test_the_second_lease_ran_the_four_profiles_on_its_release_and_the_shipped_series():
    timeline = SESSION.log("timeline.txt")
    for name in ("profile-31b-plain", "profile-31b-k3", "profile-qwen-plain", "profile-qwen-k2"):
        assert f"{name}: exit 0 " in timeline and f"wrote /tmp/s23/{name}/profile.json" in timeline
    assert "profiles271 done" in timeline and "bench-long-attn" not in timeline
    assert "torch 2.13.0+cu130 vllm 0.27.1 transformers 5.12.1" in SESSION.log("logs/machine271.txt")
    assert SESSION.log("logs/apply271.txt").splitlines()[0] == \
        "applied 1 patch(es) to vLLM 0.27.1 at /tmp/site271/vllm: triton-spec-decode-split-kv"
    assert "dsl_packages" in SESSION.log("path271")


def test_the_first_lease_refused_both_copies_and_they_were_redone_by_hand():
    timeline = SESSION.log("first-lease/timeline.txt")
    for name, candidate in (("head512", "triton-attn-head512-launch"), ("groupkv", "triton-attn-group-kv-heads")):
        log = SESSION.log(f"first-lease/logs/apply-{name}.txt")
        refusal, by_hand = log.split("--- by hand", 1)
        assert f"--with-candidate {candidate}" in refusal and "was applied without it" in refusal
        assert "revert exit 0" in by_hand and by_hand.rstrip().endswith("apply exit 0")
        assert f"{name}: apply exit 2" in timeline and f"{name}: by hand" in timeline


@pytest.mark.parametrize("which", ["qwen-plain", "qwen-k2"])
def test_the_first_leases_qwen_profiles_stopped_at_cutlass_without_dsl_packages(which):
    log = SESSION.log(f"first-lease/logs/profile-{which}-cutlass.txt")
    assert "qwen_gdn_linear_attn.py" in log and "No module named 'cutlass'" in log
    assert "dsl_packages" not in SESSION.log("first-lease/path271")
    assert f"profile-{which}: exit 1 ModuleNotFoundError: No module named 'cutlass'" in \
        SESSION.log("first-lease/timeline.txt")


def test_the_findings_of_section_14_are_the_analyses():
    dense, qwen = analysis("31b-plain"), analysis("qwen-plain")
    assert f"at its floor's {dense['floor']['pct_of_floor_wall']:.0f}%" in FLAT
    assert (f"would reach {qwen['floor']['pct_of_floor_kernels']:.0f}% of the floor but the wall time only "
            f"{qwen['floor']['pct_of_floor_wall']:.0f}%") in FLAT
    assert f"leaves {analysis('qwen-k2')['other_us_per_step']:.1f} µs unnamed" in FLAT
