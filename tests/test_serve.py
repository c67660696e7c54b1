"""`build.py serve`: the docker command for every recipe passes the vLLM release's own argument
definitions (read from its real source), adapts or refuses where a release lacks something, and
--run hands exactly that argv to the real docker CLI."""
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from forge.errors import ForgeError
from forge.image_names import image_ref
from forge.serving.recipes import capped_range, load_all, load_recipe
from forge.serving.serve import _runner_env, plan_serve
from forge.serving.vllm_args import release_args
from tests.build_cli import run_build

REPO = Path(__file__).resolve().parents[1]
CHECKED_RELEASES = ["0.25.0", "0.27.1", "0.33.0"]


def _serve_args(argv: list[str], model: str) -> list[str]:
    """What follows `serve MODEL` in the docker argv."""
    at = argv.index("serve")
    assert argv[at + 1] == model
    return argv[at + 2:]


def _flag_values(args: list[str]) -> list[tuple[str, str | None]]:
    pairs, i = [], 0
    while i < len(args):
        assert args[i].startswith("-"), f"stray value {args[i]!r}"
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        pairs.append((args[i], value))
        i += 2 if value is not None else 1
    return pairs


CASES = [(r.name, r.target, v) for r in load_all() for v in CHECKED_RELEASES if r.admits(v)]


def test_every_recipe_is_checked_against_some_release():
    assert {(name, target) for name, target, _ in CASES} == {(r.name, r.target) for r in load_all()}
    assert len(CASES) == len(load_all()) * len(CHECKED_RELEASES)


@pytest.mark.parametrize("name,target,version", CASES, ids=["/".join(c) for c in CASES])
def test_serve_command_passes_the_releases_parser(name, target, version):
    recipe = load_recipe(name, target)
    release = release_args(version)
    plan = plan_serve(name, target, version, repository="127.0.0.1:5000/forge")
    args = _serve_args(plan.argv, recipe.model)
    assert args, "the recipe sets flags"
    for flag, value in _flag_values(args):
        assert release.has_flag(flag), f"{flag} is not a `vllm serve` flag in {version}"
        if flag in release.choices:
            assert value in release.choices[flag], (flag, value)
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert set(spec) <= release.speculative_fields
    assert spec["method"] in release.speculative_methods
    # no `model` where the drafter is inside the checkpoint (vLLM then takes the target's)
    assert spec.get("model") == recipe.drafter
    # the same settings as vllm.LLM kwargs are EngineArgs fields of that release
    assert set(recipe.engine_kwargs()) <= release.engine_fields
    # every variable the command sets is one the release reads
    env = [plan.argv[i + 1] for i, a in enumerate(plan.argv) if a == "-e"]
    assert "VLLM_USE_V2_MODEL_RUNNER=" + ("1" if recipe.serve.model_runner == "v2" else "0") in env
    assert all(item.split("=")[0] in release.env_vars for item in env if "=" in item)


def test_docker_command_shape(tmp_path):
    plan = plan_serve("gemma-4-26b-a4b-it", "h200", "0.27.1", repository="registry.example/forge",
                      port=8123, hf_cache=str(tmp_path / "hf"))
    argv = plan.argv
    assert argv[:2] == ["docker", "run"]
    assert argv[argv.index("--gpus") + 1] == "all" and "--ipc=host" in argv
    assert argv[argv.index("-p") + 1] == "8123:8000"
    assert argv[argv.index("-v") + 1] == f"{tmp_path / 'hf'}:/root/.cache/huggingface"
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert envs == ["HF_TOKEN", "VLLM_USE_V2_MODEL_RUNNER=1"]
    image = image_ref("h200", "0.27.1", "registry.example/forge")
    assert image == "registry.example/forge:vllm0.27.1-h200"
    # the upstream base's ENTRYPOINT is `vllm serve`: the command names the program itself
    assert argv[argv.index("--entrypoint") + 1:argv.index("--entrypoint") + 5] == [
        "vllm", image, "serve", "google/gemma-4-26B-A4B-it"]
    assert shlex.split(plan.shell()) == argv
    k = load_recipe("gemma-4-26b-a4b-it", "h200").speculative.num_speculative_tokens
    assert "'{\"model\":\"google/gemma-4-26B-A4B-it-assistant\",\"method\":\"mtp\"," \
           f"\"num_speculative_tokens\":{k}}}'" in plan.shell()


