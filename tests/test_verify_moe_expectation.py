"""verify expects a recipe's tuned MoE config only on releases whose image carries it."""
from pathlib import Path

from forge.patching.status import shipped_moe_configs
from forge.serving.recipes import load_recipe
from verify import checks as gate
from verify.mtp_smoke import tuned_config_expected
from verify.vllm_logs import parse_engine_log

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
H200_FP8 = "E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"


def _patched_run_facts():
    return parse_engine_log((FIXTURES / "smoke-patched-L6" / "engine.log").read_text())


def test_engine_log_names_its_release():
    assert _patched_run_facts().vllm_version == "0.25.0"


def test_series_ships_the_h200_tunes_for_025_and_026_only():
    assert H200_FP8 in shipped_moe_configs("0.25.0")
    assert H200_FP8 in shipped_moe_configs("0.26.0")
    assert H200_FP8 not in shipped_moe_configs("0.27.1")


def test_expectation_follows_the_release():
    moe = load_recipe("gemma-4-26b-a4b-it", "h200").moe_config
    assert moe.expected and moe.name == H200_FP8
    assert tuned_config_expected(moe, "0.25.0") is True
    assert tuned_config_expected(moe, "0.27.1") is False
    assert tuned_config_expected(moe, None) is True
    a100 = load_recipe("gemma-4-26b-a4b-it", "a100").moe_config
    assert tuned_config_expected(a100, "0.25.0") is False


def test_captured_025_run_without_the_config_fails_but_a_027_run_would_not():
    # The captured H200 run had no VLLM_TUNED_CONFIG_FOLDER: vLLM said "Config file not found".
    facts = _patched_run_facts()
    assert facts.moe_config_missing
    moe = load_recipe("gemma-4-26b-a4b-it", "h200").moe_config
    on_025 = gate.check_moe_config(facts, moe.name, tuned_config_expected(moe, "0.25.0"))
    on_027 = gate.check_moe_config(facts, moe.name, tuned_config_expected(moe, "0.27.1"))
    assert on_025.failed
    assert not on_027.failed and on_027.status == "INFO"
