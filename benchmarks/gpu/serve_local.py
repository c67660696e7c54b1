#!/usr/bin/env python3
"""The command `build.py serve --recipe R --target T --vllm V` prints, minus docker, made to run
on a GPU host with vLLM installed and dummy weights.

    serve_local.py --vllm V --models DIR --work DIR [--recipe R] [--target T] [--layers N]
                   [--shape 26b-a4b|31b] [--port 8012]
                   [--gpu-memory-utilization F] [--kv-cache-gib G] [--control agree|random]
                   [--installed] [--json | --exec]

With --control agree|random the server itself serves verify's control model (verify/controls.py):
the controls plugin is written under --work, and the server gets it and the repository root
first on its PYTHONPATH, with $VLLM_FORGE_CONTROL (agree: target and drafter agree, every draft
is accepted; random: vLLM's own dummy weights) and $VLLM_FORGE_CONTROL_FAMILY (the recipe's
model family), so `verify/mtp_smoke.py --endpoint URL --dummy --expect-control agree|random`
can hold the server to a positive or negative control. Without it, the command is as before.

The recipe's own command comes from forge.serving.serve.plan_serve (what `build.py serve` prints,
every flag checked against the release's parser: read from its sdist, or with --installed from the
vLLM installed for this interpreter, for a GPU host without network); the docker wrapper is peeled
off and only what a host without the image must change is changed, each change listed under
"stand_in" in the JSON:

- the model and drafter are configs of the recipe's shapes with dummy weights
  (verify/dummy_models.py), loaded with --load-format dummy --skip-tokenizer-init;
- VLLM_TUNED_CONFIG_FOLDER points at patches/moe-configs, as the image sets it;
- the server gets its own compile cache under --work;
- with --gpu-memory-utilization F, the recipe's share of the GPU becomes F (other engines of the
  same run share the one GPU);
- with --kv-cache-gib G, the KV cache is a fixed G GiB (--kv-cache-memory-bytes): on a GPU that other
  engines share, vLLM's profiling counts their growth as its own and sizes the cache below zero (H200,
  2026-12-01, docs/gpu-evidence.md §10: "Available KV cache memory: -43.62 GiB", no server);
- `vllm` is `python3 -m vllm.entrypoints.cli.main` (the staged install has no entry points).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shlex
import sys
from pathlib import Path

from packaging.version import Version

from benchmarks.gpu.two_node_commands import VLLM, _swap_models
from forge import REPO_ROOT as ROOT
from forge.errors import ForgeError, exit_on_interrupt
from forge.json_text import dump_json
from forge.serving.recipes import load_recipe
from forge.serving.serve import plan_serve
from forge.versions import Release
from verify import controls
from verify.dummy_models import write_dummy_models

STAND_IN_FLAGS = ["--load-format", "dummy", "--skip-tokenizer-init"]
# The stand-in --control adds: listed under "stand_in" only when it is given (without it the
# JSON is as before).
CONTROL_STAND_IN = '''
- with --control agree|random, the server loads verify's controls plugin (verify/controls.py,
  written to <--work>/controls-plugin): that folder and the repository root go first on its
  PYTHONPATH, $VLLM_FORGE_CONTROL is the control and $VLLM_FORGE_CONTROL_FAMILY the recipe's
  model family (only with dummy weights, which this command always loads).
'''


def peel_docker(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(the -e K=V environment, the arguments after `--entrypoint vllm IMAGE`) of a docker argv."""
    env: dict[str, str] = {}
    for flag, value in zip(argv, argv[1:]):
        if flag == "-e" and "=" in value:
            name, _, setting = value.partition("=")
            env[name] = setting
    at = argv.index("--entrypoint")
    assert argv[at + 1] == "vllm", argv[at:at + 3]
    return env, argv[at + 3:]


def use_installed_release(vllm: str, work: Path) -> Path:
    """Make this process read release `vllm`'s argument rules from the vLLM installed for this
    interpreter, not from its sdist (a GPU host has no network to fetch it). release_tree
    (forge/upstream/releases.py) returns the cache's trees/<version> as it is once it holds
    vllm/__init__.py, so a cache folder under --work gets trees/<version> linked to the folder the
    installed vllm/ sits in, and $VLLM_FORGE_CACHE names that cache for this process. vllm is found
    and its version read without importing it (importing starts torch, CUDA)."""
    release = Release(vllm)
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ForgeError("--installed: no vLLM is installed for this interpreter "
                         f"({sys.executable})")
    package = Path(next(iter(spec.submodule_search_locations))).resolve()
    # The version the dist-info beside that very package names (not another vllm on sys.path).
    dist = next(iter(importlib.metadata.distributions(name="vllm", path=[str(package.parent)])),
                None)
    if dist is None:
        raise ForgeError(f"--installed: the installed vLLM {package} has no vllm-*.dist-info "
                         "beside it naming its version")
    # A build's local label (0.27.1+cu130) is that release's source.
    if Version(dist.version).public != str(release.version.public):
        raise ForgeError(f"--installed: the installed vLLM ({package}) is {dist.version}, "
                         f"not --vllm {release}")
    cache = work.resolve() / "vllm-forge-cache"
    tree = cache / "trees" / release
    tree.parent.mkdir(parents=True, exist_ok=True)
    if tree.is_symlink():
        tree.unlink()       # a link from an earlier run, maybe to another install
    elif tree.exists():
        raise ForgeError(f"--installed: {tree} is in the way (not a link this command made)")
    tree.symlink_to(package.parent, target_is_directory=True)
    os.environ["VLLM_FORGE_CACHE"] = str(cache)
    return cache


