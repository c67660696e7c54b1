"""bench.py's figures, derived step costs and rendering, rebuilt on the CPU from the engine
results captured on an H200 (vLLM 0.25.0, 6 target layers, dummy weights)."""
import json
import shutil
from pathlib import Path

import pytest

from verify import bench
from verify.report import FAIL, INFO, PASS, Check, render_table, verdict, write_report

GPU = Path(__file__).parent / "fixtures" / "gpu"
CAPTURED = GPU / "bench-L6"
ENGINES = [f"{c}-{r}" for r in ("v1", "v2") for c in ("bf16", "fp8", "fp8-mtp1", "fp8-mtp2", "fp8-mtp3")]


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    shutil.copytree(CAPTURED / "engines", out / "engines")
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--layers",
                       "6", "--collect", "--out", str(out)])
    return code, out, json.loads((out / "bench.json").read_text())


def test_collect_rebuilds_the_gpu_report_exactly(collected):
    code, _, report = collected
    captured = json.loads((CAPTURED / "bench.json").read_text())
    assert code == 0
    assert list(report["engines"]) == ENGINES
    assert report["machine"] == {"device": "NVIDIA H200", "vllm": "0.25.0", "torch": "2.11.0+cu130"}
    for name in ENGINES:
        assert report["engines"][name] == captured["engines"][name], name


def test_every_engine_ran_under_cuda_graphs_with_triton_moe(collected):
    for name, engine in collected[2]["engines"].items():
        assert engine["error"] is None and engine["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert engine["moe_backends"] == (["TRITON Unquantized"] if name.startswith("bf16")
                                          else ["TRITON Fp8"])
        assert engine["v2_runner_log"] is name.endswith("v2")


def test_figures_follow_their_definitions(collected):
    for name, engine in collected[2]["engines"].items():
        sustained = engine["figures"]["sustained"]
        assert sustained["decode_tok_s"] == pytest.approx(1000 / sustained["tpot_ms"], rel=0.01)
        # Wall clock includes prefill and scheduling: never faster than decode alone.
        assert sustained["wall_tok_s"] <= sustained["decode_tok_s"] * 1.01
        assert engine["figures"]["conc16"]["concurrency"] == 16
        assert engine["figures"]["burst"]["concurrency"] == 1


def test_speculative_engines_accept_nothing_on_dummy_weights_so_a_step_is_a_token(collected):
    for name, engine in collected[2]["engines"].items():
        spec = engine["figures"]["sustained"]["spec"]
        if engine["k"] == 0:
            assert spec is None
            continue
        assert spec["accepted"] == 0 and spec["draft_tokens"] == engine["k"] * spec["drafts"]
        assert engine["figures"]["sustained"]["step_ms"] == pytest.approx(
            engine["figures"]["sustained"]["tpot_ms"], rel=0.02)


def test_step_cost_and_break_even(collected):
    engines = collected[2]["engines"]
    for name in ("fp8-mtp1-v1", "fp8-mtp3-v1", "fp8-mtp3-v2"):
        derived = engines[name]["derived"]
        plain = engines[derived["plain_engine"]]["figures"]["sustained"]["step_ms"]
        ratio = engines[name]["figures"]["sustained"]["step_ms"] / plain
        assert derived["step_cost_ratio"] == pytest.approx(ratio, abs=0.001)
        assert derived["break_even_mean_acceptance_length"] == derived["step_cost_ratio"]
        k = engines[name]["k"]
        assert derived["max_speedup_all_accepted"] == pytest.approx((k + 1) / ratio, abs=0.002)
    # The measured direction REFERENCE.md §5 reports: V2's speculative step is the cheaper one.
    assert engines["fp8-mtp3-v2"]["derived"]["step_cost_ratio"] < engines["fp8-mtp3-v1"]["derived"]["step_cost_ratio"]


def test_markdown_labels_every_figure(collected):
    markdown = (collected[1] / "bench.md").read_text()
    for name in ENGINES:
        assert f"| {name} |" in markdown
    assert "decode = 1/TPOT (decode only)" in markdown and "wall clock incl. prefill" in markdown
    assert "6 target layers" in markdown and "dummy weights" in markdown


def test_plot_is_rendered_or_its_absence_explained(collected):
    report = collected[2]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert report["plot"] is None and "matplotlib is not installed" in report["plot_note"]
        assert "Plot: not rendered (matplotlib is not installed here)" in (collected[1] / "bench.md").read_text()
    else:
        assert (collected[1] / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_render_from_json_reproduces_the_markdown(collected, tmp_path):
    shutil.copy(collected[1] / "bench.json", tmp_path / "bench.json")
    assert bench.main(["--render", str(tmp_path / "bench.json")]) == 0
    assert (tmp_path / "bench.md").read_text() == (collected[1] / "bench.md").read_text()


def test_failed_engine_is_reported_not_dropped(tmp_path):
    (tmp_path / "engines").mkdir()
    shutil.copy(GPU / "smoke-unpatched-L30" / "engine.log", tmp_path / "engines" / "fp8-mtp3-v1.log")
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy",
                       "--configs", "fp8-mtp3", "--runners", "v1", "--collect", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "bench.json").read_text())
    assert code == 1
    assert "same reduction dim" in report["engines"]["fp8-mtp3-v1"]["error"]
    assert "failed: a and b must have same reduction dim" in (tmp_path / "bench.md").read_text()


@pytest.mark.parametrize("text", ["fp16", "fp8-mtp", "bf16-mtp10", "fp8-eagle3"])
def test_bad_config_names_are_one_line_errors(text, tmp_path, capsys):
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--configs", text,
                       "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --configs:") and "\n" not in err


def test_smoke_report_table_and_verdict_from_the_captured_run(tmp_path):
    captured = json.loads((GPU / "smoke-patched-L6" / "mtp_smoke.json").read_text())
    checks = [Check(**c) for c in captured["checks"]]
    assert [c.status for c in checks] == [PASS, PASS, PASS, PASS, INFO, FAIL, INFO]
    table = render_table(checks)
    assert "RESULT: FAIL (4 passed, 1 failed)" in table
    failed = next(c for c in checks if c.status == FAIL)
    assert failed.detail in table  # a failure's root cause is never cut
    assert all(len(line) <= 160 for line in table.splitlines() if " FAIL " not in line)
    unpatched = [Check(**c) for c in json.loads(
        (GPU / "smoke-unpatched-L30" / "mtp_smoke.json").read_text())["checks"]]
    assert "#47794" in render_table(unpatched) and "build.py apply" in render_table(unpatched)
    path = write_report(tmp_path / "r.json", checks, recipe="gemma-4-26b-a4b-it")
    assert json.loads(path.read_text())["passed"] is False
    assert verdict([Check("x", INFO, "")]) is False  # nothing passed: not a pass
