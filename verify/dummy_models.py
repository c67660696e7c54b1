"""Target and assistant configs with a family's published shapes, for loading with dummy weights
(vLLM `load_format="dummy"`) where no checkpoint is at hand.

The shapes and their public sources live in models/<family>.yaml (forge/models.py writes the
configs); a shape is named by its model there (26b-a4b, 31b). `layers` may be cut below the real
depth to fit several engines on one GPU; every figure states it. `centroids=True` sets
`use_ordered_embeddings` (centroid-masked drafter logits) to exercise that path. Without a shape
the first dummy shape of the first family is written.
"""
from __future__ import annotations

from pathlib import Path

from forge.models import Family, family_names, load_family


def _families() -> list[Family]:
    return [load_family(name) for name in family_names()]


def dummy_shapes() -> list[str]:
    """Every shape --dummy can write, across the families."""
    return [shape for family in _families() for shape in family.dummy_shapes()]


def family_of(shape: str | None = None) -> tuple[Family, str]:
    """The family that holds `shape` (default: the first dummy shape listed), and the shape."""
    for family in _families():
        shapes = family.dummy_shapes()
        if shapes and (shape is None or shape in shapes):
            return family, shape or shapes[0]
    raise ValueError(f"unknown shape {shape!r} (known: {', '.join(dummy_shapes())})")


def resolve_shape(shape: str | None) -> str:
    """The shape --dummy writes: `shape` if a family has it, else the first listed."""
    return family_of(shape)[1]


def full_layers(shape: str | None = None) -> int:
    family, name = family_of(shape)
    return family.model(name).layers


def target_config(layers: int | None = None, shape: str | None = None) -> dict:
    family, name = family_of(shape)
    return family.target_config(family.model(name), layers)


def assistant_config(shape: str | None = None, centroids: bool = False) -> dict:
    family, name = family_of(shape)
    return family.assistant_config(family.model(name), centroids)


def write_dummy_models(root: Path | str, layers: int | None = None, shape: str | None = None,
                       centroids: bool = False) -> tuple[Path, Path]:
    """Write target and assistant config.json under root; return (target_dir, assistant_dir)."""
    family, name = family_of(shape)
    return family.write_dummy_models(root, layers, name, centroids)


def encode_without_tokenizer(text: str, shape: str | None = None) -> list[int]:
    """Token ids for a prompt when the dummy model has no tokenizer: BOS then one id per UTF-8
    byte, offset past the special ids. Prompt lengths stay realistic (a byte is a short token);
    the ids mean nothing to dummy weights, which is all a dummy run can promise."""
    bos = family_of(shape)[0].token_ids["bos"]
    return [bos] + [1000 + byte for byte in text.encode("utf-8")]
