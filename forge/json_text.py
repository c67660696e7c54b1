"""The one way the project writes JSON: strict JSON only (no NaN, no Infinity).

Python's json module writes float('nan') as `NaN` and float('inf') as `Infinity` unless told not
to: neither is JSON (RFC 8259), and other readers (jq, a browser, Go) refuse the whole file. A
figure that is not a finite number is refused here, by the path of the field that holds it, before
anything is written.
"""
from __future__ import annotations

import json
import math

from forge.errors import ForgeError

# Compact, strict and written by the C encoder (json.dumps with an indent runs in Python, some
# thirty times slower: it matters for a record of thousands of entries).
_ONE_LINE = json.JSONEncoder(allow_nan=False)
_CONTAINERS = (dict, list, tuple)


def dump_json(value: object, what: str = "JSON", **options) -> str:
    """json.dumps(value, allow_nan=False, **options); a NaN or infinite number anywhere in `value`
    is a ForgeError naming `what` and the field (`windows.greedy.acceptance_rate`)."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        error = _non_finite_error(value, what)
        if error is None:
            raise
        raise error from None


def dump_json_lines(value: object, what: str = "JSON") -> str:
    """`value` as JSON with one line per entry of a list or object that holds lists or objects,
    and each list or object that holds none on one line of its own (a record of thousands of
    files: one line per file, as readable as an indented dump and written many times faster).
    Strict as dump_json: a NaN or infinite number is a ForgeError naming `what` and the field."""
    try:
        return _layout(value, "\n")
    except ValueError:
        error = _non_finite_error(value, what)
        if error is None:
            raise
        raise error from None


def _layout(value: object, newline: str) -> str:
    """`newline`: a line break and the indent of the line `value` starts on. (Recursive: for
    records a few levels deep, not for arbitrary input.)"""
    inner = newline + " "
    if isinstance(value, dict) and _holds_containers(value.values()):
        entries = [f"{_ONE_LINE.encode(_key_text(key))}: {_layout(item, inner)}"
                   for key, item in value.items()]
        return "{" + inner + ("," + inner).join(entries) + newline + "}"
    if isinstance(value, (list, tuple)) and _holds_containers(value):
        entries = [_layout(item, inner) for item in value]
        return "[" + inner + ("," + inner).join(entries) + newline + "]"
    return _ONE_LINE.encode(value)


def _holds_containers(values) -> bool:
    for value in values:      # a loop, not any(generator): it runs once per record entry
        if isinstance(value, _CONTAINERS):
            return True
    return False


def _key_text(key: object) -> str:
    """An object key as json.dumps writes it (True as "true", 1 as "1")."""
    return key if isinstance(key, str) else _ONE_LINE.encode(key)


def _non_finite_error(value: object, what: str) -> ForgeError | None:
    """The ForgeError naming the first field of `value` that is no finite number (None: there is
    none, the encoder refused something else)."""
    where = non_finite_field(value)
    if where is None:
        return None
    path, number = where
    return ForgeError(f"{what}: {path or 'the value'} is {number!r}, not a finite number "
                      "(strict JSON holds no NaN or Infinity)")


def non_finite_field(value: object, path: str = "") -> tuple[str, float] | None:
    """(dotted path, number) of the first NaN or infinite float in `value`, else None.
    Walked with an explicit stack: a deeply nested value is not a RecursionError here."""
    stack: list[tuple[str, object]] = [(path, value)]
    while stack:
        here, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return here, item
        if isinstance(item, dict):
            stack.extend((f"{here}.{key}" if here else str(key), v)
                         for key, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{here}[{i}]", v) for i, v in reversed(list(enumerate(item))))
    return None
