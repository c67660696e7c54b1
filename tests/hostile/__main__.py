"""`python3 -m tests.hostile [-v] [SUBSTRING...]`: run the corpus (or the cases whose id holds one
of the substrings) outside pytest; print each failing case (-v: every case) as a JSON line with
its problems and time, then the totals."""
from __future__ import annotations

import json
import sys
import time

from tests.hostile.cases import CASES
from tests.hostile.runner import run_cases


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    wanted = [a for a in argv if a != "-v"]
    cases = [c for c in CASES if not wanted or any(a in c["id"] for a in wanted)]
    started = time.monotonic()

    def report(case_id: str, outcome: dict) -> None:
        if outcome["problems"] or verbose:
            print(json.dumps({"id": case_id, "s": outcome["seconds"], "problems": outcome["problems"]}),
                  flush=True)

    outcomes = run_cases(cases, report=report)
    failing = sum(1 for o in outcomes.values() if o["problems"])
    print(f"{len(cases)} cases, {failing} failing, {time.monotonic() - started:.0f} s")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