def local_command(recipe_name: str, target: str, vllm: str, models: Path, work: Path,
                  layers: int, shape: str, port: int, memory: float | None = None,
                  kv_cache_gib: float | None = None, control: str | None = None) -> dict:
    plan = plan_serve(recipe_name, target, vllm, port=port)
    env, args = peel_docker(plan.argv)
    recipe = load_recipe(recipe_name, target)
    target_dir, draft_dir = write_dummy_models(models, layers, shape)
    args = _swap_models(args, recipe, target_dir, draft_dir)
    if memory is not None:
        args = _with_flag(args, "--gpu-memory-utilization", str(memory))
    if kv_cache_gib is not None:
        args = _with_flag(args, "--kv-cache-memory-bytes", str(int(kv_cache_gib * 2**30)))
    # The container listens on its own port; here the host's port is the server's.
    args = [*args, "--port", str(port), *STAND_IN_FLAGS]
    env.update({"VLLM_TUNED_CONFIG_FOLDER": str(ROOT / "patches" / "moe-configs"),
                "VLLM_CACHE_ROOT": str(work / "cache"), "PYTHONUNBUFFERED": "1"})
    run = {"recipe_command": plan.shell(), "notes": plan.notes, "env": env,
           "argv": VLLM + args, "log": str(work / "server.log")}
    if control is not None:
        # STAND_IN_FLAGS always load dummy weights: the only weights the plugin switches.
        assert args[args.index("--load-format") + 1] == "dummy", args
        env.update(control_env(recipe, work, control))
        run["control"] = control
    return run


def control_env(recipe, work: Path, control: str) -> dict[str, str]:
    """The server's environment for verify's control `control` (agree or random): the plugin
    installed under `work` and the environment verify gives its own --dummy engines (mtp_smoke.py
    engine_setup), the PYTHONPATH this process has kept behind the plugin and the repository."""
    plugin = (work / "controls-plugin").resolve()
    controls.install_plugin(plugin)
    return controls.engine_env(plugin, ROOT, initial=control, family=recipe.family_model[0].name)


def _with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """args with `flag value`: the recipe's own value replaced where it sets the flag."""
    if flag in args:
        at = args.index(flag)
        return [*args[:at + 1], value, *args[at + 2:]]
    return [*args, flag, value]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="gemma-4-26b-a4b-it")
    p.add_argument("--target", default="h200")
    p.add_argument("--vllm", required=True)
    p.add_argument("--models", required=True, help="where the dummy model configs go")
    p.add_argument("--work", required=True, help="logs and caches")
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--shape", default="26b-a4b")
    p.add_argument("--port", type=int, default=8012)
    p.add_argument("--gpu-memory-utilization", type=float, help="instead of the recipe's")
    p.add_argument("--kv-cache-gib", type=float,
                   help="a fixed KV cache of this many GiB (on a GPU other engines share)")
    p.add_argument("--control", metavar="agree|random",
                   help="serve verify's agreeing or random control model (verify/controls.py)")
    p.add_argument("--installed", action="store_true",
                   help="check the flags against the vLLM installed here, not the release's sdist")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--exec", action="store_true",
                   help="print the command, then run the server in this process's place, on this "
                        "interpreter (a GPU run's server job: benchmarks/gpu/plans/serve.yaml)")
    args = p.parse_args(argv)
    if args.json and args.exec:
        p.error("--json prints the plan, --exec runs it: one of them")
    return args


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        if a.control is not None and a.control not in controls.CONTROLS:
            # checked before anything is written (the models, --installed's cache link)
            raise ForgeError(f"--control: {a.control!r} is not one of {', '.join(controls.CONTROLS)}")
        if a.installed:
            use_installed_release(a.vllm, Path(a.work))
        run = local_command(a.recipe, a.target, a.vllm, Path(a.models), Path(a.work), a.layers,
                            a.shape, a.port, a.gpu_memory_utilization, a.kv_cache_gib, a.control)
    except ForgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        stand_in = __doc__.split("each change listed under")[1]
        if a.control is not None:
            stand_in = stand_in.rstrip("\n") + CONTROL_STAND_IN
        print(dump_json({**run, "stand_in": stand_in}, "the serve plan", indent=1))
        return 0
    argv = run["argv"]        # its vLLM is this interpreter's (two_node_commands.VLLM)
    print(shlex.join(["env", *[f"{k}={v}" for k, v in sorted(run["env"].items())], *argv]), flush=True)
    if a.exec:
        os.execvpe(argv[0], argv, {**os.environ, **run["env"]})
    return 0


if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
