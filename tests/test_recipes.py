"""Recipes: every file validates, names a real target, and states honest, derived thresholds;
a malformed recipe gives one line naming the file and field (through build.py, exit 2)."""
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from forge.errors import ForgeError
from forge.serving import recipes, serve_flags
from forge.serving.recipes import (
    ENGINE_SETTINGS,
    load_all,
    load_recipe,
    moe_config_name,
    series_coverage,
)
from forge.targets import load_targets
from tests.build_cli import run_build

REPO = Path(__file__).resolve().parents[1]
# The shipped recipes and the ids they serve (a new recipe file joins them: tests/test_guides.py).
MODELS = {"gemma-4-26b-a4b-it": "google/gemma-4-26B-A4B-it",
          "gemma-4-31b-it": "google/gemma-4-31B-it",
          "gemma-4-e4b-it": "google/gemma-4-E4B-it",
          "gemma-4-26b-a4b-it-nvfp4": "nvidia/Gemma-4-26B-A4B-NVFP4",
          "gemma-4-31b-it-nvfp4": "nvidia/Gemma-4-31B-IT-NVFP4",
          "gemma-4-31b-it-nvfp4-ct": "RedHatAI/gemma-4-31B-it-NVFP4",
          "qwen3.6-35b-a3b": "Qwen/Qwen3.6-35B-A3B"}
# A cited source: the reference notes, an upstream issue/PR, a release file, or a result record
# (benchmarks/results/<id>/).
CITED = re.compile(r"docs/reference\.md|record [a-z0-9.-]+|#\d+|vllm/[\w/]+\.py")


def test_every_model_has_a_recipe_on_every_target_that_lists_it():
    targets = load_targets()
    found = {(r.name, r.target) for r in load_all()}
    expected = {(name, t.name) for t in targets.values() for name in t.recipes}
    assert expected == found
    assert {name for name, _ in found} >= set(MODELS)


@pytest.mark.parametrize("recipe", load_all(), ids=lambda r: f"{r.name}/{r.target}")
def test_recipe_is_consistent(recipe):
    targets = load_targets()
    assert recipe.target in targets and recipe.name in targets[recipe.target].recipes
    assert recipe.model == MODELS.get(recipe.name, recipe.model)
    assert recipe.path.stem == recipe.name
    # the drafter is the base model's own (BF16 beside an NVFP4 checkpoint too), or none where the
    # family's drafter is inside the checkpoint (models/<family>.yaml, drafter.loading)
    family = recipe.family_model[0]
    if family.drafter_loading == "separate-checkpoint":
        assert recipe.drafter == recipe.base_model + "-assistant"
    else:
        assert recipe.drafter is None and "model" not in recipe.speculative_config()
    assert recipe.speculative.method == "mtp"
    # The releases the tests check are all admitted.
    assert all(recipe.admits(v) for v in ("0.25.0", "0.27.1", "0.33.0"))
    if recipe.name in MODELS:       # the shipped recipes start at 0.25.0 (a new one: where it says)
        assert not recipe.admits("0.24.0")
    if recipe.target == "a100":
        assert not recipe.serve.kv_cache_dtype.startswith("fp8")
    # Every reference figure says where it comes from.
    for ref in recipe.reference:
        assert CITED.search(ref["source"]), ref
    # each recipe carries figures users compare against, unless nothing about it is measured yet
    assert recipe.reference or recipe.thresholds.step_cost_source.startswith("assumption, unmeasured")


@pytest.mark.parametrize("recipe", load_all(), ids=lambda r: f"{r.name}/{r.target}")
def test_thresholds_are_derived_from_the_step_cost(recipe):
    t, k = recipe.thresholds, recipe.speculative.num_speculative_tokens
    # passing the acceptance gate implies the speedup gate: length / step cost >= min_speedup
    assert t.min_mean_acceptance_length / t.step_cost_ratio >= t.min_speedup - 1e-9
    assert t.min_acceptance_rate == pytest.approx((t.min_mean_acceptance_length - 1) / k, abs=0.011)
    # a healthy drafter (field: ~87% acceptance on coherent prose at k=3) passes; the
    # random-token figure (39%, which was a 0.85x loss) fails.
    assert t.min_acceptance_rate < 0.87
    assert t.min_acceptance_rate > 0.39
    assert t.min_speedup >= 1.0
    # a measured or derived ratio cites where from; an assumption says so, citing nothing
    assert CITED.search(t.step_cost_source) or t.step_cost_source.startswith("assumption")
    # each ratio says first whether it was measured, derived, or is an assumption
    assert t.step_cost_source.startswith(("measured", "derived", "assumption", "not measured"))


