"""bench.py at 32 and 64 concurrent sequences (issue 19: the recipe never slower than stock at
concurrency 8 and 16; the triton-attn-group-kv-heads candidate changes anything only at 17-64
sequences): the conc32/conc64 windows, the engines' max_num_seqs, and the concurrency table, all
on the CPU from hand-built worker results of the shape the H200 runs wrote
(the bench.json of record h200-0.27.1-bench-26b-a4b-l10-fp8-scales)."""
import json
import shutil

import pytest

from forge.errors import ForgeError
from forge.serving.recipes import load_recipe
from verify import bench, bench_report
from verify.dummy_models import encode_without_tokenizer
from verify.prompts import gate_prompts, load_prompts

RECIPE = "gemma-4-26b-a4b-it"


def _windows(*flags: str) -> list[dict]:
    args = bench.parse_args(["--recipe", RECIPE, "--dummy", "--shape", "26b-a4b", *flags])
    return bench.windows(args, load_prompts())


# --- the windows ------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [32, 64])
def test_conc32_and_conc64_are_the_gate_prompts_repeated_at_once(count):
    windows = {w["name"]: w for w in _windows("--windows", f"conc8,conc{count}")}
    assert list(windows) == ["warmup", "conc8@agree", "conc8@random",
                             f"conc{count}@agree", f"conc{count}@random"]
    gate = [encode_without_tokenizer(t, "26b-a4b") for _, t in gate_prompts(load_prompts())]
    for control in ("agree", "random"):
        window = windows[f"conc{count}@{control}"]
        assert window["prompts"] == (gate * 8)[:count] and len(window["prompts"]) == count
        assert window["sampling"] == {"temperature": 0.0, "ignore_eos": True, "max_tokens": 128}
        assert window["warmup"] is True and not window.get("sequential")
        assert window["control"] == control
        # the same shape as conc8: only the number of prompts differs
        conc8 = windows[f"conc8@{control}"]
        assert {**window, "name": "", "prompts": []} == {**conc8, "name": "", "prompts": []}


def test_conc8_and_conc16_are_as_before_and_the_default_windows_leave_out_32_and_64():
    windows = {w["name"]: w for w in _windows()}
    gate = [encode_without_tokenizer(t, "26b-a4b") for _, t in gate_prompts(load_prompts())]
    assert windows["conc8@agree"]["prompts"] == (gate * 2)[:8]
    assert windows["conc16@agree"]["prompts"] == (gate * 2)[:16]
    assert [n.split("@")[0] for n in windows][1::2] == ["burst", "sustained", "conc8", "conc16", "followup"]
    assert bench.parse_args(["--recipe", RECIPE]).windows == "burst,sustained,conc8,conc16,followup"


# --- max_num_seqs -----------------------------------------------------------------------------

@pytest.mark.parametrize("names, seqs", [
    ("burst,sustained,conc8,conc16,followup", 16),   # the default run: as before
    ("sustained,conc8", 16),                         # never below the default
    ("conc8,conc32", 32),
    ("conc16,conc64,conc32", 64),
    ("sustained,long8k-conc24", 24),                 # a long window's -conc<C> counts too
    ("long8k-conc64,conc32", 64),
])
def test_max_num_seqs_is_the_largest_concurrency_measured_and_at_least_16(names, seqs, tmp_path):
    assert bench.engine_max_num_seqs(names) == seqs
    args = bench.parse_args(["--recipe", RECIPE, "--dummy", "--layers", "2", "--windows", names,
                             "--out", str(tmp_path)])
    spec = bench.engine_spec(load_recipe(RECIPE, "h200"), args, bench.parse_engine("name=e"), tmp_path)
    assert spec["engine_kwargs"]["max_num_seqs"] == seqs


def test_window_concurrency_reads_every_kind_of_window_name():
    assert [bench.window_concurrency(n) for n in ("burst", "followup", "conc8", "conc64", "long8k",
                                                  "long32k-conc48")] == [1, 1, 8, 64, 1, 48]