def test_home_relative_hf_cache_is_expanded():
    plan = plan_serve("gemma-4-e4b-it", "a100", "0.25.0", repository="r/forge")
    mount = plan.argv[plan.argv.index("-v") + 1]
    assert mount == f"{Path.home() / '.cache/huggingface'}:/root/.cache/huggingface"


def test_build_py_prints_exactly_the_planned_command():
    result = run_build("serve", "--recipe", "gemma-4-31b-it", "--target", "gb10", "--vllm", "0.27.1",
                       "--repository", "127.0.0.1:5000/forge", "--port", "9001", timeout=120)
    assert result.returncode == 0, result.stderr
    plan = plan_serve("gemma-4-31b-it", "gb10", "0.27.1", repository="127.0.0.1:5000/forge",
                      port=9001)
    assert result.stdout == plan.shell() + "\n"
    assert "-e VLLM_USE_V2_MODEL_RUNNER=0" in result.stdout


def test_release_outside_the_recipes_range_is_refused():
    with pytest.raises(ForgeError, match=r"gemma-4-26b-a4b-it.yaml: targets.h200.vllm: the recipe is for vLLM "
                                         + re.escape(capped_range(">=0.25.0")) + r", not 0.24.0"):
        plan_serve("gemma-4-26b-a4b-it", "h200", "0.24.0")
    with pytest.raises(ForgeError, match=r"--vllm: not a vLLM version: 'latest'"):
        plan_serve("gemma-4-26b-a4b-it", "h200", "latest")


# --- releases lacking a flag or the runner switch (real older sdists) --------------------------

def _recipes_for_old_releases(tmp_path: Path, edit) -> Path:
    root = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", root, ignore=shutil.ignore_patterns("*.md"))
    path = root / "gemma-4-26b-a4b-it.yaml"
    data = yaml.safe_load(path.read_text())
    data["targets"]["gb10"]["vllm"] = ">=0.10.0"
    edit(data["targets"]["gb10"])
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def test_moe_backend_refused_where_the_release_has_no_flag(tmp_path):
    root = _recipes_for_old_releases(tmp_path, lambda d: d["serve"].update(moe_backend="triton"))
    # 0.25.0 has --moe-backend: emitted
    plan = plan_serve("gemma-4-26b-a4b-it", "gb10", "0.25.0", repository="r/f", recipes_dir=root)
    args = _serve_args(plan.argv, "google/gemma-4-26B-A4B-it")
    assert args[args.index("--moe-backend") + 1] == "triton"
    # 0.14.0 has no --moe-backend: refuse (dropping it would silently bypass the tuned config)
    result = run_build("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "gb10", "--vllm", "0.14.0",
                       "--recipes-dir", str(root), timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: {root}/gemma-4-26b-a4b-it.yaml: targets.gb10.serve.moe_backend: needs "
                             f"--moe-backend, which vLLM 0.14.0's `vllm serve` does not have\n")


def test_unknown_extra_flag_is_refused_naming_its_position(tmp_path):
    root = _recipes_for_old_releases(
        tmp_path, lambda d: d["serve"].update(extra_args=["--async-scheduling", "--speculative-cfg", "{}"]))
    with pytest.raises(ForgeError, match=r"serve.extra_args\[1\]: --speculative-cfg is not a "
                                         r"`vllm serve` flag in vLLM 0.27.1"):
        plan_serve("gemma-4-26b-a4b-it", "gb10", "0.27.1", recipes_dir=root)


def test_runner_switch_adapts_for_v1_and_refuses_v2_without_it(tmp_path):
    old = release_args("0.10.0")               # no VLLM_USE_V2_MODEL_RUNNER in its envs.py
    v1 = load_recipe("gemma-4-31b-it", "h100")
    env, notes = _runner_env(v1, old)
    assert env == {} and notes == [
        "note: vLLM 0.10.0 has no VLLM_USE_V2_MODEL_RUNNER (V1 only); not set"]
    assert _runner_env(v1, release_args("0.25.0")) == ({"VLLM_USE_V2_MODEL_RUNNER": "0"}, [])
    root = _recipes_for_old_releases(tmp_path, lambda d: None)
    with pytest.raises(ForgeError, match=r"gemma-4-26b-a4b-it.yaml: targets.gb10.serve.model_runner: v2 needs "
                                         r"VLLM_USE_V2_MODEL_RUNNER, which vLLM 0.10.0 does not read"):
        plan_serve("gemma-4-26b-a4b-it", "gb10", "0.10.0", recipes_dir=root)


