"""bench.py's figures, derived step costs, projections and rendering, rebuilt on the CPU from
engine results captured on H200s (vLLM 0.25.0, dummy weights):
the result records under benchmarks/results/ (each record's engines/ beside its result.json):
- h200-0.25.0-bench-26b-a4b-l6: 2026-11-29, 26B-A4B shapes, 6 layers, no controls (every draft
  rejected);
- h200-0.25.0-bench-31b-sweep-k0-2: 31B shapes, 10 layers, eager compile backend, each window on
  the agreeing model (@agree) and the random one (@random), verify/controls.py;
- h200-0.25.0-bench-26b-a4b-sweep-{v2,v1}: 26B-A4B shapes, 10 layers, eager compile backend,
  k = 1..5 on each runner with controls, stock in the V2 sweep; bench.json is the rebuilt report,
  captured/ the one the GPU host wrote."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge.errors import ForgeError
from verify import bench, bench_report
from verify.report import (
    FAIL,
    INFO,
    PASS,
    Check,
    installed_versions,
    render_table,
    verdict,
    write_report,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent.parent / "benchmarks" / "results"
L6 = RESULTS / "h200-0.25.0-bench-26b-a4b-l6"
ENGINES_L6 = [f"{c}-{r}" for c in ("bf16", "fp8", "fp8-mtp1", "fp8-mtp2", "fp8-mtp3") for r in ("v1", "v2")]
SWEEP_31B = RESULTS / "h200-0.25.0-bench-31b-sweep-k0-2"
SWEEP_ARGS = ["--recipe", "gemma-4-31b-it", "--target", "h200", "--dummy", "--shape", "31b",
              "--layers", "10", "--configs", "stock,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3,fp8-mtp4,fp8-mtp5",
              "--runners", "v1,v2", "--compile-backend", "eager", "--windows", "sustained,conc8",
              "--attention-backend", "TRITON_ATTN", "--moe-config-dir", "patches/moe-configs",
              "--profile", "spark343=0.84/0.60/0.39/0.27", "--profile", "seed87=rate@0.87"]
SMOKE_L6 = RESULTS / "h200-0.25.0-smoke-26b-a4b-v1-l6-patched"
SMOKE_L30 = RESULTS / "h200-0.25.0-smoke-26b-a4b-v1-l30-unpatched"


def sweep_26b(runner: str) -> Path:
    return RESULTS / f"h200-0.25.0-bench-26b-a4b-sweep-{runner}"
SWEEP_26B_ARGS = ["--recipe", "gemma-4-26b-a4b-it", "--shape", "26b-a4b", "--target", "h200", "--dummy",
                  "--layers", "10", "--compile-backend", "eager", "--windows", "sustained,conc8",
                  "--attention-backend", "TRITON_ATTN", "--moe-config-dir", "patches/moe-configs",
                  "--profile", "spark343=0.84/0.60/0.39/0.27", "--profile", "seed87=rate@0.87"]
SWEEP_26B_CONFIGS = {"v2": "stock,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3,fp8-mtp4,fp8-mtp5",
                     "v1": "fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3,fp8-mtp4,fp8-mtp5"}
SPARK343 = [0.84, 0.60, 0.39, 0.27]  # eugr/spark-vllm-docker#343, 26B-A4B NVFP4, k=4


def _collect(tmp_path_factory, engines_dir: Path, args: list[str]):
    out = tmp_path_factory.mktemp("bench")
    shutil.copytree(engines_dir, out / "engines")
    code = bench.main(args + ["--collect", "--out", str(out)])
    return code, out, json.loads((out / "bench.json").read_text())


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    return _collect(tmp_path_factory, L6 / "engines",
                    ["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--layers", "6",
                     "--configs", "bf16,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3", "--attention-backend",
                     "TRITON_ATTN"])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return _collect(tmp_path_factory, SWEEP_31B / "engines", SWEEP_ARGS)


@pytest.fixture(scope="module")
def sweeps_26b(tmp_path_factory):
    return {runner: _collect(tmp_path_factory, sweep_26b(runner) / "engines",
                             SWEEP_26B_ARGS + ["--configs", configs, "--runners", runner])
            for runner, configs in SWEEP_26B_CONFIGS.items()}


def test_collect_rebuilds_the_gpu_report_exactly(collected):
    code, _, report = collected
    captured = json.loads((L6 / "bench.json").read_text())
    assert code == 0
    assert list(report["engines"]) == ENGINES_L6
    # Captured before the worker recorded versions: vLLM and torch as the started engine imported
    # them, transformers said to be unknown rather than guessed.
    assert report["machine"] == {"device": "NVIDIA H200", "vllm": "0.25.0", "torch": "2.11.0+cu130",
                                 "transformers": "unknown: not recorded (an engine result from "
                                                 "before verify recorded it)"}
    for name in ENGINES_L6:
        # The run measured conc16, so the rebuild adds the concurrency figures the capture
        # predates (derived["concurrency"]); everything else is the captured report's.
        engine = report["engines"][name]
        derived = dict(engine["derived"])
        concurrency = derived.pop("concurrency")
        assert {**engine, "derived": derived} == captured["engines"][name], name
        assert concurrency == {window: {"decode_tok_s": engine["figures"][window]["decode_tok_s"],
                                        "x_stock": None, "slower_than_stock": None}
                               for window in ("conc8", "conc16")}, name  # no stock engine ran


def test_the_l6_run_measured_conc16_so_its_rebuilt_report_gains_the_concurrency_table(collected):
    """The only committed run with conc16 (no stock engine: decode columns alone); the reports
    of runs of conc8 alone (every other committed one) rebuild without it, line for line."""
    markdown = (collected[1] / "bench.md").read_text()
    table = markdown.split("\nConcurrency (", 1)[1].split("\n\n", 2)[1].splitlines()
    assert table[:3] == ["| engine | conc 8 decode tok/s as measured | conc 16 decode tok/s as measured |",
                         "|---|---|---|", "| bf16-v1 | 275 | 258 |"]
    assert [row.split(" | ")[0] for row in table[2:]] == [f"| {name}" for name in ENGINES_L6]


def test_bench_names_the_versions_the_engine_processes_recorded(tmp_path):
    # The L6 engines' results as the worker writes them now: with the versions installed where
    # it ran (here this host's real metadata: no vLLM, no torch), read before the engine started.
    engines = tmp_path / "engines"
    shutil.copytree(L6 / "engines", engines)
    versions = installed_versions()
    for path in engines.glob("*.result.json"):
        result = json.loads(path.read_text())
        path.write_text(json.dumps({**result, "versions": versions}))
    args = ["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--layers", "6",
            "--attention-backend", "TRITON_ATTN"]
    bench.main(args + ["--configs", "bf16,fp8", "--collect", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["machine"] == {"device": "NVIDIA H200", **versions}
    assert versions["vllm"] == "not installed"
    assert "- ran on: vllm not installed, torch not installed, transformers " in \
        (tmp_path / "bench.md").read_text()
    # An engine that never started still named them: the report says them without a device.
    (engines / "bf16-v1.result.json").write_text(json.dumps(
        {"versions": versions, "engine": {"started": False}, "error": "RuntimeError: x"}))
    bench.main(args + ["--configs", "bf16", "--runners", "v1", "--collect", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "bench.json").read_text())["machine"] == {"device": None, **versions}


def test_collect_rebuilds_the_sweep_report_exactly(sweep):
    code, out, report = sweep
    captured = json.loads((SWEEP_31B / "bench.json").read_text())
    # k = 3..5 were cut by the call's time limit: the report says so rather than dropping them.
    assert code == 1
    assert report["engines"] == captured["engines"]
    assert report["picks"] == captured["picks"]
    table = [line for line in (out / "bench.md").read_text().splitlines() if line.startswith("|")]
    assert table == [line for line in (SWEEP_31B / "bench.md").read_text().splitlines()
                     if line.startswith("|")]


def test_every_engine_ran_under_cuda_graphs_with_triton_moe(collected):
    for name, engine in collected[2]["engines"].items():
        assert engine["error"] is None and engine["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        assert engine["moe_backends"] == (["TRITON Unquantized"] if name.startswith("bf16")
                                          else ["TRITON Fp8"])
        assert engine["v2_runner_log"] is name.endswith("v2")


def test_figures_follow_their_definitions(collected, sweep):
    for report in (collected[2], sweep[2]):
        for name, engine in report["engines"].items():
            for window, f in (engine["figures"] or {}).items():
                if window == "followup":  # TTFT figures, not a decode window
                    continue
                assert f["decode_tok_s"] == pytest.approx(1000 / f["tpot_ms"], rel=0.01), (name, window)
                # step cost = TPOT x tokens per step
                assert f["step_ms"] == pytest.approx(f["tpot_ms"] * f["tokens_per_step"], rel=0.02)
                if f["spec"]:
                    length = f["spec"]["mean_acceptance_length"]
                    assert f["tokens_per_step"] == pytest.approx(length, rel=0.02), (name, window)
                if window.startswith("sustained"):
                    # Wall clock includes prefill and scheduling: never faster than decode alone.
                    assert f["wall_tok_s"] <= f["decode_tok_s"] * 1.01
    assert collected[2]["engines"]["fp8-v1"]["figures"]["conc16"]["concurrency"] == 16
    assert sweep[2]["engines"]["fp8-v1"]["figures"]["conc8@agree"]["concurrency"] == 8


def test_dummy_weights_without_controls_accept_nothing(collected):
    for engine in collected[2]["engines"].values():
        spec = engine["figures"]["sustained"]["spec"]
        if engine["k"] == 0:
            assert spec is None
            continue
        assert spec["accepted"] == 0 and spec["draft_tokens"] == engine["k"] * spec["drafts"]
        assert engine["figures"]["sustained"]["tokens_per_step"] == 1


def controls_held(engines: dict) -> int:
    """Assert every speculative window accepted all drafts on the agreeing model and none on the
    random one (plain engines have no spec figures); return how many windows were checked."""
    measured = 0
    for name, engine in engines.items():
        for window, f in (engine["figures"] or {}).items():
            if not engine["k"]:
                assert f["spec"] is None
                continue
            spec = f["spec"]
            if window.endswith("@agree"):
                assert spec["accepted"] == spec["draft_tokens"] > 0, (name, window)
                assert spec["per_position_rates"] == [1.0] * engine["k"]
            else:
                assert spec["accepted"] == 0 and spec["draft_tokens"] > 0, (name, window)
                assert f["tokens_per_step"] == 1
            measured += 1
    return measured


def test_controls_accept_everything_on_the_agreeing_model_and_nothing_on_the_random_one(sweep):
    measured = controls_held(sweep[2]["engines"])
    # k=1 and k=2 on both runners, four windows each, and k=5 V1's first window.
    assert measured == 17


def test_step_cost_does_not_depend_on_acceptance_on_v2(sweep):
    """At greedy a step verifies k+1 tokens and drafts k whatever is accepted: the agreeing and
    the random model must cost the same per step (measured: within 0.3 % on V2)."""
    for name in ("fp8-mtp1-v2", "fp8-mtp2-v2"):
        derived = sweep[2]["engines"][name]["derived"]
        assert derived["step_ms_spread"] < 0.01, name


def test_speedups_are_ratios_from_the_same_run(sweep):
    engines = sweep[2]["engines"]
    for name in ("fp8-mtp1-v2", "fp8-mtp2-v2", "fp8-mtp1-v1"):
        engine = engines[name]
        derived = engine["derived"]
        assert derived["plain_engine"] == f"fp8-{engine['runner']}" and derived["stock_engine"] == "stock"
        for window, w in derived["windows"].items():
            mine = engine["figures"][window]["decode_tok_s"]
            plain = engines[derived["plain_engine"]]["figures"][window]["decode_tok_s"]
            stock = engines["stock"]["figures"][window]["decode_tok_s"]
            assert w["speedup_vs_plain"] == pytest.approx(mine / plain, abs=0.001)
            assert w["speedup_vs_stock"] == pytest.approx(mine / stock, abs=0.001)
    # V2's speculative step is the cheaper one (the 31B runner choice).
    for k in (1, 2):
        assert (engines[f"fp8-mtp{k}-v2"]["derived"]["step_cost_x_plain"]
                < engines[f"fp8-mtp{k}-v1"]["derived"]["step_cost_x_plain"])


def test_projection_is_mean_length_over_step_cost(sweep):
    engines = sweep[2]["engines"]
    stock = bench_report._decode(engines["stock"], "sustained")
    for engine in engines.values():
        projected = (engine.get("derived") or {}).get("projected") or {}
        for profile, p in projected.items():
            rates = SPARK343 if profile == "spark343" else 0.87
            length = bench_report.profile_length(rates, engine["k"]) if engine["k"] else 1.0
            assert p["mean_acceptance_length"] == pytest.approx(length, abs=0.001)
            assert p["tok_s"] == pytest.approx(1000 * length / engine["derived"]["step_ms"], rel=1e-3)
            assert p["speedup_vs_stock"] == pytest.approx(p["tok_s"] / stock, abs=0.002)
    # a 4-position profile does not project k=5
    assert "spark343" not in engines["fp8-mtp5-v1"]["derived"]["projected"]
    assert bench_report.profile_length(SPARK343, 2) == pytest.approx(2.44)
    assert bench_report.profile_length(0.87, 3) == pytest.approx(3.61)


def test_the_first_31b_sweep_chose_k2_among_what_it_measured(sweep):
    """The first 31B sweep measured k <= 2 (k = 3..5 were cut): its pick, k=2 on V2, and its
    figures are its record's (h200-0.25.0-bench-31b-sweep-k0-2)."""
    pick = sweep[2]["picks"]["spark343"]
    assert (pick["engine"], pick["k"], pick["runner"]) == ("fp8-mtp2-v2", 2, "v2")
    figures = json.loads((SWEEP_31B / "result.json").read_text())["figures"]
    assert figures["fp8-mtp2-v2.projected_tok_s"] == pick["tok_s"]
    derived = sweep[2]["engines"]["fp8-mtp2-v2"]["derived"]
    assert figures["fp8-mtp2-v2.step_cost_x_plain"] == derived["step_cost_x_plain"]


