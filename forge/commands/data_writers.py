"""`build.py new-target`, `new-recipe`, `new-family` (the data files a guide would otherwise have
you type: images/targets.yaml's entry, a recipe, a model family) and `recipes-table`
(recipes/README.md's generated thresholds table). Each writer refuses a name that exists or a bad
flag in one line, and writes inside the checkout only, atomically."""
from __future__ import annotations

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.image_names import DEFAULT_BASE_IMAGE

# The writers are imported by the handler that runs (forge/commands/cli.py builds every command's
# parser on each call; the model-family writer alone costs a tenth of a second to import).


def _shown(path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def cmd_new_target(args) -> int:
    from forge.images import new_target

    new = new_target.NewTarget(
        name=args.name, description=args.description, platform=args.platform, cuda=args.cuda,
        cuda_arch=args.cuda_arch, device_names=args.device_name or [],
        gpu_memory_gib=args.gpu_memory_gib, moe_device_name=args.moe_device_name,
        bandwidths_gb_s=tuple(args.bandwidth_gb_s or ()), bandwidth_source=args.bandwidth_source,
        base_image=args.base_image, releases=args.releases)
    path = new_target.add_target(new)
    print(f"wrote {_shown(path)}: targets.{args.name}")
    print(f"next: a recipe for it, `python3 build.py new-recipe MODEL --target {args.name}`")
    return 0


# The flags of a new file's defaults (new_recipe.NewDefaults fills in what is not given).
DEFAULTS_FLAGS = ("quantization", "num_speculative_tokens", "model_runner", "attention_backend",
                  "min_speedup", "step_cost_ratio")


def cmd_new_recipe(args) -> int:
    from forge.serving import new_recipe, thresholds_table

    given = {flag: getattr(args, flag) for flag in DEFAULTS_FLAGS if getattr(args, flag) is not None}
    if given and not args.model:
        raise ForgeError(f"--{next(iter(given)).replace('_', '-')}: only with --model (a new "
                         f"file's defaults)")
    defaults = new_recipe.NewDefaults(model=args.model, **given) if args.model else None
    path = new_recipe.add_recipe(args.name, args.target, defaults, args.moe_config_provider)
    print(f"wrote {_shown(path)}: " + ", ".join(f"targets.{t}" for t in args.target))
    print(f"next: `{thresholds_table.COMMAND}`, then `python3 build.py serve --recipe {args.name} "
          f"--target {args.target[0]} --vllm VERSION`")
    return 0


def cmd_new_family(args) -> int:
    from forge import family_writer

    path = family_writer.add_family(args.name, args.like, args.model_id, args.label)
    print(f"wrote {_shown(path)}: {args.name}, a copy of {args.like}'s facts with {args.model_id}")
    print(f"next: correct each value there, then `python3 build.py new-recipe MODEL "
          f"--model {args.model_id} --target TARGET`")
    return 0


def cmd_recipes_table(args) -> int:
    from forge.commands.generated import check_or_write
    from forge.serving import thresholds_table

    current, updated = thresholds_table.regenerated()
    return check_or_write(thresholds_table.README, _shown(thresholds_table.README), "the thresholds table",
                          current, updated, check=args.check, command=thresholds_table.COMMAND)


def add_parsers(commands) -> None:
    """The parsers of this module's commands (forge/commands/cli.py lists this builder)."""
    _add_new_target(commands)
    _add_new_recipe(commands)
    _add_new_family(commands)
    _add_recipes_table(commands)


def _add_new_target(commands) -> None:
    p = commands.add_parser("new-target", help="add a hardware target to images/targets.yaml")
    p.add_argument("name", metavar="NAME", help="the target's name (lowercase letters, digits, -)")
    p.add_argument("--description", required=True, help="one line for humans")
    p.add_argument("--platform", required=True, help="linux/amd64 or linux/arm64")
    p.add_argument("--cuda", required=True, help="CUDA major.minor of the base image, e.g. 13.0")
    p.add_argument("--cuda-arch", required=True, help="compute capability, e.g. 12.0 (not sm_120)")
    p.add_argument("--device-name", action="append", required=True,
                   help="torch.cuda.get_device_name() of a card it covers (repeatable)")
    p.add_argument("--gpu-memory-gib", type=float, required=True,
                   help="memory one device offers as torch reports it, GiB")
    p.add_argument("--moe-device-name",
                   help="device_name in vLLM's fused-MoE config names (default: the first "
                        "--device-name, spaces as _)")
    p.add_argument("--bandwidth-gb-s", type=float, action="append",
                   help="peak memory bandwidth of each --device-name, GB/s (in their order)")
    p.add_argument("--bandwidth-source", help="the public page the bandwidth figures come from")
    p.add_argument("--base-image", default=DEFAULT_BASE_IMAGE,
                   help="upstream base image tag, {version} the release (default %(default)s)")
    p.add_argument("--releases", help="PEP 440 range of releases that base serves (default: "
                                      "from the series' checked_from)")
    p.set_defaults(handler=cmd_new_target)


def _add_new_recipe(commands) -> None:
    p = commands.add_parser("new-recipe", help="a model's recipe on a target: add the target to "
                                               "recipes/NAME.yaml, or start the file with --model")
    p.add_argument("name", metavar="NAME", help="the recipe file's name, recipes/NAME.yaml")
    p.add_argument("--target", action="append", required=True, help="a target (repeatable)")
    p.add_argument("--moe-config-provider", choices=("vllm", "forge"),
                   help="the targets' fused-MoE config file is expected, bundled by vLLM or "
                        "shipped by forge (patches/moe-configs); default: the recipe's defaults")
    g = p.add_argument_group("a new file's defaults (with --model)")
    g.add_argument("--model", help="the Hugging Face id served (its family lists it in models/)")
    g.add_argument("--quantization", choices=("fp8",), help="fp8 weights (default: as stored)")
    g.add_argument("--num-speculative-tokens", type=int, metavar="K", help="default 3")
    g.add_argument("--model-runner", choices=("v1", "v2"), help="default v2")
    g.add_argument("--attention-backend", help="default TRITON_ATTN")
    g.add_argument("--min-speedup", type=float, help="default 1.0")
    g.add_argument("--step-cost-ratio", type=float, help="assumed until measured (default 2.0)")
    p.set_defaults(handler=cmd_new_recipe)


def _add_new_family(commands) -> None:
    p = commands.add_parser("new-family", help="start models/NAME.yaml, a model family, from an "
                                               "existing family's file")
    p.add_argument("name", metavar="NAME", help="the family (lowercase letters, digits, _)")
    p.add_argument("--like", required=True, metavar="FAMILY",
                   help="the family in models/ whose facts it starts from (the closest architecture)")
    p.add_argument("--model-id", required=True, help="the Hugging Face id of its first model")
    p.add_argument("--label", help="the model's name for humans (default: the id's name)")
    p.set_defaults(handler=cmd_new_family)


def _add_recipes_table(commands) -> None:
    p = commands.add_parser("recipes-table", help="regenerate recipes/README.md's thresholds table")
    p.add_argument("--check", action="store_true", help="exit 1 if the table is stale; write nothing")
    p.set_defaults(handler=cmd_recipes_table)
