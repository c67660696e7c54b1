"""The verify prompt set (prompts.yaml beside this file), validated on load."""
from __future__ import annotations

from pathlib import Path

from forge.schema import Field, ListOf, load_yaml, validate

PROMPTS_FILE = Path(__file__).with_name("prompts.yaml")
CATEGORIES = ("chat", "code", "prose", "burst")
# A prompt shorter than this is not a realistic request (and hints at a truncated file).
MIN_PROMPT_CHARS = 20

SCHEMA = {
    **{name: Field(ListOf(str, min_items=1)) for name in CATEGORIES},
    "followup": Field({"first": Field(str), "second": Field(str)}),
}


def load_prompts(path: Path | str = PROMPTS_FILE) -> dict:
    source = str(path)
    data = validate(load_yaml(path), SCHEMA, source)
    for category in CATEGORIES:
        for index, text in enumerate(data[category]):
            if len(text.strip()) < MIN_PROMPT_CHARS:
                from forge.schema import SchemaError
                raise SchemaError(f"{source}: {category}[{index}]: prompt shorter than "
                                  f"{MIN_PROMPT_CHARS} characters")
    return data


def gate_prompts(data: dict) -> list[tuple[str, str]]:
    """(category, text) for the acceptance gate: chat, code and prose together, since the
    acceptance a user sees is the mix, and a drafter that only handles code would pass otherwise."""
    return [(category, text) for category in ("chat", "code", "prose") for text in data[category]]
