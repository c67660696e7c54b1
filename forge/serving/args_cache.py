"""The serve-args cache entry (`serve-args/<release>.json`, forge.serving.vllm_args) as a typed
model: exactly what vllm_args writes loads, and nothing else: strict types (a 1 is no true, a
"2" no count), no key it does not write, bounded sizes, no NaN or infinity. An entry the model
refuses is a damaged one, read from the release again.

pydantic v2 is what vLLM's own config uses; here it replaces a hand-written check, and is imported
only when a cached reading is loaded."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from forge.typed import STRICT, entry_or_none

# Far above any release's (0.34.0: 400 flags, 300 EngineArgs fields, flag names under 60
# characters), far below what would make a load slow.
Name = Annotated[str, Field(max_length=300)]
Names = Annotated[list[Name], Field(max_length=20_000)]


class RuleEntry(BaseModel):
    """A ValueRule: argparse's nargs, the converter's name, "None" accepted, choices closed."""
    model_config = STRICT
    nargs: Annotated[int, Field(ge=0, le=64)] | Literal["?", "+", "*"] | None
    converter: Name
    accepts_none: bool
    open_choices: bool


class ServeArgsEntry(BaseModel):
    model_config = STRICT
    code: Name
    version: Name
    serve_flags: Names
    engine_fields: Names
    env_vars: Names
    speculative_fields: Names
    speculative_methods: Names
    runners: Names
    choices: Annotated[dict[Name, Names], Field(max_length=20_000)]
    value_rules: Annotated[dict[Name, RuleEntry], Field(max_length=20_000)]
    aliases: Annotated[dict[Name, Name], Field(max_length=20_000)]


def parse_entry(data: object) -> ServeArgsEntry | None:
    """The entry, or None where `data` is not one (missing, of another shape or type)."""
    return entry_or_none(ServeArgsEntry, data)
