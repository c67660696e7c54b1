"""benchmarks/gpu/two_node_local.sh: the commands it runs are `build.py serve --nodes 2`'s own node
commands (checked against vLLM 0.25.0's real parser) with only the listed single-host changes,
and the exact lines the script execs reach the program as that argv and environment."""
import json
import os
import subprocess
import sys
from pathlib import Path

from forge.recipes import load_recipe
from forge.vllm_args import release_args

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu" / "two_node_commands.py"
STAND_IN_FLAGS = ["--load-format", "dummy", "--skip-tokenizer-init", "--disable-custom-all-reduce",
                  "--compilation-config", '{"pass_config":{"fuse_allreduce_rms":false}}']


def _plan(tmp_path, *extra):
    result = subprocess.run([sys.executable, str(SCRIPT), "--models", str(tmp_path / "models"),
                             "--work", str(tmp_path / "work"), *extra],
                            capture_output=True, text=True, check=True, timeout=120)
    return result.stdout


def test_plan_is_the_recipes_node_commands_plus_the_listed_stand_ins(tmp_path):
    plan = json.loads(_plan(tmp_path, "--json", "--layers", "10"))
    release = release_args("0.25.0")
    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    runs = plan["runs"]
    assert [r["rank"] for r in runs] == [0, 1] and [r["headless"] for r in runs] == [False, True]
    for run in runs:
        argv = run["argv"]
        assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
        args = argv[5:]
        for token in args:
            if token.startswith("--"):
                assert release.has_flag(token), f"{token} is not a `vllm serve` flag in 0.25.0"
        assert args[args.index("--tensor-parallel-size") + 1] == "2"
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--node-rank") + 1] == str(run["rank"])
        assert args[args.index("--master-addr") + 1] == "127.0.0.1"
        assert ("--headless" in args) == run["headless"]
        assert ("--port" in args) != run["headless"]
        assert args[-len(STAND_IN_FLAGS):] == STAND_IN_FLAGS
        # the recipe's own settings, unchanged (CUDA graphs: never --enforce-eager)
        recipe_args = recipe.cli_args()
        spec_at = recipe_args.index("--speculative-config")
        assert args[:spec_at] == recipe_args[:spec_at]
        spec = json.loads(args[args.index("--speculative-config") + 1])
        assert spec["method"] == "mtp" and spec["num_speculative_tokens"] == 3
        assert Path(spec["model"]).name == "gemma-4-26b-a4b-assistant"
        assert Path(argv[4]).name == "gemma-4-26b-a4b-L10"
        assert "--enforce-eager" not in args
        env = run["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == str(run["rank"])
        # NVLink multicast off everywhere it could start (lent machines' rule)
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1" and env["VLLM_ALLREDUCE_USE_SYMM_MEM"] == "0"
        assert json.loads(args[args.index("--compilation-config") + 1]) == {
            "pass_config": {"fuse_allreduce_rms": False}}
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "lo"
        assert env["VLLM_HOST_IP"] == "127.0.0.1"
        assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
        assert env["VLLM_TUNED_CONFIG_FOLDER"].endswith("patches/moe-configs")
        assert all(name in release.env_vars for name in env if name.startswith("VLLM_"))
    # the dummy target config carries the 26B-A4B MoE shape: at TP=2 vLLM looks for N=352
    config = json.loads((tmp_path / "models" / "gemma-4-26b-a4b-L10" / "config.json").read_text())
    assert config["moe_intermediate_size"] // 2 == 352 and config["num_experts"] == 128
    # the pass it turns off is a field of 0.25.0's PassConfig, and FlashInfer picks "mnnvl"
    # (NVSwitch multicast) there whenever vLLM counts more than one node
    from forge.releases import release_tree

    tree = release_tree("0.25.0") / "vllm"
    assert "fuse_allreduce_rms: bool" in (tree / "config" / "compilation.py").read_text()
    assert 'backend = "mnnvl"' in (tree / "distributed/device_communicators/flashinfer_all_reduce.py").read_text()
    # the recipe commands it started from are build.py serve --nodes 2's, minus docker
    assert len(plan["recipe_commands"]) == 2 and "--headless" in plan["recipe_commands"][1]


def test_each_line_the_script_execs_reaches_the_program_as_planned(tmp_path):
    """Run every line exactly as two_node_local.sh does (bash -c "exec LINE") with a stand-in
    `vllm.entrypoints.cli.main` that records its argv and environment."""
    fake = tmp_path / "fake" / "vllm" / "entrypoints" / "cli"
    fake.mkdir(parents=True)
    for d in (fake.parents[1], fake.parents[0], fake):
        (d / "__init__.py").write_text("")
    (fake / "main.py").write_text(
        "import json, os, sys\n"
        "rank = sys.argv[sys.argv.index('--node-rank') + 1]\n"
        "open(os.path.join(os.environ['RECORD'], rank + '.json'), 'w').write(json.dumps("
        "{'argv': sys.argv[1:], 'env': dict(os.environ)}))\n")
    plan = json.loads(_plan(tmp_path, "--json"))
    lines = _plan(tmp_path).splitlines()
    record = tmp_path / "record"
    record.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "RECORD": str(record)}
    for line in lines:
        subprocess.run(["bash", "-c", f"exec {line}"], env=env, check=True, timeout=60)
    for run in plan["runs"]:
        seen = json.loads((record / f"{run['rank']}.json").read_text())
        assert seen["argv"] == run["argv"][3:]
        for name, value in run["env"].items():
            assert seen["env"][name] == value


def test_script_passes_shellcheck_and_keeps_nvls_off():
    script = REPO / "benchmarks" / "gpu" / "two_node_local.sh"
    subprocess.run(["shellcheck", str(script)], check=True, timeout=60)
    text = script.read_text()
    assert "--burst 500" in text and "--server-log" in text and "mtp_smoke.py" in text
