"""What docs/gpu-evidence.md §7 reads out of the third H200 x2 session (2026-11-30 15:13-15:36 UTC,
vLLM 0.25.0, tests/gpu/session/s15.sh calls a..e), rebuilt in CI from the committed raw results
(tests/fixtures/gpu/s15-h200x2-2026-11-30/) with verify's own code: the smokes' controls from
vLLM's counters (issue 11 item 1), every bench report with `bench.py --collect` from the engines'
results and logs, the 31B k pick, the MoE configs end to end, FA4 against Triton, the two-node
ranks and burst. The tables of §7 are rendered here from the rebuilt reports and must appear in
the document as they are: a figure there that the data contradicts fails."""
from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from forge.serving.recipes import load_recipe
from verify import bench, bench_report
from verify import checks as gate
from verify.bench_report import _fmt
from verify.metrics import counters_from_prometheus
from verify.mtp_smoke import _token_ids, server_log_checks, window_counters
from verify.report import FAIL, PASS
from verify.vllm_logs import parse_engine_log

ROOT = Path(__file__).resolve().parent.parent
S15 = ROOT / "tests" / "fixtures" / "gpu" / "s15-h200x2-2026-11-30"
DOC = ROOT / "docs" / "gpu-evidence.md"
RESULTS = ROOT / "benchmarks" / "results"
RUNS = ("recipe-26b", "sweep-31b-v1", "sweep-31b-v2", "moe-26b-L30", "moe-26b-L30-r2",
        "attention-26b-L30", "attention-26b-L30-r2")
SPARK343 = [0.84, 0.60, 0.39, 0.27]  # eugr/spark-vllm-docker#343, the recipes' field profile
SHIPPED = "patches/moe-configs/E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
TUNED = "v11-h200x2-2026-11-30/tune/E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
TP2_FP8 = "E=128,N=352,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
SMOKES = {"smoke-v2-lossless": "V2, eager compile, --lossless",
          "smoke-v1-centroids": "V1 (patched), Inductor, centroid-masked drafter"}


# --- rebuilding the reports ---------------------------------------------------------------

def captured(run: str) -> dict:
    return json.loads((S15 / run / "captured" / "bench.json").read_text())


def collect(run: str, out: Path) -> tuple[int, dict, str]:
    """bench.py --collect on the committed engine results and logs, with the command the GPU
    host ran (its --out replaced): (exit code, bench.json, bench.md)."""
    argv = shlex.split(captured(run)["command"])[1:]
    at = argv.index("--out")
    del argv[at:at + 2]
    shutil.copytree(S15 / run / "engines", out / "engines")
    code = bench.main(argv + ["--collect", "--out", str(out)])
    return code, json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return {run: collect(run, tmp_path_factory.mktemp(run)) for run in RUNS}


