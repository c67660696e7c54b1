"""benchmarks/gpu/serve_local.py: the single-node server a GPU run starts is the command
`build.py serve` prints for the release, docker peeled off, checked against that release's real
parser, with only the stand-ins its docstring lists."""
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge.serving.recipes import load_recipe
from forge.serving.vllm_args import release_args
from forge.upstream import releases

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



@pytest.mark.parametrize("target", ["h200", "gb10"])
def test_kv_cache_gib_fixes_the_cache_once_replacing_the_recipes_own(tmp_path, target):
    """On a GPU other engines share, vLLM's profiling sized the cache below zero (§10): a fixed
    cache goes in as one --kv-cache-memory-bytes, the recipe's own (gb10 sets 24 GiB) replaced."""
    plan = _plan(tmp_path, "--vllm", "0.27.1", "--target", target, "--kv-cache-gib", "2")
    args = plan["argv"]
    assert args.count("--kv-cache-memory-bytes") == 1
    assert args[args.index("--kv-cache-memory-bytes") + 1] == str(2 * 2**30)
    recipe_args = load_recipe("gemma-4-26b-a4b-it", target).cli_args()
    assert ("--kv-cache-memory-bytes" in recipe_args) == (target == "gb10")
    assert release_args("0.27.1").has_flag("--kv-cache-memory-bytes")
    assert "--kv-cache-gib" in plan["stand_in"]


def test_an_in_checkpoint_drafter_keeps_the_recipes_speculative_config(tmp_path):
    """Qwen3.6's MTP head is inside the target's checkpoint: the dummy target replaces the model,
    and the speculative config names no drafter model (it read "model": "None" before)."""
    plan = _plan(tmp_path, "--vllm", "0.27.1", "--recipe", "qwen3.6-35b-a3b", "--shape", "35b-a3b")
    args = plan["argv"]
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == load_recipe("qwen3.6-35b-a3b", "h200").speculative_config()
    assert "model" not in spec
    assert args[4] == str(tmp_path / "models" / "qwen3.6-35b-a3b-L10")

@pytest.fixture(scope="module")
def installed_vllm(tmp_path_factory):
    """A real install's layout: a site-packages folder holding vLLM 0.27.1's own vllm/ package
    (copied from the release's tree in the cache) and the dist-info that names its version."""
    def install(version: str) -> Path:
        site = tmp_path_factory.mktemp("site-packages")
        shutil.copytree(releases.release_tree("0.27.1") / "vllm", site / "vllm",
                        ignore=shutil.ignore_patterns("__pycache__"))
        dist_info = site / f"vllm-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        return site
    return install


def _serve_local(tmp_path, *extra, site: Path | None = None, cache: Path | None = None):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if site:
        env["PYTHONPATH"] = str(site)
    if cache:
        # An empty cache and an index nothing answers at: no sdist can come from anywhere.
        env.update(VLLM_FORGE_CACHE=str(cache), VLLM_FORGE_INDEX="http://127.0.0.1:9/simple/vllm/")
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu.serve_local", "--vllm", "0.27.1",
                           "--models", str(tmp_path / "models"), "--work", str(tmp_path / "work"),
                           *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_installed_reads_the_flags_from_the_installed_vllm_without_the_network(tmp_path, installed_vllm):
    """The H200 run of 2026-12-01 (vLLM 0.27.1):
    the host has no network, so the release's sdist could not be fetched to check the flags."""
    from_sdist = _serve_local(tmp_path)
    assert from_sdist.returncode == 0, from_sdist.stderr
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    site = installed_vllm("0.27.1")
    installed = _serve_local(tmp_path, "--installed", site=site, cache=cache)
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout == from_sdist.stdout and installed.stdout.startswith("env ")
    assert list(cache.iterdir()) == []
    own = tmp_path / "work" / "vllm-forge-cache"
    assert [p.relative_to(own) for p in own.rglob("*")] == [Path("trees"), Path("trees/0.27.1")]
    assert (own / "trees" / "0.27.1").resolve() == site.resolve()


def test_installed_refuses_another_version_or_no_vllm_in_one_line(tmp_path, installed_vllm):
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    other = _serve_local(tmp_path, "--installed", site=installed_vllm("0.27.0"), cache=cache)
    none = _serve_local(tmp_path, "--installed", cache=cache)
    for result, words in ((other, "is 0.27.0, not --vllm 0.27.1"), (none, "no vLLM is installed")):
        assert result.returncode == 2 and result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --installed: ") and words in lines[0], lines
    assert list(cache.iterdir()) == [] and not (tmp_path / "models").exists()


# --control: the server itself serves verify's agreeing or random dummy model (verify/controls.py)

