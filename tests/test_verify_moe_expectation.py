"""verify expects a recipe's tuned MoE config only on releases whose image carries it."""
from pathlib import Path

from forge.patching.status import shipped_moe_configs
from forge.serving.recipes import Section, load_recipe
from verify import checks as gate
from verify.mtp_smoke import tuned_config_expected
from verify.vllm_logs import parse_engine_log

FIXTURES = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
H200_FP8 = "E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
H200_BF16 = "E=128,N=704,device_name=NVIDIA_H200.json"
# A recipe that expects a file this project ships (the bf16 tune, shipped for 0.25-0.26).
FORGE_BF16 = Section({"name": H200_BF16, "expected": True, "provider": "forge"})


def _patched_run_facts():
    return parse_engine_log((FIXTURES / "h200-0.25.0-smoke-26b-a4b-v1-l6-patched" / "engine.log").read_text())


def test_engine_log_names_its_release():
    assert _patched_run_facts().vllm_version == "0.25.0"


def test_series_ships_the_h200_bf16_tune_for_025_and_026_only_and_no_fp8_tune():
    assert H200_BF16 in shipped_moe_configs("0.25.0") and H200_BF16 in shipped_moe_configs("0.26.0")
    assert H200_BF16 not in shipped_moe_configs("0.27.1")
    # withdrawn: it lost end to end at the recipe's k=4 (patches/series.yaml, h200-0.25.0-bench-26b-a4b-l30-moe-config)
    assert not any(H200_FP8 in shipped_moe_configs(v) for v in ("0.25.0", "0.26.0", "0.27.1"))


def test_expectation_follows_the_release():
    assert tuned_config_expected(FORGE_BF16, "0.25.0") is True
    assert tuned_config_expected(FORGE_BF16, "0.27.1") is False
    assert tuned_config_expected(FORGE_BF16, None) is True
    # a forge file the series does not ship (any more) is never expected
    assert tuned_config_expected(Section({**FORGE_BF16.values, "name": H200_FP8}), "0.25.0") is False
    h200 = load_recipe("gemma-4-26b-a4b-it", "h200").moe_config
    assert h200.name == H200_FP8 and not h200.expected
    assert not any(tuned_config_expected(h200, v) for v in ("0.25.0", "0.27.1", None))
    a100 = load_recipe("gemma-4-26b-a4b-it", "a100").moe_config
    assert tuned_config_expected(a100, "0.25.0") is False


def test_a_missing_expected_file_fails_on_the_releases_that_ship_it_only():
    # The captured H200 run had no VLLM_TUNED_CONFIG_FOLDER: vLLM said "Config file not found".
    facts = _patched_run_facts()
    assert facts.moe_config_missing
    on_025 = gate.check_moe_config(facts, H200_BF16, tuned_config_expected(FORGE_BF16, "0.25.0"))
    on_027 = gate.check_moe_config(facts, H200_BF16, tuned_config_expected(FORGE_BF16, "0.27.1"))
    assert on_025.failed and H200_BF16 in on_025.detail
    assert not on_027.failed and on_027.status == "INFO"
    # the H200 recipe itself expects vLLM's default config: the same log is INFO on every release
    h200 = load_recipe("gemma-4-26b-a4b-it", "h200").moe_config
    check = gate.check_moe_config(facts, h200.name, tuned_config_expected(h200, "0.25.0"))
    assert check.status == "INFO" and "Config file not found" in check.detail


def test_h100_expects_vllms_bundled_file_on_every_release():
    moe = load_recipe("gemma-4-26b-a4b-it", "h100").moe_config
    assert moe.provider == "vllm" and moe.expected
    assert moe.name == "E=128,N=704,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"
    assert all(tuned_config_expected(moe, v) for v in ("0.25.0", "0.27.1", "0.33.0", None))


def test_a100_expects_no_file_but_the_marlin_backend():
    recipe = load_recipe("gemma-4-26b-a4b-it", "a100")
    assert recipe.moe_config is None and tuned_config_expected(None, "0.25.0") is False
    assert recipe.expect.moe_backend == "MARLIN Fp8"


def test_a_tp2_server_log_is_held_to_the_n352_file():
    """The engine config line's tensor_parallel_size picks the layout's file (N=352): a TP=2
    H200 server reading no N=352 file is INFO (none expected), not a failure for N=704."""
    from verify.mtp_smoke import log_checks

    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    n352 = "E=128,N=352,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    log = ("INFO 11-30 [core.py:114] Initializing a V1 LLM engine (v0.25.0) with config: "
           "tensor_parallel_size=2, pipeline_parallel_size=1, quantization=fp8, enforce_eager=False,\n"
           "WARNING 11-30 [fused_moe.py:1106] Using default MoE config. Performance might be "
           f"sub-optimal! Config file not found at /opt/vllm-forge/moe-configs/{n352}\n")
    facts = parse_engine_log(log)
    assert facts.tensor_parallel_size == 2
    moe_check = next(c for c in log_checks(facts, recipe, True, None) if c.name == "tuned MoE config")
    assert moe_check.status == "INFO" and n352 in moe_check.detail
    # the same log at TP=1 is read against the N=704 name (INFO too: no H200 file is shipped)
    at_tp1 = parse_engine_log(log.replace("tensor_parallel_size=2", "tensor_parallel_size=1"))
    assert recipe.moe_config_for(1).name == H200_FP8 and recipe.moe_config_for(2).name == n352
    moe_check = next(c for c in log_checks(at_tp1, recipe, True, None) if c.name == "tuned MoE config")
    assert moe_check.status == "INFO"
