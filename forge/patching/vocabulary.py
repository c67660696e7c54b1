"""The words the patch series speaks: what kind a patch is, which status it has on a tree, where
an apply run stands in its record, and what an apply (or revert) did.

All are `str` enums, so a member equals its spelling in patches/series.yaml, in statuses cached
as JSON, in the apply record and in the plan's labels; code names them instead of repeating the
strings (tests/test_patch_vocabulary.py fails on a repeated one)."""
from __future__ import annotations

from enum import Enum


class _Word(str, Enum):
    """A word of the vocabulary: equal to its spelling, printed as it by str() and f-strings (json
    writes it plain too; PyYAML does not, so the series writes str(kind))."""

    def __str__(self) -> str:
        return self.value


class Kind(_Word):
    SOURCE = "source"            # a .diff against vLLM's source
    MOE_CONFIG = "moe-config"    # a tuned fused-MoE config, delivered through VLLM_TUNED_CONFIG_FOLDER
    DEPENDENCY = "dependency"    # a version constraint on a package vLLM depends on


class Status(_Word):
    APPLIES = "applies"
    ALREADY_UPSTREAM = "already-upstream"
    NOT_NEEDED = "not-needed"
    CONFLICT = "conflict"
    # Past the top of the patch's `releases`, the code it fixes still there (its fixes_marker)
    # and upstream's fix not in: the bug is present and the series carries no patch that fits.
    NEEDED_NOT_CARRIED = "needed-not-carried"
    SATISFIED = "satisfied"      # a dependency on an install: the installed version satisfies it
    APPLIED = "applied"          # a source patch on an install that vllm-forge's record lists as applied
    INTERRUPTED = "interrupted"  # on an install where a vllm-forge apply or revert was killed part way


class RecordState(_Word):
    """The `state` of the apply record (vllm/.vllm-forge/applied.json): see forge/patching/apply.py."""
    STAGING = "staging"      # originals saved, temp files written, no file replaced: the next run
    #                          removes what this one created
    APPLYING = "applying"    # files being replaced: the next apply asks for --revert first
    APPLIED = "applied"      # every file in place


class RevertStep(_Word):
    """The record's `reverting.step` while a revert runs (absent otherwise)."""
    STAGING = "staging"      # restored bytes in temp files, directories created: the next run
    #                          removes them and the install stays patched
    RESTORING = "restoring"  # files being put back: the next run finishes the revert


class ApplyOutcome(_Word):
    """What `build.py apply` (or `--revert`) did to an install: ApplyReport.action."""
    APPLIED = "applied"
    ALREADY_APPLIED = "already-applied"
    RE_PINNED = "re-pinned"
    NOTHING_TO_APPLY = "nothing-to-apply"
    REVERTED = "reverted"
    NOTHING_TO_REVERT = "nothing-to-revert"
    DROPPED_FOREIGN = "dropped-foreign"   # --revert on a record of another install: dropped
