"""Declarative validation for the project's YAML and JSON data (series, targets, recipes, model
families, records, the upgrade report, ...): one typed boundary per input.

A schema is a dict of field name -> Field, declared where the data is read. `validate` compiles
it once into a pydantic v2 validator: pydantic-core's typed-dict schema, what a pydantic model
compiles to, built directly (a model class per nested mapping would be some 50 classes for the
files one command reads, milliseconds each; these take microseconds). pydantic-core is imported
at the first validation, not before. The validator refuses what the data cannot hold:

- strict types: a bool is no integer, "2" is no integer, a date no string (an integer IS taken
  where a number is wanted: YAML reads `1` as one); no NaN or infinity, no integer past 64 bits;
- no unknown field; mapping keys are text only;
- every string, list and free-form mapping capped (MAX_TEXT, MAX_ITEMS);
- a Field's `choices` and `check` run as validators of the field.

Every refusal is one line naming the file and the dotted path of the field (the first problem):

    patches/series.yaml: patches[0].kind: must be one of source, moe-config (got 'diff')
"""
from __future__ import annotations

import math
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


# Caps far above any real file (the longest string of the data is ~3,000 characters, a patch's
# `why`; the longest list 48 items, the largest mapping 70 keys), far below what would make a
# load slow or a report unreadable: a file past them is damaged or hostile.
MAX_TEXT = 100_000
MAX_ITEMS = 10_000
# Integers are counts, ids, bytes: 64 bits hold every one; a 400-digit "count" is a damaged file.
MAX_INT = 2**63 - 1
# A compiled validator per schema dict, the dict held with it so its id is not reused while the
# entry lives; bounded, so a schema built per call (a flag's, forge.images.new_target) does not
# grow it for ever. Declare a schema once, at module level, and it is compiled once.
_COMPILED_MAX = 256
_compiled: dict[int, tuple[dict, Any]] = {}
_CHECK_ERROR = "forge_check"               # a Field's choices or check refused the value
_UNKNOWN = ("extra_forbidden", "invalid_key")


def validate(data: Any, schema: dict[str, Field], source: str, path: str = "") -> dict:
    """Check `data` against `schema`; return a new dict with defaults filled in."""
    from pydantic_core import ValidationError

    try:
        return _validator(schema).validate_python(data)
    except ValidationError as exc:
        error = first_error(exc.errors())
    where, problem = _describe(error, schema)
    raise SchemaError(f"{source}: {_join(path, where) or '(top level)'}: {problem}")


def _validator(schema: dict):
    entry = _compiled.get(id(schema))
    if entry is None:
        from pydantic_core import SchemaValidator

        if len(_compiled) >= _COMPILED_MAX:
            del _compiled[next(iter(_compiled))]
        entry = _compiled[id(schema)] = (schema, SchemaValidator(_core_schema(schema)))
    return entry[1]


# --- the declarative schema as pydantic-core's ---------------------------------------------------

def _core_schema(kind) -> Any:
    from pydantic_core import core_schema as cs

    if isinstance(kind, dict):
        fields = {name: cs.typed_dict_field(_field_schema(field), required=field.required)
                  for name, field in kind.items()}
        mapping = cs.typed_dict_schema(fields, extra_behavior="forbid", strict=True)
        return cs.no_info_before_validator_function(_none_is_absent, mapping)
    if isinstance(kind, ListOf):
        return cs.list_schema(_core_schema(kind.item), min_length=kind.min_items,
                              max_length=MAX_ITEMS, strict=True)
    if isinstance(kind, tuple):
        # Tried in this order: an integer where a number is among the kinds becomes a float.
        kinds = sorted(kind, key=lambda k: k is not float)
        return cs.union_schema([_core_schema(k) for k in kinds], mode="left_to_right")
    scalars = {
        str: lambda: cs.str_schema(max_length=MAX_TEXT, strict=True),
        int: lambda: cs.int_schema(ge=-MAX_INT, le=MAX_INT, strict=True),
        float: lambda: cs.float_schema(allow_inf_nan=False, strict=True),
        bool: lambda: cs.bool_schema(strict=True),
        # A free-form mapping: its reader checks the values (often with a schema of its own).
        dict: lambda: cs.dict_schema(cs.str_schema(max_length=MAX_TEXT, strict=True),
                                     cs.any_schema(), max_length=MAX_ITEMS, strict=True),
        list: lambda: cs.list_schema(cs.any_schema(), max_length=MAX_ITEMS, strict=True),
    }
    return scalars[kind]()


