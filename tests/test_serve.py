"""`build.py serve`: the docker command for every recipe passes the vLLM release's own argument
definitions (read from its real source), adapts or refuses where a release lacks something, and
--run hands exactly that argv to the real docker CLI."""
import io
import json
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
from forge.serving.recipes import load_all, load_recipe
from forge.serving.serve import _runner_env, plan_serve
from forge.serving.vllm_args import release_args

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
    assert spec["model"] == recipe.drafter
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
    assert "'{\"model\":\"google/gemma-4-26B-A4B-it-assistant\",\"method\":\"mtp\"," \
           "\"num_speculative_tokens\":3}'" in plan.shell()


def test_home_relative_hf_cache_is_expanded():
    plan = plan_serve("gemma-4-e4b-it", "a100", "0.25.0", repository="r/forge")
    mount = plan.argv[plan.argv.index("-v") + 1]
    assert mount == f"{Path.home() / '.cache/huggingface'}:/root/.cache/huggingface"


def test_build_py_prints_exactly_the_planned_command():
    result = subprocess.run(
        [sys.executable, "build.py", "serve", "--recipe", "gemma-4-31b-it", "--target", "gb10",
         "--vllm", "0.27.1", "--repository", "127.0.0.1:5000/forge", "--port", "9001"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    plan = plan_serve("gemma-4-31b-it", "gb10", "0.27.1", repository="127.0.0.1:5000/forge",
                      port=9001)
    assert result.stdout == plan.shell() + "\n"
    assert "-e VLLM_USE_V2_MODEL_RUNNER=0" in result.stdout


def test_release_outside_the_recipes_range_is_refused():
    with pytest.raises(ForgeError, match=r"h200.yaml: vllm: the recipe is for vLLM >=0.25.0,<0.34, "
                                         r"not 0.24.0"):
        plan_serve("gemma-4-26b-a4b-it", "h200", "0.24.0")
    with pytest.raises(ForgeError, match=r"--vllm: not a vLLM version: 'latest'"):
        plan_serve("gemma-4-26b-a4b-it", "h200", "latest")


# --- releases lacking a flag or the runner switch (real older sdists) --------------------------

def _recipes_for_old_releases(tmp_path: Path, edit) -> Path:
    root = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", root, ignore=shutil.ignore_patterns("*.md"))
    path = root / "gemma-4-26b-a4b-it" / "gb10.yaml"
    data = yaml.safe_load(path.read_text())
    data["vllm"] = ">=0.10.0"
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def test_moe_backend_refused_where_the_release_has_no_flag(tmp_path):
    root = _recipes_for_old_releases(tmp_path, lambda d: d["serve"].update(moe_backend="triton"))
    # 0.25.0 has --moe-backend: emitted
    plan = plan_serve("gemma-4-26b-a4b-it", "gb10", "0.25.0", repository="r/f", recipes_dir=root)
    args = _serve_args(plan.argv, "google/gemma-4-26B-A4B-it")
    assert args[args.index("--moe-backend") + 1] == "triton"
    # 0.14.0 has no --moe-backend: refuse (dropping it would silently bypass the tuned config)
    result = subprocess.run(
        [sys.executable, "build.py", "serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "gb10",
         "--vllm", "0.14.0", "--recipes-dir", str(root)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: {root}/gemma-4-26b-a4b-it/gb10.yaml: serve.moe_backend: needs "
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
    with pytest.raises(ForgeError, match=r"gb10.yaml: serve.model_runner: v2 needs "
                                         r"VLLM_USE_V2_MODEL_RUNNER, which vLLM 0.10.0 does not read"):
        plan_serve("gemma-4-26b-a4b-it", "gb10", "0.10.0", recipes_dir=root)


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
        result = subprocess.run(
            [sys.executable, "build.py", "serve", "--recipe", "gemma-4-26b-a4b-it", "--target",
             "h200", "--vllm", "0.25.0", "--repository", repository, "--port", "18123",
             "--hf-cache", str(tmp_path / "hf"), "--run"],
            cwd=REPO, capture_output=True, text=True, timeout=300)
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
    result = subprocess.run(
        [sys.executable, "build.py", "serve", "--recipe", "gemma-4-e4b-it", "--target", "h100",
         "--vllm", "0.27.1", "--port", "70000"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr == "error: --port: not a TCP port: 70000\n"
