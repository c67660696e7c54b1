"""A `vllm serve` command line's tokens as argparse reads them: which values follow which flag, a
value as the command line spells it, and extra_args as vllm.LLM keywords. No recipe here: recipes.py
checks a recipe's extra_args with these, serve.py checks them against a release's own parser."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from forge.json_text import dump_json


@dataclass(frozen=True)
class FlagGroup:
    """One flag of a `vllm serve` command line and the values that follow it."""
    index: int               # where the flag stands among the tokens
    flag: str                # as written, without an `=value`
    values: list[str]

    @property
    def name(self) -> str:
        """The flag as the parser registers it: `--max_model_len` and `--x.key` are `--x`."""
        return self.flag.split(".", 1)[0].replace("_", "-")


_NUMBER = re.compile(r"-\d+(\.\d*)?")


def flag_groups(tokens: list[str]) -> list[FlagGroup]:
    """Tokens as argparse reads them: each flag (`-x`, `--x`, `--x=value`) with the values after
    it; a negative number is a value (vLLM's parser registers no flag that looks like one).
    Values before the first flag belong to no flag and are returned under flag ''."""
    groups: list[FlagGroup] = []
    for index, token in enumerate(tokens):
        if token.startswith("-") and not _NUMBER.fullmatch(token):
            flag, equals, inline = token.partition("=")
            groups.append(FlagGroup(index, flag, [inline] if equals else []))
        elif groups:
            groups[-1].values.append(token)
        else:
            groups.append(FlagGroup(index, "", [token]))
    return groups


def cli_value(value) -> str:
    """A value as `vllm serve` reads it: a dict or list as compact JSON (`--speculative-config`)."""
    if isinstance(value, (dict, list)):
        return dump_json(value, separators=(",", ":"))
    return str(value)


def extra_args_as_kwargs(tokens: list[str]) -> dict[str, Any]:
    """['--limit-mm-per-prompt', '{"image":0}', '--no-x'] -> {limit_mm_per_prompt: {...}, x: False}."""
    kwargs: dict[str, Any] = {}
    for group in flag_groups(tokens):
        name = group.flag.lstrip("-").replace("-", "_")
        if len(group.values) > 1:
            kwargs[name] = [_parse_value(value) for value in group.values]
        elif group.values:
            kwargs[name] = _parse_value(group.values[0])
        elif name.startswith("no_"):
            kwargs[name[3:]] = False
        else:
            kwargs[name] = True
    return kwargs


def _parse_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text