def test_moe_model_runs_v2_and_names_vllms_config_file():
    targets = load_targets()
    for recipe in load_all():
        if recipe.name == "gemma-4-26b-a4b-it-nvfp4":
            # FlashInfer CUTLASS runs the NVFP4 MoE on GB10: no Triton JSON
            assert recipe.moe_config is None
            assert recipe.expect.moe_backend == "FLASHINFER_CUTLASS NvFp4"
            assert recipe.env() == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
        elif recipe.name == "gemma-4-26b-a4b-it":
            assert recipe.serve.model_runner == "v2"
            assert recipe.env() == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
            if recipe.target == "a100":
                # fp8 on sm_80 runs the MoE through Marlin: no Triton JSON is ever read there,
                # so the recipe names none and verify checks the backend line instead.
                assert recipe.moe_config is None and recipe.expect.moe_backend == "MARLIN Fp8"
                continue
            device = targets[recipe.target].moe_device_name
            dtype = ",dtype=fp8_w8a8" if recipe.serve.quantization == "fp8" else ""
            assert recipe.moe_config.name == f"E=128,N=704,device_name={device}{dtype}.json"
            assert recipe.moe_config.expected in (True, False)
        elif recipe.moe_shape is not None:
            # another family's MoE (models/<family>.yaml): the file named by its own experts, V2
            # (Qwen3.6-35B-A3B: chosen by the H200 bench, record h200-0.27.1-bench-35b-a3b-v2)
            shape, device = recipe.moe_shape, targets[recipe.target].moe_device_name
            assert recipe.moe_config.name == (f"E={shape.experts},N={shape.intermediate},"
                                              f"device_name={device},dtype=fp8_w8a8.json")
            assert recipe.moe_config.expected is False
            assert recipe.env() == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
        else:
            assert recipe.moe_config is None
            # dense models: V1, except where a sweep chose V2 (the target cites its bench records)
            measured = any(i.split("-")[2] == "bench" for i in recipe.evidence)
            runner = "1" if measured and recipe.serve.model_runner == "v2" else "0"
            assert recipe.env() == {"VLLM_USE_V2_MODEL_RUNNER": runner}
    shape = load_recipe("gemma-4-26b-a4b-it", "h200").moe_shape  # models/gemma4.yaml: E=128, N=704
    assert moe_config_name("h200", None, 1, shape) == "E=128,N=704,device_name=NVIDIA_H200.json"
    # TP=2: each rank holds half of every expert's intermediate size (N=352)
    assert moe_config_name("h200", "fp8", 2, shape) == "E=128,N=352,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    assert moe_config_name("h200", None, 2, shape) == "E=128,N=352,device_name=NVIDIA_H200.json"


def test_h200_two_node_layout_names_the_n352_file_the_tuner_would_write():
    from forge.serving.moe_tune import config_file_name

    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    layout = recipe.layout(2)
    assert (layout.tensor_parallel_size, layout.pipeline_parallel_size, layout.gpus_per_node) == (2, 1, 1)
    moe = recipe.moe_config_for(2)
    assert moe.name == config_file_name("NVIDIA H200", "fp8_w8a8", 128, 352)
    assert moe.name == "E=128,N=352,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    # the tuner's H200 files are N=704 (TP=1): none is expected at TP=2
    assert not moe.expected
    assert recipe.moe_config_for(1) is recipe.moe_config and recipe.moe_config_for(4) is None