def test_a_long_window_of_up_to_64_requests_is_measured_and_one_of_more_refused():
    (window, _) = [w for w in _windows("--windows", "long1k-conc64", "--max-model-len", "1280")
                   if "prompt_tokens" in w]
    assert len(window["prompts"]) == 64
    with pytest.raises(ForgeError, match=r"^--windows: long1k-conc65: more than 64 requests at once"):
        _windows("--windows", "long1k-conc65", "--max-model-len", "1280")


def test_an_unknown_window_names_conc32_and_conc64_among_the_windows():
    with pytest.raises(ForgeError, match=r"is not one of burst, sustained, conc8, conc16, conc32, "
                                         r"conc64, followup or long<N>k\[-conc<C>\]$"):
        _windows("--windows", "conc128")


# --- the report -------------------------------------------------------------------------------

def _window(control: str, concurrency: int, tpot_s: float) -> dict:
    """A conc<C> window as engine_worker.run_window records it (compare the bench26 results)."""
    return {"control": control, "control_reply": [{"agree": control == "agree"}],
            "wall_s": [0.3 + 127 * tpot_s], "repeat": 1, "concurrency": concurrency,
            "requests": [{"prompt_tokens": 276, "tokens": 128, "ttft_s": 0.3, "tpot_s": tpot_s}
                         for _ in range(concurrency)],
            "metrics_before": {}, "metrics_after": {}}


def _result(name: str, tpots: dict[int, float]) -> dict:
    windows = {f"conc{c}@{control}": _window(control, c, tpot_s * (1.25 if control == "random" else 1))
               for c, tpot_s in tpots.items() for control in ("agree", "random")}
    return {"name": name, "versions": {"vllm": "0.27.1", "torch": "2.13.0", "transformers": "5.12.1"},
            "engine": {"started": True, "init_s": 120.0, "vllm": "0.27.1", "torch": "2.13.0",
                       "device": "NVIDIA H200", "cudagraph_mode": "FULL_AND_PIECEWISE"},
            "windows": windows}


# TPOT per concurrency (s): fp8-v2 is faster than stock at 8, slower at 16 and 32, as fast at 64
TPOTS = {"stock": {8: 0.004, 16: 0.005, 32: 0.008, 64: 0.0125},
         "fp8-v2": {8: 0.002, 16: 0.00625, 32: 0.01, 64: 0.0125}}


def _collect(tmp_path, windows: str, tpots: dict = TPOTS) -> tuple[dict, str]:
    (tmp_path / "engines").mkdir()
    for name, by_concurrency in tpots.items():
        result = _result(name, {c: t for c, t in by_concurrency.items() if f"conc{c}" in windows})
        (tmp_path / "engines" / f"{name}.result.json").write_text(json.dumps(result))
    engines = [a for name in tpots for a in ("--engine", f"name={name},runner=v2")]
    code = bench.main(["--recipe", RECIPE, "--target", "h200", "--dummy", "--layers", "2",
                       "--configs", "", *engines, "--windows", windows, "--collect",
                       "--out", str(tmp_path)])
    assert code == 0
    return json.loads((tmp_path / "bench.json").read_text()), (tmp_path / "bench.md").read_text()


def _concurrency_table(markdown: str) -> list[str]:
    return markdown.split("\nConcurrency (", 1)[1].split("\n\n", 2)[1].splitlines()


def test_the_concurrency_table_has_a_row_per_engine_and_says_where_it_is_slower(tmp_path):
    _, markdown = _collect(tmp_path, "conc8,conc16,conc32,conc64")
    assert _concurrency_table(markdown) == [
        "| engine | conc 8 decode tok/s full / zero acc. | conc 8 x stock | conc 16 decode tok/s "
        "full / zero acc. | conc 16 x stock | conc 32 decode tok/s full / zero acc. | conc 32 x stock "
        "| conc 64 decode tok/s full / zero acc. | conc 64 x stock | slower than stock at |",
        "|---|---|---|---|---|---|---|---|---|---|",
        "| stock | 250 / 200 | 1 / 1 | 200 / 160 | 1 / 1 | 125 / 100 | 1 / 1 | 80 / 64 | 1 / 1 | – |",
        "| fp8-v2 | 500 / 400 | 2 / 2 | 160 / 128 | 0.8 / 0.8 | 100 / 80 | 0.8 / 0.8 | 80 / 64 | 1 / 1 "
        "| 16, 32 |"]