def test_markdown_labels_every_figure(collected, sweep):
    markdown = (collected[1] / "bench.md").read_text()
    for name in ENGINES_L6:
        assert f"| {name} |" in markdown
    assert "decode = 1/TPOT (decode only" in markdown and "no controls: dummy weights accept no drafts" in markdown
    assert "6 target layers" in markdown and "dummy weights" in markdown
    swept = (sweep[1] / "bench.md").read_text()
    assert "31b shapes, 10 target layers" in swept and "@agree: full acceptance" in swept
    assert "projected tok/s(L) = L / step cost" in swept
    assert "| fp8-mtp3-v2 | failed: no result |" in swept
    assert "best at profile `spark343`" in swept and "fp8-mtp2-v2 (k=2, runner v2)" in swept


def test_the_plot_is_rendered(collected):
    """matplotlib is a test requirement (requirements-dev.txt): the plot is drawn for real here.
    Before, CI had no matplotlib and only ever ran the branch that explains its absence."""
    import matplotlib

    report, out = collected[2], collected[1]
    assert matplotlib.__version__ and report["plot"] == "bench.png"
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Plot: bench.png" in (out / "bench.md").read_text()
    assert not list(out.glob("*.partial"))


def test_without_matplotlib_the_report_says_the_plot_was_not_rendered(collected, tmp_path):
    """A GPU host without matplotlib: `bench.py --render` in a Python that cannot import it
    (sys.modules["matplotlib"] = None is Python's own way to make an import fail)."""
    shutil.copy(collected[1] / "bench.json", tmp_path / "bench.json")
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from verify import bench\n"
            f"raise SystemExit(bench.main(['--render', {str(tmp_path / 'bench.json')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["plot"] is None and report["plot_note"] == "matplotlib is not installed here"
    assert "Plot: not rendered (matplotlib is not installed here)" in (tmp_path / "bench.md").read_text()
    assert not (tmp_path / "bench.png").exists()


