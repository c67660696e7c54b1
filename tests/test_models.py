"""forge/models.py: models/<family>.yaml validated on load (errors name the file and the field), and
what the code reads from it instead of Gemma 4 constants."""
import json
import shutil
from pathlib import Path

import pytest
import yaml

from forge.errors import ForgeError
from forge.models import MODELS_DIR, family_names, first_dummy, load_family, model_for_id, moe_models
from forge.serving.recipes import RECIPES_DIR, load_all, load_recipe
from tests.family_copies import edited_family
from verify import checks
from verify.vllm_logs import EngineLogFacts

GEMMA4 = load_family("gemma4")


def test_the_gemma4_family_states_what_the_code_used_to_hard_wire():
    moe = GEMMA4.model("26b-a4b").moe
    assert (moe.experts, moe.intermediate, moe.hidden, moe.topk, moe.activation) == \
        (128, 704, 2816, 8, "GELU_TANH")
    assert GEMMA4.model("31b").moe is None and GEMMA4.model("e4b").moe is None
    assert GEMMA4.drafter_architecture == "Gemma4MTPModel"
    assert "Gemma4ForCausalLM" in GEMMA4.target_architectures
    assert GEMMA4.control_norms == ["model.norm"]
    assert GEMMA4.config_types == {"target": "gemma4_text", "text": None, "assistant": "gemma4_assistant"}
    assert GEMMA4.drafter_id("google/gemma-4-31B-it") == "google/gemma-4-31B-it-assistant"
    assert ["Gemma-4-26B-A4B", "Qwen3.6-35B-A3B"] == [m.label for f, m in moe_models()
                                                       if f.name in ("gemma4", "qwen3_5_moe")]


def test_ranged_facts_are_read_per_release():
    assert GEMMA4.speculative_method("0.25.0") == GEMMA4.speculative_method("0.33.0") == "mtp"
    assert GEMMA4.kv_shared_layers_read_kv_weights("0.29.0") is True
    assert GEMMA4.kv_shared_layers_read_kv_weights("0.30.0") is False
    with pytest.raises(ForgeError, match=r"gemma4.yaml: speculative_methods: no entry covers vLLM 0.20.0"):
        GEMMA4.speculative_method("0.20.0")
    # empty `vllm:`: served on the series' coverage
    assert "0.33.0" in GEMMA4.served_on(">=0.21.0,<=0.33.0")
    assert "0.34.0" not in GEMMA4.served_on(">=0.21.0,<=0.33.0")


def test_every_recipe_finds_its_model_in_a_family():
    for recipe in load_all():
        family, model = recipe.family_model
        assert recipe.base_model in model.ids
        # exactly one family lists the model (model_for_id takes the first)
        assert [f for f in family_names() if any(recipe.base_model in m.ids
                                                 for m in load_family(f).models.values())] == [family.name]
        # only a model with experts may name a MoE config (the A100's Marlin path names none)
        assert recipe.moe_config is None or model.moe is not None, recipe.path
        assert recipe.moe_shape == model.moe
    with pytest.raises(ForgeError, match="no model family lists 'org/unknown'"):
        model_for_id("org/unknown")


def test_the_dummy_configs_keep_their_published_shapes():
    family, model = first_dummy()
    assert (family.name, model.name) == ("gemma4", "26b-a4b")
    target = family.target_config(model, 10)
    assert target["architectures"] == ["Gemma4ForCausalLM"] and target["model_type"] == "gemma4_text"
    assert (target["hidden_size"], target["num_experts"], target["moe_intermediate_size"]) == (2816, 128, 704)
    assert target["layer_types"].count("full_attention") == 2 and target["layer_types"][-1] == "full_attention"
    assistant = family.assistant_config(GEMMA4.model("31b"), centroids=True)
    assert assistant["model_type"] == "gemma4_assistant" and assistant["backbone_hidden_size"] == 5376
    assert assistant["text_config"]["num_key_value_heads"] == 16 and assistant["num_centroids"] == 2048
    with pytest.raises(ValueError, match="assistant_heads: no assistant shape for Gemma-4-E4B"):
        family.assistant_config(GEMMA4.model("e4b"))
    assert GEMMA4.dummy_shapes() == ["26b-a4b", "31b"]


def test_a_plain_engines_dummy_is_the_target_alone_of_any_model(tmp_path):
    """E4B has no published assistant shape: its plain step can still be written and profiled
    (verify/profile.py --k 0), its spec step is refused rather than run on another model's shapes."""
    from verify import profile
    from verify.dummy_models import write_dummy_models

    target_dir, assistant_dir = write_dummy_models(tmp_path, 42, "e4b", drafter=False)
    assert assistant_dir is None and sorted(p.name for p in tmp_path.iterdir()) == [target_dir.name]
    written = json.loads((target_dir / "config.json").read_text())
    assert (written["hidden_size"], written["num_hidden_layers"], written["num_kv_shared_layers"]) == (2560, 42, 18)
    with pytest.raises(ValueError, match=r"unknown shape 'e4b' \(known: 26b-a4b, 31b, "):
        write_dummy_models(tmp_path / "spec", 42, "e4b")  # with its drafter
    plain = profile.parse_args(["--recipe", "gemma-4-e4b-it", "--target", "h200", "--dummy", "--k", "0"])
    assert profile.dummy_shape(plain) == "e4b"
    spec = profile.parse_args(["--recipe", "gemma-4-e4b-it", "--target", "h200", "--dummy", "--k", "3"])
    with pytest.raises(ForgeError, match="models.e4b has no drafter shape for --dummy"):
        profile.dummy_shape(spec)


