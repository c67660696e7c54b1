"""The acceptance gate's controls: the plugin that makes a dummy target and drafter agree is found
the way vLLM finds general plugins, and the gate's verdicts on the agreeing and the random model
(counters captured on an H200, 2026-11-30) come out as a positive and a negative control must."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verify import checks as gate
from verify import controls
from verify.dummy_models import assistant_config, target_config, write_dummy_models
from verify.metrics import counters_from_snapshot
from verify.report import FAIL, NOT_CHECKED, PASS

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "benchmarks" / "results" / "h200-0.25.0-bench-31b-sweep-k0-2" / "engines"


def test_plugin_is_found_as_vllm_finds_general_plugins(tmp_path):
    """vLLM's load_plugins_by_group reads importlib.metadata entry points of the group
    `vllm.general_plugins`: a fresh interpreter with the engine's PYTHONPATH must see ours and
    load the function it names."""
    controls.install_plugin(tmp_path)
    env = {**os.environ, **controls.engine_env(tmp_path, REPO, initial="agree")}
    code = ("import importlib.metadata as m; "
            "eps = [e for e in m.entry_points(group='vllm.general_plugins')]; "
            "print([(e.name, e.value) for e in eps]); "
            "f = [e for e in eps if e.name == 'vllm_forge_controls'][0].load(); "
            "print(f.__module__, f.__name__)")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "[('vllm_forge_controls', 'verify.controls:register')]"
    assert out[1] == "verify.controls register"
    assert env[controls.ENV_INITIAL] == "agree"
    assert env["PYTHONPATH"].split(":")[:2] == [str(tmp_path), str(REPO)]


def test_only_the_final_norms_are_switched():
    names = ["model", "model.embed_tokens", "model.layers.0.input_layernorm", "model.layers.0.router.norm",
             "model.norm", "lm_head", "model.pre_projection", "language_model.model.norm",
             "model.layers.3.model.norm"]
    assert controls.final_norm_names(names) == ["model.norm", "language_model.model.norm"]


def _window(name: str, window: str):
    result = json.loads((SWEEP / f"{name}.result.json").read_text())["windows"][window]
    return (counters_from_snapshot(result["metrics_after"])
            - counters_from_snapshot(result["metrics_before"]))


@pytest.mark.parametrize("engine", ["fp8-mtp1-v1", "fp8-mtp1-v2", "fp8-mtp2-v1", "fp8-mtp2-v2"])
def test_gate_passes_the_agreeing_model_and_fails_the_random_one(engine):
    """31B-shaped dummy model, V1 and V2 runners: the same gate (the 31B H200 recipe's
    thresholds) on vLLM's counters of each window."""
    from forge.serving.recipes import load_recipe

    rate = load_recipe("gemma-4-31b-it", "h200").thresholds.min_acceptance_rate
    k = int(engine.split("mtp")[1][0])
    length = 1 + k * rate  # the recipe's rule, at this engine's k
    agree = gate.check_acceptance(_window(engine, "sustained@agree"), rate, length)
    random = gate.check_acceptance(_window(engine, "sustained@random"), rate, length)
    positive, negative = gate.positive_control(agree), gate.negative_control(random)
    assert (positive.status, negative.status) == (PASS, PASS)
    assert positive.name == "acceptance (temperature 0)"  # the required gate, on the agreeing model
    assert positive.detail.startswith("agreeing model (positive control): ")
    assert "rate 100.0%" in positive.detail and "per position [100%" in positive.detail
    assert "the gate failed it, as it must" in negative.detail and "rate 0.0%" in negative.detail
    assert gate.controls_broken([positive, negative]) == []
    # Swapped, the controls report verify itself broken.
    wrong = [gate.positive_control(random), gate.negative_control(agree)]
    assert [c.status for c in wrong] == [FAIL, FAIL]
    assert gate.controls_broken(wrong) == wrong
    assert all(c.detail.startswith("verify is broken: ") for c in wrong)


def test_a_control_that_never_ran_is_not_a_broken_verify():
    never = gate.check_acceptance(None, 0.5, 2.0)
    assert never.status == NOT_CHECKED
    assert gate.positive_control(never).status == NOT_CHECKED
    assert gate.negative_control(never).status == NOT_CHECKED


def test_31b_shapes_as_published_and_centroid_drafter(tmp_path):
    target, draft = target_config(shape="31b"), assistant_config("31b", centroids=True)
    assert (target["hidden_size"], target["intermediate_size"], target["num_hidden_layers"],
            target["num_attention_heads"], target["num_key_value_heads"],
            target["num_global_key_value_heads"], target["enable_moe_block"]) == \
        (5376, 21504, 60, 32, 16, 4, False)
    assert target["layer_types"].count("full_attention") == 10
    assert draft["backbone_hidden_size"] == 5376 and draft["use_ordered_embeddings"] is True
    assert (draft["num_centroids"], draft["centroid_intermediate_top_k"]) == (2048, 32)
    assert draft["text_config"]["num_attention_heads"] == 32
    with pytest.raises(ValueError, match="1..60"):
        target_config(61, "31b")
    with pytest.raises(ValueError, match="unknown shape"):
        target_config(4, "70b")
    t_dir, d_dir = write_dummy_models(tmp_path, 10, "31b", centroids=True)
    assert t_dir.name == "gemma-4-31b-L10" and d_dir.name == "gemma-4-31b-assistant-centroids"
    assert json.loads((t_dir / "config.json").read_text())["num_hidden_layers"] == 10
