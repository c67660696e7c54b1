"""The kernel-name map (kernel_groups.yaml beside this file): which kernel group each CUDA kernel
of a decode step belongs to, per model family, validated on load.

A kernel goes to the first group whose patterns match its name; the last group must be `other`,
with no patterns, and takes the rest, so grouping never drops kernel time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from forge.schema import Field, ListOf, SchemaError, load_yaml, validate
from forge.serving.roofline import GROUPS

KERNEL_GROUPS_FILE = Path(__file__).with_name("kernel_groups.yaml")
OTHER = "other"
# The byte groups `build.py roofline --json` reports (forge/serving/roofline.py, every decoder
# layout's): what a kernel group's `bytes` may name.
BYTE_GROUPS = GROUPS

GROUP_SCHEMA = {
    "name": Field(str),
    "label": Field(str),
    "bytes": Field(ListOf(str), required=False, default=[]),
    "patterns": Field(ListOf(str), required=False, default=[]),
}
FAMILY_SCHEMA = {
    "source": Field(str),
    "groups": Field(ListOf(GROUP_SCHEMA, min_items=1)),
}


@dataclass(frozen=True)
class KernelGroup:
    name: str
    label: str
    byte_groups: tuple[str, ...]
    patterns: tuple[re.Pattern, ...]

    def matches(self, kernel_name: str) -> bool:
        return any(pattern.search(kernel_name) for pattern in self.patterns)


@dataclass(frozen=True)
class KernelMap:
    family: str
    source: str
    groups: tuple[KernelGroup, ...]

    def group_of(self, kernel_name: str) -> str:
        for group in self.groups[:-1]:
            if group.matches(kernel_name):
                return group.name
        return OTHER

    def group(self, name: str) -> KernelGroup:
        return next(g for g in self.groups if g.name == name)

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.groups]


def load_kernel_map(family: str, path: Path | str = KERNEL_GROUPS_FILE) -> KernelMap:
    source = str(path)
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise SchemaError(f"{source}: (top level): must be a mapping of family name -> groups")
    if family not in data:
        raise SchemaError(f"{source}: {family}: no kernel map for this family "
                          f"(known: {', '.join(sorted(data))})")
    fields = validate(data[family], FAMILY_SCHEMA, source, family)
    groups = tuple(_group(raw, source, f"{family}.groups[{i}]")
                   for i, raw in enumerate(fields["groups"]))
    _check_groups(groups, source, family)
    return KernelMap(family, fields["source"], groups)


def _group(raw: dict, source: str, where: str) -> KernelGroup:
    unknown = [b for b in raw["bytes"] if b not in BYTE_GROUPS]
    if unknown:
        raise SchemaError(f"{source}: {where}.bytes: {unknown[0]!r} is not a roofline byte group "
                          f"({', '.join(BYTE_GROUPS)})")
    patterns = []
    for i, text in enumerate(raw["patterns"]):
        try:
            patterns.append(re.compile(text, re.IGNORECASE))
        except re.error as exc:
            raise SchemaError(f"{source}: {where}.patterns[{i}]: not a regular expression "
                              f"({exc}): {text!r}") from exc
    return KernelGroup(raw["name"], raw["label"], tuple(raw["bytes"]), tuple(patterns))


def _check_groups(groups: tuple[KernelGroup, ...], source: str, family: str) -> None:
    names = [g.name for g in groups]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise SchemaError(f"{source}: {family}.groups: group {duplicate!r} is named twice")
    last = groups[-1]
    if last.name != OTHER or last.patterns:
        raise SchemaError(f"{source}: {family}.groups[{len(groups) - 1}]: the last group must be "
                          f"{OTHER!r} with no patterns (it takes every kernel no group matched)")
    if OTHER in names[:-1]:
        raise SchemaError(f"{source}: {family}.groups: {OTHER!r} must be the last group only")
    claimed: dict[str, str] = {}
    for group in groups:
        for byte_group in group.byte_groups:
            if byte_group in claimed:
                raise SchemaError(f"{source}: {family}.groups ({group.name}).bytes: {byte_group!r} "
                                  f"is already counted by {claimed[byte_group]!r} (a byte group "
                                  "has one kernel group, or its floor would count twice)")
            claimed[byte_group] = group.name
