"""A model family's YAML copied into a temporary models/ folder with one edit made: how the tests
show what a broken family file is told (forge.models.load_family reads that folder)."""
from __future__ import annotations

from pathlib import Path

import yaml

from forge.models import MODELS_DIR


def edited_family(tmp_path: Path, family: str, edit) -> Path:
    """The folder holding models/<family>.yaml as shipped, after `edit(data)`."""
    root = tmp_path / "models"
    root.mkdir()
    data = yaml.safe_load((MODELS_DIR / f"{family}.yaml").read_text())
    edit(data)
    (root / f"{family}.yaml").write_text(yaml.safe_dump(data))
    return root
