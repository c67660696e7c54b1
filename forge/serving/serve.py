"""`build.py serve`: the exact `docker run ... vllm serve ...` command for a recipe on a built image.

Every flag is checked against the vLLM release's own parser definitions (forge.serving.vllm_args), so a
recipe never emits a flag that release lacks: the command refuses with a line naming the
recipe field instead. Settings that only exist to select a behaviour the release does not have
are adapted (dropped) where that is exactly equivalent, and say so on stderr.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forge.errors import ForgeError
from forge.serving.recipes import ENGINE_SETTINGS, RUNNER_ENV, Recipe, display_path, load_recipe

CONTAINER_PORT = 8000
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
# Hugging Face token passed through from the caller's environment (Gemma weights are gated).
PASSTHROUGH_ENV = ("HF_TOKEN",)


@dataclass(frozen=True)
class ServePlan:
    argv: list[str]
    notes: list[str]          # adaptations made for this release, printed to stderr

    def shell(self) -> str:
        return shlex.join(self.argv)


def plan_serve(recipe_name: str, target: str, vllm: str, repository: str | None = None,
               port: int = 8000, hf_cache: str = "~/.cache/huggingface",
               recipes_dir: str | None = None) -> ServePlan:
    version = _version(vllm)
    _check_target(target)
    recipe = load_recipe(recipe_name, target, Path(recipes_dir) if recipes_dir else None)
    if not recipe.admits(version):
        raise ForgeError(f"{_where(recipe)}: vllm: the recipe is for vLLM {recipe.vllm}, "
                         f"not {version}")
    from forge.serving.vllm_args import release_args

    release = release_args(version)
    env, notes = _runner_env(recipe, release)
    check_for_release(recipe, release)
    from forge.image_names import image_ref

    argv = docker_argv(image_ref(target, version, repository), recipe, env, port, hf_cache)
    return ServePlan(argv, notes)


def docker_argv(image: str, recipe: Recipe, env: dict[str, str], port: int,
                hf_cache: str) -> list[str]:
    if not 0 < port < 65536:
        raise ForgeError(f"--port: not a TCP port: {port}")
    argv = ["docker", "run", "--rm", "--gpus", "all", "--ipc=host",
            "-p", f"{port}:{CONTAINER_PORT}",
            "-v", f"{_host_path(hf_cache)}:{CONTAINER_HF_CACHE}"]
    for name in PASSTHROUGH_ENV:
        argv += ["-e", name]
    for name, value in sorted(env.items()):
        argv += ["-e", f"{name}={value}"]
    # --entrypoint: the upstream base's ENTRYPOINT is already `vllm serve`; naming the
    # program here makes the command mean the same whatever the image's entrypoint is.
    argv += ["--entrypoint", "vllm", image, "serve", recipe.model, *recipe.cli_args()]
    return argv


def _runner_env(recipe: Recipe, release) -> tuple[dict[str, str], list[str]]:
    env = recipe.env()
    if RUNNER_ENV in release.env_vars:
        return env, []
    if recipe.serve.model_runner == "v2":
        raise ForgeError(f"{_where(recipe)}: serve.model_runner: v2 needs {RUNNER_ENV}, "
                         f"which vLLM {release.version} does not read")
    # A release without the switch has only the V1 runner: the setting is moot there.
    del env[RUNNER_ENV]
    return env, [f"note: vLLM {release.version} has no {RUNNER_ENV} (V1 only); not set"]


def check_for_release(recipe: Recipe, release) -> None:
    """Refuse (one line naming the recipe field) anything the release's parser would reject:
    a missing flag, a value outside the flag's Literal choices, an unknown speculative key or
    method, an engine keyword vllm.LLM would not accept."""
    _check_flags(recipe, release)
    _check_speculative(recipe, release)
    for name in recipe.engine_kwargs():
        if name != "model" and name not in release.engine_fields:
            raise ForgeError(f"{_where(recipe)}: serve: {name} is not an EngineArgs field in "
                             f"vLLM {release.version}")


def _check_flags(recipe: Recipe, release) -> None:
    for setting in ENGINE_SETTINGS:
        value = setting.value(recipe)
        if value is None:
            continue
        field_name = _recipe_field(setting.kwarg)
        if not release.has_flag(setting.flag):
            raise ForgeError(f"{_where(recipe)}: {field_name}: needs {setting.flag}, "
                             f"which vLLM {release.version}'s `vllm serve` does not have")
        allowed = release.choices.get(setting.flag)
        if allowed and str(value) not in allowed:
            raise ForgeError(f"{_where(recipe)}: {field_name}: vLLM {release.version} accepts "
                             f"{setting.flag} {' | '.join(sorted(allowed))}, not {value!r}")
    for index, token in enumerate(recipe.serve.extra_args):
        if token.startswith("-") and not release.has_flag(token):
            raise ForgeError(f"{_where(recipe)}: serve.extra_args[{index}]: {token} is not a "
                             f"`vllm serve` flag in vLLM {release.version}")


def _check_speculative(recipe: Recipe, release) -> None:
    for key in recipe.speculative_config():
        if key not in release.speculative_fields:
            raise ForgeError(f"{_where(recipe)}: speculative: vLLM {release.version}'s "
                             f"SpeculativeConfig has no field {key!r}")
    if recipe.speculative.method not in release.speculative_methods:
        raise ForgeError(f"{_where(recipe)}: speculative.method: vLLM {release.version} has no "
                         f"speculative method {recipe.speculative.method!r}")


def _recipe_field(kwarg: str) -> str:
    return "speculative" if kwarg == "speculative_config" else f"serve.{kwarg}"


def _where(recipe: Recipe) -> str:
    return display_path(recipe.path) if recipe.path else f"{recipe.name}/{recipe.target}"


def _version(text: str) -> str:
    try:
        return str(Version(text))
    except InvalidVersion:
        raise ForgeError(f"--vllm: not a vLLM version: {text!r}") from None


def _check_target(target: str) -> None:
    from forge.targets import load_targets

    targets = load_targets()
    if target not in targets:
        raise ForgeError(f"--target: unknown target {target!r} (targets: {', '.join(sorted(targets))})")


def _host_path(path: str) -> str:
    # docker -v needs an absolute host path; "~" is not expanded by docker.
    return os.path.abspath(os.path.expanduser(path))


def cmd_serve(args) -> int:
    plan = plan_serve(args.recipe, args.target, args.vllm, args.repository, args.port,
                      args.hf_cache, args.recipes_dir)
    for note in plan.notes:
        print(note, file=sys.stderr)
    if not args.run:
        print(plan.shell())
        return 0
    return run_plan(plan)


def run_plan(plan: ServePlan) -> int:
    if shutil.which(plan.argv[0]) is None:
        raise ForgeError(f"--run: {plan.argv[0]} is not installed (the command is: {plan.shell()})")
    print(f"+ {plan.shell()}", file=sys.stderr, flush=True)
    return subprocess.run(plan.argv, check=False).returncode
