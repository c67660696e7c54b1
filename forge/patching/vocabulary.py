"""The words the patch series speaks: what kind a patch is and which status it has on a tree.

Both are `str` enums, so a member equals its spelling in patches/series.yaml, in statuses cached
as JSON and in the plan's labels; code names them instead of repeating the strings."""
from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    SOURCE = "source"            # a .diff against vLLM's source
    MOE_CONFIG = "moe-config"    # a tuned fused-MoE config, delivered through VLLM_TUNED_CONFIG_FOLDER
    DEPENDENCY = "dependency"    # a version constraint on a package vLLM depends on

    def __str__(self) -> str:
        return self.value


class Status(str, Enum):
    APPLIES = "applies"
    ALREADY_UPSTREAM = "already-upstream"
    NOT_NEEDED = "not-needed"
    CONFLICT = "conflict"
    SATISFIED = "satisfied"      # a dependency on an install: the installed version satisfies it
    APPLIED = "applied"          # a source patch on an install that vllm-forge's record lists as applied

    def __str__(self) -> str:
        return self.value
