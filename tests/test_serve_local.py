"""benchmarks/gpu/serve_local.py: the single-node server the GPU session starts is the command
`build.py serve` prints for the release, docker peeled off, checked against that release's real
parser, with only the stand-ins its docstring lists."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from forge.serving.recipes import load_recipe
from forge.serving.vllm_args import release_args

REPO = Path(__file__).resolve().parents[1]


def _plan(tmp_path, *extra) -> dict:
    result = subprocess.run([sys.executable, "-m", "benchmarks.gpu.serve_local", "--json",
                             "--models", str(tmp_path / "models"), "--work", str(tmp_path / "work"),
                             *extra], cwd=REPO, capture_output=True, text=True, check=True,
                            timeout=120)
    return json.loads(result.stdout)


@pytest.mark.parametrize("recipe_name,shape", [("gemma-4-26b-a4b-it", "26b-a4b"),
                                               ("gemma-4-31b-it", "31b")])
def test_server_runs_the_recipes_own_command_with_the_listed_stand_ins(tmp_path, recipe_name, shape):
    plan = _plan(tmp_path, "--vllm", "0.27.1", "--recipe", recipe_name, "--shape", shape,
                 "--gpu-memory-utilization", "0.3")
    recipe = load_recipe(recipe_name, "h200")
    release = release_args("0.27.1")
    argv = plan["argv"]
    assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    args = argv[5:]
    for token in args:
        if token.startswith("--"):
            assert release.has_flag(token), f"{token} is not a `vllm serve` flag in 0.27.1"
    recipe_args = recipe.cli_args()
    spec_at = recipe_args.index("--speculative-config")
    memory_at = recipe_args.index("--gpu-memory-utilization") + 1
    # every recipe flag in the recipe's order; only the memory share differs, as listed
    assert args[:memory_at] == recipe_args[:memory_at] and args[memory_at] == "0.3"
    assert args[memory_at + 1:spec_at] == recipe_args[memory_at + 1:spec_at]
    spec = json.loads(args[spec_at + 1])
    assert spec["num_speculative_tokens"] == json.loads(recipe_args[spec_at + 1])["num_speculative_tokens"]
    assert Path(spec["model"]).name == f"gemma-4-{shape}-assistant"
    assert args[-5:] == ["--port", "8012", "--load-format", "dummy", "--skip-tokenizer-init"]
    assert "--enforce-eager" not in args
    assert plan["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert (tmp_path / "models" / f"gemma-4-{shape}-L10" / "config.json").is_file()
    assert "docker run" in plan["recipe_command"] and "gpu-memory-utilization" in plan["stand_in"]
