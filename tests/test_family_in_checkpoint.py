"""A second model family served from data alone: Qwen3.5/3.6 MoE, whose MTP drafter is a head
inside the target's checkpoint (models/qwen3_5_moe.yaml). Its file is validated like Gemma 4's, its
recipes serve through the same code, --dummy writes a config.json that each vLLM release's own code
parses, and verify's per-family checks are the ones its data names."""
import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from forge.errors import ForgeError
from forge.models import family_names, load_family
from forge.serving.recipes import RECIPES_DIR, load_recipe, pin_attention_backend
from forge.upstream.pyenvs import package_env
from forge.upstream.releases import release_tree, tree_manifest
from tests.family_copies import edited_family
from verify import bench, controls, mtp_smoke
from verify.dummy_models import recipe_shape, write_dummy_models
from verify.vllm_logs import parse_engine_log

REPO = Path(__file__).resolve().parents[1]
FAMILY = load_family("qwen3_5_moe")
GEMMA4 = load_family("gemma4")
RECIPE = "qwen3.6-35b-a3b"
PROBE = REPO / "tests" / "nested_config_probe.py"


def test_the_family_states_its_drafter_experts_and_norms():
    model = FAMILY.model("35b-a3b")
    assert model.ids == ("Qwen/Qwen3.6-35B-A3B", "Qwen/Qwen3.5-35B-A3B")
    moe = model.moe
    assert (moe.experts, moe.intermediate, moe.hidden, moe.topk, moe.activation) == (256, 512, 2048, 8, "SILU")
    assert FAMILY.drafter_loading == "in-checkpoint"
    assert FAMILY.drafter_id("Qwen/Qwen3.6-35B-A3B") is None
    assert FAMILY.drafter_architecture == "Qwen3_5MoeMTP"
    assert list(FAMILY.shares) == ["embedding", "lm_head"]
    assert list(GEMMA4.shares) == ["embedding"]
    assert FAMILY.control_norms == ["model.norm"]
    assert (FAMILY.control_norm_zero_weight, GEMMA4.control_norm_zero_weight) == (-1.0, 0.0)
    assert FAMILY.speculative_method("0.25.0") == FAMILY.speculative_method("0.33.0") == "mtp"
    assert FAMILY.dummy_shapes() == ["35b-a3b"]
    # 3 Gated DeltaNet layers to 1 full attention layer, the last one full
    assert FAMILY.layer_types(8) == ["linear_attention"] * 3 + ["full_attention"] + \
        ["linear_attention"] * 3 + ["full_attention"]
    with pytest.raises(ValueError, match=r"drafter.loading: in-checkpoint: Qwen3.6-35B-A3B's drafter is inside"):
        FAMILY.assistant_config(model)


@pytest.mark.parametrize("edit, error", [
    (lambda d: d["drafter"].pop("layers_key"), "drafter.layers_key: required for drafter.loading in-checkpoint"),
    (lambda d: d["drafter"].update(suffix="-mtp"), "drafter.suffix: not for drafter.loading in-checkpoint"),
    (lambda d: d["dummy"].update(assistant_text={}), "dummy.assistant_text: not for drafter.loading in-checkpoint"),
    (lambda d: d["drafter"]["shares"].update(logits=["x"]), "drafter.shares: logits: must be one of embedding, lm_head"),
    (lambda d: d["drafter"].update(shares={}), "drafter.shares: must name at least one of embedding, lm_head"),
    (lambda d: d["drafter"].update(attention_backend="inherit"), "drafter.attention_backend: "),
    (lambda d: d["drafter"].pop("attention_backend"), "drafter.attention_backend: "),
    (lambda d: d["models"]["35b-a3b"]["text"].update(mtp_num_hidden_layers=0),
     "models.35b-a3b.text.mtp_num_hidden_layers: must be a positive integer"),
    (lambda d: d["models"]["35b-a3b"]["text"].pop("num_experts_per_tok"),
     "models.35b-a3b.text.num_experts_per_tok: required for an MoE model"),
    (lambda d: d.update(control_norm_zero_weight="minus one"), "control_norm_zero_weight: "),
    (lambda d: d["config_types"].update(assistant="qwen3_5_mtp"),
     "config_types.assistant: not for drafter.loading in-checkpoint"),
])
def test_a_bad_field_is_one_line_naming_file_and_field(tmp_path, edit, error):
    root = edited_family(tmp_path, "qwen3_5_moe", edit)
    with pytest.raises(ForgeError) as caught:
        load_family("qwen3_5_moe", root)
    message = str(caught.value)
    assert message.startswith(f"{root / 'qwen3_5_moe.yaml'}: ") and error in message
    assert "\n" not in message