def test_on_a_release_with_only_the_v2_runner_v2_needs_no_switch_and_v1_is_refused():
    """vLLM 0.34.0 removed the V1 runner and VLLM_USE_V2_MODEL_RUNNER with it (its
    platforms/interface.py refuses =0 at start): read from the real 0.34.0 source."""
    only_v2 = release_args("0.34.0")
    assert only_v2.runners == {"v2"} and "VLLM_USE_V2_MODEL_RUNNER" not in only_v2.env_vars
    assert release_args("0.33.0").runners == {"v1", "v2"} and release_args("0.10.0").runners == {"v1"}
    env, notes = _runner_env(load_recipe("gemma-4-26b-a4b-it", "h200"), only_v2)
    assert "VLLM_USE_V2_MODEL_RUNNER" not in env
    assert notes == ["note: vLLM 0.34.0 has no VLLM_USE_V2_MODEL_RUNNER (V2 only); not set"]
    with pytest.raises(ForgeError, match=r"^recipes/gemma-4-31b-it.yaml: targets.h100.serve.model_runner: v1: "
                                         r"vLLM 0.34.0 has no V1 runner \(vllm/v1/worker/gpu_model_runner.py is gone"):
        _runner_env(load_recipe("gemma-4-31b-it", "h100"), only_v2)
    command = plan_serve("gemma-4-26b-a4b-it", "h200", "0.34.0")
    assert "VLLM_USE_V2_MODEL_RUNNER" not in command.shell()


def test_verify_engines_follow_the_installed_vllms_runners(vllm_site, tmp_path):
    """The smoke and the bench on an install: a copy of the real 0.34.0 tree gets no runner switch
    and refuses a V1 engine before it starts; 0.33.0 keeps the switch as the recipe sets it."""
    from forge.serving.serve import installed_runner_env
    from verify import bench

    v2, v1 = load_recipe("gemma-4-26b-a4b-it", "h200"), load_recipe("gemma-4-31b-it", "h100")
    new, old = str(vllm_site("0.34.0")), str(vllm_site("0.33.0"))
    assert installed_runner_env(v2.env(), "v2", v2, new) == {}
    assert installed_runner_env(v1.env(), "v1", v1, old) == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    with pytest.raises(ForgeError, match=r"^recipes/gemma-4-31b-it.yaml: targets.h100.serve.model_runner: "
                                         r"v1: the vLLM 0.34.0 at .* has no V1 runner \(removed in 0.34.0\)"):
        installed_runner_env(v1.env(), "v1", v1, new)
    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--layers", "2"])
    for site, runner, switch in ((new, "v2", None), (old, "v2", "1"), (old, "v1", "0")):
        engine = bench.parse_engine(f"name=e-{runner},k=4,runner={runner},site={site}")
        spec = bench.engine_spec(v2, args, engine, tmp_path / f"out-{runner}")
        assert spec["env"].get("VLLM_USE_V2_MODEL_RUNNER") == switch, (site, runner)
    with pytest.raises(ForgeError, match=r"^--engine e-v1: recipes/gemma-4-26b-a4b-it.yaml: .*has no V1 runner"):
        bench.engine_spec(v2, args, bench.parse_engine(f"name=e-v1,k=4,runner=v1,site={new}"), tmp_path / "o")


# --- --run with the real docker CLI and engine --------------------------------------------------

@pytest.mark.docker
def test_run_hands_the_argv_to_docker(docker_engine, tmp_path):
    # An empty local image under the exact reference serve computes: docker resolves it, parses
    # every option of our argv, then stops at the GPU request (this host has no GPU runtime).
    repository = "vllm-forge-serve-test/forge"
    reference = image_ref("h200", "0.25.0", repository)
    empty_layer = io.BytesIO()
    tarfile.open(fileobj=empty_layer, mode="w").close()
    docker_engine.api.import_image_from_data(empty_layer.getvalue(), repository=reference.split(":")[0],
                                             tag=reference.split(":")[1])
    try:
        result = run_build("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", "0.25.0",
                           "--repository", repository, "--port", "18123", "--hf-cache", str(tmp_path / "hf"),
                           "--run", timeout=300)
    finally:
        docker_engine.images.remove(reference, force=True)
    plan = plan_serve("gemma-4-26b-a4b-it", "h200", "0.25.0", repository=repository, port=18123,
                      hf_cache=str(tmp_path / "hf"))
    assert result.stderr.startswith(f"+ {plan.shell()}\n")
    assert result.returncode == 125, result.stderr      # docker's own "could not run" status
    assert ('could not select device driver "" with capabilities: [[gpu]]' in result.stderr
            or 'exec: "vllm": executable file not found' in result.stderr), result.stderr
    assert "Unable to find image" not in result.stderr   # the reference resolved locally