def test_render_from_json_reproduces_the_markdown(collected, sweep, tmp_path):
    for source in (collected[1], sweep[1]):
        shutil.copy(source / "bench.json", tmp_path / "bench.json")
        assert bench.main(["--render", str(tmp_path / "bench.json")]) == 0
        assert (tmp_path / "bench.md").read_text() == (source / "bench.md").read_text()


def test_failed_engine_is_reported_not_dropped(tmp_path):
    (tmp_path / "engines").mkdir()
    shutil.copy(SMOKE_L30 / "engine.log", tmp_path / "engines" / "fp8-mtp3-v1.log")
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy",
                       "--configs", "fp8-mtp3", "--runners", "v1", "--collect", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "bench.json").read_text())
    assert code == 1
    assert "same reduction dim" in report["engines"]["fp8-mtp3-v1"]["error"]
    assert "failed: a and b must have same reduction dim" in (tmp_path / "bench.md").read_text()


def test_out_of_memory_behind_orphaned_engines_is_named(tmp_path):
    """The 2026-11-30 26B wave: engines of a killed wave kept their memory; the next wave's
    report names the CUDA out-of-memory root cause."""
    (tmp_path / "engines").mkdir()
    shutil.copy(sweep_26b("v1") / "oom-wave" / "fp8-mtp3-v1.log", tmp_path / "engines" / "fp8-mtp3-v1.log")
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--layers", "10",
                       "--configs", "fp8-mtp3", "--runners", "v1", "--collect", "--out", str(tmp_path)])
    assert code == 1
    error = json.loads((tmp_path / "bench.json").read_text())["engines"]["fp8-mtp3-v1"]["error"]
    assert "out of memory" in error.lower() or "not enough GPU memory" in error


