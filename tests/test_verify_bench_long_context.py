"""bench.py at long context (issue 19): an engine's KV cache dtype (kv=), the long-context windows
(long<N>k[-conc<C>]) and how the report shows them, all on the CPU: engine specs are built, not
run, and the report is rendered from hand-built worker results of the shape the H200 runs wrote
(the bench.json of record h200-0.27.1-bench-26b-a4b-l10-fp8-scales)."""
import json
import shutil
import sys
from types import ModuleType, SimpleNamespace

import pytest

from forge.errors import ForgeError
from forge.serving.recipes import load_recipe
from verify import bench, bench_report, engine_worker
from verify.dummy_models import encode_without_tokenizer
from verify.prompts import load_prompts

RECIPE = "gemma-4-26b-a4b-it"


def _spec(tmp_path, engine: str, target: str = "h200", *flags: str) -> dict:
    args = bench.parse_args(["--recipe", RECIPE, "--dummy", "--layers", "2", *flags,
                             "--out", str(tmp_path)])
    return bench.engine_spec(load_recipe(RECIPE, target), args, bench.parse_engine(engine), tmp_path)


@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"])
def test_an_engine_kv_is_the_kv_cache_dtype_vllm_is_given(kv, tmp_path):
    spec = _spec(tmp_path, f"name=e,k=4,runner=v2,kv={kv}")
    assert spec["engine_kwargs"]["kv_cache_dtype"] == kv
    assert spec["meta"]["kv"] == kv


def test_without_kv_the_engine_keeps_the_recipes_cache_and_its_meta_stays_as_before(tmp_path):
    """No kv=: the recipe's kv_cache_dtype (auto: vLLM's default, so no kwarg) and no kv in the
    meta, so the reports of runs before the key (and of engines without it) are unchanged."""
    spec = _spec(tmp_path, "name=e,k=4,runner=v2")
    assert "kv_cache_dtype" not in spec["engine_kwargs"] and "kv" not in spec["meta"]
    auto = _spec(tmp_path, "name=a,k=4,runner=v2,kv=auto")
    assert "kv_cache_dtype" not in auto["engine_kwargs"] and auto["meta"]["kv"] == "auto"