def table(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


# --- the rows §7 quotes, rendered from the rebuilt reports -------------------------------

def decode(engine: dict, window: str) -> float:
    return engine["figures"][window]["decode_tok_s"]


def projected(engine: dict) -> float:
    return engine["derived"]["projected"]["spark343"]["tok_s"]


def smoke_rows() -> list[str]:
    rows = []
    for folder, label in SMOKES.items():
        result = json.loads((S15 / folder / "engine.result.json").read_text())
        for window, role in (("greedy_agree", "agreeing (positive control)"),
                             ("greedy_random", "random (negative control)")):
            c = window_counters(result, window)
            verdict = gate.check_acceptance(c, *thresholds()).status
            rows.append(f"| {label} | {role} | {c.drafts:g} | {c.draft_tokens:g} | {c.accepted:g} "
                        f"| {'/'.join(f'{r:.2f}' for r in c.per_position_rates)} "
                        f"| {c.mean_acceptance_length:.2f} | {verdict} |")
    return rows


def thresholds() -> tuple[float, float]:
    t = load_recipe("gemma-4-26b-a4b-it", "h200").thresholds
    return t.min_acceptance_rate, t.min_mean_acceptance_length


def item5_rows(reports) -> list[str]:
    """Issue 11 item 5: stock, FP8 and the recipe's configuration (V2, k=4, Triton, vLLM's
    default MoE config) at zero, measured-agreeing and projected field acceptance."""
    engines = reports["recipe-26b"][1]["engines"]
    rows = []
    for name, label in (("stock", "stock: BF16, default runner, FA4, Inductor, no drafter"),
                        ("fp8-v2", "FP8, V2, Triton, eager, no drafter"),
                        ("fp8-mtp4-v2-moe-none", "**recipe: FP8, V2, k=4, Triton, eager, vLLM's MoE config**"),
                        ("fp8-mtp4-v2", "same, shipped MoE config (withdrawn)")):
        e = engines[name]
        w = e["derived"]["windows"]
        ratios = (f"{_fmt(w['sustained@random'].get('speedup_vs_stock'))} / "
                  f"{_fmt(w['sustained@agree'].get('speedup_vs_stock'))} / "
                  f"{_fmt(e['derived']['projected']['spark343']['speedup_vs_stock'])}")
        rows.append(f"| 10 | {label} | {_fmt(decode(e, 'sustained@random'))} | "
                    f"{_fmt(decode(e, 'sustained@agree'))} | {_fmt(projected(e))} | {ratios} | "
                    f"{_fmt(e['derived']['step_ms'])} |")
    # 30 layers: stock and FP8 plain from attention-26b-L30-r2 (GPU 0), the recipe's
    # configuration from moe-26b-L30-r2 (GPU 1), the same call (e), at the same time.
    stock = reports["attention-26b-L30-r2"][1]["engines"]["stock"]
    plain = reports["attention-26b-L30-r2"][1]["engines"]["fp8-v2"]
    recipe = reports["moe-26b-L30-r2"][1]["engines"]["fp8-mtp4-v2-moe-none"]
    base = {w: decode(stock, f"sustained@{w}") for w in ("random", "agree")}
    mean_stock = bench_report._decode(stock, "sustained")
    for e, label in ((stock, "stock: BF16, default runner, FA4, Inductor, no drafter"),
                     (plain, "FP8, V2, Triton, eager, no drafter"),
                     (recipe, "**recipe: FP8, V2, k=4, Triton, eager, vLLM's MoE config**")):
        ratios = " / ".join(_fmt(round(x, 3)) for x in (
            decode(e, "sustained@random") / base["random"], decode(e, "sustained@agree") / base["agree"],
            projected(e) / mean_stock))
        rows.append(f"| 30 | {label} | {_fmt(decode(e, 'sustained@random'))} | "
                    f"{_fmt(decode(e, 'sustained@agree'))} | {_fmt(projected(e))} | {ratios} | "
                    f"{_fmt(e['derived']['step_ms'])} |")
    return rows


def sweep31_rows(reports) -> list[str]:
    rows = []
    for runner in ("v2", "v1"):
        engines = reports[f"sweep-31b-{runner}"][1]["engines"]
        for k in (0, 3, 4, 5):
            e = engines[bench_report.engine_name("fp8", k, runner)]
            d = e["derived"]
            p = d["projected"].get("spark343")
            rows.append(f"| {runner.upper()} | {k} | {_fmt(d['step_ms'])} | {_fmt(d.get('step_cost_x_plain'))} | "
                        f"{_fmt(decode(e, 'sustained@agree'))} / {_fmt(decode(e, 'sustained@random'))} | "
                        + (f"{_fmt(p['tok_s'])} ({_fmt(p['speedup_vs_stock'])})" if p else "–") + " |")
    return rows


MOE_ENGINES = (("fp8-mtp4-v2", "shipped (tuned at M=1,8,64,256)"),
               ("fp8-mtp4-v2-moe-none", "none: vLLM's default"),
               ("fp8-mtp4-v2-moe-tuned-kplus1", "tuned at k+1 (M=4,5 added)"))


def moe_rows(reports) -> list[str]:
    rows = []
    for run, layers in (("recipe-26b", 10), ("moe-26b-L30", 30), ("moe-26b-L30-r2", 30)):
        engines = reports[run][1]["engines"]
        none = engines["fp8-mtp4-v2-moe-none"]
        for name, label in MOE_ENGINES:
            e = engines[name]
            rows.append(f"| {run} | {layers} | {label} | {_fmt(decode(e, 'sustained@agree'))} / "
                        f"{_fmt(decode(e, 'sustained@random'))} | {_fmt(decode(e, 'conc8@agree'))} / "
                        f"{_fmt(decode(e, 'conc8@random'))} | {_fmt(e['derived']['step_ms'])} | "
                        f"{_fmt(round(decode(e, 'sustained@agree') / decode(none, 'sustained@agree'), 3))} |")
    return rows


def attention_rows(reports) -> list[str]:
    rows = []
    for run in ("attention-26b-L30", "attention-26b-L30-r2"):
        engines = reports[run][1]["engines"]
        for name, e in engines.items():
            if not e.get("figures"):
                rows.append(f"| {run} | {name} | failed: CUDA out of memory at load | | | | |")
                continue
            facts = parse_engine_log((S15 / run / "engines" / f"{name}.log").read_text(errors="replace"))
            attention = "FA4" if facts.flash_attn_version == 4 else ", ".join(facts.attention_backends)
            rows.append(f"| {run} | {name} | {attention} | {_fmt(e['init_s'])} | "
                        f"{facts.graph_capture_s:.0f} | {_fmt(decode(e, 'sustained@agree'))} / "
                        f"{_fmt(decode(e, 'sustained@random'))} | {_fmt(e['derived']['step_ms'])} |")
    return rows


def section7() -> str:
    text = DOC.read_text()
    return text.split("\n## 7.", 1)[1].split("\n## ", 1)[0]


# --- issue 11 item 1: one smoke invocation, the agreeing model passes, the random one fails --

@pytest.mark.parametrize("folder", list(SMOKES))
def test_one_smoke_passes_the_agreeing_model_and_fails_the_random_one(folder):
    result = json.loads((S15 / folder / "engine.result.json").read_text())
    report = json.loads((S15 / folder / "mtp_smoke.json").read_text())
    agree, random = (window_counters(result, w) for w in ("greedy_agree", "greedy_random"))
    # vLLM's counters: every draft token accepted on the agreeing model, none on the random one
    assert agree.accepted == agree.draft_tokens == 4 * agree.drafts > 0
    assert agree.per_position_rates == [1.0] * 4 and agree.mean_acceptance_length == 5.0
    assert random.accepted == 0 and random.draft_tokens == 4 * random.drafts > 0
    # the gate, re-run on those counters with the recipe's thresholds
    positive = gate.positive_control(gate.check_acceptance(agree, *thresholds()))
    negative = gate.negative_control(gate.check_acceptance(random, *thresholds()))
    assert positive.status == PASS and negative.status == PASS  # i.e. the gate FAILED the random model
    assert gate.check_acceptance(random, *thresholds()).status == FAIL
    # what the GPU host reported: the same counters, the same verdicts, verify not broken
    assert report["windows"]["greedy_agree"] == agree.summary()
    assert report["windows"]["greedy_random"] == random.summary()
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name[positive.name]["status"] == PASS and by_name[negative.name]["status"] == PASS
    assert f"{agree.accepted:g}/{agree.draft_tokens:g} draft tokens accepted" in by_name[positive.name]["detail"]
    assert f"0/{random.draft_tokens:g} draft tokens accepted" in by_name[negative.name]["detail"]
    assert report["passed"] is True and report["verify_broken"] is False
    assert all(c["status"] in (PASS, "INFO") for c in report["checks"])
    # one engine, switched between the two models by the controls plugin
    assert [w["control_reply"][0]["agree"] for w in (result["windows"]["greedy_agree"],
                                                     result["windows"]["greedy_random"])] == [True, False]


@pytest.mark.parametrize("window", ["greedy_agree", "greedy_random"])
def test_prometheus_text_agrees_with_the_window_counters(window):
    """The V2 smoke also kept vLLM's /metrics text before and after each window: parsed by
    verify's Prometheus reader it gives the same counters as the engine's snapshot."""
    result = json.loads((S15 / "smoke-v2-lossless" / "engine.result.json").read_text())
    prom = S15 / "smoke-v2-lossless" / "prometheus"
    text = {when: counters_from_prometheus((prom / f"{window}.{when}.prom").read_text())
            for when in ("before", "after")}
    assert text["after"] - text["before"] == window_counters(result, window)


@pytest.mark.parametrize("window", ["greedy_agree", "greedy_random"])
def test_lossless_greedy_output_is_identical_with_and_without_the_drafter(window):
    draft = json.loads((S15 / "smoke-v2-lossless" / "engine.result.json").read_text())
    plain = json.loads((S15 / "smoke-v2-lossless" / "engine-no-draft.result.json").read_text())
    check = gate.check_lossless(_token_ids(draft, window), _token_ids(plain, window))
    assert check.status == PASS and check.detail == "8 prompts, 1024 tokens identical"
    report = json.loads((S15 / "smoke-v2-lossless" / "mtp_smoke.json").read_text())
    control = window.split("_")[1]
    assert next(c for c in report["checks"] if c["name"].endswith(f"{control} model"))["detail"] == check.detail


def test_smoke_engines_ran_the_runner_asked_with_cuda_graphs():
    v2 = parse_engine_log((S15 / "smoke-v2-lossless" / "engine.log").read_text(errors="replace"))
    v1_text = (S15 / "smoke-v1-centroids" / "engine.log").read_text(errors="replace")
    v1 = parse_engine_log(v1_text)
    assert v2.v2_runner and not v1.v2_runner and v1.embedding_sharing_lines
    for facts, seconds in ((v2, 10), (v1, 17)):
        assert facts.cudagraph_mode == "FULL_AND_PIECEWISE" and facts.graph_capture_s == seconds
        assert gate.check_cuda_graphs(facts, None).status == PASS
    assert "Gemma4 MTP: centroids masking enabled (num_centroids=2048, top_k=32" in v1_text
    v1_result = json.loads((S15 / "smoke-v1-centroids" / "engine.result.json").read_text())
    # the controls plugin also reordered the centroid-masked drafter's embeddings
    assert all(w["control_reply"][0]["orderings"] == 1 for w in v1_result["windows"].values())
    report = json.loads((S15 / "smoke-v1-centroids" / "mtp_smoke.json").read_text())
    assert (report["runner"], report["centroids"], report["compile_backend"]) == ("v1", True, "inductor")


# --- every bench report, rebuilt --------------------------------------------------------

@pytest.mark.parametrize("run", RUNS)
def test_collect_rebuilds_every_report_of_the_session(reports, run):
    code, report, markdown = reports[run]
    cap = captured(run)
    assert report["engines"] == cap["engines"] and report["picks"] == cap["picks"]
    assert table(markdown) == table((S15 / run / "captured" / "bench.md").read_text())
    # the attention replicate's two k=4 engines died (below); every other engine measured
    assert code == (1 if run == "attention-26b-L30-r2" else 0)
    committed = json.loads((RESULTS / f"verify-{run}-s15-h200-vllm0.25.0.json").read_text())
    assert committed["engines"] == report["engines"] and committed["picks"] == report["picks"]


@pytest.mark.parametrize("run", RUNS)
def test_committed_markdown_holds_the_rebuilt_tables(reports, run):
    committed = "\n".join((RESULTS / name).read_text() for name in (
        "verify-sweep-h200-vllm0.25.0.md", "moe-config-e2e-h200-vllm0.25.0.md",
        "attention-fa4-h200-vllm0.25.0.md"))
    rows = table(reports[run][2])[2:]
    assert rows and all(row in committed for row in rows), run


def test_controls_held_on_every_speculative_window(reports):
    measured = 0
    for run in RUNS:
        for name, e in reports[run][1]["engines"].items():
            for window, f in (e.get("figures") or {}).items():
                if not e["k"]:
                    assert f["spec"] is None
                    continue
                if window.endswith("@agree"):
                    assert f["spec"]["accepted"] == f["spec"]["draft_tokens"] > 0, (run, name, window)
                else:
                    assert f["spec"]["accepted"] == 0 < f["spec"]["draft_tokens"], (run, name, window)
                measured += 1
    # 10 layers: recipe 4 engines, 31B 6; 30 layers: MoE 2 x 3, attention 2 (the replicate's died)
    assert measured == 4 * (4 + 6 + 6 + 2)


# --- issue 11 item 3: the 31B pick, k = 3..5 on V2 and V1 -------------------------------

def test_31b_v2_k3_wins_at_the_field_profile_and_v1_never_pays(reports):
    v2 = reports["sweep-31b-v2"][1]
    stock = bench_report._decode(v2["engines"]["stock"], "sustained")
    tok_s = {}
    for k in (3, 4):
        engine = v2["engines"][f"fp8-mtp{k}-v2"]
        tok_s[k] = 1000 * bench_report.profile_length(SPARK343, k) / engine["derived"]["step_ms"]
        assert projected(engine) == pytest.approx(tok_s[k], rel=1e-3)
    assert max(tok_s, key=tok_s.get) == 3
    pick = v2["picks"]["spark343"]
    assert (pick["engine"], pick["k"], pick["runner"]) == ("fp8-mtp3-v2", 3, "v2")
    assert pick["speedup_vs_stock"] == pytest.approx(pick["tok_s"] / stock, abs=0.002)
    assert "spark343" not in v2["engines"]["fp8-mtp5-v2"]["derived"]["projected"]
    # the step cost ratio the 31B H200 recipe takes as its threshold
    assert v2["engines"]["fp8-mtp3-v2"]["derived"]["step_cost_x_plain"] == pytest.approx(1.67, abs=0.005)
    v1 = reports["sweep-31b-v1"][1]
    assert all(p["engine"] == "fp8-v1" for p in v1["picks"].values())
    for k in (3, 4, 5):
        v1_cost = v1["engines"][f"fp8-mtp{k}-v1"]["derived"]["step_cost_x_plain"]
        v2_cost = v2["engines"][f"fp8-mtp{k}-v2"]["derived"]["step_cost_x_plain"]
        assert v1_cost > 3 * v2_cost, k


def test_the_31b_h200_recipe_states_what_the_sweeps_chose(reports):
    """k=3 beats k=4 in this run and the first sweep's best (k=2, 562 tok/s projected: h200.sweep.md,
    tests/test_verify_bench_report.py); the recipe serves it, with its measured step cost."""
    pick = reports["sweep-31b-v2"][1]["picks"]["spark343"]
    assert pick["tok_s"] > 562
    recipe = load_recipe("gemma-4-31b-it", "h200")
    assert recipe.speculative.num_speculative_tokens == pick["k"] == 3
    assert recipe.serve.model_runner == pick["runner"] == "v2"
    engine = reports["sweep-31b-v2"][1]["engines"][pick["engine"]]
    assert recipe.thresholds.step_cost_ratio == pytest.approx(engine["derived"]["step_cost_x_plain"], abs=0.01)
    evidence = (ROOT / "recipes" / "gemma-4-31b-it.h200-sweep.md").read_text()
    assert f"| **{pick['tok_s']:.0f} ({pick['speedup_vs_stock']:.2f})** |" in evidence


def test_the_26b_h200_recipe_expects_vllms_default_moe_config():
    from forge.patching.status import shipped_moe_configs

    moe = load_recipe("gemma-4-26b-a4b-it", "h200").moe_config
    assert not moe.expected and moe.name not in shipped_moe_configs("0.25.0")


# --- issue 11 item 4: the MoE configs end to end -----------------------------------------

@pytest.mark.parametrize("run", ["moe-26b-L30", "moe-26b-L30-r2"])
def test_vllms_default_moe_config_beats_the_shipped_one_at_full_depth(reports, run):
    engines = reports[run][1]["engines"]
    shipped, none, tuned = (engines[name] for name, _ in MOE_ENGINES)
    for window in ("sustained@agree", "sustained@random", "conc8@agree", "conc8@random"):
        assert decode(none, window) > decode(shipped, window) * 1.04, window
    # the k+1 tune does not beat vLLM's default either (within 2 %, slower at batch 1)
    for window in ("sustained@agree", "sustained@random"):
        assert 0.97 < decode(tuned, window) / decode(none, window) < 1.0, window
    # each engine read what it was given
    logs = {name: parse_engine_log((S15 / run / "engines" / f"{name}.log").read_text(errors="replace"))
            for name, _ in MOE_ENGINES}
    assert logs["fp8-mtp4-v2"].moe_config_used[0].endswith(SHIPPED)
    assert logs["fp8-mtp4-v2-moe-tuned-kplus1"].moe_config_used[0].endswith(TUNED)
    assert logs["fp8-mtp4-v2-moe-none"].moe_config_used == []
    assert "moe-none/E=128,N=704" in logs["fp8-mtp4-v2-moe-none"].moe_config_missing[0]


def test_the_shipped_config_measured_as_fast_as_none_in_the_attention_run(reports):
    """The caveat §7.4 states: the same shipped-config engine (identical settings) ran 676 tok/s
    in attention-26b-L30, measured after the MoE run on the other GPU had finished, against
    624 in moe-26b-L30: the 7.5 % gap is a within-run figure, not a property of the file alone."""
    attention = reports["attention-26b-L30"][1]["engines"]["fp8-mtp4-v2"]
    moe = reports["moe-26b-L30"][1]["engines"]
    assert attention["moe"] == moe["fp8-mtp4-v2"]["moe"] == "patches/moe-configs"
    assert decode(attention, "sustained@agree") >= decode(moe["fp8-mtp4-v2-moe-none"], "sustained@agree")
    assert decode(attention, "sustained@agree") > 1.05 * decode(moe["fp8-mtp4-v2"], "sustained@agree")


def test_10_layer_recipe_run_shows_no_gain_from_any_moe_config(reports):
    engines = reports["recipe-26b"][1]["engines"]
    none = decode(engines["fp8-mtp4-v2-moe-none"], "sustained@agree")
    assert decode(engines["fp8-mtp4-v2"], "sustained@agree") <= none
    assert decode(engines["fp8-mtp4-v2-moe-tuned-kplus1"], "sustained@agree") < none
    pick = reports["recipe-26b"][1]["picks"]["spark343"]
    assert pick["engine"] == "fp8-mtp4-v2-moe-none" and pick["k"] == 4


# --- issue 13 item 4: FA4 against Triton ------------------------------------------------

def test_fa4_and_triton_within_a_few_percent_and_fa4_starts_slower(reports):
    first = reports["attention-26b-L30"][1]["engines"]
    second = reports["attention-26b-L30-r2"][1]["engines"]
    for engines in (first, second):
        triton, fa4 = engines["fp8-v2"], engines["fp8-v2-fa4"]
        ratio = decode(triton, "sustained@agree") / decode(fa4, "sustained@agree")
        assert 1.0 < ratio < 1.04  # plain: Triton ahead by 2-3 %
        assert fa4["init_s"] > triton["init_s"] + 40
    ratio = decode(first["fp8-mtp4-v2-fa4"], "sustained@agree") / decode(first["fp8-mtp4-v2"], "sustained@agree")
    assert 1.0 < ratio < 1.04  # k=4: FA4 ahead by about 2 %
    assert first["fp8-mtp4-v2-fa4"]["init_s"] > first["fp8-mtp4-v2"]["init_s"] + 40
    # 10 layers (the recipe run): Triton ahead at k=4, FA4's repeats noisy
    ten = reports["recipe-26b"][1]["engines"]
    ahead = decode(ten["fp8-mtp4-v2"], "sustained@agree") / decode(ten["fp8-mtp4-v2-fa4"], "sustained@agree")
    assert f"Triton {100 * (ahead - 1):.1f} %\n  ahead" in section7()
    tpots = [r["tpot_s"] for r in json.loads((S15 / "recipe-26b" / "engines" / "fp8-mtp4-v2-fa4.result.json")
                                             .read_text())["windows"]["sustained@agree"]["requests"]]
    assert f"{1000 * min(tpots):.2f}-{1000 * max(tpots):.2f} ms per token" in section7()


@pytest.mark.parametrize("run, engine", [
    ("recipe-26b", "stock"), ("recipe-26b", "fp8-v2-fa4"), ("recipe-26b", "fp8-mtp4-v2-fa4"),
    ("attention-26b-L30", "fp8-v2-fa4"), ("attention-26b-L30", "fp8-mtp4-v2-fa4"),
    ("attention-26b-L30-r2", "stock"), ("attention-26b-L30-r2", "fp8-v2-fa4")])
def test_fa4_engines_captured_cuda_graphs_without_an_abort(run, engine):
    """vLLM #47275 (Gemma 4 MoE + FA4 aborting in CUDA-graph capture on an H200) not reproduced:
    with and without the drafter, 10 and 30 layers."""
    facts = parse_engine_log((S15 / run / "engines" / f"{engine}.log").read_text(errors="replace"))
    assert facts.flash_attn_version == 4 and facts.root_cause is None
    assert facts.cudagraph_mode == "FULL_AND_PIECEWISE" and facts.graph_capture_s is not None


@pytest.mark.parametrize("engine", ["fp8-mtp4-v2", "fp8-mtp4-v2-fa4"])
def test_the_replicates_k4_engines_died_of_memory_at_load_beside_the_bf16_stock(reports, engine):
    run = "attention-26b-L30-r2"
    error = reports[run][1]["engines"][engine]["error"]
    assert error.startswith("CUDA out of memory") and "Process 20477 has 49.04 GiB memory in use" in error
    text = (S15 / run / "engines" / f"{engine}.log").read_text(errors="replace")
    assert "process_weights_after_loading" in text and "Capturing" not in text  # before attention ran
    stock = (S15 / run / "engines" / "stock.log").read_text(errors="replace")
    assert "EngineCore pid=20477" in stock and "Model loading took 47.47 GiB" in stock


# --- issue 13 item 2: two nodes ----------------------------------------------------------

@pytest.mark.parametrize("rank", [0, 1])
def test_two_node_ranks_joined_captured_graphs_and_looked_up_n352(rank):
    text = (S15 / "two-node" / f"rank{rank}.log").read_text(errors="replace")
    assert f"rank {rank} nRanks 2 nNodes 2" in text and "via NET/Socket" in text
    facts = parse_engine_log(text)
    assert facts.graph_capture_s == 36
    assert any(TP2_FP8 in line for line in facts.moe_config_missing)
    assert not facts.moe_config_used  # vLLM's default MoE config ran
    if rank == 0:
        assert facts.tensor_parallel_size == 2 and facts.cudagraph_mode == "FULL_AND_PIECEWISE"
    else:
        assert "headless multiproc executor, with head node address 127.0.0.1:29611" in text


def test_two_node_server_answered_the_smoke_and_a_burst_of_500():
    log = (S15 / "logs" / "two-node.txt").read_text(errors="replace")
    assert "[two-node +279s] server up" in log
    assert "Application startup complete." in (S15 / "two-node" / "rank0.log").read_text(errors="replace")
    burst = json.loads((S15 / "two-node" / "burst" / "bench.json").read_text())
    b = burst["server_burst"]
    assert b["answered"] == b["requests"] == 500 and b["failed"] == 0
    assert (b["latency_p50_s"], b["wall_s"]) == (15.196, 29.11)
    rendered = bench_report.render_markdown({**burst, "engines": {}})
    line = next(x for x in rendered.splitlines() if x.startswith("- server burst"))
    assert line in (S15 / "two-node" / "burst" / "bench.md").read_text()


def test_two_node_smoke_passes_seven_and_fails_acceptance_as_dummy_weights_must():
    report = json.loads((S15 / "two-node" / "smoke" / "mtp_smoke.json").read_text())
    statuses = [c["status"] for c in report["checks"]]
    assert statuses.count(PASS) == 7 and statuses.count(FAIL) == 1
    failed = next(c for c in report["checks"] if c["status"] == FAIL)
    assert failed["name"] == "acceptance (temperature 0)"
    assert report["windows"]["greedy"]["accepted"] == 0 and report["windows"]["greedy"]["draft_tokens"] == 2016
    # the captured report said "mode N" (an API server's unresolved setting); main's parser now
    # reads the mode the engine resolved from the same rank-0 log
    graphs = next(c for c in report["checks"] if c["name"] == "CUDA graphs")
    assert graphs["detail"] == "mode N, captured in 36 s"
    rebuilt = {c.name: c for c in server_log_checks(load_recipe("gemma-4-26b-a4b-it", "h200"),
                                                    str(S15 / "two-node" / "rank0.log"))}
    assert rebuilt["CUDA graphs"].detail == "mode FULL_AND_PIECEWISE, captured in 36 s"


def test_moe_config_names_agree_with_vllms_on_the_h200():
    names = json.loads((S15 / "logs" / "moe-config-names.json").read_text())
    text = (S15 / "logs" / "moe-config-names.txt").read_text()
    assert "5/5 names agree (vLLM 0.25.0, NVIDIA H200)" in text and text.rstrip().endswith("exit 0")
    assert TP2_FP8 in json.dumps(names)
    # today's grammar still builds and reads vLLM's own names, as vLLM 0.25.0 spelled them on the H200
    from forge.patching.moe_config_names import config_file_name, parse_config_name

    for row in names["rows"]:
        parsed = parse_config_name(row["vllm"])
        assert parsed is not None and str(parsed) == row["vllm"]
        if parsed.block_shape is None:
            dtype = parsed.dtype or "bf16"
            assert config_file_name(names["device"], dtype, parsed.experts, parsed.n) == row["vllm"]


# --- docs/gpu-evidence.md §7 quotes what the data says ----------------------------------

def test_section_7_tables_are_the_rebuilt_figures(reports):
    text = section7()
    rows = (smoke_rows() + item5_rows(reports) + sweep31_rows(reports) + moe_rows(reports)
            + attention_rows(reports))
    missing = [row for row in rows if row not in text]
    assert not missing, "\n".join(missing)


def test_section_7_quotes_log_lines_that_are_in_the_logs():
    quoted = re.findall(r"^(\S+?\.(?:log|txt)): (.+)$", section7(), flags=re.MULTILINE)
    assert len(quoted) >= 8
    for path, line in quoted:
        files = sorted(S15.glob(path.replace("{0,1}", "*")))
        assert files, path
        for f in files:
            assert line in f.read_text(errors="replace"), (path, line)


def attention_prose(reports) -> str:
    """The sentence §7.5 and the attention report say about FA4 against Triton at 30 layers."""
    first = reports["attention-26b-L30"][1]["engines"]
    second = reports["attention-26b-L30-r2"][1]["engines"]

    def ahead(a: dict, b: dict, window: str) -> str:
        return f"{100 * (decode(a, window) / decode(b, window) - 1):.1f} % ({_fmt(decode(a, window))} vs {_fmt(decode(b, window))})"

    triton, fa4 = (first["fp8-v2"], second["fp8-v2"]), (first["fp8-v2-fa4"], second["fp8-v2-fa4"])
    k4, k4_fa4 = first["fp8-mtp4-v2"], first["fp8-mtp4-v2-fa4"]
    return (f"Triton ahead by {ahead(triton[0], fa4[0], 'sustained@agree')} and "
            f"{ahead(triton[1], fa4[1], 'sustained@agree')};\n"
            f"  k=4 (call d only), FA4 ahead by {ahead(k4_fa4, k4, 'sustained@agree')} at full acceptance, "
            f"{ahead(k4_fa4, k4, 'sustained@random')[:5]} at zero")


def test_section_7_and_the_attention_report_state_the_rebuilt_differences(reports):
    sentence = attention_prose(reports)
    assert sentence in section7()
    assert sentence in (RESULTS / "attention-fa4-h200-vllm0.25.0.md").read_text()


@pytest.mark.parametrize("run, engine, repeats", [
    *[(run, name, 5) for run in ("moe-26b-L30", "moe-26b-L30-r2") for name, _ in MOE_ENGINES],
    ("attention-26b-L30-r2", "stock", 3), ("attention-26b-L30-r2", "fp8-v2", 3)])
def test_30_layer_repeats_agree_within_one_percent(run, engine, repeats):
    """§7.2, §7.4: every 30-layer engine they quote has per-request TPOTs within 1 % across its
    repeats, so the differences between engines are not noise inside a run."""
    result = json.loads((S15 / run / "engines" / f"{engine}.result.json").read_text())
    for window in ("sustained@agree", "sustained@random"):
        tpots = [r["tpot_s"] for r in result["windows"][window]["requests"]]
        assert len(tpots) == repeats and max(tpots) / min(tpots) < 1.01, window