@pytest.mark.parametrize("text", ["fp16", "fp8-mtp", "bf16-mtp10", "fp8-eagle3"])
def test_bad_config_names_are_one_line_errors(text, tmp_path, capsys):
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--configs", text,
                       "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --configs:") and "\n" not in err


@pytest.mark.parametrize("text, message", [
    ("name=x,dtype=fp16", "dtype must be one of fp8, fp8_per_channel, fp8_per_block, fp8-dynamic, fp8-static, bf16, auto"),
    ("name=x,dtype=fp8_dynamic", "dtype must be one of fp8, fp8_per_channel, fp8_per_block, fp8-dynamic, fp8-static, bf16, auto"),
    ("k=3", "name= is required"),
    ("name=x,runner=v3", "runner must be v1, v2 or default"),
    ("name=x,colour=red", "is not one of name, dtype"),
    ("name=x,moe_backend=Triton", "moe_backend must be one of vLLM's --moe-backend names"),
    ("name=x,moe_backend=flashinfer-cutlass", "moe_backend must be one of vLLM's --moe-backend names"),
])
def test_bad_engine_definitions_are_one_line_errors(text, message, tmp_path, capsys):
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--configs", "",
                       "--engine", text, "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: --engine") and message in err and "\n" not in err


def test_engine_definitions_become_engine_settings(tmp_path):
    """What the H200 run's recipe pass asked for: stock as the release ships (its runner, no
    attention override, no tuned MoE folder), FA4 by leaving the backend to vLLM, and a MoE
    config folder per engine."""
    from forge.serving.recipes import load_recipe

    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "10",
                             "--attention-backend", "TRITON_ATTN", "--moe-config-dir", "patches/moe-configs",
                             "--out", str(tmp_path)])
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    stock = bench.engine_spec(recipe, args, bench.parse_engine("name=stock,dtype=auto,attention=default"), tmp_path)
    fa4 = bench.engine_spec(recipe, args, bench.parse_engine("name=f,k=3,runner=v2,attention=default"), tmp_path)
    none = bench.engine_spec(recipe, args, bench.parse_engine("name=n,k=3,runner=v2,moe=none"), tmp_path)
    assert "VLLM_USE_V2_MODEL_RUNNER" not in stock["env"] and "quantization" not in stock["engine_kwargs"]
    assert "attention_backend" not in stock["engine_kwargs"] and stock["meta"]["stock"] is True
    assert list(Path(stock["env"]["VLLM_TUNED_CONFIG_FOLDER"]).iterdir()) == []
    assert "attention_backend" not in fa4["engine_kwargs"] and fa4["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert fa4["engine_kwargs"]["speculative_config"]["num_speculative_tokens"] == 3
    assert fa4["env"]["VLLM_TUNED_CONFIG_FOLDER"].endswith("patches/moe-configs")
    assert none["engine_kwargs"]["attention_backend"] == "TRITON_ATTN"
    assert none["env"]["VLLM_TUNED_CONFIG_FOLDER"] == stock["env"]["VLLM_TUNED_CONFIG_FOLDER"]
    # --dummy: the controls plugin is installed and on the engine's path
    plugin = Path(fa4["env"]["PYTHONPATH"].split(":")[0])
    assert (plugin / "vllm_forge_controls-1.0.dist-info" / "entry_points.txt").exists()


def _site_copy(vllm_site) -> Path:
    """A copy of a real install (vLLM 0.27.1's package from its sdist), as a bench engine's site."""
    return vllm_site("0.27.1")


def test_an_engine_site_goes_first_on_its_path_with_the_plugin_behind(tmp_path, vllm_site):
    """site=DIR: the engine's worker imports vLLM from DIR (a copy patched with a candidate), the
    controls plugin and the repository stay on its path; an engine without site= keeps the path."""
    from forge.serving.recipes import load_recipe

    site = _site_copy(vllm_site)
    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "2",
                             "--out", str(tmp_path / "out")])
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    out = tmp_path / "out"
    plain = bench.engine_spec(recipe, args, bench.parse_engine("name=fp8-mtp4-v2,k=4,runner=v2"), out)
    patched = bench.engine_spec(recipe, args, bench.parse_engine(
        f"name=fp8-mtp4-v2-splitkv,k=4,runner=v2,site={site}"), out)
    path, plain_path = patched["env"]["PYTHONPATH"].split(":"), plain["env"]["PYTHONPATH"].split(":")
    assert path[0] == str(site.resolve()) and path[1:] == plain_path
    assert (Path(path[1]) / "vllm_forge_controls-1.0.dist-info" / "entry_points.txt").exists()
    assert str(bench.ROOT) in path and str(site.resolve()) not in plain_path
    assert patched["meta"]["site"] == str(site.resolve()) and "site" not in plain["meta"]
    # Without --dummy (no plugin): the site goes in front of the caller's own path.
    real = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--out", str(out)])
    spec = bench.engine_spec(recipe, real, bench.parse_engine(f"name=s,k=4,site={site}"), out)
    assert spec["env"]["PYTHONPATH"].split(":")[0] == str(site.resolve())