def test_the_architecture_check_reads_the_family():
    resolved = EngineLogFacts(architectures=["Gemma4ForConditionalGeneration", "Gemma4MTPModel"])
    assert checks.check_architectures(resolved, GEMMA4).status == "PASS"
    other = EngineLogFacts(architectures=["Qwen3ForCausalLM", "Gemma4MTPModel"])
    check = checks.check_architectures(other, GEMMA4)
    assert check.failed and "Gemma4ForCausalLM" in check.detail


@pytest.mark.parametrize("edit, error", [
    (lambda d: d.pop("architectures"), "architectures: required field is missing"),
    (lambda d: d["drafter"].update(loading="sideways"), "drafter.loading: must be one of"),
    (lambda d: d["speculative_methods"][0].update(vllm="newest"), "speculative_methods[0].vllm: not a PEP 440"),
    (lambda d: d["models"]["31b"]["text"].pop("hidden_size"), "models.31b.text.hidden_size: must be a positive"),
    (lambda d: d["models"]["26b-a4b"]["text"].pop("top_k_experts"),
     "models.26b-a4b.text.top_k_experts: required for an MoE model"),
    (lambda d: d.update(colour="blue"), "colour: unknown field"),
    (lambda d: d.update(family="gemma5"), "family: must match the file name 'gemma4'"),
])
def test_a_bad_family_file_is_refused_naming_file_and_field(tmp_path, edit, error):
    root = edited_family(tmp_path, "gemma4", edit)
    with pytest.raises(ForgeError) as caught:
        load_family("gemma4", root)
    assert str(caught.value).startswith(f"{root / 'gemma4.yaml'}: ")
    assert error in str(caught.value)


def test_an_unknown_family_names_the_ones_there_are(tmp_path):
    shutil.copy(MODELS_DIR / "gemma4.yaml", tmp_path / "gemma4.yaml")
    with pytest.raises(ForgeError, match=r"no such model family 'qwen3' \(families: gemma4\)"):
        load_family("qwen3", tmp_path)


def test_a_recipe_without_sampling_takes_the_familys(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root, ignore=shutil.ignore_patterns("*.md"))
    path = root / "gemma-4-e4b-it.yaml"
    data = yaml.safe_load(path.read_text())
    assert "sampling" not in data["defaults"] and "sampling" not in data["targets"]["h200"]
    data["targets"]["h200"]["speculative"] = {"method": "eagle"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ForgeError, match=r"gemma-4-e4b-it.yaml: targets.h200.speculative.method: must be one of mtp "
                                         r"\(got 'eagle'\): the gemma4"):
        load_recipe("gemma-4-e4b-it", "h200", root)
    # left out, the method is the family's only one
    data["targets"]["h200"].pop("speculative")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    recipe = load_recipe("gemma-4-e4b-it", "h200", root)
    assert recipe.sampling.values == GEMMA4.sampling
    assert (recipe.sampling.temperature, recipe.sampling.top_p, recipe.sampling.top_k) == (1.0, 0.95, 64)


def without_evidence_lists(lines: list[str]) -> list[str]:
    """The lines of a YAML file less its `evidence: [...]` flow lists (which may span lines)."""
    kept, open_list = [], False
    for line in lines:
        if open_list or line.lstrip().startswith("evidence:"):
            open_list = "]" not in line
            continue
        kept.append(line)
    return kept


def test_the_recipes_and_models_stay_within_their_line_budgets():
    """Issue 18's bound on the data (664 lines for Gemma alone before the family became data; 450
    for the 2 families and 17 recipe targets of that day): what is stated once stays small, per
    file, so a new target or family brings its own budget. Comments and blank lines are not data,
    nor are `evidence:` lists: they cite result records, they state nothing the recipe serves."""
    root = Path(__file__).resolve().parent.parent
    files = sorted([*root.glob("recipes/*.yaml"), *root.glob("models/*.yaml")])
    assert any(f.parent.name == "models" for f in files) and len(files) >= 8
    for f in files:
        data = [line for line in without_evidence_lists(f.read_text().splitlines())
                if line.strip() and not line.lstrip().startswith("#")]
        if f.parent.name == "models":
            budget = 120
        else:
            targets = (yaml.safe_load(f.read_text()) or {}).get("targets") or {}
            budget = 25 + 10 * len(targets)
        assert len(data) <= budget, f"{f.relative_to(root)}: {len(data)} data lines (budget {budget})"