def test_bad_port_is_one_line():
    result = run_build("serve", "--recipe", "gemma-4-e4b-it", "--target", "h100", "--vllm", "0.27.1",
                       "--port", "70000", timeout=120)
    assert result.returncode == 2 and result.stderr == "error: --port: not a TCP port: 70000\n"


def test_unknown_target_is_the_one_message_every_command_gives():
    """serve names an unknown target exactly as forge.targets.get_target does, and so as build,
    lock and release-matrix do: one line, exit 2, for one node and for several."""
    from forge.targets import get_target

    with pytest.raises(ForgeError) as caught:
        get_target("tpu")
    expected = f"error: {caught.value}\n"
    assert "unknown target 'tpu' (known: " in expected and "h200" in expected
    with pytest.raises(ForgeError) as planned:
        plan_serve("gemma-4-31b-it", "tpu", "0.27.1")
    assert str(planned.value) == str(caught.value)
    for argv in (["serve", "--recipe", "gemma-4-31b-it", "--target", "tpu", "--vllm", "0.27.1"],
                 ["serve", "--recipe", "gemma-4-31b-it", "--target", "tpu", "--vllm", "0.27.1",
                  "--nodes", "2", "--master-addr", "127.0.0.1", "--node-ips", "127.0.0.1,127.0.0.2"],
                 ["--target", "tpu", "--vllm", "0.27.1", "--plan"],
                 ["lock", "--target", "tpu", "--vllm", "0.27.1"],
                 ["release-matrix", "--target", "tpu", "--vllm", "0.27.1"]):
        result = run_build(*argv, timeout=120)
        assert (result.returncode, result.stderr) == (2, expected), argv


# --- --nodes N: vLLM's native multi-node engine ------------------------------------------------

from forge.serving.serve import Interconnect, detect_interconnect, plan_multi_node, roce_devices, route_to  # noqa: E402

SUPPORTED_RELEASES = ["0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1",
                      "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0",
                      "0.32.0", "0.33.0"]
LAYOUT_RECIPES = [(r.name, r.target) for r in load_all() if r.multi_node]
SPARKS = Interconnect("192.168.100.10", ("192.168.100.10", "192.168.100.11"), "enp1s0f0np0",
                      ("rocep1s0f0", "roceP2p1s0f0"))


def _recipes_for_every_release(tmp_path: Path) -> Path:
    """The recipes, admitted for every supported release (the files say >=0.25.0 for the MTP
    patch; the multi-node flags are checked back to 0.21.0)."""
    root = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", root, ignore=shutil.ignore_patterns("*.md"))
    for path in root.glob("gemma-*.yaml"):
        data = yaml.safe_load(path.read_text())
        data["defaults"]["vllm"] = ">=0.21.0"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def every_release_recipes(tmp_path_factory):
    return _recipes_for_every_release(tmp_path_factory.mktemp("all-releases"))


def test_layouts_exist_for_the_spark_pair_and_the_h200_proof():
    assert ("gemma-4-26b-a4b-it", "gb10") in LAYOUT_RECIPES
    assert ("gemma-4-31b-it", "gb10") in LAYOUT_RECIPES
    assert ("gemma-4-26b-a4b-it", "h200") in LAYOUT_RECIPES


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_two_node_commands_pass_every_releases_parser(version, every_release_recipes):
    release = release_args(version)
    for name, target in LAYOUT_RECIPES:
        recipe = load_recipe(name, target)
        plan = plan_multi_node(name, target, version, 2, SPARKS, repository="r/forge",
                               recipes_dir=str(every_release_recipes))
        assert len(plan.nodes) == len(plan.argvs) == 2
        for node, argv in zip(plan.nodes, plan.argvs):
            args = _serve_args(argv, recipe.model)
            for flag, value in _flag_values(args):
                assert release.has_flag(flag), f"{flag} is not a `vllm serve` flag in {version}"
                if flag in release.choices:
                    assert value in release.choices[flag], (flag, value, version)
            values = dict(_flag_values(args))
            assert values["--nnodes"] == "2" and values["--node-rank"] == str(node.rank)
            assert values["--master-addr"] == "192.168.100.10"
            assert values["--master-port"] == "29501"
            assert values["--tensor-parallel-size"] == str(recipe.layout(2).tensor_parallel_size)
            assert ("--headless" in values) == (node.rank > 0) == node.headless
            assert ("--port" in values) == (node.rank == 0)
            assert "--network" in argv and argv[argv.index("--network") + 1] == "host"
            assert "--ipc=host" in argv and "-p" not in argv
            env = dict(item.split("=", 1) for item in
                       (argv[i + 1] for i, a in enumerate(argv) if a == "-e") if "=" in item)
            assert env["VLLM_HOST_IP"] == SPARKS.node_ips[node.rank]
            for name_ in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
                assert env[name_] == "enp1s0f0np0"
            assert env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
            assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_IGNORE_CPU_AFFINITY"] == "1"
            assert all(k in release.env_vars for k in env if k.startswith("VLLM_"))
            assert argv[argv.index("--device") + 1] == "/dev/infiniband"


