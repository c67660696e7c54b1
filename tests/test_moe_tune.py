"""forge.serving.moe_tune on the CPU: search space, vLLM's file naming, the keep-only-where-tuned-wins
rule, and importing the H200 sweep's real results into the patch series. The sweep itself needs
the GPU (tests/gpu/test_gpu_verify.py)."""
import json
import shutil
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.models import load_family
from forge.patching.series import load_series
from forge.serving import moe_tune
from tests.build_cli import run_build

ROOT = Path(__file__).resolve().parents[1]
# Gemma-4-26B-A4B's experts as models/gemma4.yaml states them: 128 of 704, top-8
SHAPE = load_family("gemma4").model("26b-a4b").moe
TUNE = ROOT / "benchmarks" / "results" / "h200-0.25.0-tune-moe-26b-a4b"


def test_search_space_prunes_tiles_taller_than_the_tokens_per_expert():
    assert {c["BLOCK_SIZE_M"] for c in moe_tune.search_space(1, SHAPE)} == {16}
    assert {c["BLOCK_SIZE_M"] for c in moe_tune.search_space(256, SHAPE)} == {16, 32}
    assert {c["BLOCK_SIZE_M"] for c in moe_tune.search_space(4096, SHAPE)} == {16, 32, 64}
    assert len(moe_tune.search_space(1, SHAPE)) == 24
    every = moe_tune.search_space(1, SHAPE, "full")
    assert all(set(c) == set(moe_tune.CONFIG_KEYS) for c in every)
    with pytest.raises(ForgeError, match="unknown search space 'huge'"):
        moe_tune.search_space(1, SHAPE, "huge")


def test_file_names_match_the_ones_vllm_ships(release_tree):
    configs = release_tree("0.25.0") / "vllm" / "model_executor" / "layers" / "fused_moe" / "configs"
    name = moe_tune.tuned_file_name("NVIDIA H100 80GB HBM3", "fp8_w8a8", SHAPE)
    assert (configs / name).exists(), name
    assert moe_tune.tuned_file_name("NVIDIA H200 NVL", "bf16", SHAPE) == "E=128,N=704,device_name=NVIDIA_H200.json"
    # What the recipes expect on the H200 is what the tuner writes.
    from forge.serving.recipes import load_recipe

    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    assert recipe.moe_config.name == moe_tune.tuned_file_name("NVIDIA H200", "fp8_w8a8", SHAPE)


def test_tuned_is_kept_only_where_it_wins():
    a = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
         "num_warps": 4, "num_stages": 3}
    default = {**a, "BLOCK_SIZE_N": 64, "num_stages": 4, "SPLIT_K": 1}
    tuned = {1: {"config": a, "us": 40.0}, 8: {"config": a, "us": 99.5}, 64: {"config": a, "us": 80.0}}
    defaults = {1: {"config": default, "us": 37.0}, 8: {"config": default, "us": 100.0},
                64: {"config": default, "us": 100.0}}
    configs, decisions = moe_tune.choose(tuned, defaults)
    assert [d["kept"] for d in decisions] == ["default", "default", "tuned"]  # 0.5% is noise
    assert configs[64] == a
    # Where the default wins the file holds the default itself (vLLM picks the nearest key).
    assert configs[1] == {k: v for k, v in default.items() if k != "SPLIT_K"}