def _env_and_argv(command: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(the `env` assignments in their order, the server's argv) of a printed command line."""
    words = shlex.split(command)
    assert words[0] == "env"
    at = next(i for i, word in enumerate(words[1:], 1) if "=" not in word)
    return [tuple(word.split("=", 1)) for word in words[1:at]], words[at:]


@pytest.mark.parametrize("recipe_name,shape,family", [("gemma-4-26b-a4b-it", "26b-a4b", "gemma4"),
                                                      ("qwen3.6-35b-a3b", "35b-a3b", "qwen3_5_moe")])
def test_control_puts_the_plugin_and_the_repository_first_on_the_servers_path(tmp_path, recipe_name,
                                                                              shape, family):
    theirs = tmp_path / "their-site"
    plain = _serve_local(tmp_path, "--recipe", recipe_name, "--shape", shape, site=theirs)
    agree = _serve_local(tmp_path, "--recipe", recipe_name, "--shape", shape, "--control", "agree",
                         site=theirs)
    assert plain.returncode == 0 and agree.returncode == 0, agree.stderr
    plain_env, plain_argv = _env_and_argv(plain.stdout)
    env, argv = _env_and_argv(agree.stdout)
    plugin = (tmp_path / "work" / "controls-plugin").resolve()
    assert dict(env)["PYTHONPATH"].split(":") == [str(plugin), str(REPO), str(theirs)]
    assert dict(env)["VLLM_FORGE_CONTROL"] == "agree"
    assert dict(env)["VLLM_FORGE_CONTROL_FAMILY"] == family
    # exactly these three added to the environment; the server's own command is the same
    assert [kv for kv in env if kv[0] not in ("PYTHONPATH", "VLLM_FORGE_CONTROL",
                                              "VLLM_FORGE_CONTROL_FAMILY")] == plain_env
    assert "PYTHONPATH" not in dict(plain_env) and argv == plain_argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    # the plugin folder is written as verify/controls.py's install_plugin writes it
    dist_info = plugin / "vllm_forge_controls-1.0.dist-info"
    assert (dist_info / "entry_points.txt").read_text() == (
        "[vllm.general_plugins]\nvllm_forge_controls = verify.controls:register\n")
    assert "Name: vllm_forge_controls\n" in (dist_info / "METADATA").read_text()


def test_the_servers_environment_finds_and_loads_the_plugin_as_vllm_does(tmp_path):
    """vLLM loads general plugins from importlib.metadata's entry points of the group
    `vllm.general_plugins`: a fresh interpreter with the printed command's environment, started
    elsewhere than the repository, must find ours and load the function it names."""
    result = _serve_local(tmp_path, "--control", "random")
    assert result.returncode == 0, result.stderr
    env, _ = _env_and_argv(result.stdout)
    code = ("import importlib.metadata as m, os; "
            "eps = [e for e in m.entry_points(group='vllm.general_plugins') "
            "if e.name == 'vllm_forge_controls']; "
            "f = eps[0].load(); print(len(eps), f.__module__, f.__name__, "
            "os.environ['VLLM_FORGE_CONTROL'])")
    found = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True,
                           env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                                **dict(env)}, timeout=60)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["1", "verify.controls", "register", "random"]


def test_control_in_the_json_plan_and_its_stand_in(tmp_path):
    plain = _plan(tmp_path, "--vllm", "0.27.1")
    plan = _plan(tmp_path, "--vllm", "0.27.1", "--control", "random")
    assert plan["control"] == "random" and "control" not in plain
    assert plan["env"]["VLLM_FORGE_CONTROL"] == "random"
    assert plan["env"]["VLLM_FORGE_CONTROL_FAMILY"] == "gemma4"
    assert not any(k.startswith("VLLM_FORGE_CONTROL") or k == "PYTHONPATH" for k in plain["env"])
    assert plan["argv"] == plain["argv"]
    assert plan["stand_in"].startswith(plain["stand_in"].rstrip("\n"))
    assert "--control" in plan["stand_in"] and "--control" not in plain["stand_in"]
    assert "controls-plugin" in plan["stand_in"]


def test_a_bad_control_is_refused_in_one_line_before_anything_is_written(tmp_path):
    result = _serve_local(tmp_path, "--control", "agreeing")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == ["error: --control: 'agreeing' is not one of agree, random"]
    assert not (tmp_path / "models").exists() and not (tmp_path / "work").exists()


def test_exec_prints_the_command_then_runs_it_in_its_place(tmp_path):
    """--exec (a GPU run's server job): the printed command is what runs, in serve_local's own
    process and on its interpreter; here, with no vLLM installed, that interpreter says so."""
    result = _serve_local(tmp_path, "--exec", "--port", "8019")
    printed = result.stdout.splitlines()[0]
    assert printed.startswith("env ") and "VLLM_TUNED_CONFIG_FOLDER=" in printed
    assert f"{sys.executable} -m vllm.entrypoints.cli.main serve " in printed and "--port 8019" in printed
    assert result.returncode == 1 and "No module named 'vllm'" in result.stderr
