#!/usr/bin/env python3
"""The two commands `build.py serve --recipe R --target T --nodes 2` lays out, minus docker, made
to run as two "nodes" on one host (benchmarks/gpu/two_node_local.sh runs them).

    two_node_commands.py --models DIR --work DIR [--recipe R] [--target T] [--layers N]
                         [--port 8011] [--master-port 29611] [--json]

The recipe's own node commands come from forge.serving.serve.node_commands (the function
`build.py serve --nodes 2` uses; there each flag is also checked against the release's parser,
tests/test_two_node_local.py does that here). Only what a single host must change is changed,
and every change is listed under "stand_in" in the JSON:

- the interconnect is loopback: master and both node addresses 127.0.0.1, interface `lo`;
- each node sees one GPU (CUDA_VISIBLE_DEVICES=rank) and has its own compile cache;
- NCCL may not use peer-to-peer or shared memory between the two processes, so the ranks talk
  over its socket transport as two hosts would (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1); no RoCE
  device, so NCCL_IB_DISABLE=1; NVLink SHARP off (NCCL_NVLS_ENABLE=0);
- NVLink multicast stays off (the lent machines' rule: it can take the shared GPUs out of
  service): NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1,
  VLLM_ALLREDUCE_USE_SYMM_MEM=0 (vLLM's torch symmetric-memory all-reduce), and
  --compilation-config '{"pass_config":{"fuse_allreduce_rms":false}}': on Hopper at TP>1 vLLM
  0.25 fuses all-reduce + RMSNorm through FlashInfer, whose backend with 2 nodes is "mnnvl"
  (NVSwitch multicast; vllm/distributed/device_communicators/flashinfer_all_reduce.py). Across
  real hosts without multi-node NVLink that workspace fails and vLLM drops the fusion itself;
- the model and drafter are Gemma-4-26B-A4B-shaped configs with dummy weights
  (verify/dummy_models.py), loaded with --load-format dummy --skip-tokenizer-init;
- VLLM_TUNED_CONFIG_FOLDER points at patches/moe-configs, as the image sets it;
(vLLM's custom all-reduce needs no flag: with --nnodes > 1 vLLM turns it off itself,
vllm/config/parallel.py line 991 in 0.25.0.)
- `vllm` is `python3 -m vllm.entrypoints.cli.main` (the staged install has no entry points).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from forge import REPO_ROOT as ROOT
from forge.errors import exit_on_interrupt
from forge.json_text import dump_json
from forge.serving.recipes import load_recipe
from forge.serving.serve import Interconnect, NodeCommand, layout_for, node_commands
from verify.dummy_models import write_dummy_models

LOOPBACK = "127.0.0.1"
STAND_IN_FLAGS = ["--load-format", "dummy", "--skip-tokenizer-init",
                  "--compilation-config", '{"pass_config":{"fuse_allreduce_rms":false}}']
VLLM = [sys.executable, "-m", "vllm.entrypoints.cli.main"]


def stand_in_env(rank: int, work: Path) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": str(rank),
            "VLLM_CACHE_ROOT": str(work / f"cache-rank{rank}"),
            "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1",
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
            "VLLM_TUNED_CONFIG_FOLDER": str(ROOT / "patches" / "moe-configs"),
            "PYTHONUNBUFFERED": "1"}


def local_commands(recipe_name: str, target: str, models: Path, work: Path, layers: int,
                   port: int, master_port: int) -> tuple[list[NodeCommand], list[dict]]:
    """(the recipe's node commands on a loopback interconnect, what each node runs here)."""
    recipe = load_recipe(recipe_name, target)
    layout = layout_for(recipe, 2)
    network = Interconnect(LOOPBACK, (LOOPBACK, LOOPBACK), "lo", (), master_port)
    nodes = node_commands(recipe, layout, network, port)
    target_dir, draft_dir = write_dummy_models(models, layers)
    runs = []
    for node in nodes:
        args = _swap_models(node.vllm_args, recipe, target_dir, draft_dir)
        args += STAND_IN_FLAGS
        env = {**node.env, **stand_in_env(node.rank, work)}
        runs.append({"rank": node.rank, "headless": node.headless, "env": env,
                     "argv": VLLM + args, "log": str(work / f"rank{node.rank}.log")})
    return nodes, runs


def _swap_models(args: list[str], recipe, target_dir: Path, draft_dir: Path | None) -> list[str]:
    """The recipe's model and drafter replaced by the dummy ones; draft_dir None: the drafter is
    inside the target's checkpoint (write_dummy_models), and the speculative config names none."""
    args = list(args)
    assert args[:2] == ["serve", recipe.model], args[:2]
    args[1] = str(target_dir)
    if draft_dir is not None:
        at = args.index("--speculative-config") + 1
        args[at] = dump_json({**json.loads(args[at]), "model": str(draft_dir)}, separators=(",", ":"))
    return args


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="gemma-4-26b-a4b-it")
    p.add_argument("--target", default="h200")
    p.add_argument("--models", required=True, help="where the dummy model configs go")
    p.add_argument("--work", required=True, help="logs and caches")
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--master-port", type=int, default=29611)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    a = p.parse_args(argv)
    work = Path(a.work)
    nodes, runs = local_commands(a.recipe, a.target, Path(a.models), work, a.layers, a.port,
                                 a.master_port)
    if a.json:
        print(dump_json({"recipe_commands": [n.bare_shell() for n in nodes], "runs": runs,
                          "stand_in": __doc__.split("every change is listed under")[1]},
                         indent=1))
        return 0
    for run in runs:
        # One line per node, rank order: `env K=V ... python3 -m vllm... serve ...`.
        print(shlex.join(["env", *[f"{k}={v}" for k, v in sorted(run["env"].items())],
                          *run["argv"]]))
    return 0


if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