def test_build_py_prints_every_nodes_command():
    result = run_build("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "gb10", "--vllm", "0.27.1",
                       "--nodes", "2", "--master-addr", "127.0.0.1", "--node-ips", "127.0.0.1,10.0.0.2",
                       "--ib-hca", "mlx5_0,mlx5_1", "--repository", "r/f", timeout=120)
    assert result.returncode == 0, result.stderr
    network = Interconnect("127.0.0.1", ("127.0.0.1", "10.0.0.2"), "lo", ("mlx5_0", "mlx5_1"))
    plan = plan_multi_node("gemma-4-26b-a4b-it", "gb10", "0.27.1", 2, network, repository="r/f")
    assert result.stdout == plan.shell() + "\n"
    lines = result.stdout.splitlines()
    assert lines[0] == "# node 0 (API server)" and lines[2] == "# node 1 (worker, headless)"
    assert shlex.split(lines[1]) == plan.argvs[0] and shlex.split(lines[3]) == plan.argvs[1]


REFUSED = [
    (["--recipe", "gemma-4-26b-a4b-it-nvfp4", "--target", "gb10", "--nodes", "2",
      "--master-addr", "127.0.0.1", "--node-ips", "127.0.0.1,10.0.0.2"],
     "gemma-4-26b-a4b-it-nvfp4.yaml: targets.gb10.multi_node: no 2-node layout: google/gemma-4-26B-A4B-it "
     "nvfp4 at tensor parallel 2 fails upstream, vLLM #39595 (open): Gemma-4-26B-A4B NVFP4 fails "
     "at tensor parallel 2 on every MoE backend"),
    (["--recipe", "gemma-4-e4b-it", "--target", "h100", "--nodes", "2", "--master-addr",
      "127.0.0.1", "--node-ips", "127.0.0.1,10.0.0.2"],
     "gemma-4-e4b-it.yaml: targets.h100.multi_node: no layout for 2 nodes (layouts for: none)"),
    (["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--nodes", "3", "--master-addr",
      "127.0.0.1", "--node-ips", "127.0.0.1,10.0.0.2,10.0.0.3"],
     "gemma-4-26b-a4b-it.yaml: targets.h200.multi_node: no layout for 3 nodes (layouts for: 2)"),
    (["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--nodes", "2"],
     "--master-addr: required with --nodes"),
    (["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--nodes", "2", "--master-addr",
      "127.0.0.1", "--node-ips", "127.0.0.1"],
     "--node-ips: 2 nodes need 2 addresses (got 1: 127.0.0.1)"),
    (["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--nodes", "2", "--master-addr",
      "127.0.0.1", "--node-ips", "10.0.0.2,127.0.0.1"],
     "--node-ips: node 0 runs the master: its address must be --master-addr 127.0.0.1"),
    (["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--nodes", "2", "--master-addr",
      "127.0.0.1"],
     "--node-ips: give the 2 nodes' addresses on the interconnect, in rank order (node 0 is the "
     "master, 127.0.0.1; this host's is 127.0.0.1 on lo)"),
    (["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--nodes", "2", "--master-addr",
      "127.0.0.1", "--node-ips", "127.0.0.1,10.0.0.2", "--run"],
     "--node-rank: with --run, say which node this host is (0 .. 1)"),
]


