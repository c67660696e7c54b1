"""`build.py evidence`: docs/evidence.md regenerated from the result records (--check: exit 1
when it is stale, writing nothing; --derive ID: first set that record's figures from its raw
report)."""
from __future__ import annotations

from pathlib import Path

from forge.commands.generated import check_or_write
from forge.errors import ForgeError


def cmd_evidence(args) -> int:
    from forge.evidence.page import COMMAND, PAGE, regenerate

    page, name = (Path(args.page), args.page) if args.page else (PAGE, "docs/evidence.md")
    results = Path(args.results) if args.results else None
    if args.derive:
        if args.check:
            raise ForgeError("--derive writes the records: not with --check")
        _derive(args.derive, results)
    current, updated = regenerate(page, name, results)
    return check_or_write(page, name, "the page of result records", current, updated,
                          check=args.check, command=COMMAND)


def _derive(ids: list[str], results: Path | None) -> None:
    from forge.evidence.figures import write_derived
    from forge.evidence.records import load_records

    records = load_records(results)
    missing = [i for i in ids if i not in records]
    if missing:  # refused before any record is written
        raise ForgeError(f"--derive: no result record {missing[0]!r} "
                         f"(benchmarks/results/<id>/result.json)")
    for record_id in ids:
        figures = write_derived(records[record_id], records)
        print(f"{record_id}: {len(figures)} figure(s) from its raw report")
