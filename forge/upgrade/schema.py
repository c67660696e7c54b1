"""The schema of `build.py upgrade --json` (schema 1), in forge.schema's terms: every field named,
unknown fields refused, `required=False` where the value may be null. `check_report` validates a
report the command prints (the tests run every report through it).

Top level: schema, from, to, target, downgrade, unchecked (--to newer than the series'
checked_through), verdict (ready | needs-work), blocking (one line each), patches, dependencies
(requirements, constraints, drift), defaults (runners, choices, gemma4_attention, moe_backends,
effective: values the recipes leave to vLLM that the new release sets differently),
kernels, family_lines (each log line a models/<family>.yaml cites for verify, where each release's
source holds it), recipes, image (from, to), next (the commands, in order).
"""
from __future__ import annotations

from forge.patching.vocabulary import Kind, Status
from forge.schema import Field, ListOf, validate
from forge.upgrade import kernels
from forge.upgrade import patch_changes as pc

VERDICTS = ("ready", "needs-work")
CHANGES = (pc.RETIRES, pc.DROPS, pc.NEW, pc.CARRIED, pc.CONFLICT, pc.NOT_CARRIED, pc.UNCHANGED)
STATUSES = tuple(s.value for s in Status)
TEXTS = ListOf(str)


def _optional(kind) -> Field:
    return Field(kind, required=False)


PATCH = {
    "id": Field(str), "kind": Field(str, choices=tuple(k.value for k in Kind)),
    "change": Field(str, choices=CHANGES), "from": Field(str, choices=STATUSES),
    "to": Field(str, choices=STATUSES), "detail": Field(str),
    "upstream": Field({"issue": _optional(int), "pr": _optional(int),
                       "fixed_in": _optional(str), "introduced_by": _optional(int)}),
    "candidate": Field(bool),
}
REQUIREMENT = {"package": Field(str), "from": _optional(str), "to": _optional(str)}
DRIFT = {"package": Field(str), "checked_through": Field(str), "declared": _optional(str),
         "unchecked": Field(TEXTS), "covering_constraints": Field(TEXTS),
         "no_longer_needed": Field(TEXTS), "records": Field(TEXTS),
         "newest_checked": _optional(str), "newest_published": _optional(str)}
FUNCTION = {"path": Field(str), "function": Field(str), "lines": Field(ListOf(int), required=False),
            "families": Field(ListOf(int))}
ARCHS = {"archs": Field(str), "line": Field(int), "built": Field(str)}
KERNEL_STATES = (kernels.NATIVE, kernels.PTX, kernels.ABSENT)
KERNEL = {"family": Field(str), "variable": Field(str), "from": _optional(ARCHS),
          "to": _optional(ARCHS), "state_from": Field(str, choices=KERNEL_STATES),
          "state_to": Field(str, choices=KERNEL_STATES), "native_from": Field(bool),
          "native_to": Field(bool)}
COVERAGE = {"release": Field(str), "state": Field(str, choices=("measured", "not measured")),
            "records": Field(TEXTS)}
RECIPE = {"recipe": Field(str), "target": Field(str), "served_from": Field(bool),
          "served_to": Field(bool), "runner": Field(str, choices=("v1", "v2")),
          "refused": Field(TEXTS), "renamed": Field(TEXTS), "notes": Field(TEXTS),
          "kernels": Field(TEXTS), "known_failures": Field(TEXTS),
          "kernel_states": Field(ListOf({"family": Field(str), "role": Field(str),
                                         "from": Field(str, choices=KERNEL_STATES),
                                         "to": Field(str, choices=KERNEL_STATES)})),
          "evidence": Field(ListOf(COVERAGE, min_items=2)), "missing_evidence": Field(TEXTS)}
IMAGE = {"vllm": Field(str), "base": _optional(str), "digest": _optional(str),
         "locked": Field(bool), "moving_tag": Field(str), "immutable_tag": _optional(str),
         "problem": _optional(str)}
REPORT = {
    "schema": Field(int, choices=(1,)), "from": Field(str), "to": Field(str), "target": Field(str),
    "downgrade": Field(bool), "unchecked": Field(bool), "verdict": Field(str, choices=VERDICTS),
    "blocking": Field(TEXTS),
    "patches": Field(ListOf(PATCH)),
    "dependencies": Field({"requirements": Field(ListOf(REQUIREMENT)),
                           "constraints": Field(ListOf(PATCH)), "drift": Field(ListOf(DRIFT)),
                           "indexes": Field(ListOf({"option": Field(str), "from": _optional(str),
                                                    "to": _optional(str)}))}),
    "defaults": Field({
        "runners": Field({"from": Field(TEXTS), "to": Field(TEXTS), "removed": Field(TEXTS),
                          "recipes": Field(TEXTS)}),
        "choices": Field(ListOf({"flag": Field(str), "removed": Field(TEXTS),
                                 "added": Field(TEXTS)})),
        "gemma4_attention": Field({"from": Field(FUNCTION), "to": Field(FUNCTION),
                                   "changed": Field(bool)}),
        "moe_backends": Field(ListOf({"weights": Field(str), "oracle": _optional(str),
                                      "removed": Field(TEXTS), "added": Field(TEXTS)})),
        "effective": Field(ListOf({"setting": Field(str), "from": Field(str), "to": Field(str),
                                   "where": Field(str), "pin": _optional(str),
                                   "recipes": Field(TEXTS), "detail": Field(str)})),
    }),
    "kernels": Field(ListOf(KERNEL)),
    "family_lines": Field(ListOf({"family_file": Field(str), "what": Field(str),
                                  "check": Field(str), "line": Field(str),
                                  "found": Field(dict)})),
    "recipes": Field(ListOf(RECIPE)),
    "image": Field({"from": Field(IMAGE), "to": Field(IMAGE)}),
    "next": Field(ListOf(str, min_items=1)),
}


def check_report(data: dict, source: str = "upgrade --json") -> dict:
    """The report validated against REPORT (a one-line ForgeError naming the field if not)."""
    return validate(data, REPORT, source)