def test_engine_kwargs_and_cli_args_come_from_one_table():
    for recipe in load_all():
        kwargs, argv = recipe.engine_kwargs(), recipe.cli_args()
        assert kwargs["model"] == recipe.model
        cli = dict(zip(argv[::2], argv[1::2]))
        for setting in ENGINE_SETTINGS:
            if setting.kwarg in kwargs:
                value = kwargs[setting.kwarg]
                expected = json.dumps(value, separators=(",", ":")) if isinstance(value, dict) \
                    else str(value)
                assert cli[setting.flag] == expected
            else:
                assert setting.flag not in cli
        own = {"model": recipe.drafter} if recipe.drafter else {}
        # the drafter's own pin only where the family's drafter does not run the target's backend
        if recipe.family_model[0].drafter_attention_backend == "speculative-config":
            own["attention_backend"] = recipe.serve.attention_backend
        assert kwargs["speculative_config"] == {
            **own, "method": "mtp", "num_speculative_tokens": recipe.speculative.num_speculative_tokens}
        # CUDA graphs always: nothing turns on eager mode.
        assert "enforce_eager" not in kwargs and "--enforce-eager" not in argv
        baseline = recipe.engine_kwargs(speculative=False)
        assert "speculative_config" not in baseline
        assert {k: v for k, v in kwargs.items() if k != "speculative_config"} == baseline


def test_extra_args_become_engine_kwargs():
    assert serve_flags.extra_args_as_kwargs(
        ["--limit-mm-per-prompt", '{"image": 0}', "--no-enable-prefix-caching",
         "--async-scheduling", "--reasoning-parser", "gemma4"]) == {
        "limit_mm_per_prompt": {"image": 0}, "enable_prefix_caching": False,
        "async_scheduling": True, "reasoning_parser": "gemma4"}


def test_unknown_recipe_and_target_name_what_exists():
    with pytest.raises(ForgeError, match=r"unknown recipe 'gemma-5' \(recipes: gemma-4-26b"):
        load_recipe("gemma-5", "h200")
    with pytest.raises(ForgeError, match=r"^recipes/gemma-4-31b-it.yaml: targets: recipe "
                                         r"'gemma-4-31b-it' has no target 'h300' \(targets: a100, gb10"):
        load_recipe("gemma-4-31b-it", "h300")


# --- malformed recipes, through build.py ------------------------------------------------------

def _copy_recipes(tmp_path: Path) -> Path:
    root = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", root, ignore=shutil.ignore_patterns("*.md"))
    return root


def _edit(root: Path, edit, name="gemma-4-26b-a4b-it") -> Path:
    """Edit a model's file (recipes/<model>.yaml) as data."""
    path = root / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _serve(root: Path, name="gemma-4-26b-a4b-it", target="h200", vllm="0.25.0"):
    return run_build("serve", "--recipe", name, "--target", target, "--vllm", vllm, "--recipes-dir", str(root),
                     timeout=120)


def _at(edit, target="h200"):
    """An edit of one target's overrides (targets.<target>)."""
    def on_file(data):
        if data["targets"].get(target) is None:
            data["targets"][target] = {}
        edit(data["targets"][target])
    return on_file


def _set(section, key, value, target="h200"):
    def edit(overrides):
        (overrides.setdefault(section, {}) if section else overrides)[key] = value
    return _at(edit, target)


