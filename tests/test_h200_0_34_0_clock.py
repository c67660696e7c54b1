"""vLLM 0.34.0 on the H200: the records' figures rebuilt from their raw files (vLLM's own
`vllm bench latency` JSON and verify/bench.py's bench.json), and the independent clock's
agreement with verify's plain and zero-acceptance spec steps (the 5% the comparison allows)."""
import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
BENCH = RESULTS / "h200-0.34.0-bench-26b-a4b-k4-l10"
OUTPUT_LEN = 128  # vllm bench latency --output-len: one prefill and 127 decode steps


def record(rid: str) -> dict:
    rec = json.loads((RESULTS / rid / "result.json").read_text())
    assert rec["id"] == rid and rec["versions"]["vllm"] == "0.34.0"
    for name in rec["files"]:
        assert (RESULTS / rid / name).is_file(), (rid, name)
    return rec


def avg_latency(rid: str, name: str = "latency.json") -> float:
    return json.loads((RESULTS / rid / name).read_text())["avg_latency"]


def bench_step(engine: str, control: str) -> float:
    bench = json.loads((BENCH / "bench.json").read_text())
    return bench["engines"][engine]["figures"][f"sustained@{control}"]["step_ms"]


@pytest.mark.parametrize("rid, engine", [("h200-0.34.0-latency-26b-a4b-k0-l10", "fp8-v2"),
                                         ("h200-0.34.0-latency-26b-a4b-k4-l10", "fp8-mtp4-v2")])
def test_vllms_clock_agrees_with_verifys_step_at_zero_acceptance(rid, engine):
    rec = record(rid)
    step = avg_latency(rid) / OUTPUT_LEN * 1000
    assert rec["figures"]["ms_per_step"] == pytest.approx(step, abs=5e-4)
    assert rec["figures"]["vs_bench_zero_acc"] == pytest.approx(step / bench_step(engine, "random"), abs=5e-4)
    assert abs(step / bench_step(engine, "random") - 1) < 0.05


def test_the_k4_latency_run_accepted_nothing_by_vllms_counters():
    rid = "h200-0.34.0-latency-26b-a4b-k4-l10"
    counters = json.loads((RESULTS / rid / "counters.json").read_text())
    assert counters["vllm:spec_decode_num_accepted_tokens"] == 0
    assert counters["vllm:spec_decode_num_draft_tokens"] == 4 * counters["vllm:spec_decode_num_drafts"] > 0
    assert record(rid)["figures"]["spec_accepted_tokens"] == 0


def test_the_fusion_verdicts_follow_their_pairs():
    """k=4: every pair slower with the passes (a loss); plain: pairs on both sides of 1 (a tie)."""
    k4 = record("h200-0.34.0-latency-26b-a4b-fusion-k4-l10")
    assert k4["verdict"] == "loss"
    fused = (avg_latency(k4["id"], "run1-fused.latency.json"), avg_latency(k4["id"], "run2-fused.latency.json"))
    plain = (avg_latency("h200-0.34.0-latency-26b-a4b-k4-l10"),
             avg_latency("h200-0.34.0-latency-26b-a4b-k4-l10", "repeat.latency.json"))
    assert all(f > p for f, p in zip(fused, plain))
    assert k4["figures"]["run1_fused_x_plain"] == pytest.approx(fused[0] / plain[0], abs=5e-4)
    k0 = record("h200-0.34.0-latency-26b-a4b-fusion-k0-l10")
    ratios = [k0["figures"][f"{pair}_fused_x_plain"] for pair in ("run1", "alone_pair", "contended_pair")]
    assert k0["verdict"] == "tie" and min(ratios) < 1 < max(ratios)


def test_the_bench_record_states_bench_jsons_projection():
    rec = record("h200-0.34.0-bench-26b-a4b-k4-l10")
    picks = json.loads((BENCH / "bench.json").read_text())["picks"]
    assert rec["figures"]["projected_spark343_x_stock"] == picks["spark343"]["speedup_vs_stock"]
    assert rec["figures"]["plain_step_ms_zero_acc"] == bench_step("fp8-v2", "random")