def _field_schema(field: Field) -> Any:
    from pydantic_core import core_schema as cs

    schema = _core_schema(field.kind)
    if field.choices is not None or field.check is not None:
        schema = cs.no_info_after_validator_function(_field_checks(field), schema)
    if not field.required:
        schema = cs.with_default_schema(schema, default=field.default)   # copied per use
    return schema


def _none_is_absent(data: Any) -> Any:
    """`key: null` (or `key:`) reads as the key left out: a default, or "missing"."""
    if isinstance(data, dict):
        return {key: value for key, value in data.items() if value is not None}
    return data


def _field_checks(field: Field):
    from pydantic_core import PydanticCustomError

    def check(value):
        problem = None
        if field.choices is not None and value not in field.choices:
            problem = f"must be one of {', '.join(map(str, field.choices))} (got {value!r})"
        elif field.check is not None:
            problem = field.check(value)
        if problem:
            raise PydanticCustomError(_CHECK_ERROR, "{problem}", {"problem": problem})
        return value
    return check


# --- pydantic's error as the project's one line --------------------------------------------------

def first_error(errors: list) -> dict:
    """The problem a reader meets first: pydantic lists a mapping's unknown keys after its fields'
    problems; here, as before, an unknown key (the first by name) comes before anything inside
    the mapping that holds it."""
    first = errors[0]
    unknown = [error for error in errors if error["type"] in _UNKNOWN]
    for depth in range(len(first["loc"])):
        here = [error for error in unknown if error["loc"][:-1] == first["loc"][:depth]]
        if here:
            return min(here, key=lambda error: str(error["loc"][-1]))
    return first


def _describe(error: dict, schema: dict) -> tuple[str, str]:
    """The dotted path the error's location names, and the problem in the project's words."""
    kind: Any = schema
    where, holder = "", schema
    loc = error["loc"]
    key = loc[-1:] == ("[key]",)          # a free-form mapping's key, not its value
    for part in loc[:-1] if key else loc:
        if isinstance(kind, dict):
            holder, where = kind, _join(where, _shown(part))
            kind = kind[part].kind if part in kind else None
        elif isinstance(kind, ListOf):
            where, kind = f"{where}[{part}]", kind.item
        elif kind is dict:
            where, kind = _join(where, _shown(part)), None
        elif kind is list:
            where, kind = f"{where}[{part}]", None
        else:
            break          # a union's member: the problem is the union's
    return where, _problem(error, kind, holder, key)


def _problem(error: dict, kind, holder: dict, key: bool) -> str:
    kind_of_error, value, context = error["type"], error["input"], error.get("ctx") or {}
    if kind_of_error == _CHECK_ERROR:
        return context["problem"]
    if kind_of_error == "missing":
        return "required field is missing"
    if kind_of_error in _UNKNOWN:
        return f"unknown field (known: {', '.join(sorted(holder))})"
    if kind_of_error == "too_short":
        return f"must hold at least {context['min_length']} item(s)"
    if kind_of_error == "too_long":
        return f"must hold at most {context['max_length']} items (got {context['actual_length']})"
    if kind_of_error == "string_too_long":
        what = "keys must be" if key else "must be text of"
        return f"{what} at most {context['max_length']} characters (got {len(value)})"
    if kind_of_error in ("greater_than_equal", "less_than_equal"):
        return f"must be an integer within ±(2^63 - 1) (got one of {len(str(abs(value)))} digits)"
    if key:
        return f"mapping keys must be text (got {kind_name(type(value))}: {value!r:.40})"
    return _type_problem(_expected(kind), value)


def _expected(kind) -> tuple:
    if isinstance(kind, tuple):
        return kind
    return (dict,) if isinstance(kind, dict) else (list,) if isinstance(kind, ListOf) else (kind,)


def _type_problem(expected: tuple, value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number (got {value!r})"
    if float in expected and isinstance(value, int) and not isinstance(value, bool):
        return (f"must be {_names(expected)} within about ±1.8e308 (got an integer of about "
                f"{value.bit_length() * 3 // 10} digits)")
    return f"must be {_names(expected)} (got {kind_name(type(value))})"


def _shown(key) -> str:
    """A key as the path shows it: a key of 100,000 characters would make the line a page."""
    text = str(key)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path and name else path or name


def _names(kinds: tuple) -> str:
    return " or ".join(kind_name(k) for k in kinds)


def kind_name(kind) -> str:
    """A Python type as an error names it: 'a string', 'a mapping'."""
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
            list: "a list", dict: "a mapping", type(None): "empty"}.get(kind, kind.__name__)


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
