"""The serving commands: `build.py serve` (the docker command that serves a recipe, one node or
several) and `build.py tune-moe` (fused-MoE kernel tuning on this GPU, or importing its results).
Recipes, flag checks, plans and the sweep live in forge/serving/; here arguments become values."""
from __future__ import annotations

import sys
from pathlib import Path

from forge.errors import ForgeError
from forge.json_text import dump_json
from forge.untrusted import visible

# --- build.py serve ----------------------------------------------------------------------------

def cmd_serve(args) -> int:
    from forge.serving.serve import plan_serve, run_plan

    if args.nodes < 1:
        raise ForgeError(f"--nodes: must be 1 or more (got {args.nodes})")
    if args.nodes > 1:
        return _serve_nodes(args)
    plan = plan_serve(args.recipe, args.target, args.vllm, args.repository, args.port,
                      args.hf_cache, args.recipes_dir)
    for note in plan.notes:
        print(note, file=sys.stderr)
    if not args.run:
        print(plan.shell())
        return 0
    return run_plan(plan)


def _serve_nodes(args) -> int:
    from forge.serving.serve import ServePlan, detect_interconnect, plan_multi_node, run_plan

    if not args.master_addr:
        raise ForgeError("--master-addr: required with --nodes (node 0's address on the "
                         "interconnect)")
    network = detect_interconnect(args.master_addr, _split(args.node_ips), args.ifname,
                                  _split(args.ib_hca), args.master_port, args.nodes)
    plan = plan_multi_node(args.recipe, args.target, args.vllm, args.nodes, network,
                           args.repository, args.port, args.hf_cache, args.recipes_dir)
    for note in plan.notes:
        print(note, file=sys.stderr)
    if not args.run:
        print(plan.shell())
        return 0
    if args.node_rank is None:
        raise ForgeError("--node-rank: with --run, say which node this host is (0 .. "
                         f"{args.nodes - 1})")
    if not 0 <= args.node_rank < args.nodes:
        raise ForgeError(f"--node-rank: must be 0 .. {args.nodes - 1} (got {args.node_rank})")
    return run_plan(ServePlan(plan.argvs[args.node_rank], plan.notes))


def _split(text: str | None) -> list[str] | None:
    """A comma-separated flag value ("a, b,c") as a list; None when not given."""
    return [item.strip() for item in text.split(",") if item.strip()] if text else None


# --- build.py roofline ------------------------------------------------------------------------

def cmd_roofline(args) -> int:
    from forge.serving.acceptance import parse_profile, parse_rates
    from forge.serving.recipes import load_recipe
    from forge.serving.roofline import recipe_report, render_text
    from forge.targets import get_target

    rates = None
    if args.profile:
        rates = parse_profile(args.profile)[1] if "=" in args.profile else parse_rates(args.profile)
    report = recipe_report(load_recipe(args.recipe, args.target, _recipes_dir(args)), get_target(args.target),
                           args.vllm, args.dtype, args.context, rates, args.step_cost_ratio, args.device,
                           args.layers)
    print(dump_json(report, indent=1) if args.json else render_text(report))
    return 0


def _recipes_dir(args) -> Path | None:
    return Path(args.recipes_dir) if getattr(args, "recipes_dir", None) else None


# --- build.py tune-moe -------------------------------------------------------------------------

def cmd_tune_moe(args) -> int:
    from forge.serving import moe_tune

    if args.import_results:
        proof = _end_to_end(args, moe_tune)
        target = moe_tune.import_results(Path(args.import_results), end_to_end=proof)
        print(visible(f"wrote {target} and registered it in patches/series.yaml ({proof.text()})"))
        return 0
    if not args.dtype:
        raise ForgeError("tune-moe: --dtype is required (bf16 or fp8_w8a8) unless --import-results")
    result = moe_tune.tune(args.dtype, _batch_sizes(args), moe_tune.moe_shape_for(_recipe(args)), args.space)
    results_path = moe_tune.write_results(result, Path(args.results or f"tune-moe-{args.dtype}.json"))
    if args.merge_into:
        merged = moe_tune.write_merged(result, Path(args.merge_into))
        print(visible(f"wrote {merged} (merged over the shipped file)"))   # a path given by a flag
    for d in result["decisions"]:
        print(f"M={d['M']:>5}: tuned {d['tuned_us']:8.1f} us, default {d['default_us']:8.1f} us "
              f"-> keep {d['kept']}")
    print(visible(f"wrote {results_path}; import it with: python3 build.py tune-moe --import-results "
                  f"{results_path}"))
    return 0


def _batch_sizes(args) -> list[int]:
    """--batch-sizes, plus the token counts --recipe's decode steps run; the server's default set
    when neither is given."""
    from forge.serving.moe_tune import SERVER_BATCH_SIZES, token_counts_for_recipe

    batch_sizes = args.batch_sizes
    recipe = _recipe(args)
    if recipe is not None:
        batch_sizes = sorted(set(batch_sizes or []) | set(
            token_counts_for_recipe(recipe, args.k, args.concurrency)))
    return batch_sizes or SERVER_BATCH_SIZES


def _recipe(args):
    """tune-moe --recipe R --target T: the recipe whose model and decode steps are tuned for."""
    if not args.recipe:
        return None
    from forge.serving.recipes import load_recipe

    if not args.target:
        raise ForgeError("tune-moe: --recipe needs --target")
    return load_recipe(args.recipe, args.target)


def _end_to_end(args, moe_tune):
    """The end-to-end proof --import-results requires, read from the bench runs given."""
    if not args.end_to_end:
        raise ForgeError("tune-moe: --import-results needs --end-to-end BENCH_JSON (a tuned config "
                         "ships only where it wins end to end: verify/bench.py with and without it)")
    if not (args.with_engine and args.without_engine):
        raise ForgeError("tune-moe: --end-to-end needs --with-engine and --without-engine")
    name = moe_tune.load_results(Path(args.import_results)).file_name
    return moe_tune.end_to_end([Path(p) for p in args.end_to_end], name, args.with_engine,
                               args.without_engine, args.window)