@pytest.mark.parametrize("what, message", [
    ("missing", "no such directory"),
    ("empty", "holds no vllm/ package"),
])
def test_an_engine_site_without_vllm_is_a_one_line_error(what, message, tmp_path, capsys):
    site = tmp_path / what
    if what == "empty":
        site.mkdir()
    code = bench.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--configs", "",
                       "--engine", f"name=x,k=4,site={site}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: --engine ") and "\n" not in err
    assert f"site={site}: {message}" in err


def test_collect_takes_an_engine_site_the_rebuilding_machine_lacks(tmp_path):
    """--collect starts no engine: a site= folder of the GPU host is named, not required (a
    committed run rebuilt in CI), while a run that starts engines still refuses it."""
    gone = str(tmp_path / "site-on-the-gpu-host")
    assert bench.parse_engine(f"name=x,k=4,site={gone}", check_site=False)["site"] == gone
    with pytest.raises(ForgeError, match="no such directory"):
        bench.parse_engine(f"name=x,k=4,site={gone}")


@pytest.mark.parametrize("dtype, quantization", [
    ("fp8", "fp8"), ("fp8_per_channel", "fp8_per_channel"), ("fp8_per_block", "fp8_per_block"),
    ("fp8-dynamic", None), ("bf16", None), ("auto", None)])
def test_an_engine_dtype_is_the_quantization_vllm_is_given(dtype, quantization, tmp_path):
    """The online FP8 variants are vLLM's own `--quantization` shorthands, passed as named; a BF16
    engine loads the checkpoint unquantized whatever the recipe says."""
    from forge.serving.recipes import load_recipe

    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "4",
                             "--out", str(tmp_path)])
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    spec = bench.engine_spec(recipe, args, bench.parse_engine(f"name=e,dtype={dtype},k=4"), tmp_path)
    assert spec["engine_kwargs"].get("quantization") == quantization
    assert spec["meta"]["dtype"] == dtype


