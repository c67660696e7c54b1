"""Declarative validation for the project's YAML data (series, targets, recipes, lock).

A schema is a dict of field name -> Field. `validate` rejects unknown fields, missing required
fields and bad values, and every error names the file and the dotted path of the field:

    patches/series.yaml: patches[0].kind: must be one of source, moe-config (got 'diff')
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge import data_formats
from forge.data_formats import DataError
from forge.errors import FileError
from forge.files import DATA_YAML, FileKind

# A check returns None when the value is fine, else a short phrase saying what is wrong.
Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Field:
    kind: type | tuple[type, ...] | dict | ListOf
    required: bool = True
    default: Any = None
    choices: tuple | None = None
    check: Check | None = None


@dataclass(frozen=True)
class ListOf:
    item: type | tuple[type, ...] | dict
    min_items: int = 0


# Validation and parse errors are one type: a caller tells neither apart.
SchemaError = DataError


def load_yaml(path: Path | str, kind: FileKind = DATA_YAML) -> Any:
    """A data YAML file, read through forge.files (regular files only, capped) and parsed by the
    one guarded loader (forge.data_formats)."""
    try:
        return data_formats.load_yaml(path, kind)
    except FileError as exc:
        raise SchemaError(str(exc)) from exc


def validate(data: Any, schema: dict[str, Field], source: str, path: str = "") -> dict:
    """Check `data` against `schema`; return a new dict with defaults filled in."""
    if not isinstance(data, dict):
        _fail(source, path, f"must be a mapping (got {_kind_name(type(data))})")
    # Keys are sorted as text: YAML keys may be of any type (`1:` beside `zz:`).
    unknown = sorted(set(data) - set(schema), key=str)
    if unknown:
        _fail(source, _join(path, str(unknown[0])),
              f"unknown field (known: {', '.join(sorted(schema))})")
    result = {}
    for name, field in schema.items():
        where = _join(path, name)
        if name not in data or data[name] is None:
            if field.required:
                _fail(source, where, "required field is missing")
            result[name] = field.default
            continue
        result[name] = _validate_value(data[name], field.kind, source, where)
        if field.choices is not None and result[name] not in field.choices:
            _fail(source, where, f"must be one of {', '.join(map(str, field.choices))} "
                                 f"(got {result[name]!r})")
        if field.check is not None:
            problem = field.check(result[name])
            if problem:
                _fail(source, where, problem)
    return result


def _validate_value(value, kind, source: str, where: str):
    if isinstance(kind, dict):
        return validate(value, kind, source, where)
    if isinstance(kind, ListOf):
        if not isinstance(value, list):
            _fail(source, where, f"must be a list (got {_kind_name(type(value))})")
        if len(value) < kind.min_items:
            _fail(source, where, f"must hold at least {kind.min_items} item(s)")
        return [_validate_value(item, kind.item, source, f"{where}[{i}]")
                for i, item in enumerate(value)]
    expected = kind if isinstance(kind, tuple) else (kind,)
    # YAML reads `1` as int where a float is wanted, and bool is an int subclass: be exact.
    if float in expected and isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > sys.float_info.max:     # float() would raise OverflowError
            _fail(source, where, f"must be {_names(expected)} within about ±1.8e308 (got an "
                                 f"integer of about {value.bit_length() * 3 // 10} digits)")
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        _fail(source, where, f"must be a finite number (got {value!r})")
    if isinstance(value, bool) and bool not in expected:
        _fail(source, where, f"must be {_names(expected)} (got a boolean)")
    if not isinstance(value, expected):
        _fail(source, where, f"must be {_names(expected)} (got {_kind_name(type(value))})")
    return value


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _names(kinds: tuple) -> str:
    return " or ".join(_kind_name(k) for k in kinds)


def _kind_name(kind: type) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
            list: "a list", dict: "a mapping", type(None): "empty"}.get(kind, kind.__name__)


def _fail(source: str, where: str, problem: str):
    raise SchemaError(f"{source}: {where or '(top level)'}: {problem}")


# Checks shared by several schemas.
def pep440_specifier(value: str) -> str | None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        return f"not a PEP 440 version specifier: {value!r}"
    return None


def pep440_version(value: str) -> str | None:
    from packaging.version import InvalidVersion, Version

    try:
        Version(str(value))
    except InvalidVersion:
        return f"not a PEP 440 version: {value!r}"
    return None


def sha256_hex(value: str) -> str | None:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        return f"not a lowercase sha256 hex digest: {value!r}"
    return None
