"""`build.py new-target`: a hardware target's entry in images/targets.yaml, written from flags.

The entry is validated field by field (an error names the flag), appended under the file's
`targets:` mapping (its comments and order kept) and the whole file validated again before the
atomic rename: the file either gains exactly this entry or stays as it was.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forge.errors import ForgeError
from forge.files import DATA_YAML, read_text, write_text_atomically
from forge.image_names import DEFAULT_BASE_IMAGE
from forge.json_text import dump_json
from forge.schema import SchemaError, load_yaml, validate
from forge.serving.recipes import series_coverage
from forge.targets import BASE_SCHEMA, TARGET_SCHEMA, load_targets, target_name_problem, targets_file


@dataclass(frozen=True)
class NewTarget:
    name: str
    description: str
    platform: str
    cuda: str
    cuda_arch: str
    device_names: list[str]
    gpu_memory_gib: float
    moe_device_name: str | None = None          # default: the first card's name, spaces -> "_"
    bandwidths_gb_s: tuple[float, ...] = ()     # one per card of device_names, in their order
    bandwidth_source: str | None = None
    base_image: str = DEFAULT_BASE_IMAGE
    releases: str | None = None                 # default: from the series' checked_from


# The flag each field of the entry comes from: a bad value is refused naming the flag.
FLAGS = {"description": "--description", "platform": "--platform", "cuda": "--cuda",
         "cuda_arch": "--cuda-arch", "device_names": "--device-name",
         "moe_device_name": "--moe-device-name", "gpu_memory_gib": "--gpu-memory-gib",
         "memory_bandwidth_gb_s": "--bandwidth-gb-s", "memory_bandwidth_source": "--bandwidth-source"}
# The base rule's fields and their flags.
BASE_FLAGS = {"releases": "--releases", "image": "--base-image"}


def moe_device_name_of(card: str) -> str:
    """vLLM's fused-MoE config files name the card as torch does, spaces -> "_" (docs/reference.md §2)."""
    return card.replace(" ", "_")


def entry_of(new: NewTarget) -> dict:
    """The target's fields as images/targets.yaml states them, each checked against the loader's
    schema (an error names the flag)."""
    problem = target_name_problem(new.name)
    if problem:
        raise ForgeError(f"new-target NAME: {problem}")
    if new.bandwidths_gb_s and len(new.bandwidths_gb_s) != len(new.device_names):
        raise ForgeError(f"--bandwidth-gb-s: give one figure per --device-name "
                         f"({len(new.bandwidths_gb_s)} for {len(new.device_names)})")
    if bool(new.bandwidths_gb_s) != bool(new.bandwidth_source):
        raise ForgeError("--bandwidth-source: give it with --bandwidth-gb-s (the public page the "
                         "figures come from), and neither without the other")
    base = {"releases": new.releases or f">={series_coverage()[0]}", "image": new.base_image}
    for field, flag in BASE_FLAGS.items():
        _check_field(field, base[field], BASE_SCHEMA, flag)
    entry: dict = {
        "description": new.description, "platform": new.platform, "cuda": new.cuda,
        "cuda_arch": new.cuda_arch, "device_names": list(new.device_names),
        "moe_device_name": new.moe_device_name or moe_device_name_of(new.device_names[0]),
        "gpu_memory_gib": new.gpu_memory_gib,
        "memory_bandwidth_gb_s": dict(zip(new.device_names, new.bandwidths_gb_s)),
        "memory_bandwidth_source": new.bandwidth_source,
        "env": {"VLLM_FORGE_TARGET": new.name},
        "bases": [base],
    }
    entry = {key: value for key, value in entry.items() if value not in ({}, None)}
    for key, value in entry.items():
        if key in FLAGS:
            _check_field(key, value, TARGET_SCHEMA, FLAGS[key])
    return entry


def _check_field(key: str, value, schema: dict, flag: str) -> None:
    try:
        validate({key: value}, {key: schema[key]}, "flags")
    except SchemaError as exc:
        problem = str(exc).split(": ", 2)[-1]
        raise ForgeError(f"{flag}: {problem}") from None


def render_entry(name: str, entry: dict) -> str:
    """The entry as the file writes its others: two-space indent under `targets:`, lists and
    mappings of scalars on one line; every scalar is JSON, which YAML reads as it is written."""
    lines = [f"  {name}:"]
    for key, value in entry.items():
        if key == "env":
            lines += ["    env:", *(f"      {k}: {dump_json(v)}" for k, v in value.items())]
        elif key == "bases":
            lines.append("    bases:")
            for base in value:
                lines += [f"      - releases: {dump_json(base['releases'])}",
                          f"        image: {dump_json(base['image'])}"]
        else:
            lines.append(f"    {key}: {dump_json(_whole(value), ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def _whole(value):
    """1792.0 GB/s is written 1792, as a person would."""
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return int(value) if isinstance(value, float) and value.is_integer() else value


def add_target(new: NewTarget, path: Path | None = None) -> Path:
    """Append the new target to images/targets.yaml (or $VLLM_FORGE_TARGETS): refused when the
    name exists or the file would not load with it."""
    path = Path(path or targets_file())
    before = load_yaml(path)
    known = load_targets(path)
    if new.name in known:
        raise ForgeError(f"new-target NAME: {path}: targets.{new.name} exists; edit it there")
    entry = entry_of(new)
    text = read_text(path, DATA_YAML).rstrip("\n") + "\n\n" + render_entry(new.name, entry)

    def check(candidate: Path) -> None:
        after = load_yaml(candidate)
        expected = {**before, "targets": {**before["targets"], new.name: entry}}
        if after != expected:
            raise ForgeError(f"{path}: targets: must be the file's last section (new-target "
                             f"appends the entry to it)")
        load_targets(candidate)

    return write_text_atomically(path, text, check)
