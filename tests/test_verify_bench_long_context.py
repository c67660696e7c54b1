"""bench.py at long context (issue 19): an engine's KV cache dtype (kv=), the long-context windows
(long<N>k[-conc<C>]) and how the report shows them, all on the CPU: engine specs are built, not
run, and the report is rendered from hand-built worker results of the shape the H200 runs wrote
(tests/fixtures/gpu/s18-h200-2026-12-01/bench26/engines/*.result.json)."""
import pytest

from forge.serving.recipes import load_recipe
from verify import bench, bench_report

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
    from forge.errors import ForgeError

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
    assert engines["fp8-mtp4-v2-kv8"]["derived"]["windows"]["sustained"]["speedup_vs_plain"] == 2.0
    assert engines["fp8-mtp4-v2"]["derived"]["plain_engine"] == "fp8-v2"