def test_the_table_sits_after_the_main_table_and_before_the_long_context_one(tmp_path):
    _, markdown = _collect(tmp_path, "conc8,conc16")
    main = markdown.index("| engine | runner | k |")
    assert main < markdown.index("\nConcurrency (") < markdown.index("\nPlot: ")
    assert "Long context (" not in markdown  # no long window measured
    table = _concurrency_table(markdown)
    assert table[0] == ("| engine | conc 8 decode tok/s full / zero acc. | conc 8 x stock | conc 16 "
                        "decode tok/s full / zero acc. | conc 16 x stock | slower than stock at |")
    assert table[2:] == ["| stock | 250 / 200 | 1 / 1 | 200 / 160 | 1 / 1 | – |",
                         "| fp8-v2 | 500 / 400 | 2 / 2 | 160 / 128 | 0.8 / 0.8 | 16 |"]


def test_a_run_of_conc8_alone_has_no_concurrency_table_nor_derived_figures(tmp_path):
    report, markdown = _collect(tmp_path, "conc8")
    assert "Concurrency (" not in markdown and "conc 16" not in markdown
    assert all("concurrency" not in e["derived"] for e in report["engines"].values())
    assert "| conc 8 decode tok/s full / zero acc. |" in markdown  # the main table's, as before


def test_bench_json_holds_the_derived_concurrency_figures(tmp_path):
    report, _ = _collect(tmp_path, "conc8,conc16")
    assert report["engines"]["fp8-v2"]["derived"]["concurrency"] == {
        "conc8": {"decode_tok_s": 500.0, "x_stock": 2.0, "decode_tok_s_zero": 400.0,
                  "x_stock_zero": 2.0, "slower_than_stock": False},
        "conc16": {"decode_tok_s": 160.0, "x_stock": 0.8, "decode_tok_s_zero": 128.0,
                   "x_stock_zero": 0.8, "slower_than_stock": True}}
    # the ratios are the windows' speedups over stock: one computation
    windows = report["engines"]["fp8-v2"]["derived"]["windows"]
    assert windows["conc16@agree"]["speedup_vs_stock"] == 0.8
    assert report["engines"]["stock"]["derived"]["concurrency"]["conc16"]["slower_than_stock"] is False


def test_without_a_stock_engine_the_table_has_no_ratio_columns(tmp_path):
    report, markdown = _collect(tmp_path, "conc8,conc32", {"fp8-v2": TPOTS["fp8-v2"]})
    assert _concurrency_table(markdown) == [
        "| engine | conc 8 decode tok/s full / zero acc. | conc 32 decode tok/s full / zero acc. |",
        "|---|---|---|", "| fp8-v2 | 500 / 400 | 100 / 80 |"]
    assert report["engines"]["fp8-v2"]["derived"]["concurrency"]["conc32"]["slower_than_stock"] is None


def test_render_from_json_reproduces_the_concurrency_table(tmp_path, tmp_path_factory):
    _collect(tmp_path, "conc8,conc16,conc64")
    copy = tmp_path_factory.mktemp("render")
    shutil.copy(tmp_path / "bench.json", copy / "bench.json")
    assert bench.main(["--render", str(copy / "bench.json")]) == 0
    assert (copy / "bench.md").read_text() == (tmp_path / "bench.md").read_text()


def test_a_failed_engine_has_a_row_saying_so():
    engines = {"stock": {"stock": True, "figures": {"conc16": {"decode_tok_s": 100.0}},
                         "derived": {"concurrency": {"conc16": {"decode_tok_s": 100.0, "x_stock": 1.0,
                                                                "slower_than_stock": False}}}},
               "fp8-v2": {"figures": None, "error": "CUDA out of memory"}}
    table = bench_report.concurrency_table(engines, controlled=False)
    assert table[-2:] == ["| stock | 100 | 1 | – |", "| fp8-v2 | failed: CUDA out of memory | | |"]
    assert table[-1].count("|") == table[-3].count("|")  # as many cells as the header
