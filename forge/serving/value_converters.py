"""The project's own readings of the `type=` callables vLLM's argparse runs on a flag's values.

A release's serve flags are read from its source as data (forge.serving.vllm_args): each flag
names its converter, and the converter is looked up here by that name. Nothing of the release is
ever run: a name not in CONVERTERS is an unknown converter, whose values are checked as strings
(anything goes) with one line saying so.

human_readable_int and human_readable_int_or_auto follow vllm/utils/argparse_utils.py, whose two
definitions are the same in every release from 0.20.2 to 0.34.0 (docstrings aside): a number, or
a number with a decimal (k, m, g, t) or binary (K, M, G, T) suffix, decimals only with a decimal
suffix; `-1` or `auto` for the second.
"""
from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable

_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(value: str) -> int:
    value = value.strip()
    match = _SUFFIXED.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        try:
            return int(number) * _BINARY[suffix]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"decimals are not allowed with {suffix}") from exc
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


# converter name, as the release's add_argument or _compute_kwargs spells it -> (the project's
# reading, the words a refusal uses).
CONVERTERS: dict[str, tuple[Callable[[str], object], str]] = {
    "int": (int, "a whole number"),
    "float": (float, "a number"),
    "json.loads": (json.loads, "JSON"),
    "human_readable_int": (human_readable_int, "a whole number (or 2k, 1M, ...)"),
    "human_readable_int_or_auto": (human_readable_int_or_auto,
                                   "a whole number (or 2k, 1M, ..., -1, auto)"),
}
# Names vllm_args gives values it leaves to vLLM on purpose: plain text, and a nested config's
# JSON (which vLLM also takes as `--flag.key value`).
AS_TEXT = frozenset({"str", "json"})


def converts(name: str, value: str) -> bool | None:
    """Whether the converter `name` takes `value`; None when `name` is not known here."""
    known = CONVERTERS.get(name)
    if known is None:
        return None
    try:
        known[0](value)
    except (ValueError, TypeError, ArithmeticError, RecursionError,
            argparse.ArgumentTypeError):
        return False
    return True


def words(name: str) -> str:
    return CONVERTERS[name][1] if name in CONVERTERS else f"a value {name} reads"