def test_a_separate_checkpoint_family_must_name_its_assistant(tmp_path):
    root = edited_family(tmp_path, "gemma4", lambda data: data["drafter"].pop("suffix"))
    with pytest.raises(ForgeError, match=r"gemma4.yaml: drafter.suffix: required for drafter.loading separate-checkpoint"):
        load_family("gemma4", root)


def _recipes(tmp_path: Path, name: str, target: str, edit) -> Path:
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root, ignore=shutil.ignore_patterns("*.md"))
    path = root / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data["targets"][target])
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def test_the_drafter_follows_the_familys_loading(tmp_path):
    recipe = load_recipe(RECIPE, "h200")
    assert recipe.drafter is None
    # the family's drafter takes its backend from the speculative config: the recipe's pin goes there too
    assert recipe.speculative_config() == {"method": "mtp", "num_speculative_tokens": 2, "attention_backend": "TRITON_ATTN"}
    assert load_recipe("gemma-4-31b-it", "h200").drafter == "google/gemma-4-31B-it-assistant"
    # the family says where the drafter is: no recipe states it
    root = _recipes(tmp_path, RECIPE, "h200", lambda d: d.update(drafter="Qwen/Qwen3.6-35B-A3B"))
    with pytest.raises(ForgeError, match=r"qwen3.6-35b-a3b.yaml: targets.h200.drafter: unknown field"):
        load_recipe(RECIPE, "h200", root)


