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


def dump_json(value: object, what: str = "JSON", **options) -> str:
    """json.dumps(value, allow_nan=False, **options); a NaN or infinite number anywhere in `value`
    is a ForgeError naming `what` and the field (`windows.greedy.acceptance_rate`)."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        where = non_finite_field(value)
        if where is None:
            raise
        path, number = where
        raise ForgeError(f"{what}: {path or 'the value'} is {number!r}, not a finite number "
                         "(strict JSON holds no NaN or Infinity)") from None


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
