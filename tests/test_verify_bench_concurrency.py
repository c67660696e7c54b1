"""bench.py at 32 and 64 concurrent sequences (issue 19: the recipe never slower than stock at
concurrency 8 and 16; the triton-attn-group-kv-heads candidate changes anything only at 17-64
sequences): the conc32/conc64 windows and the engines' max_num_seqs, on the CPU."""
import pytest

from forge.errors import ForgeError
from forge.serving.recipes import load_recipe
from verify import bench
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
