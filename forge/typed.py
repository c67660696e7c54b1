"""What every typed model of a JSON file shares (pydantic v2): one configuration, the bounded
types the models are made of, and the two ways a model is applied to what a file held:

- a cache entry (entry_or_none): the model or None, a damaged entry being one to make again;
- a file a user gives or a run wrote (loaded): the model, or one DataError line naming the file
  and the first field at fault (`work/report.json: checks[2].name: must be a string (got a list)`).

The configuration: strict types (a 1 is no true, a "2" no count), no key the writer does not
write, no NaN or infinity (json.loads reads 1e999 as one), frozen. Sizes are bounded by field, far
above any real file, and every file by its kind's cap (forge.files).

pydantic is imported with this module: a module on build.py's start-up path imports its models
only where it reads a file."""
from __future__ import annotations

from typing import Annotated, TypeVar

from packaging.version import Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, ValidationError

from forge.data_formats import DataError
from forge.schema import kind_name

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)
# A file another program writes (pip's --report): only the fields read are modelled, strictly;
# the others are its own, and dropped.
FOREIGN = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, frozen=True)
# A file whose top level is a list or a mapping of its own (a RootModel, which has no extra keys
# to refuse).
STRICT_ROOT = ConfigDict(strict=True, allow_inf_nan=False, frozen=True)

# Far above any real value: a name, version or URL is under 300 characters, a path in an sdist
# under 200 (releases.NAME_CAP bounds it at 1024), a check's detail or an error a few KB.
Name = Annotated[str, Field(max_length=1024)]
Text = Annotated[str, Field(max_length=1 << 20)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
# Seconds since the epoch or a duration: finite (the configuration), never negative.
Seconds = Annotated[float, Field(ge=0)]
# A list or mapping of names (installed packages, requirement lines, a tree's files): the largest
# real one is an sdist's 10,296 files; releases.MEMBERS_CAP bounds an extraction at 200,000.
MAX_ITEMS = 200_000
Names = Annotated[list[Name], Field(max_length=MAX_ITEMS)]



def _is_version(text: str) -> str:
    Version(text)         # InvalidVersion is a ValueError: pydantic names the field
    return text


# A PEP 440 version as the writer wrote it (str(Version(...)) or the index's spelling).
VersionText = Annotated[str, Field(max_length=128), AfterValidator(_is_version)]



# Open-ended JSON (vLLM's engine keywords, a window's figures): JSON values, their numbers finite
# (the configuration), nested at most JSON_DEPTH deep with at most JSON_ITEMS entries in each list
# or mapping and strings of at most Text's length; the whole file bounded by its kind's cap.
JSON_DEPTH = 32
JSON_ITEMS = 100_000


def _bounded_json(value: JsonValue) -> JsonValue:
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if depth > JSON_DEPTH:
            raise ValueError(f"nested over {JSON_DEPTH} levels deep")
        if isinstance(item, (list, dict)):
            if len(item) > JSON_ITEMS:
                raise ValueError(f"a list or mapping of over {JSON_ITEMS} entries")
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
        elif isinstance(item, str) and len(item) > 1 << 20:
            raise ValueError("a string over 1 MiB")
    return value


BoundedJson = Annotated[JsonValue, AfterValidator(_bounded_json)]


def one_of(words: tuple[str, ...]):
    """A validator that takes only one of `words` (a vocabulary's spellings)."""
    def check(text: str) -> str:
        if text not in words:
            raise ValueError(f"must be one of {', '.join(words)}")
        return text
    return AfterValidator(check)


Model = TypeVar("Model", bound=BaseModel)

# The tags pydantic puts into an error's location for a union's branch (JsonValue's list, dict,
# str, ...): no field of the file, left out of the path the message names.
_BRANCH_TAGS = {"list", "dict", "str", "bool", "int", "float", "[key]"}


def entry_or_none(model: type[Model], data: object) -> Model | None:
    """`data` as `model`, or None where it is not one (missing, of another shape or type)."""
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def loaded(model: type[Model], data: object, source: object) -> Model:
    """`data` (what `source` held) as `model`, or a DataError naming the file and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DataError(problem_line(exc, source)) from None


def problem_line(exc: ValidationError, source: object) -> str:
    """'<source>: <field path>: <what is wrong>', and how many more problems there are."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {field_path(first['loc'])}: {_problem(first)}{more}"


# pydantic's type errors, by the type the field holds: said in forge.schema's words, with what the
# file held instead ("must be a string (got a list)"), as every data file's refusal says it.
_TYPE_ERRORS = {"string_type": str, "bool_type": bool, "int_type": int, "float_type": float,
                "dict_type": dict, "list_type": list, "model_type": dict, "model_attributes_type": dict}


def _problem(error) -> str:
    expected = _TYPE_ERRORS.get(error["type"])
    if expected is None:
        return error["msg"]
    return f"must be {kind_name(expected)} (got {kind_name(type(error['input']))})"


def field_path(location: tuple) -> str:
    """pydantic's location as the file's reader names it: checks[2].status, or (top level)."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in _BRANCH_TAGS and not str(part).startswith(("function-", "literal[")):
            path += f".{part}" if path else str(part)
    return path or "(top level)"