def test_fp8_dynamic_engine_loads_a_prequantized_dummy_target(tmp_path):
    """dtype=fp8-dynamic: no online `quantization`; the dummy target's config.json carries the
    compressed-tensors FP8_DYNAMIC quantization_config with the family's ignore list, in a models
    folder of its own so that an fp8 engine of the same run keeps the plain config."""
    from forge.models import load_family
    from forge.serving.recipes import load_recipe

    engine = bench.parse_engine("name=fp8dyn-v2,dtype=fp8-dynamic,k=0,runner=v2")
    assert (engine["dtype"], engine["k"], engine["runner"]) == ("fp8-dynamic", 0, "v2")
    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "2", "--out", str(tmp_path)])
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    dyn = bench.engine_spec(recipe, args, engine, tmp_path)
    fp8 = bench.engine_spec(recipe, args, bench.parse_engine("name=f,dtype=fp8,runner=v2"), tmp_path)
    assert "quantization" not in dyn["engine_kwargs"] and fp8["engine_kwargs"]["quantization"] == "fp8"
    assert dyn["meta"]["dtype"] == "fp8-dynamic" and dyn["engine_kwargs"]["load_format"] == "dummy"
    dyn_dir, fp8_dir = Path(dyn["engine_kwargs"]["model"]), Path(fp8["engine_kwargs"]["model"])
    assert dyn_dir.parent == tmp_path / "models-fp8-dynamic" and fp8_dir.parent == tmp_path / "models"
    assert "quantization_config" not in json.loads((fp8_dir / "config.json").read_text())
    quant = json.loads((dyn_dir / "config.json").read_text())["quantization_config"]
    family = load_family(recipe.family_model[0].name)
    assert quant["ignore"] == family.values["fp8_dynamic"]["ignore"] and "re:.*router" in quant["ignore"]
    assert (quant["quant_method"], quant["format"]) == ("compressed-tensors", "float-quantized")
    (group,) = quant["config_groups"].values()
    assert group["targets"] == ["Linear"] and group["format"] == "float-quantized"
    weights, acts = group["weights"], group["input_activations"]
    assert {k: weights[k] for k in ("num_bits", "type", "strategy", "dynamic", "symmetric")} == \
        {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False, "symmetric": True}
    assert {k: acts[k] for k in ("num_bits", "type", "strategy", "dynamic", "symmetric")} == \
        {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True}


def test_fp8_static_engine_loads_the_static_preset_of_the_same_checkpoint(tmp_path):
    """dtype=fp8-static (issue 19's static scales): the FP8-Dynamic checkpoint's ignore list with
    llm-compressor's static FP8 preset, per-tensor weights and per-tensor static input scales, in a
    models folder of its own beside the fp8-dynamic one."""
    from forge.serving.recipes import load_recipe

    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "2", "--out", str(tmp_path)])
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    static = bench.engine_spec(recipe, args, bench.parse_engine("name=s,dtype=fp8-static,k=4,runner=v2"), tmp_path)
    dynamic = bench.engine_spec(recipe, args, bench.parse_engine("name=d,dtype=fp8-dynamic,k=4,runner=v2"), tmp_path)
    assert "quantization" not in static["engine_kwargs"]
    static_dir, dynamic_dir = (Path(e["engine_kwargs"]["model"]) for e in (static, dynamic))
    assert static_dir.parent == tmp_path / "models-fp8-static" != dynamic_dir.parent
    quant_s = json.loads((static_dir / "config.json").read_text())["quantization_config"]
    quant_d = json.loads((dynamic_dir / "config.json").read_text())["quantization_config"]
    assert quant_s["ignore"] == quant_d["ignore"]
    (group,) = quant_s["config_groups"].values()
    assert (group["weights"]["strategy"], group["weights"]["dynamic"]) == ("tensor", False)
    acts = group["input_activations"]
    assert (acts["strategy"], acts["dynamic"], acts["type"], acts["num_bits"]) == ("tensor", False, "float", 8)
    # the drafter stays the BF16 assistant: only the target is shipped quantized
    draft = Path(static["engine_kwargs"]["speculative_config"]["model"])
    assert "quantization_config" not in json.loads((draft / "config.json").read_text())


def test_fp8_dynamic_without_dummy_or_a_model_is_refused(tmp_path):
    from forge.errors import ForgeError
    from forge.serving.recipes import load_recipe

    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--out", str(tmp_path)])
    with pytest.raises(ForgeError, match="fp8-dynamic needs --dummy or --model"):
        bench.engine_spec(load_recipe("gemma-4-26b-a4b-it", "h200"), args,
                          bench.parse_engine("name=d,dtype=fp8-dynamic"), tmp_path)


def test_fp8_dynamic_engines_count_among_the_fp8_picks():
    engines = {"fp8dyn-mtp3-v2": {"dtype": "fp8-dynamic", "k": 3, "runner": "v2",
                                  "derived": {"projected": {"p": {"tok_s": 300.0}}}},
               "fp8-mtp3-v2": {"dtype": "fp8", "k": 3, "runner": "v2",
                               "derived": {"projected": {"p": {"tok_s": 250.0}}}},
               "bf16-mtp3-v2": {"dtype": "bf16", "k": 3, "runner": "v2",
                                "derived": {"projected": {"p": {"tok_s": 400.0}}}}}
    assert bench_report.picks(engines, {"p": None})["p"]["engine"] == "fp8dyn-mtp3-v2"