@pytest.mark.parametrize("target", ["h200", "gb10"])
def test_serve_prints_the_public_recipes_speculative_config(target):
    """build.py serve, as a user runs it: the MTP config of vLLM's Qwen3.5/3.6 guide, no drafter
    model, text only; the release's parser checks every flag (tests/test_serve.py runs all)."""
    result = subprocess.run(["python3", "build.py", "serve", "--recipe", RECIPE, "--target", target,
                             "--vllm", "0.27.1"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    command = result.stdout.strip().splitlines()[-1]
    assert f"vllm-forge:vllm0.27.1-{target} serve Qwen/Qwen3.6-35B-A3B --quantization fp8" in command
    assert ("--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2,"
            "\"attention_backend\":\"TRITON_ATTN\"}'") in command
    assert command.endswith("--language-model-only") and "-e VLLM_USE_V2_MODEL_RUNNER=1" in command  # V2: §11.4



@pytest.mark.parametrize("override, engine_backend", [("FLASH_ATTN", "FLASH_ATTN"), ("default", None)])
def test_an_attention_override_moves_the_drafters_pin_with_the_targets(tmp_path, override, engine_backend):
    """§10.3: with only --attention-backend, vLLM 0.27.1's V1 runner gave the Qwen MTP drafter its own
    backend. An engine that overrides the recipe's backend (bench's attention=, mtp_smoke's
    --attention-backend) takes the drafter along, and attention=default leaves both to vLLM."""
    recipe = load_recipe(RECIPE, "h200")
    args = bench.parse_args(["--recipe", RECIPE, "--target", "h200", "--dummy", "--layers", "8",
                             "--out", str(tmp_path)])
    args.shape = recipe_shape(recipe, args.shape)
    engine = bench.parse_engine(f"name=e,k=2,runner=v1,attention={override}")
    kwargs = bench.engine_spec(recipe, args, engine, tmp_path)["engine_kwargs"]
    assert kwargs.get("attention_backend") == engine_backend
    assert kwargs["speculative_config"].get("attention_backend") == engine_backend
    smoke_args = mtp_smoke.parse_args(["--recipe", RECIPE, "--target", "h200", "--dummy", "--layers", "8",
                                       "--attention-backend", "FLASH_ATTN"])
    smoke_args.shape = recipe_shape(recipe, smoke_args.shape)
    kwargs, _, _ = mtp_smoke.engine_setup(recipe, smoke_args, tmp_path / "smoke")
    assert kwargs["attention_backend"] == kwargs["speculative_config"]["attention_backend"] == "FLASH_ATTN"
    # Gemma 4's proposer gives its drafter the target's backend: no pin of its own to move
    gemma = load_recipe("gemma-4-26b-a4b-it", "h200")
    assert "attention_backend" not in gemma.speculative_config()
    assert "attention_backend" not in pin_attention_backend(gemma.engine_kwargs(), "FLASH_ATTN")["speculative_config"]

# --- --dummy: what vLLM's own code makes of the config.json it writes --------------------------

# (transformers in the image, release): 5.14.1 is the series' pin below 0.28 (patches/series.yaml,
# transformers-gemma4-per-layer-config); beyond it 5.15.0, the version that pin holds back, whose
# environment a whole run makes anyway (tests/prefetch), where PyPI's newest would move.
ROUND_TRIPS = [("5.14.1", "0.25.0"), ("5.14.1", "0.27.1"), ("5.15.0", "0.28.0"), ("5.15.0", "0.30.0"),
               ("5.15.0", "0.33.0")]


def _block_line(tree: Path, model_type: str) -> int:
    source = (tree / "vllm/config/speculative.py").read_text().splitlines()
    return next(i for i, line in enumerate(source, 1)
                if line.strip().startswith("if hf_config.model_type in (") and
                any(f'"{model_type}"' in later for later in source[i - 1:i + 5]))


@pytest.mark.parametrize("transformers, release", ROUND_TRIPS)
def test_the_dummy_config_is_what_the_release_parses(tmp_path, transformers, release):
    target_dir, draft_dir = write_dummy_models(tmp_path, 8, "35b-a3b")
    assert draft_dir is None  # the MTP layers are the target checkpoint's own
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qwen3.6-35b-a3b-L8"]
    tree = release_tree(release)
    request = {"model": str(target_dir), "tree": str(tree), "model_type": FAMILY.config_types["target"],
               "manifest": tree_manifest(release)}
    done = subprocess.run([str(package_env("transformers", transformers)), str(PROBE)],
                          input=json.dumps(request), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    own = tree / "vllm/transformers_utils/configs/qwen3_5_moe.py"
    assert seen["loaded_by"] == ("vllm/transformers_utils/configs/qwen3_5_moe.py:Qwen3_5MoeConfig"
                                 if own.exists() else "transformers Qwen3_5MoeConfig")
    assert (seen["model_type"], seen["text_type"]) == (FAMILY.config_types["target"], FAMILY.config_types["text"])
    model = FAMILY.model("35b-a3b")
    for key, value in seen["text"].items():
        expected = FAMILY.layer_types(8) if key == "layer_types" else 8 if key == "num_hidden_layers" \
            else model.text[key]
        assert value == expected, key
    assert seen["rope"]["mrope_section"] == [11, 11, 10] and seen["rope"]["partial_rotary_factor"] == 0.25
    # the drafter vLLM makes of it: the release's own block, to the family's MTP class
    assert seen["draft"]["line"] == _block_line(tree, "qwen3_5_moe")
    assert seen["draft"]["architectures"] == [FAMILY.drafter_architecture]
    assert seen["draft"]["model_type"] == "qwen3_5_mtp"
    # before 0.30.0 the block reads the MTP layer count off the top-level config only, where the
    # multimodal checkpoints (and so the dummy) do not carry it: n_predict None, which skips
    # vLLM's divisibility check of k; from 0.30.0 it falls back to text_config
    assert seen["draft"]["n_predict"] == (1 if Version(release) >= Version("0.30.0") else None)


# --- verify: the per-family checks come from the data -----------------------------------------

V1_LOG = """\
(EngineCore pid=1) INFO 12-01 10:00:00 [model.py:619] Resolved architecture: Qwen3_5MoeForConditionalGeneration
(EngineCore pid=1) INFO 12-01 10:00:01 [model.py:619] Resolved architecture: Qwen3_5MoeMTP
(EngineCore pid=1) INFO 12-01 10:00:02 [llm_base_proposer.py:1466] Detected MTP model. Sharing target model embedding weights with the draft model.
(EngineCore pid=1) INFO 12-01 10:00:02 [llm_base_proposer.py:1541] Detected MTP model. Sharing target model lm_head weights with the draft model.
"""


def _checks(log: str, recipe_name: str, target: str = "h200") -> dict:
    recipe = load_recipe(recipe_name, target)
    checks = mtp_smoke.log_checks(parse_engine_log(log), recipe, False, None)
    assert [c.name for c in checks] == mtp_smoke.log_check_names(recipe)
    return {c.name: c for c in checks}


def test_the_in_checkpoint_drafter_is_checked_for_what_its_family_shares():
    checks = _checks(V1_LOG, RECIPE)
    assert checks["architectures"].status == "PASS"
    assert checks["draft shares target embedding"].status == "PASS"
    assert checks["draft shares target lm_head"].status == "PASS"
    assert "lm_head weights" in checks["draft shares target lm_head"].detail
    # Gemma 4's drafter shares the embedding only: no lm_head check is made up for it
    gemma = _checks(V1_LOG.replace("Qwen3_5MoeForConditionalGeneration", "Gemma4ForConditionalGeneration")
                    .replace("Qwen3_5MoeMTP", "Gemma4MTPModel"), "gemma-4-31b-it")
    assert "draft shares target lm_head" not in gemma and gemma["draft shares target embedding"].status == "PASS"


def test_a_drafter_keeping_its_own_lm_head_fails_its_familys_check():
    log = V1_LOG.replace("Detected MTP model. Sharing target model lm_head weights with the draft model.",
                         "Detected EAGLE model with distinct lm_head weights. Keeping separate lm_head weights "
                         "from the target model.")
    check = _checks(log, RECIPE)["draft shares target lm_head"]
    assert check.failed and "keeps its own lm_head" in check.detail
    silent = _checks(V1_LOG.splitlines()[0] + "\n" + V1_LOG.splitlines()[1] + "\n", RECIPE)
    assert silent["draft shares target lm_head"].failed
    assert "qwen3_5_moe.yaml's drafter.shares.lm_head lines" in silent["draft shares target lm_head"].detail
    assert silent["architectures"].status == "PASS" and silent["draft shares target embedding"].failed


def test_the_dummy_engine_takes_the_checkpoints_own_mtp_and_the_familys_controls(tmp_path):
    args = mtp_smoke.parse_args(["--recipe", RECIPE, "--target", "h200", "--dummy", "--layers", "8"])
    assert args.shape is None  # the recipe decides (verify/dummy_models.py recipe_shape)
    recipe = load_recipe(RECIPE, "h200")
    args.shape = recipe_shape(recipe, args.shape)
    assert args.shape == "35b-a3b"
    kwargs, env, _ = mtp_smoke.engine_setup(recipe, args, tmp_path)
    assert kwargs["model"] == str(tmp_path / "models" / "qwen3.6-35b-a3b-L8")
    assert kwargs["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2, "attention_backend": "TRITON_ATTN"}
    assert kwargs["load_format"] == "dummy" and kwargs["language_model_only"] is True
    assert env[controls.ENV_FAMILY] == "qwen3_5_moe" and env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    config = json.loads((Path(kwargs["model"]) / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
    # prompts begin with the family's own BOS
    assert mtp_smoke.prompt_inputs(args, ["hi"])[0][0] == FAMILY.token_ids["bos"]
    with pytest.raises(ValueError, match=r"--shape 35b-a3b: not a dummy shape of gemma-4-31b-it's family gemma4"):
        recipe_shape(load_recipe("gemma-4-31b-it", "h200"), "35b-a3b")


def test_the_controls_zero_each_familys_norms_its_own_way():
    assert controls.control_norms("qwen3_5_moe") == (["model.norm"], -1.0)
    assert controls.control_norms("gemma4") == (["model.norm"], 0.0)
    # every family, each with its weight (a family added since is listed too)
    weights = ", ".join(f"{name}: {load_family(name).control_norm_zero_weight}" for name in family_names())
    with pytest.raises(ForgeError) as failure:
        controls.control_norms(None)
    assert (f"VLLM_FORGE_CONTROL_FAMILY unset and the families zero their norms differently "
            f"({weights})") in str(failure.value)
    assert "gemma4: 0.0" in weights and "qwen3_5_moe: -1.0" in weights
    env = controls.engine_env("/plugin", REPO, family="qwen3_5_moe")
    assert env[controls.ENV_FAMILY] == "qwen3_5_moe"
    assert controls.ENV_FAMILY not in controls.engine_env("/plugin", REPO)


# --- added by data alone: no forge/ or verify/ code names the family ---------------------------

def _code_words(path: Path) -> set[str]:
    """Identifiers and string constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.add(node.value)
        elif isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            words.add(node.name)
    return words


def test_no_forge_or_verify_code_names_the_family():
    values = FAMILY.values
    names = {FAMILY.name, "qwen", FAMILY.drafter_architecture, *FAMILY.target_architectures,
             *values["config_types"].values(), values["dummy"]["directory_prefix"], RECIPE,
             *(i for m in FAMILY.models.values() for i in (m.label, *m.ids))} - {None}
    files = sorted((REPO / "forge").rglob("*.py")) + sorted((REPO / "verify").rglob("*.py"))
    assert len(files) > 40
    found = [(path.relative_to(REPO), word) for path in files for word in _code_words(path)
             if any(name.lower() in word.lower() for name in names)]
    assert found == []