@pytest.mark.parametrize("argv,message", REFUSED, ids=[r[1][:40] for r in REFUSED])
def test_multi_node_refusals_are_one_line(argv, message):
    result = run_build("serve", "--vllm", "0.27.1", *argv, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


# --- interconnect detection on this machine's real interfaces and in a network namespace ---------

def _ip_json(*args: str, netns: str | None = None):
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    return json.loads(subprocess.run([*prefix, "-j", *args], capture_output=True, text=True,
                                     check=True).stdout or "[]")


def test_detection_on_this_hosts_interfaces():
    # loopback, and every IPv4 address this host holds, map to the interface holding it
    assert route_to("127.0.0.1") == {"dev": "lo", "src": "127.0.0.1"}
    for link in _ip_json("-4", "addr", "show"):
        for info in link.get("addr_info", []):
            assert route_to(info["local"]) == {"dev": link["ifname"], "src": info["local"]}
    # an address elsewhere: the interface the kernel routes it through, as `ip route get` says
    default = _ip_json("route", "show", "default")
    if default:
        gateway = default[0]["gateway"]
        kernel = _ip_json("route", "get", gateway)[0]
        assert route_to(gateway) == {"dev": kernel["dev"], "src": kernel["prefsrc"]}


@pytest.fixture
def interconnect_namespace():
    """A network namespace with a veth pair standing in for a CX7 link: 10.77.0.1/24 on cx7a."""
    name = f"forge-serve-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for command in (["link", "add", "cx7a", "type", "veth", "peer", "name", "cx7b"],
                        ["addr", "add", "10.77.0.1/24", "dev", "cx7a"],
                        ["link", "set", "cx7a", "up"], ["link", "set", "cx7b", "up"],
                        ["link", "set", "lo", "up"]):
            subprocess.run(["ip", "-n", name, *command], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def test_detection_in_a_network_namespace(interconnect_namespace):
    def in_namespace(*argv):
        return subprocess.run(["ip", "netns", "exec", interconnect_namespace, *argv], cwd=REPO,
                              capture_output=True, text=True, timeout=120)

    probe = in_namespace(sys.executable, "-c",
                         "import json; from forge.serving.serve import route_to; "
                         "print(json.dumps([route_to('10.77.0.1'), route_to('10.77.0.2')]))")
    assert probe.returncode == 0, probe.stderr
    # on the master itself (address held by cx7a) and towards the worker: both cx7a
    assert json.loads(probe.stdout) == [{"dev": "cx7a", "src": "10.77.0.1"},
                                        {"dev": "cx7a", "src": "10.77.0.1"}]
    result = in_namespace(sys.executable, "build.py", "serve", "--recipe", "gemma-4-31b-it",
                          "--target", "gb10", "--vllm", "0.27.1", "--nodes", "2",
                          "--master-addr", "10.77.0.1", "--node-ips", "10.77.0.1,10.77.0.2")
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines()[1::2]:
        argv = shlex.split(line)
        assert "NCCL_SOCKET_IFNAME=cx7a" in argv and "GLOO_SOCKET_IFNAME=cx7a" in argv
        assert not any(a.startswith("NCCL_IB_HCA=") for a in argv)   # no RoCE device here
        assert "--device" not in argv
    # no route at all: one line naming the flag
    unreachable = in_namespace(sys.executable, "build.py", "serve", "--recipe", "gemma-4-31b-it",
                               "--target", "gb10", "--vllm", "0.27.1", "--nodes", "2",
                               "--master-addr", "203.0.113.9")
    assert unreachable.returncode == 2
    assert unreachable.stderr.startswith("error: --master-addr: no route to 203.0.113.9")


def test_roce_devices_are_read_from_sysfs(tmp_path):
    # /sys/class/infiniband/<dev>/ports/<n>/link_layer, as the kernel lays it out
    for device, layer in (("rocep1s0f0", "Ethernet"), ("roceP2p1s0f0", "Ethernet"),
                          ("mlx5_ib0", "InfiniBand")):
        port = tmp_path / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "link_layer").write_text(layer + "\n")
    assert roce_devices(str(tmp_path)) == ["roceP2p1s0f0", "rocep1s0f0"]
    network = detect_interconnect("127.0.0.1", ["127.0.0.1", "10.0.0.2"], None, None, 29501, 2,
                                  sys_infiniband=str(tmp_path))
    assert network.interface == "lo" and network.ib_hcas == ("roceP2p1s0f0", "rocep1s0f0")
    # this machine has none
    assert roce_devices() == ([] if not Path("/sys/class/infiniband").exists()
                              else roce_devices("/sys/class/infiniband"))
    assert roce_devices(str(tmp_path / "absent")) == []