@pytest.mark.parametrize("text", ["name=x,kv=fp16", "name=x,kv=FP8", "name=x,kv="])
def test_a_bad_kv_is_a_one_line_error_naming_the_key(text, tmp_path, capsys):
    code = bench.main(["--recipe", RECIPE, "--target", "h200", "--configs", "",
                       "--engine", text, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: --engine ") and "\n" not in err
    assert "kv must be one of auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2" in err


def test_an_fp8_kv_cache_is_refused_where_the_recipes_refuse_it(tmp_path):
    with pytest.raises(ForgeError, match=r"^--engine e: kv=fp8: no FP8 KV cache on a100"):
        _spec(tmp_path, "name=e,kv=fp8", "a100")
    assert _spec(tmp_path, "name=b,kv=bfloat16", "a100")["engine_kwargs"]["kv_cache_dtype"] == "bfloat16"


def test_the_report_labels_an_engine_by_its_kv_cache():
    assert bench_report.engine_label("fp8-mtp4-v2", {"kv": "fp8"}) == "fp8-mtp4-v2 (KV fp8)"
    assert bench_report.engine_label("fp8-mtp4-v2", {}) == "fp8-mtp4-v2"


def test_an_fp8_kv_engine_is_compared_with_the_plain_engine_of_the_same_cache():
    def engine(k: int, kv: str | None, tok_s: float) -> dict:
        return {"dtype": "fp8", "k": k, "runner": "v2", "attention": None, "moe": None,
                "compile": "eager", **({"kv": kv} if kv else {}),
                "figures": {"sustained": {"decode_tok_s": tok_s}}}

    engines = {"fp8-v2": engine(0, None, 400.0), "fp8-v2-kv8": engine(0, "fp8", 500.0),
               "fp8-mtp4-v2-kv8": engine(4, "fp8", 1000.0), "fp8-mtp4-v2": engine(4, None, 800.0)}
    bench_report.derive(engines)
    assert engines["fp8-mtp4-v2-kv8"]["derived"]["plain_engine"] == "fp8-v2-kv8"
    # and with the same engine of the default cache
    assert engines["fp8-mtp4-v2-kv8"]["derived"]["default_kv_engine"] == "fp8-mtp4-v2"
    assert engines["fp8-mtp4-v2-kv8"]["derived"]["windows"]["sustained"]["speedup_vs_default_kv"] == 1.25
    assert engines["fp8-v2-kv8"]["derived"]["default_kv_engine"] == "fp8-v2"
    assert engines["fp8-mtp4-v2-kv8"]["derived"]["windows"]["sustained"]["speedup_vs_plain"] == 2.0
    assert engines["fp8-mtp4-v2"]["derived"]["plain_engine"] == "fp8-v2"


# --- long-context windows ---------------------------------------------------------------------

def _windows(*flags: str, dummy: bool = True) -> list[dict]:
    args = bench.parse_args(["--recipe", RECIPE, *(["--dummy", "--shape", "26b-a4b"] if dummy else []),
                             *flags])
    return bench.windows(args, load_prompts())


def _long(windows: list[dict]) -> list[dict]:
    return [w for w in windows if "prompt_tokens" in w]


def test_a_long_window_is_a_prompt_of_exactly_n_k_tokens_at_its_concurrency():
    windows = _windows("--windows", "sustained,long8k,long32k-conc8", "--max-model-len", "33024")
    assert [w["name"] for w in windows] == [
        "warmup", "sustained@agree", "sustained@random", "long8k@agree", "long8k@random",
        "long32k-conc8@agree", "long32k-conc8@random"]
    bos = encode_without_tokenizer("x", "26b-a4b")[0]
    for window in _long(windows):
        tokens, concurrency = (8192, 1) if window["name"].startswith("long8k@") else (32768, 8)
        assert window["prompt_tokens"] == tokens
        assert window["sequential"] is (concurrency == 1) and window["warmup"] is True
        assert window["sampling"] == {"temperature": 0.0, "ignore_eos": True, "max_tokens": 256}
        for prompt in window["prompts"] + window["warmup_prompts"]:
            assert len(prompt) == tokens and prompt[0] == bos and bos not in prompt[1:]
        assert len(window["prompts"]) == len(window["warmup_prompts"]) == concurrency


def test_long_prompts_are_the_prose_prompts_repeated_and_the_same_every_run():
    first = _windows("--windows", "long8k-conc8,long16k", "--max-model-len", "16640")
    assert first == _windows("--windows", "long8k-conc8,long16k", "--max-model-len", "16640")
    prose = "\n\n".join(load_prompts()["prose"]) + "\n\n"
    body = encode_without_tokenizer(prose, "26b-a4b")[1:]
    prompt = _long(first)[0]["prompts"][0]
    assert prompt[1:] == (body * 14)[:8191]  # the first prompt starts at the text's start


def test_no_two_long_prompts_of_a_run_share_a_first_block():
    """vLLM's prefix cache matches whole blocks from the start (16 tokens here): a shared first
    block would let a warm-up, an earlier window or the agreeing model's run serve a measured
    prefill from memory, and the prefill time would measure nothing."""
    windows = _windows("--windows", "long8k,long8k-conc16,long16k-conc8,long32k",
                       "--max-model-len", "33024")
    prompts = [p for w in _long(windows) for p in w["prompts"] + w["warmup_prompts"]]
    assert len(prompts) == 2 * 2 * (1 + 16 + 8 + 1)
    assert len({tuple(p[:16]) for p in prompts}) == len(prompts)


def test_without_dummy_a_long_prompt_is_text_enough_for_its_tokens_cut_by_the_worker():
    (window,) = _long(_windows("--windows", "long8k", "--max-model-len", "8448", dummy=False))
    assert window["name"] == "long8k" and "control" not in window and window["prompt_tokens"] == 8192
    for text in window["prompts"] + window["warmup_prompts"]:
        assert isinstance(text, str) and len(text) >= 8 * 8192
    assert window["prompts"][0][:64] != window["warmup_prompts"][0][:64]


def test_max_model_len_holds_the_longest_window_exactly():
    _windows("--windows", "long8k,long32k", "--long-tokens", "128", "--max-model-len", "32896")
    with pytest.raises(ForgeError, match=r"^--max-model-len 32895 is shorter than window long32k: "
                                         r"32768 prompt \+ 128 decode tokens = 32896$"):
        _windows("--windows", "long8k,long32k", "--long-tokens", "128", "--max-model-len", "32895")
    _windows("--windows", "burst,sustained,conc16")  # no long window: nothing to check


def _refusal(tmp_path, capsys, *flags: str) -> str:
    out = tmp_path / "out"
    code = bench.main(["--recipe", RECIPE, "--target", "h200", "--dummy", "--layers", "2",
                       "--configs", "fp8", "--runners", "v2", *flags, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err
    assert not out.exists() or not any(out.iterdir())  # refused before an engine was set up
    return err


def test_a_long_window_beyond_max_model_len_is_refused_in_one_line_before_any_engine(tmp_path, capsys):
    err = _refusal(tmp_path, capsys, "--windows", "sustained,long8k")
    assert err == ("error: --max-model-len 8192 is shorter than window long8k: 8192 prompt + 256 "
                   "decode tokens = 8448")


@pytest.mark.parametrize("windows, message", [
    ("long", "is not one of burst, sustained, conc8, conc16, conc32, conc64, followup or "
             "long<N>k[-conc<C>]"),
    ("long0k", "'long0k' is not one of"),
    ("long8k-conc0", "'long8k-conc0' is not one of"),
    ("long8K", "'long8K' is not one of"),
    # 64: the most bench.py sets as max_num_seqs (the largest concurrency of the run's windows)
    ("long8k-conc65", "long8k-conc65: more than 64 requests at once"),
])
def test_a_bad_long_window_name_is_a_one_line_error(windows, message, tmp_path, capsys):
    err = _refusal(tmp_path, capsys, "--windows", windows, "--max-model-len", "9000")
    assert err.startswith("error: --windows: ") and message in err


def test_a_long_window_decoding_nothing_is_refused(tmp_path, capsys):
    err = _refusal(tmp_path, capsys, "--windows", "long8k", "--long-tokens", "0")
    assert err == "error: --long-tokens 0: a long window decodes 1 token or more"


# --- the worker: long prompts cut to length, warm-up on other prompts -------------------------

class FakeTokenizer:
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [2] * add_special_tokens + [ord(c) for c in text]


class FakeLLM:
    """What run_window calls on vllm.LLM; generate records each batch's prompts."""

    def __init__(self):
        self.batches: list[tuple[list, int]] = []

    def get_tokenizer(self):
        return FakeTokenizer()

    def get_metrics(self):
        return []

    def generate(self, batch, sampling, use_tqdm=False):
        self.batches.append((batch, sampling.max_tokens))
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], metrics=None,
                                outputs=[SimpleNamespace(token_ids=[7] * sampling.max_tokens)])
                for p in batch]


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` module holding only SamplingParams: the worker imports nothing else here."""
    module = ModuleType("vllm")
    module.SamplingParams = lambda **kw: SimpleNamespace(**kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)


def test_the_worker_cuts_a_text_prompt_to_its_tokens_and_refuses_a_short_one():
    window = {"name": "long8k", "prompt_tokens": 5, "prompts": ["abcdefgh", [2, 9, 9, 9, 9]]}
    assert engine_worker.window_prompts(FakeLLM(), window) == [
        {"prompt_token_ids": [2, 97, 98, 99, 100]}, {"prompt_token_ids": [2, 9, 9, 9, 9]}]
    with pytest.raises(ValueError, match="window long8k: a prompt of 4 tokens, shorter than its "
                                         "prompt_tokens 5"):
        engine_worker.window_prompts(FakeLLM(), {**window, "prompts": ["abc"]})
    # a window without prompt_tokens passes its prompts as they are, as before
    assert engine_worker.window_prompts(FakeLLM(), {"name": "burst", "prompts": ["hi", [1]]}) == [
        "hi", {"prompt_token_ids": [1]}]


def test_the_worker_warms_a_long_window_up_on_its_other_prompts(fake_vllm):
    window = {"name": "long8k-conc2", "warmup": True, "prompt_tokens": 3,
              "prompts": [[2, 5, 5], [2, 6, 6]], "warmup_prompts": [[2, 7, 7], [2, 8, 8]],
              "sampling": {"temperature": 0.0, "ignore_eos": True, "max_tokens": 4}}
    llm = FakeLLM()
    result = engine_worker.run_window(llm, window, None)
    ids = [([p["prompt_token_ids"] for p in batch], max_tokens) for batch, max_tokens in llm.batches]
    assert ids == [([[2, 7, 7], [2, 8, 8]], 2), ([[2, 5, 5], [2, 6, 6]], 4)]
    assert result["concurrency"] == 2 and [r["prompt_tokens"] for r in result["requests"]] == [3, 3]
    # a window without warmup_prompts warms up on its own, as before
    llm = FakeLLM()
    engine_worker.run_window(llm, {**window, "warmup_prompts": None, "prompt_tokens": None}, None)
    assert llm.batches[0][0] == llm.batches[1][0]


# --- the report: long windows from recorded results -------------------------------------------

LONG_ARGS = ["--recipe", RECIPE, "--target", "h200", "--dummy", "--layers", "2", "--configs", "",
             "--engine", "name=fp8-v2,runner=v2", "--engine", "name=fp8-v2-kv8,runner=v2,kv=fp8",
             "--windows", "sustained,long8k,long8k-conc8", "--max-model-len", "8448"]


def _window(control: str, prompt_tokens: int, ttfts: list[float], tpot_s: float) -> dict:
    """A window as engine_worker.run_window records it (compare the bench26 results)."""
    return {"control": control, "control_reply": [{"agree": control == "agree"}],
            "wall_s": [max(ttfts) + 255 * tpot_s], "repeat": 1, "concurrency": len(ttfts),
            "requests": [{"prompt_tokens": prompt_tokens, "tokens": 256, "ttft_s": t, "tpot_s": tpot_s}
                         for t in ttfts],
            "metrics_before": {}, "metrics_after": {}}


def _result(name: str, tpot_s: float) -> dict:
    windows = {}
    for control in ("agree", "random"):
        windows[f"sustained@{control}"] = _window(control, 326, [0.014], tpot_s / 2)
        windows[f"long8k@{control}"] = _window(control, 8192, [0.5], tpot_s)
        windows[f"long8k-conc8@{control}"] = _window(control, 8192, [0.5 * (i + 1) for i in range(8)],
                                                     2 * tpot_s)
    return {"name": name, "versions": {"vllm": "0.27.1", "torch": "2.13.0", "transformers": "5.12.1"},
            "engine": {"started": True, "init_s": 120.0, "vllm": "0.27.1", "torch": "2.13.0",
                       "device": "NVIDIA H200", "cudagraph_mode": "FULL_AND_PIECEWISE"},
            "windows": windows}


@pytest.fixture
def long_report(tmp_path):
    engines = tmp_path / "engines"
    engines.mkdir()
    for name, tpot_s in (("fp8-v2", 0.004), ("fp8-v2-kv8", 0.0032)):
        (engines / f"{name}.result.json").write_text(json.dumps(_result(name, tpot_s)))
    assert bench.main([*LONG_ARGS, "--collect", "--out", str(tmp_path)]) == 0
    return tmp_path, json.loads((tmp_path / "bench.json").read_text())


def test_a_long_windows_prefill_is_figured_apart_from_its_decode(long_report):
    figures = long_report[1]["engines"]["fp8-v2"]["figures"]
    batch1, conc8 = figures["long8k@agree"], figures["long8k-conc8@agree"]
    assert (batch1["prompt_tokens"], batch1["concurrency"], batch1["decode_tok_s"]) == (8192, 1, 250.0)
    assert (batch1["ttft_ms"], batch1["prefill_ms"], batch1["prefill_tok_s"]) == (500.0, 500.0, 16384)
    # eight prompts at once: the batch's prefill ends with its last first token (4 s)
    assert (conc8["concurrency"], conc8["decode_tok_s"], conc8["ttft_ms"]) == (8, 125.0, 2250.0)
    assert (conc8["prefill_ms"], conc8["prefill_tok_s"]) == (4000.0, 16384)
    assert "prefill_ms" not in figures["sustained@agree"]  # the other windows' figures as before


def test_the_report_shows_the_long_windows_and_the_kv_cache(long_report):
    out, report = long_report
    assert report["engines"]["fp8-v2-kv8"]["kv"] == "fp8" and "kv" not in report["engines"]["fp8-v2"]
    markdown = (out / "bench.md").read_text()
    assert "| fp8-v2-kv8 (KV fp8) | v2 | 0 |" in markdown and "| fp8-v2 | v2 | 0 |" in markdown
    long_table = markdown.split("Long context (", 1)[1].split("\n\n", 2)[1].splitlines()
    assert long_table[0] == ("| engine | window | prompt tokens | requests at once | decode tok/s full / "
                             "zero acc. | speedup vs plain / vs stock / vs default KV cache (full acc.) "
                             "| prefill ms full / zero acc. | prefill tok/s full / zero acc. |")
    assert long_table[2:] == [
        "| fp8-v2 | long8k | 8192 | 1 | 250 / 250 | 1 / – / – | 500 / 500 | 16384 / 16384 |",
        "| fp8-v2 | long8k-conc8 | 8192 | 8 | 125 / 125 | 1 / – / – | 4000 / 4000 | 16384 / 16384 |",
        "| fp8-v2-kv8 (KV fp8) | long8k | 8192 | 1 | 312 / 312 | 1 / – / 1.25 | 500 / 500 | 16384 / 16384 |",
        "| fp8-v2-kv8 (KV fp8) | long8k-conc8 | 8192 | 8 | 156 / 156 | 1 / – / 1.25 | 4000 / 4000 "
        "| 16384 / 16384 |"]
    derived = report["engines"]["fp8-v2-kv8"]["derived"]
    assert derived["default_kv_engine"] == "fp8-v2" and "default_kv_engine" not in report["engines"]["fp8-v2"]["derived"]
    assert derived["windows"]["long8k@random"]["speedup_vs_default_kv"] == 1.25


def test_render_from_json_reproduces_the_long_context_markdown(long_report, tmp_path_factory):
    copy = tmp_path_factory.mktemp("render")
    shutil.copy(long_report[0] / "bench.json", copy / "bench.json")
    assert bench.main(["--render", str(copy / "bench.json")]) == 0
    assert (copy / "bench.md").read_text() == (long_report[0] / "bench.md").read_text()


def test_a_run_without_long_windows_has_no_long_context_table():
    engines = {"fp8-v2": {"figures": {"sustained": {"decode_tok_s": 400.0}}}}
    assert bench_report.long_context_table(engines, controlled=False) == []


def test_an_engine_told_kv_auto_is_the_default_cache_before_one_left_to_the_recipe():
    base = {"dtype": "fp8", "k": 4, "runner": "v2", "attention": None, "moe": None, "compile": None,
            "figures": {"sustained": {"decode_tok_s": 1.0}}}
    engines = {"recipe": base, "told": {**base, "kv": "auto"}, "fp8kv": {**base, "kv": "fp8"},
               "failed": {**base, "kv": "auto", "figures": None}}
    assert bench_report.default_kv_engines(engines) == {bench_report._kv_peer(base): "told"}
    assert bench_report._kv_peer(base) == bench_report._kv_peer(engines["fp8kv"])


def _figures(steps: int, step_ms: float, requests: int = 1, concurrency: int = 1) -> dict:
    return {"steps": steps, "step_ms": step_ms, "requests": requests, "concurrency": concurrency}


def test_a_spec_engines_decode_splits_into_a_steady_step_and_a_fixed_cost_a_request():
    # 26 steps at full acceptance and 127 at zero, 6.5 ms each, plus 140 ms once a request
    full, zero = _figures(26, (26 * 6.5 + 140) / 26), _figures(127, (127 * 6.5 + 140) / 127)
    assert bench_report.decode_split(full, zero) == {"step_ms": 6.5, "fixed_ms": 140.0}
    # two requests one after another: the fixed cost is each one's
    two = bench_report.decode_split(_figures(52, (52 * 6.5 + 280) / 52, 2), _figures(254, (254 * 6.5 + 280) / 254, 2))
    assert two == {"step_ms": 6.5, "fixed_ms": 140.0}
    # no split where requests overlap, the steps are the same (a plain engine) or a control is missing
    assert bench_report.decode_split(_figures(26, 12.0, 8, 8), _figures(127, 7.6, 8, 8)) is None
    assert bench_report.decode_split(_figures(127, 2.8), _figures(127, 2.6)) is None
    assert bench_report.decode_split(full, None) is None


def test_the_long_context_table_shows_the_split_only_where_there_is_one(long_report):
    _, report = long_report  # two plain engines: no speculative engine, no split column
    assert not any("decode_split" in e["derived"] for e in report["engines"].values())
    assert "steady step ms" not in bench_report.render_markdown(report)