MALFORMED = [
    ("misspelled field", _set("serve", "max_model_length", 32768),
     "targets.h200.serve.max_model_length: unknown field"),
    ("eager mode is not a recipe field", _set("serve", "enforce_eager", True),
     "targets.h200.serve.enforce_eager: unknown field"),
    ("share over 1", _set("serve", "gpu_memory_utilization", 1.5),
     "targets.h200.serve.gpu_memory_utilization: must be in (0, 1] (got 1.5)"),
    ("runner", _set("serve", "model_runner", "v3"), "targets.h200.serve.model_runner: must be one of v1, v2"),
    ("text for a number", _set("serve", "max_num_seqs", "many"),
     "targets.h200.serve.max_num_seqs: must be an integer (got a string)"),
    ("a bad default names the defaults", lambda d: d["defaults"]["serve"].update(max_num_seqs=0),
     "defaults.serve.max_num_seqs: must be positive (got 0)"),
    ("bad specifier", _set(None, "vllm", "0.25.0"), "targets.h200.vllm: not a PEP 440 version specifier"),
    ("a required field missing everywhere", lambda d: d["defaults"]["serve"].pop("model_runner"),
     "targets.h200.serve.model_runner: required field is missing"),
    # What the code derives is not restated:
    ("drafter restated", _set(None, "drafter", "google/gemma-4-26B-A4B-it-assistant"),
     "targets.h200.drafter: unknown field"),
    ("target restated", _set(None, "target", "h200"), "targets.h200.target: unknown field"),
    ("gate restated", _set("thresholds", "min_mean_acceptance_length", 2.72),
     "targets.h200.thresholds.min_mean_acceptance_length: unknown field"),
    ("MoE file name restated", _set("moe_config", "name", "E=128,N=704.json"),
     "targets.h200.moe_config.name: unknown field"),
    ("expected quantization restated", _set("expect", "quantization", "fp8"),
     "targets.h200.expect.quantization: unknown field"),
    ("unreachable speedup", _set("thresholds", "min_speedup", 3.0),
     "targets.h200.thresholds.min_speedup: min_speedup x step_cost_ratio = 5.43 exceeds "
     "1 + num_speculative_tokens = 5: unreachable"),
    ("unknown target", lambda d: d["targets"].update(h300={}),
     f"targets.h300: unknown target (targets: {', '.join(sorted(load_targets()))})"),
    ("model no family lists", lambda d: d.update(model="org/gemma-lookalike"),
     "model: " + str(REPO / "models") + ": no model family lists 'org/gemma-lookalike' in a model's ids"),
    ("reference without source", lambda d: d["reference"][0].pop("source"),
     "reference[0].source: required field is missing"),
    # A shared note is named, exists, and is cited (each fact once, and none left orphaned):
    ("a note the file lacks", _set("expect", "note", "hoper-attention"),
     "targets.h200.expect.note: no note 'hoper-attention' under notes (notes: hopper-attention)"),
    ("a note no target cites", lambda d: d["notes"].update({"orphan": "text"}),
     "notes.orphan: no expect.note cites it; remove it or cite it"),
    ("a note's name", lambda d: d["notes"].update({"Hopper Attention": "text"}),
     "notes: 'Hopper Attention' is not a note name (lowercase words joined by -)"),
]


@pytest.mark.parametrize("label,edit,message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_recipe_gives_one_line_naming_file_and_field(tmp_path, label, edit, message):
    root = _copy_recipes(tmp_path)
    path = _edit(root, edit)
    before = path.read_text()
    result = _serve(root)
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {root}/gemma-4-26b-a4b-it.yaml: "), lines[0]
    assert message in lines[0]
    assert path.read_text() == before     # nothing lost or rewritten


def test_fp8_kv_cache_refused_on_a100(tmp_path):
    root = _copy_recipes(tmp_path)
    _edit(root, _set("serve", "kv_cache_dtype", "fp8", target="a100"))
    result = _serve(root, target="a100")
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "gemma-4-26b-a4b-it.yaml: targets.a100.serve.kv_cache_dtype: no FP8 KV cache on a100 "
        "(no FP8 hardware)")