def test_config_json_is_what_vllm_loads():
    text = moe_tune.render_config_json({64: {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128,
                                             "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
                                        8: {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 256,
                                            "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}, "3.6.0")
    data = json.loads(text)
    assert list(data) == ["8", "64", "triton_version"]
    data.pop("triton_version")  # vLLM's get_moe_configs does the same
    assert {int(k): v for k, v in data.items()}[64]["BLOCK_SIZE_N"] == 64


def test_h200_sweep_results_are_what_was_shipped(tmp_path):
    """The committed config files are exactly the GPU run's decisions: the bf16 one in
    patches/moe-configs, the fp8 one kept beside its raw results since it was withdrawn (it lost
    end to end, 2026-11-30: the note in patches/series.yaml)."""
    for dtype, folder in (("bf16", ROOT / "patches" / "moe-configs"), ("fp8_w8a8", TUNE)):
        results = json.loads((TUNE / f"tune-moe-{dtype}.json").read_text())
        assert results["provenance"]["device"] == "NVIDIA H200"
        assert [d["M"] for d in results["decisions"]] == [1, 8, 64, 256]
        for d in results["decisions"]:
            wins = d["tuned_us"] < d["default_us"] * (1 - moe_tune.MIN_GAIN)
            assert d["kept"] == ("tuned" if wins else "default")
        configs = {int(m): c for m, c in results["configs"].items()}
        rendered = moe_tune.render_config_json(configs, results["provenance"]["triton"])
        assert (folder / results["file_name"]).read_text() == rendered


def test_the_withdrawn_fp8_config_is_neither_shipped_nor_registered():
    results = json.loads((TUNE / "tune-moe-fp8_w8a8.json").read_text())
    assert not (ROOT / "patches" / "moe-configs" / results["file_name"]).exists()
    series = load_series(ROOT / "patches" / "series.yaml")
    assert all(results["file_name"] not in f.path for p in series.patches for f in p.files)
    note = (ROOT / "patches" / "series.yaml").read_text()
    assert "Withdrawn 2026-11-30: moe-e128-n704-nvidia-h200-fp8_w8a8" in note


def copy_patches(tmp_path) -> Path:
    target = tmp_path / "patches"
    shutil.copytree(ROOT / "patches", target)
    return target


# The H200 runs of 2026-11-30 that measured the k=4 engine with the k+1 tune and with none.
MOE_RUNS = [ROOT / "benchmarks" / "results" / f"h200-0.25.0-bench-26b-a4b-l30-moe-config{run}" / "bench.json"
            for run in ("", "-r2")]
H200_FP8 = "E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
WITH_TUNE, WITHOUT = "fp8-mtp4-v2-moe-tuned-kplus1", "fp8-mtp4-v2-moe-none"


def won_bench(tmp_path, factor: float = 1.1) -> Path:
    """The first real run, as it would read had the tuned engine decoded `factor` times faster."""
    bench = json.loads(MOE_RUNS[0].read_text())
    bench["engines"][WITH_TUNE]["figures"]["sustained@agree"]["decode_tok_s"] = round(
        bench["engines"][WITHOUT]["figures"]["sustained@agree"]["decode_tok_s"] * factor, 1)
    path = tmp_path / "won-bench.json"
    path.write_text(json.dumps(bench))
    return path


def test_import_writes_the_file_and_registers_it_once(tmp_path):
    patches = copy_patches(tmp_path)
    series_path = patches / "series.yaml"
    before = [p.id for p in load_series(series_path).patches if p.kind == "source"]
    won = moe_tune.end_to_end([won_bench(tmp_path)], H200_FP8, WITH_TUNE, WITHOUT)
    for _ in range(2):  # importing again refreshes the entry, never duplicates it
        written = moe_tune.import_results(TUNE / "tune-moe-fp8_w8a8.json", patches / "moe-configs",
                                          series_path, end_to_end=won)
    series = load_series(series_path)  # validates every sha256
    entries = [p for p in series.patches if p.id == "moe-e128-n704-nvidia-h200-fp8_w8a8"]
    assert len(entries) == 1 and entries[0].kind == "moe-config"
    assert entries[0].files[0].path == f"moe-configs/{written.name}"
    for fact in ("device NVIDIA H200", "driver 580.159.04", "Triton 3.6.0", "vLLM 0.25.0",
                 "2026-11-29", "duration", "command: python build.py tune-moe",
                 "End to end (sustained@agree decode tok/s", "741.0 vs 673.6 (+10.0%, 2026-11-30 15:28 UTC)"):
        assert fact in entries[0].why
    assert [p.id for p in series.patches if p.kind == "source"] == before


def test_the_measured_runs_refuse_the_k_plus_1_tune(tmp_path):
    """What the H200 measured (663.3 and 668 tok/s with the tune, 673.6 and 676 without): the
    import refuses, naming every run's figures, and writes nothing."""
    patches = copy_patches(tmp_path)
    measured = moe_tune.end_to_end(MOE_RUNS, H200_FP8, WITH_TUNE, WITHOUT)
    assert [round(w / wo, 3) for _, w, wo in measured.runs] == [0.985, 0.987]
    with pytest.raises(ForgeError, match=r"did not win end to end \(663.3 vs 673.6 \(-1.5%.*needs \+1%"):
        moe_tune.import_results(TUNE / "tune-moe-fp8_w8a8.json", patches / "moe-configs",
                                patches / "series.yaml", end_to_end=measured)
    assert not (patches / "moe-configs" / H200_FP8).exists()
    # one winning run beside a losing one is not enough
    mixed = moe_tune.end_to_end([won_bench(tmp_path), MOE_RUNS[1]], H200_FP8, WITH_TUNE, WITHOUT)
    with pytest.raises(ForgeError, match="did not win end to end"):
        mixed.require_win()
    with pytest.raises(ForgeError, match="ships only where it wins end to end: give --end-to-end"):
        moe_tune.import_results(TUNE / "tune-moe-fp8_w8a8.json", patches / "moe-configs",
                                patches / "series.yaml")


def test_an_end_to_end_run_must_compare_the_config_alone(tmp_path):
    with pytest.raises(ForgeError, match=r"engines.fp8-mtp4-v2-moe-none: did not read E=128"):
        moe_tune.end_to_end(MOE_RUNS[:1], H200_FP8, WITHOUT, WITH_TUNE)
    with pytest.raises(ForgeError, match=r"engines.fp8-mtp4-v2: read E=128.* too"):
        moe_tune.end_to_end(MOE_RUNS[:1], H200_FP8, WITH_TUNE, "fp8-mtp4-v2")
    bench = json.loads(MOE_RUNS[0].read_text())
    bench["engines"][WITHOUT]["k"] = 3
    other_k = tmp_path / "other-k.json"
    other_k.write_text(json.dumps(bench))
    with pytest.raises(ForgeError, match="differ in k: not a comparison of the config alone"):
        moe_tune.end_to_end([other_k], H200_FP8, WITH_TUNE, WITHOUT)
    with pytest.raises(ForgeError, match="engines.nope: no such engine"):
        moe_tune.end_to_end(MOE_RUNS[:1], H200_FP8, "nope", WITHOUT)
    bf16 = moe_tune.end_to_end([won_bench(tmp_path)], H200_FP8, WITH_TUNE, WITHOUT)
    with pytest.raises(ForgeError, match="file_name: E=128,N=704,device_name=NVIDIA_H200.json, but the "
                                         "end-to-end run measured"):
        moe_tune.import_results(TUNE / "tune-moe-bf16.json", tmp_path / "cfg", None, end_to_end=bf16)


def test_import_refuses_results_where_tuned_never_won(tmp_path):
    results = json.loads((TUNE / "tune-moe-bf16.json").read_text())
    for d in results["decisions"]:
        d["kept"] = "default"
    path = tmp_path / "lost.json"
    path.write_text(json.dumps(results))
    patches = copy_patches(tmp_path)
    with pytest.raises(ForgeError, match="tuned won at no token count"):
        moe_tune.import_results(path, patches / "moe-configs", patches / "series.yaml")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({k: v for k, v in results.items() if k != "provenance"}))
    with pytest.raises(ForgeError, match=r"broken.json: provenance: Field required$"):
        moe_tune.import_results(broken, patches / "moe-configs", patches / "series.yaml")


def test_cli_errors_are_one_line(tmp_path):
    def run(*args):
        return run_build("tune-moe", *args)

    no_dtype = run()
    assert no_dtype.returncode == 2 and no_dtype.stderr.strip().startswith("error: tune-moe: --dtype is required")
    # two families with experts (models/): tune-moe must be told whose
    ambiguous = run("--dtype", "bf16", "--batch-sizes", "8")
    assert ambiguous.returncode == 2 and ambiguous.stderr.strip() == (
        "error: tune-moe: name the model with --recipe (MoE models in models/: Gemma-4-26B-A4B, Qwen3.6-35B-A3B)")
    bad_sizes = run("--dtype", "bf16", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--batch-sizes", "0,8")
    assert bad_sizes.returncode == 2 and "--batch-sizes: every number must be 1 or more: '0,8'" in bad_sizes.stderr
    missing = run("--import-results", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


# ------------------------------------------------------------------------------------------
# Token counts from the recipe, and the merged folder the end-to-end comparison reads

V11_TUNE = ROOT / "benchmarks" / "results" / "h200-0.25.0-tune-moe-26b-a4b-kplus1"


def test_token_counts_come_from_the_recipe():
    from forge.serving.recipes import load_recipe

    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    k = recipe.speculative.num_speculative_tokens
    # M = k+1 at batch 1, (k+1) x 8, and (k+1) x max_num_seqs: a verify step's token counts
    assert moe_tune.token_counts_for_recipe(recipe) == [k + 1, 8 * (k + 1), recipe.serve.max_num_seqs * (k + 1)]
    assert moe_tune.token_counts_for_recipe(recipe, [3, 4], [1]) == [4, 5]
    assert moe_tune.recipe_token_counts([0, 2], [1, 16]) == [1, 3, 16, 48]
    with pytest.raises(ForgeError, match="k must be >= 0"):
        moe_tune.recipe_token_counts([-1], [1])


def test_merged_config_is_rebuilt_from_the_h200_results(tmp_path):
    """The 2026-11-30 run tuned M = 4, 5 (k+1 for k = 3, 4) and 32 ((k+1) x 8): tuned won at 4
    and 5, vLLM's default at 32. The folder it handed the engines is the shipped file with those
    three entries set: rebuilt here from the raw results, byte for byte."""
    results = json.loads((V11_TUNE / "tune-moe-fp8.json").read_text())
    assert results["batch_sizes"] == [4, 5, 32]
    kept = {d["M"]: d["kept"] for d in results["decisions"]}
    assert kept == {4: "tuned", 5: "tuned", 32: "default"}
    for d in results["decisions"]:
        assert d["speedup"] == pytest.approx(d["default_us"] / d["tuned_us"], abs=0.002)
    # merged over the file shipped at the time (withdrawn since; kept with its raw results)
    written = moe_tune.write_merged(results, tmp_path, config_dir=TUNE)
    assert written.read_text() == (V11_TUNE / results["file_name"]).read_text()
    merged = json.loads(written.read_text())
    shipped = json.loads((TUNE / results["file_name"]).read_text())
    for m in shipped:
        if m not in ("triton_version", "4", "5", "32"):
            assert merged[m] == shipped[m]
    assert merged["4"] == results["decisions"][0]["tuned_config"]
    assert merged["32"] == results["decisions"][2]["default_config"]


def test_recipe_token_counts_from_the_cli(tmp_path):
    """Without a GPU the command stops at the GPU check, after deriving the counts."""
    run = run_build("tune-moe", "--dtype", "fp8_w8a8", "--recipe", "gemma-4-26b-a4b-it")
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == "error: tune-moe: --recipe needs --target"


def test_import_through_the_cli_needs_and_reads_the_end_to_end_runs(tmp_path):
    def run(*args):
        return run_build("tune-moe", "--import-results", str(TUNE / "tune-moe-fp8_w8a8.json"), *args)

    bare = run()
    assert bare.returncode == 2 and "needs --end-to-end BENCH_JSON" in bare.stderr
    assert bare.stderr.count("\n") == 1
    no_engines = run("--end-to-end", str(MOE_RUNS[0]))
    assert no_engines.returncode == 2 and "--with-engine and --without-engine" in no_engines.stderr
    # the real H200 runs: refused, the repository's series and configs untouched
    before = (ROOT / "patches" / "series.yaml").read_bytes()
    measured = run(*[a for r in MOE_RUNS for a in ("--end-to-end", str(r))],
                   "--with-engine", WITH_TUNE, "--without-engine", WITHOUT)
    assert measured.returncode == 2, measured.stdout + measured.stderr
    assert "did not win end to end (663.3 vs 673.6 (-1.5%" in measured.stderr
    assert (ROOT / "patches" / "series.yaml").read_bytes() == before
    assert not (ROOT / "patches" / "moe-configs" / H200_FP8).exists()

