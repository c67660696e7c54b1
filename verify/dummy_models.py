"""Target and assistant configs with a family's published shapes, for loading with dummy weights
(vLLM `load_format="dummy"`) where no checkpoint is at hand.

The shapes and their public sources live in models/<family>.yaml (forge/models.py writes the
configs); a shape is named by its model there (26b-a4b, 31b, 35b-a3b). `layers` may be cut below the real
depth to fit several engines on one GPU; every figure states it. `centroids=True` sets
`use_ordered_embeddings` (centroid-masked drafter logits) to exercise that path. Without a shape
the first dummy shape of the first family is written.
"""
from __future__ import annotations

from pathlib import Path

from forge.models import TINY, Family, family_names, load_family


def _families() -> list[Family]:
    return [load_family(name) for name in family_names()]


def _shapes(family: Family, drafter: bool) -> list[str]:
    """The family's models --dummy can write: with a drafter, those whose drafter shape is known;
    without (a plain engine's target alone), every model; and last the family's tiny model
    (`tiny`, for CPU engines) where it declares one."""
    published = family.dummy_shapes() if drafter else list(family.models)
    return published + ([TINY] if family.tiny is not None else [])


def dummy_shapes(drafter: bool = True) -> list[str]:
    """Every shape --dummy can write, across the families."""
    return [shape for family in _families() for shape in _shapes(family, drafter)]


def family_of(shape: str | None = None, drafter: bool = True, family: str | None = None) -> tuple[Family, str]:
    """The family that holds `shape` (default: the first dummy shape listed), and the shape;
    `family` (a name): that family's alone (`tiny` is a shape of several families)."""
    for family_ in _families():
        if family is not None and family_.name != family:
            continue
        shapes = _shapes(family_, drafter)
        if shapes and (shape is None or shape in shapes):
            return family_, shape or shapes[0]
    raise ValueError(f"unknown shape {shape!r} (known: {', '.join(dummy_shapes(drafter))})")


def resolve_shape(shape: str | None, drafter: bool = True) -> str:
    """The shape --dummy writes: `shape` if a family has it, else the first listed."""
    return family_of(shape, drafter)[1]


def check_shape_flag(parser, args, drafter: bool = True) -> None:
    """A given --shape must name a dummy model of models/: checked after parsing, not by argparse,
    so that --help needs no models/ directory (bench.py, mtp_smoke.py, profile.py)."""
    if args.dummy and args.shape:
        try:
            args.shape = resolve_shape(args.shape, drafter)
        except ValueError as exc:
            parser.error(str(exc))


def recipe_shape(recipe, shape: str | None = None, drafter: bool = True) -> str:
    """The shape --dummy writes for a recipe: `shape` if the recipe's family has it, else the
    recipe's own model where it has a drafter shape (any model when drafter=False), else the
    family's first."""
    family, model = recipe.family_model
    shapes = _shapes(family, drafter)
    if shape is not None:
        if shape not in shapes:
            raise ValueError(f"--shape {shape}: not a dummy shape of {recipe.name}'s family {family.name} "
                             f"({family.source}: {', '.join(shapes) or 'none'})")
        return shape
    if not shapes:
        raise ValueError(f"{family.source}: no model of the {family.name} family has a drafter shape "
                         f"for --dummy")
    return model.name if model.name in shapes else shapes[0]


def full_layers(shape: str | None = None) -> int:
    family, name = family_of(shape, drafter=False)
    return family.model(name).layers


def target_config(layers: int | None = None, shape: str | None = None) -> dict:
    family, name = family_of(shape, drafter=False)
    return family.target_config(family.model(name), layers)


def assistant_config(shape: str | None = None, centroids: bool = False) -> dict:
    family, name = family_of(shape)
    return family.assistant_config(family.model(name), centroids)


def write_dummy_models(root: Path | str, layers: int | None = None, shape: str | None = None,
                       centroids: bool = False, fp8_checkpoint: str | None = None,
                       drafter: bool = True, family: str | None = None) -> tuple[Path, Path | None]:
    """Write target and assistant config.json under root; return (target_dir, assistant_dir), the
    latter None where the family's drafter is inside the target's checkpoint, or with
    drafter=False (the target alone: any model of the family). fp8_checkpoint
    ("fp8-dynamic" or "fp8-static"): the target as a pre-quantized compressed-tensors FP8
    checkpoint (Family.fp8_checkpoint_config)."""
    found, name = family_of(shape, drafter, family)
    return found.write_dummy_models(root, layers, name, centroids, fp8_checkpoint, drafter)


def encode_without_tokenizer(text: str, shape: str | None = None, family: str | None = None) -> list[int]:
    """Token ids for a prompt when the dummy model has no tokenizer: BOS then one id per UTF-8
    byte, offset past the special ids. Prompt lengths stay realistic (a byte is a short token);
    the ids mean nothing to dummy weights, which is all a dummy run can promise."""
    bos = family_of(shape, drafter=False, family=family)[0].token_ids["bos"]
    return [bos] + [1000 + byte for byte in text.encode("utf-8")]
