"""What docs/gpu-evidence.md §15 reads out of the H200 session of 2026-12-02 07:54-08:19 UTC
(vLLM 0.27.1, tests/gpu/session/s24.sh), rebuilt in CI from the committed raw results
(tests/fixtures/gpu/s24-h200-2026-12-02/): the long-context bench of the two attention candidates
with `bench.py --collect`, its tables as §15.1 shows them, and the two smokes on the shipped series."""
from __future__ import annotations

import json

import pytest

from tests.gpu_evidence import (
    Session,
    assert_committed_report,
    candidate_rows,
    doc_section,
)

SESSION = Session("s24-h200-2026-12-02")
SECTION = doc_section(15)
BENCH = "bench-long-attn"
WINDOWS = ("long8k", "long32k", "long8k-conc8", "long8k-conc16", "long32k-conc8")
PAIRS = {name: {"fp8-v2": f"fp8-v2-{name}", "fp8-mtp4-v2": f"fp8-mtp4-v2-{name}"}
         for name in ("head512", "groupkv")}
CANDIDATES = {"head512": "triton-attn-head512-launch", "groupkv": "triton-attn-group-kv-heads"}


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    return SESSION.collect_bench(f"{BENCH}/bench.json", f"{BENCH}/engines", tmp_path_factory.mktemp(BENCH))


def ratios(report: dict, pair: dict, field: str = "decode_tok_s") -> dict:
    """(base, candidate, window) -> with / without, full acceptance."""
    return {(base, cand, w): report["engines"][cand]["figures"][f"{w}@agree"][field]
            / report["engines"][base]["figures"][f"{w}@agree"][field]
            for base, cand in pair.items() for w in WINDOWS}


def test_the_bench_rebuilds_every_engine_on_its_release(rebuilt):
    code, report, _ = rebuilt
    assert code == 0 and report["layers"] == 10 and report["machine"]["vllm"] == "0.27.1"
    assert all(e["error"] is None and len(e["figures"]) == 2 * len(WINDOWS) for e in report["engines"].values())
    committed = assert_committed_report(rebuilt, "verify-bench-s24-h200-vllm0.27.1-long-attn")
    assert committed["command"] == json.loads(SESSION.log(f"{BENCH}/bench.json"))["command"]


def test_the_tables_of_section_15_are_the_data(rebuilt):
    report = rebuilt[1]
    for pair in PAIRS.values():
        for row in candidate_rows(report, pair, WINDOWS):
            assert row in SECTION, row


@pytest.mark.parametrize("name", list(PAIRS))
def test_each_candidate_ran_from_its_own_copy_of_the_shipped_series(name):
    # the copy was taken before the series was applied (s23's lesson): it carries both
    first = SESSION.log(f"logs/apply-{name}.txt").splitlines()[0]
    assert first == (f"applied 2 patch(es) to vLLM 0.27.1 at /tmp/site-{name}/vllm: "
                     f"triton-spec-decode-split-kv, {CANDIDATES[name]}")
    for engine in PAIRS[name].values():
        assert f"/tmp/site-{name}/vllm/" in SESSION.log(f"{BENCH}/engines/{engine}.log"), engine
    for engine in PAIRS[name]:
        assert "/tmp/site-" not in SESSION.log(f"{BENCH}/engines/{engine}.log"), engine


def test_the_verdicts_follow_from_the_figures(rebuilt):
    report = rebuilt[1]
    control = ratios(report, PAIRS["groupkv"])
    spec_control = [v for (b, _, _), v in control.items() if b == "fp8-mtp4-v2"]
    plain_control = [v for (b, _, _), v in control.items() if b == "fp8-v2"]
    # the copies' A/A: the k=4 pair within 6%, the host-bound plain pair far apart
    assert (round(min(spec_control), 2), round(max(spec_control), 2)) == (0.94, 1.03)
    assert max(plain_control) > 1.3 and "0.94-1.03x" in SECTION
    head = ratios(report, PAIRS["head512"])
    assert head[("fp8-mtp4-v2", "fp8-mtp4-v2-head512", "long32k")] < 0.8 < min(spec_control)
    assert head[("fp8-mtp4-v2", "fp8-mtp4-v2-head512", "long32k-conc8")] < 0.7
    prefill = ratios(report, PAIRS["head512"], "prefill_ms")
    assert all(prefill[(b, c, "long32k")] > 1.4 for b, c in PAIRS["head512"].items())


def test_the_job_ran_in_order_and_both_smokes_passed():
    timeline = SESSION.log("timeline.txt")
    steps = ["head512: apply exit 0", "groupkv: apply exit 0", "apply 0.27.1 exit 0",
             "bench-long-attn: exit 0", "job271 done"]
    assert [timeline.index(s) for s in steps] == sorted(timeline.index(s) for s in steps)
    for name in ("profile-26b-k4", "profile-qwen40-plain", "profile-26b10-plain"):
        assert f"{name}: exit 0 " in timeline
    assert SESSION.log("logs/apply271.txt").splitlines()[0] == \
        "applied 1 patch(es) to vLLM 0.27.1 at /tmp/site271/vllm: triton-spec-decode-split-kv"
    for smoke in ("smoke26-shipped", "smoke-qwen-shipped"):
        assert timeline.index(f"{smoke}: exit 0 RESULT: PASS") > timeline.index("job271 done")
        report = SESSION.report(smoke)
        assert report["passed"] and report["versions"]["vllm"] == "0.27.1", smoke


def test_the_long_context_decode_splits_into_a_step_and_a_fixed_cost(rebuilt):
    """§15.4: the k=4 engines' 32k decode holds a fixed cost a request far above anything the same
    solve gives at short context in every committed bench report (sustained windows)."""
    from pathlib import Path

    from verify import bench_report

    split = {n: e["derived"]["decode_split"] for n, e in rebuilt[1]["engines"].items() if e["k"]}
    recipe = split["fp8-mtp4-v2"]
    assert (recipe["long8k"]["step_ms"], recipe["long32k"]["step_ms"]) == (4.635, 6.455)
    assert (recipe["long8k"]["fixed_ms"], recipe["long32k"]["fixed_ms"]) == (7.5, 138.0)
    assert all(s["long32k"]["fixed_ms"] > 100 for s in split.values())
    short = []
    for path in sorted(Path("benchmarks/results").glob("verify-bench-*.json")):
        for engine in json.loads(path.read_text())["engines"].values():
            figures = engine.get("figures") or {}
            done = bench_report.decode_split(figures.get("sustained@agree"), figures.get("sustained@random"))
            if engine.get("k") and done:
                short.append(done["fixed_ms"])
    assert len(short) >= 20 and max(short) <= 13 < min(s["long32k"]["fixed_ms"] for s in split.values())
    for row in ("| s24, recipe k=4 (shipped series) | 4.63 ms / 7.5 ms | 6.46 ms / 138 ms |",
                "| s24, head512 copy | 4.63 ms / 18.9 ms | 6.63 ms / 238 ms |"):
        assert row in SECTION, row