@pytest.mark.docker
def test_run_hands_one_nodes_argv_to_docker(docker_engine, tmp_path):
    repository = "vllm-forge-serve-test/forge"
    reference = image_ref("h200", "0.25.0", repository)
    empty_layer = io.BytesIO()
    tarfile.open(fileobj=empty_layer, mode="w").close()
    docker_engine.api.import_image_from_data(empty_layer.getvalue(), repository=reference.split(":")[0],
                                             tag=reference.split(":")[1])
    argv = ["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", "0.25.0",
            "--repository", repository, "--hf-cache", str(tmp_path / "hf"), "--nodes", "2",
            "--master-addr", "127.0.0.1", "--node-ips", "127.0.0.1,127.0.0.1"]
    try:
        result = run_build("serve", *argv, "--run", "--node-rank", "1", timeout=300)
    finally:
        docker_engine.images.remove(reference, force=True)
    network = Interconnect("127.0.0.1", ("127.0.0.1", "127.0.0.1"), "lo")
    plan = plan_multi_node("gemma-4-26b-a4b-it", "h200", "0.25.0", 2, network,
                           repository=repository, hf_cache=str(tmp_path / "hf"))
    assert result.stderr.startswith(f"+ {shlex.join(plan.argvs[1])}\n"), result.stderr
    assert result.returncode == 125, result.stderr
    assert "Unable to find image" not in result.stderr


# --- extra_args values, repeated flags, --nodes and --repository (issue 20, item 9) ------------

def _serve_cli(*args, root=None, env=None):
    argv = ["serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "gb10", *args]
    if root is not None:
        argv += ["--recipes-dir", str(root)]
    return run_build(*argv, timeout=300, env=env)


@pytest.mark.parametrize("extra, problem", [
    (["--max-num-batched-tokens", "lots"],
     "--max-num-batched-tokens takes a whole number (or 2k, 1M, ...), not 'lots'"),
    (["--max-num-batched-tokens", "1.5K"],      # the release's own human_readable_int refuses it
     "--max-num-batched-tokens takes a whole number (or 2k, 1M, ...), not '1.5K'"),
    (["--seed", "0x10"], "--seed takes a whole number, not '0x10'"),
    (["--cpu-offload-gb", "some"], "--cpu-offload-gb takes a number, not 'some'"),
    (["--dtype", "float17"],
     "--dtype takes one of auto | bfloat16 | float | float16 | float32 | half, not 'float17'"),
    (["--enforce-eager", "yes"], "--enforce-eager is a switch: it takes no value (got 'yes')"),
    (["--async-scheduling", "--cudagraph-capture-sizes"],
     "--cudagraph-capture-sizes takes one or more values (got none)"),
    (["--seed", "1", "2"], "--seed takes one value (got 2)"),
])
def test_extra_args_values_are_checked_by_the_releases_own_argparse_action(tmp_path, extra, problem):
    root = _recipes_for_old_releases(tmp_path, lambda d: d["serve"].update(extra_args=extra))
    index = next(i for i, token in enumerate(extra) if problem.startswith(token + " "))
    result = _serve_cli("--vllm", "0.27.1", root=root)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: {root}/gemma-4-26b-a4b-it.yaml: targets.gb10.serve.extra_args[{index}]: "
                             f"vLLM 0.27.1's {problem}\n")


def test_extra_args_values_the_release_takes_pass_through_unchanged(tmp_path):
    extra = ["--max-num-batched-tokens", "8k", "--cudagraph-capture-sizes", "1", "2", "4",
             "--seed=7", "--no-enable-prefix-caching", "--dtype", "bfloat16"]
    root = _recipes_for_old_releases(tmp_path, lambda d: d["serve"].update(extra_args=extra))
    plan = plan_serve("gemma-4-26b-a4b-it", "gb10", "0.27.1", repository="r/f", recipes_dir=root)
    assert plan.argv[-len(extra):] == extra