def test_broken_yaml_names_the_file_and_line(tmp_path):
    root = _copy_recipes(tmp_path)
    path = root / "gemma-4-31b-it.yaml"
    path.write_text(path.read_text().replace("serve:\n", "serve: [\n", 1))
    result = _serve(root, name="gemma-4-31b-it", target="h100")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {path}: line ")
    assert "not valid YAML" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_recipe_and_target_through_build_py():
    for argv, message in (
            (["--recipe", "gemma-5", "--target", "h200"], "error: unknown recipe 'gemma-5'"),
            # forge.targets.get_target's one message (tests/test_serve.py compares it whole)
            (["--recipe", "gemma-4-31b-it", "--target", "tpu"], "targets.yaml: unknown target 'tpu' (known: ")):
        result = run_build("serve", *argv, "--vllm", "0.25.0", timeout=120)
        assert result.returncode == 2
        assert result.stderr.startswith("error: ") and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_readme_threshold_table_matches_the_recipe_files():
    check = run_build("recipes-table", "--check", timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    text = (REPO / "recipes" / "README.md").read_text()
    for r in load_all():
        t = r.thresholds
        row = (f"| {r.name} | {r.target} | {r.serve.model_runner} | {r.weights} "
               f"| {t.step_cost_ratio} | {t.min_speedup} | {t.min_mean_acceptance_length} "
               f"| {t.min_acceptance_rate} |")
        assert row in text, row


def test_recipes_without_the_targets_file_are_refused(monkeypatch, tmp_path):
    # Images carry images/targets.yaml (tests/test_images_build.py loads a recipe inside one):
    # a recipe is never taken unchecked.
    absent = tmp_path / "absent.yaml"
    monkeypatch.setenv("VLLM_FORGE_TARGETS", str(absent))
    with pytest.raises(ForgeError) as failure:
        load_recipe("gemma-4-26b-a4b-it", "h200")
    assert str(failure.value).startswith(f"{absent}: cannot read")


def _moe_expectations():
    for recipe in load_all():
        if recipe.moe_config is not None:
            yield recipe, recipe.moe_config
        for layout in recipe.multi_node:
            if layout.moe_config is not None:
                yield recipe, layout.moe_config


def test_tuned_moe_config_expected_exactly_where_patches_ship_one():
    shipped = {p.name for p in (REPO / "patches" / "moe-configs").glob("*.json")}
    for recipe, moe in _moe_expectations():
        if moe.provider == "vllm":
            # vLLM bundles it (checked against every release below); ours would shadow it
            assert moe.name not in shipped, f"{recipe.path}: {moe.name} would shadow upstream's"
            continue
        assert moe.expected == (moe.name in shipped), (
            f"{recipe.path}: moe_config.expected must say whether patches/moe-configs/ "
            f"ships {moe.name}")


SUPPORTED_RELEASES = ["0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1",
                      "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0",
                      "0.32.0", "0.33.0"]


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_files_expected_from_vllm_are_bundled_by_the_release(version):
    """Every release bundles E=128,N=704 (and N=352) for the H100 fp8: the H100 recipe expects
    upstream's file, read from the real release source."""
    from forge.upstream.releases import release_tree

    configs = release_tree(version) / "vllm/model_executor/layers/fused_moe/configs"
    expected = {moe.name for _, moe in _moe_expectations() if moe.provider == "vllm"}
    assert "E=128,N=704,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json" in expected
    for name in expected:
        assert (configs / name).is_file(), f"vLLM {version} does not bundle {name}"
    # and none for the H200 or GB10: those expectations stay ours or none
    assert not list(configs.glob("E=128,N=704,device_name=NVIDIA_H200*"))
    assert not list(configs.glob("E=128,N=*,device_name=NVIDIA_GB10*"))


def test_recipe_survives_pickle_and_copy():
    # verify hands recipes to engine child processes
    import copy
    import pickle

    recipe = load_recipe("gemma-4-26b-a4b-it", "gb10")
    for clone in (pickle.loads(pickle.dumps(recipe)), copy.deepcopy(recipe)):
        assert clone == recipe
        assert clone.serve.max_num_seqs == 32 and clone.engine_kwargs() == recipe.engine_kwargs()
    with pytest.raises(AttributeError):
        _ = recipe.serve.no_such_setting


# --- NVFP4, expectations, removed variables, multi-node layouts ------------------------------

def test_nvfp4_recipes_cover_both_sizes_and_both_checkpoint_formats():
    nvfp4 = [r for r in load_all() if r.weights == "nvfp4"]
    assert {(r.base_model, r.checkpoint.format) for r in nvfp4} == {
        ("google/gemma-4-26B-A4B-it", "modelopt_fp4"), ("google/gemma-4-31B-it", "modelopt_fp4"),
        ("google/gemma-4-31B-it", "compressed-tensors")}
    for r in nvfp4:
        assert r.target == "gb10"
        # vLLM detects the format: no --quantization, and verify expects the detected name
        assert r.serve.quantization is None and "--quantization" not in r.cli_args()
        assert r.expect.quantization == r.checkpoint.format
        assert r.serve.kv_cache_memory_bytes
        assert r.thresholds.step_cost_source.startswith("assumption")
        assert r.expect.source.startswith("assumption")
    # the fallback box's recipe is in the gb10 image
    assert "gemma-4-26b-a4b-it-nvfp4" in load_targets()["gb10"].recipes


@pytest.mark.parametrize("version", ["0.25.0", "0.27.1", "0.33.0"])
def test_expected_quantization_names_are_the_releases_method_names(version):
    from forge.serving.vllm_args import release_args

    methods = release_args(version).choices["--quantization"]
    for r in load_all():
        if r.expect.quantization:
            assert r.expect.quantization in methods, (r.path, version)


def test_every_gb10_recipe_sets_an_explicit_kv_cache_size():
    for r in load_all():
        if r.target == "gb10":
            assert r.serve.kv_cache_memory_bytes >= 2**30, r.path
            assert r.engine_kwargs()["kv_cache_memory_bytes"] == r.serve.kv_cache_memory_bytes
            args = r.cli_args()
            assert args[args.index("--kv-cache-memory-bytes") + 1] == str(r.serve.kv_cache_memory_bytes)


@pytest.mark.parametrize("variable,flag", [("VLLM_USE_FLASHINFER_MOE_FP4", "--moe-backend"),
                                           ("VLLM_NVFP4_GEMM_BACKEND", "--linear-backend")])
def test_variables_vllm_024_removed_are_refused(tmp_path, variable, flag):
    root = _copy_recipes(tmp_path)
    _edit(root, _set("serve", "env", {variable: "1"}, target="gb10"), name="gemma-4-26b-a4b-it-nvfp4")
    result = _serve(root, name="gemma-4-26b-a4b-it-nvfp4", target="gb10")
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.startswith(f"error: {root}/gemma-4-26b-a4b-it-nvfp4.yaml: targets.gb10.serve.env: ")
    assert f"{variable} was removed in vLLM 0.24.0" in line and f"use {flag} instead" in line


@pytest.mark.parametrize("version", ["0.23.0", "0.24.0"])
def test_removal_release_is_what_the_sources_say(version):
    from forge.serving.recipes import REMOVED_ENV_VARS
    from forge.serving.vllm_args import release_args

    read = release_args(version).env_vars
    for variable, (removed_in, _) in REMOVED_ENV_VARS.items():
        assert (variable in read) == (version < removed_in), (variable, version)


EXPECT_MALFORMED = [
    ("attention expectation disagrees", _set("expect", "attention_backend", "FLASH_ATTN"),
     "targets.h200.expect.attention_backend: must be serve.attention_backend 'TRITON_ATTN'"),
    ("lower-case backend", _set("serve", "attention_backend", "triton_attn"),
     "targets.h200.serve.attention_backend: must be an AttentionBackendEnum name"),
    ("layout with mismatched ranks", _at(lambda t: t["multi_node"][0].update(tensor_parallel_size=4)),
     "targets.h200.multi_node[0].tensor_parallel_size: tensor x pipeline parallel = 4 must equal"),
    ("layout TP not dividing the experts", _at(lambda t: t["multi_node"][0].update(nodes=3)),
     "targets.h200.multi_node[0].moe_config: tensor parallel 3 does not divide the MoE "
     "intermediate size 704"),
    ("expected file without provider", _set("moe_config", "expected", True),
     "targets.h200.moe_config.provider: say who supplies the expected file"),
    ("provider of a file not expected", lambda d: d["defaults"]["moe_config"].update(provider="forge"),
     "targets.h200.moe_config.provider: only for an expected file"),
]


@pytest.mark.parametrize("label,edit,message", EXPECT_MALFORMED, ids=[m[0] for m in EXPECT_MALFORMED])
def test_malformed_expectations_and_layouts_are_one_line(tmp_path, label, edit, message):
    root = _copy_recipes(tmp_path)
    path = _edit(root, edit)
    result = _serve(root)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.stderr
    assert message in lines[0], lines[0]


def test_a_recipe_stating_a_known_failing_layout_is_refused_naming_the_issue(tmp_path):
    root = _copy_recipes(tmp_path)
    layout = {"nodes": 2, "tensor_parallel_size": 2, "source": "two Sparks"}
    path = _edit(root, _at(lambda t: t.update(multi_node=[layout]), target="gb10"),
                 name="gemma-4-26b-a4b-it-nvfp4")
    result = _serve(root, name="gemma-4-26b-a4b-it-nvfp4", target="gb10")
    assert result.returncode == 2
    line = result.stderr.strip()
    assert line.startswith(f"error: {path}: targets.gb10.multi_node[0].tensor_parallel_size: ")
    assert "vLLM #39595" in line and "every MoE backend" in line


def test_known_failures_file_is_validated(tmp_path):
    root = _copy_recipes(tmp_path)
    (root / "known-failures.yaml").write_text(
        "failures:\n  - base_model: google/gemma-4-26B-A4B-it\n    weights: nvfp5\n"
        "    tensor_parallel_size: 2\n    issue: x\n    why: y\n")
    with pytest.raises(ForgeError) as failure:
        recipes.load_known_failures(root)
    assert str(failure.value).startswith(str(root / "known-failures.yaml"))
    assert "failures[0].weights: must be one of bf16, fp8, nvfp4" in str(failure.value)
    # a directory without its own file is held to the repository's
    (root / "known-failures.yaml").unlink()
    assert recipes.known_failures_path(root) == REPO / "recipes" / "known-failures.yaml"
    assert recipes.known_failure("google/gemma-4-26B-A4B-it", "nvfp4", 2, root).startswith(
        "google/gemma-4-26B-A4B-it nvfp4 at tensor parallel 2 fails upstream, vLLM #39595")
    assert recipes.known_failure("google/gemma-4-26B-A4B-it", "fp8", 2, root) is None


# --- one file per model: defaults, overrides and what the code derives -------------------------

def test_overrides_merge_into_the_defaults_key_by_key():
    defaults = {"serve": {"max_num_seqs": 64, "model_runner": "v2"}, "moe_config": {"expected": False},
                "serve_list": ["--a"]}
    overrides = {"serve": {"max_num_seqs": 32}, "moe_config": None, "serve_list": ["--b"]}
    assert recipes.merged(defaults, overrides) == {
        "serve": {"max_num_seqs": 32, "model_runner": "v2"}, "moe_config": None, "serve_list": ["--b"]}
    assert defaults["serve"]["max_num_seqs"] == 64          # the defaults are not changed
    # on the real files: gb10 overrides the sizes and keeps the runner; a100 drops the MoE config
    gb10, a100 = load_recipe("gemma-4-26b-a4b-it", "gb10"), load_recipe("gemma-4-26b-a4b-it", "a100")
    assert (gb10.serve.max_num_seqs, gb10.serve.model_runner, a100.serve.max_num_seqs) == (32, "v2", 64)
    assert a100.moe_config is None and gb10.moe_config is not None


@pytest.mark.parametrize("speedup,cost,k,length,rate", [
    (1.5, 1.81, 4, 2.72, 0.43), (1.5, 1.82, 3, 2.73, 0.58), (1.1, 2.96, 3, 3.26, 0.75),
    (1.2, 1.82, 2, 2.19, 0.6), (1.0, 2.96, 3, 2.96, 0.65), (1.5, 1.67, 3, 2.51, 0.5)])
def test_acceptance_gates_are_derived_from_the_speedup_and_the_step_cost(speedup, cost, k, length, rate):
    assert recipes.acceptance_gates(speedup, cost, k) == {"min_mean_acceptance_length": length,
                                                         "min_acceptance_rate": rate}


def test_a_targets_recipes_are_the_files_that_name_it(tmp_path):
    from forge.targets import recipes_for_target

    root = _copy_recipes(tmp_path)
    assert recipes_for_target("a100", root) == ["gemma-4-26b-a4b-it", "gemma-4-31b-it", "gemma-4-e4b-it"]
    _edit(root, lambda d: d["targets"].pop("a100"), name="gemma-4-31b-it")
    assert recipes_for_target("a100", root) == ["gemma-4-26b-a4b-it", "gemma-4-e4b-it"]
    assert load_targets()["h200"].recipes == sorted({r.name for r in load_all() if r.target == "h200"})


def test_the_range_is_capped_at_the_series_coverage(monkeypatch, tmp_path):
    through = Version(series_coverage()[1])
    assert load_recipe("gemma-4-31b-it", "h200").vllm == f">=0.25.0,<{through.major}.{through.minor + 1}"
    series = tmp_path / "series.yaml"
    series.write_text((REPO / "patches" / "series.yaml").read_text().replace(
        f"checked_through: {through}\n", "checked_through: 0.35.1\n"))
    monkeypatch.setenv("VLLM_FORGE_SERIES", str(series))
    recipe = load_recipe("gemma-4-31b-it", "h200")
    assert recipe.vllm == ">=0.25.0,<0.36" and recipe.admits("0.35.1") and not recipe.admits("0.36.0")
