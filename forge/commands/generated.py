"""A generated text inside the tree (README's patch table, recipes/README.md's thresholds table,
docs/evidence.md): `--check` says whether it is current (exit 1 when stale, so CI can gate on
it); otherwise it is rewritten when it changed. One wording for all of them."""
from __future__ import annotations

from pathlib import Path

from forge.files import write_text_atomically
from forge.untrusted import visible


def check_or_write(path: Path, name: str, what: str, current: str, updated: str, *, check: bool,
                   command: str) -> int:
    """`name` is the file as the user sees it, `what` the generated part ("the patch table")."""
    name = visible(name)   # a path given by a flag (--readme, --page)
    if check:
        if updated != current:
            print(f"{name}: {what} is stale; run `{command}`")
            return 1
        print(f"{name}: {what} is current")
        return 0
    if updated != current:
        write_text_atomically(path, updated)
        print(f"{name}: {what} updated")
    else:
        print(f"{name}: {what} already current")
    return 0