def test_a_family_without_fp8_dynamic_data_is_refused_in_one_line(tmp_path):
    import yaml

    from forge.errors import ForgeError
    from forge.models import MODELS_DIR, load_family

    data = yaml.safe_load((MODELS_DIR / "gemma4.yaml").read_text())
    del data["fp8_dynamic"]
    (tmp_path / "gemma4.yaml").write_text(yaml.safe_dump(data))
    family = load_family("gemma4", tmp_path)
    with pytest.raises(ForgeError, match=r"gemma4.yaml: fp8_dynamic: not stated"):
        family.write_dummy_models(tmp_path / "m", layers=2, fp8_checkpoint="fp8-dynamic")
    data["fp8_dynamic"] = {"ignore": ["re:(unclosed"], "source": "x"}
    (tmp_path / "gemma4.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ForgeError, match=r"fp8_dynamic.ignore: 're:\(unclosed': not a regular expression"):
        load_family("gemma4", tmp_path)


def test_smoke_report_table_and_verdict_from_the_captured_run(tmp_path):
    captured = json.loads((SMOKE_L6 / "mtp_smoke.json").read_text())
    checks = [Check(**c) for c in captured["checks"]]
    assert [c.status for c in checks] == [PASS, PASS, PASS, PASS, INFO, FAIL, INFO]
    table = render_table(checks)
    assert "RESULT: FAIL (4 passed, 1 failed)" in table
    failed = next(c for c in checks if c.status == FAIL)
    assert failed.detail in table  # a failure's root cause is never cut
    assert all(len(line) <= 160 for line in table.splitlines() if " FAIL " not in line)
    unpatched = [Check(**c) for c in json.loads(
        (SMOKE_L30 / "mtp_smoke.json").read_text())["checks"]]
    assert "#47794" in render_table(unpatched) and "build.py apply" in render_table(unpatched)
    path = write_report(tmp_path / "r.json", checks, installed_versions(), recipe="gemma-4-26b-a4b-it")
    assert json.loads(path.read_text())["passed"] is False
    assert verdict([Check("x", INFO, "")]) is False  # nothing passed: not a pass


def _table(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_collect_rebuilds_the_committed_26b_sweeps(sweeps_26b, runner):
    code, out, report = sweeps_26b[runner]
    committed = json.loads((sweep_26b(runner) / "bench.json").read_text())
    captured = json.loads((sweep_26b(runner) / "captured" / "bench.json").read_text())
    assert code == 0  # every engine of both sweeps measured
    assert report["engines"] == committed["engines"] == captured["engines"]
    assert report["picks"] == committed["picks"] == captured["picks"]
    # the GPU host's own table (rendered there by the same code) says the same
    rebuilt = (out / "bench.md").read_text()
    assert _table(rebuilt) == _table((sweep_26b(runner) / "captured" / "bench.md").read_text())


def test_render_rebuilds_the_committed_26b_markdown(tmp_path):
    for runner in ("v2", "v1"):
        shutil.copy(sweep_26b(runner) / "bench.json", tmp_path / "bench.json")
        assert bench.main(["--render", str(tmp_path / "bench.json")]) == 0
        rendered = (tmp_path / "bench.md").read_text()
        captured = (sweep_26b(runner) / "captured" / "bench.md").read_text()
        assert _table(rendered) == _table(captured)


def test_26b_controls_accept_everything_agreeing_and_nothing_random(sweeps_26b):
    measured = sum(controls_held(sweeps_26b[runner][2]["engines"]) for runner in ("v2", "v1"))
    assert measured == 2 * 5 * 4  # two runners, k = 1..5, four windows each


def test_26b_v2_pick_follows_from_the_step_costs(sweeps_26b):
    """The H200 26B-A4B recipe's k and runner: the projection at the field profile (#343)
    L(k) / step cost(k), highest wins; k=5 is not projected from a 4-position profile."""
    engines = sweeps_26b["v2"][2]["engines"]
    stock = bench_report._decode(engines["stock"], "sustained")
    projected = {}
    for k in range(1, 5):
        engine = engines[f"fp8-mtp{k}-v2"]
        length = bench_report.profile_length(SPARK343, k)
        tok_s = 1000 * length / engine["derived"]["step_ms"]
        assert engine["derived"]["projected"]["spark343"]["tok_s"] == pytest.approx(tok_s, rel=1e-3)
        projected[k] = tok_s
    best = max(projected, key=projected.get)
    pick = sweeps_26b["v2"][2]["picks"]["spark343"]
    assert (pick["engine"], pick["k"], pick["runner"]) == (f"fp8-mtp{best}-v2", best, "v2")
    assert pick["speedup_vs_stock"] == pytest.approx(pick["tok_s"] / stock, abs=0.002)
    assert "spark343" not in engines["fp8-mtp5-v2"]["derived"]["projected"]
    # a constant acceptance of 0.87 favours the longest window measured
    assert sweeps_26b["v2"][2]["picks"]["seed87"]["k"] == 5


def test_26b_v1_speculation_never_pays_and_v2_steps_are_cheaper(sweeps_26b):
    v1 = sweeps_26b["v1"][2]
    v2 = sweeps_26b["v2"][2]["engines"]
    # V1 (patched, eager compile): no k beats its own plain engine at any profile, so the pick is k=0
    assert all(pick["k"] == 0 and pick["speedup_vs_stock"] is None for pick in v1["picks"].values())
    assert "no stock engine in this run" in (sweeps_26b["v1"][1] / "bench.md").read_text()
    for k in range(1, 6):
        assert (v2[f"fp8-mtp{k}-v2"]["derived"]["step_cost_x_plain"]
                < v1["engines"][f"fp8-mtp{k}-v1"]["derived"]["step_cost_x_plain"]), k


def test_fp8_dynamic_config_sits_at_the_top_of_a_nested_config(tmp_path):
    """Qwen3.5 MoE nests its text config: quantization_config stays at the top, as a checkpoint has it."""
    from forge.models import load_family

    family = load_family("qwen3_5_moe")
    target, drafter = family.write_dummy_models(tmp_path, layers=4, fp8_checkpoint="fp8-dynamic")
    config = json.loads((target / "config.json").read_text())
    assert drafter is None and "quantization_config" not in config["text_config"]
    assert config["quantization_config"]["ignore"] == family.values["fp8_dynamic"]["ignore"]


def test_a_second_run_into_the_same_out_clears_the_old_barrier(tmp_path):
    """The H200 run of 2026-12-01: a rerun into the same --out died with `IsADirectoryError:
    ... barrier/0`, the stale-barrier cleanup unlinking entries while the barrier holds one
    folder per engine group. Here the engine processes really start and fail (no vLLM on the
    CPU): each run must still write its report, the second one over the first one's barrier."""
    args = ["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--configs", "bf16",
            "--runners", "v1", "--timeout", "120", "--out", str(tmp_path)]
    for run in (1, 2):
        (tmp_path / "bench.json").unlink(missing_ok=True)
        code = bench.main(args)
        assert code == 1, f"run {run}"
        report = json.loads((tmp_path / "bench.json").read_text())
        assert report["engines"]["bf16-v1"]["error"], f"run {run}"
        assert (tmp_path / "barrier" / "0" / "bf16-v1.failed").exists(), f"run {run}"


def test_a_candidate_engine_compares_with_the_plain_engine_of_its_own_site():
    """The head512 bench (record h200-0.27.1-bench-26b-a4b-l10-head512) had two plain engines, the release's and the candidate's: a spec engine's
    step x plain is over the plain engine of its own site, and over the release's own one where
    its site has none (a patch that changes only the spec step, like the split-KV backport)."""
    def engine(k: int, site: str | None, step_ms: float) -> dict:
        return {"dtype": "fp8", "k": k, "runner": "v2", "site": site,
                "figures": {"sustained@agree": {"decode_tok_s": 1000 / step_ms * (1 + k),
                                                "step_ms": step_ms}}}
    engines = {"plain": engine(0, None, 2.0), "spec": engine(4, None, 3.0), "plain-again": engine(0, None, 2.4),
               "plain-cand": engine(0, "/tmp/cand", 2.5), "spec-cand": engine(4, "/tmp/cand", 3.0),
               "spec-only": engine(4, "/tmp/spec-only", 2.8)}
    bench_report.derive(engines)
    derived = {name: e["derived"] for name, e in engines.items()}
    # an A/A twin of the plain engine, listed after it, is measured but prices nothing
    assert derived["spec"]["plain_engine"] == "plain" and derived["spec"]["step_cost_x_plain"] == 1.5
    assert derived["spec-cand"]["plain_engine"] == "plain-cand"
    assert derived["spec-cand"]["step_cost_x_plain"] == 1.2
    assert derived["spec-only"]["plain_engine"] == "plain"
    assert derived["spec-only"]["step_cost_x_plain"] == 1.4


def test_an_engine_moe_backend_is_vllms_moe_backend_and_part_of_its_family(tmp_path):
    """moe_backend= holds a comparison to one MoE kernel (record h200-0.27.1-bench-26b-a4b-l10-fp8-static: a static FP8 checkpoint made vLLM
    0.27.1 pick FLASHINFER_CUTLASS where the online path runs TRITON): vLLM's own --moe-backend."""
    from forge.serving.recipes import load_recipe

    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "10", "--out", str(tmp_path)])
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    held = bench.engine_spec(recipe, args, bench.parse_engine("name=s,dtype=fp8-static,k=4,runner=v2,moe_backend=triton"), tmp_path)
    left = bench.engine_spec(recipe, args, bench.parse_engine("name=o,k=4,runner=v2"), tmp_path)
    assert held["engine_kwargs"]["moe_backend"] == "triton" and held["meta"]["moe_backend"] == "triton"
    assert "moe_backend" not in left["engine_kwargs"] and "moe_backend" not in left["meta"]
    assert bench_report.family(held["meta"]) != bench_report.family({**held["meta"], "moe_backend": None})

