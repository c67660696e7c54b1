"""`build.py evidence`: docs/evidence.md regenerated from the result records (--check: exit 1
when it is stale, writing nothing)."""
from __future__ import annotations

from pathlib import Path

from forge.files import write_text_atomically


def cmd_evidence(args) -> int:
    from forge.evidence.page import COMMAND, PAGE, regenerate

    page, name = (Path(args.page), args.page) if args.page else (PAGE, "docs/evidence.md")
    results = Path(args.results) if args.results else None
    current, updated = regenerate(page, name, results)
    if args.check:
        if updated != current:
            print(f"{name}: stale against the result records; run `{COMMAND}`")
            return 1
        print(f"{name}: current")
        return 0
    if updated != current:
        write_text_atomically(page, updated)
        print(f"{name}: regenerated")
    else:
        print(f"{name}: already current")
    return 0
