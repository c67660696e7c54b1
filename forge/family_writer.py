"""`build.py new-family`: a model family's file, models/<family>.yaml, started from an existing
family's (the closest in architecture) with one model, so that every field the loader requires
is there to be corrected rather than looked up.

The new file says at its top which family it was copied from; the model's `source` says its
shapes are that family's until replaced. It is validated as every command loads it
(forge.models.parse_family, and no two families listing one Hugging Face id) before the atomic
rename.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from forge.data_formats import load_yaml, parse_yaml
from forge.errors import ForgeError
from forge.files import DATA_YAML, read_text, write_text_atomically
from forge.models import family_names, load_family, models_dir, parse_family


def _name_problem(name: str) -> str | None:
    if re.fullmatch(r"[a-z][a-z0-9_]*", name):
        return None
    return f"a family name is lowercase letters, digits and '_' (got {name!r})"


def _model_key(model_id: str) -> str:
    """The model's key in `models:` from its id: google/gemma-4-26B-A4B-it -> gemma-4-26b-a4b-it."""
    return model_id.split("/", 1)[1].lower()


def new_family_text(name: str, like: str, model_id: str, label: str | None,
                    root: Path | None = None) -> str:
    like_family = load_family(like, root)
    data = load_yaml(like_family.source)
    first_key, first = next(iter(data["models"].items()))
    data["family"] = name
    data["dummy"]["directory_prefix"] = name.replace("_", "-")
    data["models"] = {_model_key(model_id): {
        "label": label or model_id.split("/", 1)[1],
        "ids": [model_id],
        "source": (f"assumption: the shapes of {like}'s {first_key} (models/{like}.yaml), copied "
                   f"by new-family; replace each with the model's config.json and name it here"),
        "text": first["text"],
    }}
    header = (f"# The {name} model family: forge/models.py validates it on load. Written by\n"
              f"# `build.py new-family` from models/{like}.yaml: every value below is {like}'s until\n"
              f"# replaced with this family's (docs/guides/adding-a-model-family.md says where each is read).\n")
    return header + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def add_family(name: str, like: str, model_id: str, label: str | None = None,
               root: Path | None = None) -> Path:
    problem = _name_problem(name)
    if problem:
        raise ForgeError(f"new-family NAME: {problem}")
    folder = Path(root or models_dir())
    path = folder / f"{name}.yaml"
    if path.exists():
        raise ForgeError(f"new-family NAME: {path} exists; edit it there")
    if like not in family_names(folder):
        raise ForgeError(f"--like: no family {like!r} in {folder} (families: "
                         f"{', '.join(family_names(folder))})")
    # printable: the id is written into the file and printed in the `next:` command to paste
    if model_id.count("/") != 1 or " " in model_id or not model_id.isprintable():
        raise ForgeError(f"--model-id: must be a Hugging Face id like org/name (got {model_id!r})")
    for other in family_names(folder):
        if any(model_id in m.ids for m in load_family(other, folder).models.values()):
            raise ForgeError(f"--model-id: models/{other}.yaml already lists {model_id!r}")

    def check(candidate: Path) -> None:
        parse_family(parse_yaml(read_text(candidate, DATA_YAML), str(path)), str(path), name)

    return write_text_atomically(path, new_family_text(name, like, model_id, label, folder), check)