@pytest.mark.parametrize("extra, field", [
    (["--max-model-len", "4096"], "serve.max_model_len"),
    (["--max_model_len=4096"], "serve.max_model_len"),
    (["--gpu-memory-utilization", "0.5"], "serve.gpu_memory_utilization"),
    (["--speculative-config.num_speculative_tokens", "4"], "speculative"),
    (["--tensor-parallel-size", "2"], "multi_node[].tensor_parallel_size"),
])
def test_extra_args_repeating_a_structured_field_are_refused_on_load(tmp_path, extra, field):
    root = _recipes_for_old_releases(tmp_path, lambda d: d["serve"].update(extra_args=extra))
    with pytest.raises(ForgeError) as refused:
        load_recipe("gemma-4-26b-a4b-it", "gb10", root)
    assert str(refused.value) == (f"{root}/gemma-4-26b-a4b-it.yaml: targets.gb10.serve.extra_args[0]: "
                                  f"{extra[0].split('=')[0]} is already set by {field}; set it there only")


def test_extra_args_repeating_a_structured_field_by_its_short_alias_are_refused_by_serve(tmp_path):
    root = _recipes_for_old_releases(tmp_path, lambda d: d["serve"].update(extra_args=["-q", "fp8"]))
    result = _serve_cli("--vllm", "0.27.1", root=root)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: {root}/gemma-4-26b-a4b-it.yaml: targets.gb10.serve.extra_args[0]: -q is "
                             "already set by serve.quantization; set it there only\n")


@pytest.mark.parametrize("nodes", ["0", "-1"])
def test_serve_nodes_below_one_is_refused(nodes):
    result = _serve_cli("--vllm", "0.27.1", "--nodes", nodes)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"error: --nodes: must be 1 or more (got {nodes})\n"


BAD_REPOSITORIES = ["ghcr.io/Acme/vllm-forge", "GHCR.IO/acme/vllm-forge", "ghcr.io/acme/vllm-forge:tag",
                    "ghcr.io//vllm-forge", "ghcr.io/acme/-forge", "ghcr.io/acme/vllm forge", "a" * 256]


@pytest.mark.parametrize("repository", BAD_REPOSITORIES)
def test_repository_that_is_not_an_oci_name_is_refused_by_serve(repository):
    result = _serve_cli("--vllm", "0.27.1", "--repository", repository)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: --repository: not a valid image repository: {repository!r} "
                             "(lowercase [registry[:port]/]name/path, components of a-z 0-9 joined by . _ -)\n")


@pytest.mark.parametrize("command", [["bake", "--vllm", "0.27.1", "-o", "{tmp}/bake.json"],
                                     ["--target", "gb10", "--vllm", "0.27.1", "--plan"],
                                     ["release-matrix", "--vllm", "0.27.1"]])
def test_upper_case_repository_is_refused_before_tags_or_bake_files_are_made(tmp_path, command):
    argv = [part.format(tmp=tmp_path) for part in command]
    result = run_build(*argv, "--repository", "ghcr.io/Acme/vllm-forge", timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: --repository: not a valid image repository: "
                                    "'ghcr.io/Acme/vllm-forge'")
    assert list(tmp_path.iterdir()) == []


def test_repository_from_the_environment_is_checked_and_named():
    result = _serve_cli("--vllm", "0.27.1", env={"VLLM_FORGE_REPOSITORY": "ghcr.io/Acme/vllm-forge"})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: $VLLM_FORGE_REPOSITORY: not a valid image repository")


@pytest.mark.parametrize("repository", ["ghcr.io/acme/vllm-forge", "127.0.0.1:5000/forge",
                                        "localhost:5000/a/b", "r/f", "registry.example.com/a__b/c-d.e"])
def test_valid_oci_repositories_are_accepted(repository):
    from forge.image_names import checked_repository

    assert checked_repository(repository) == repository
    plan = plan_serve("gemma-4-26b-a4b-it", "gb10", "0.27.1", repository=repository)
    assert f"{repository}:vllm0.27.1-gb10" in plan.argv


def test_the_smoke_on_an_install_without_the_v1_runner_sets_no_switch(vllm_site, tmp_path, monkeypatch):
    """verify/mtp_smoke.py finds the vLLM on sys.path, as the GPU host's python does."""
    from verify import mtp_smoke

    monkeypatch.syspath_prepend(str(vllm_site("0.34.0")))
    args = mtp_smoke.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--layers", "2"])
    _, env, _ = mtp_smoke.engine_setup(load_recipe("gemma-4-26b-a4b-it", "h200"), args, tmp_path)
    assert "VLLM_USE_V2_MODEL_RUNNER" not in env
    args.runner = "v1"
    with pytest.raises(ForgeError, match=r"model_runner: v1: the vLLM 0.34.0 at .* has no V1 runner"):
        mtp_smoke.engine_setup(load_recipe("gemma-4-26b-a4b-it", "h200"), args, tmp_path / "v1")
