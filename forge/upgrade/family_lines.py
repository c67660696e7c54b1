"""Whether the log lines a model family file cites for verify (models/<family>.yaml
`drafter.shares.<what>`: what vLLM logs when the drafter takes the target's embedding or lm_head,
each a verify check "draft shares target <what>") can appear on a release: each line is looked for
among the string literals of the release's own `vllm/` tree (read with `ast`, implicit
concatenation joined, printf and str.format placeholders matching any text), never by running it.

A release where none of a check's lines is in the source cannot log it: verify's check has nothing
to read there (0.34.0 removed the V1 speculative directory, vllm/v1/spec_decode/gemma4.py and
llm_base_proposer.py with it).
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from forge import files
from forge.models import Family
from forge.upstream import releases

PACKAGE = "vllm"
# verify's check per shared part (verify/checks.py shared_check_name; forge does not import verify,
# tests/test_family_lines.py holds the two to one spelling).
CHECK_NAME = "draft shares target {what}"
_PLACEHOLDER = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfi]|\{[^{}]*\}")


@dataclass(frozen=True)
class LineCheck:
    """One cited line on each release: where the release's source holds it (path:line)."""
    family_file: str
    what: str                     # embedding | lm_head
    check: str                    # verify's check name
    line: str
    found: dict[str, list[str]] = field(default_factory=dict)    # release -> path:line

    def to_dict(self) -> dict:
        return {"family_file": self.family_file, "what": self.what, "check": self.check,
                "line": self.line, "found": self.found}


def _pattern(literal: str) -> re.Pattern | None:
    """A literal with placeholders as a pattern over finished log lines (None: a plain one)."""
    if not _PLACEHOLDER.search(literal):
        return None
    parts = _PLACEHOLDER.split(literal)
    return re.compile(".*".join(re.escape(p) for p in parts), re.DOTALL)


def _probe(line: str) -> bytes:
    """A piece of the line every source spelling holds in one literal: the text before its
    first placeholder-free break, at most 16 characters (long messages are split over lines)."""
    return line[:16].encode()


@functools.cache
def _literals(path: Path) -> tuple[tuple[str, int], ...]:
    try:
        tree = ast.parse(files.read_text(path, files.SOURCE))
    except (SyntaxError, ValueError):
        return ()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.value, node.lineno))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}"
                           for v in node.values)
            found.append((text, node.lineno))
    return tuple(found)


@functools.cache
def where_logged(version: str, line: str) -> tuple[str, ...]:
    """path:line of each string literal of release `version` that logs `line`."""
    root = releases.release_tree(version)
    probe, hits = _probe(line), []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if probe not in files.read_bytes(path, files.SOURCE):
            continue
        for literal, number in _literals(path):
            pattern = _pattern(literal)
            if literal == line or (pattern is not None and pattern.fullmatch(line)):
                hits.append(f"{path.relative_to(root)}:{number}")
    return tuple(hits)


def check_family(family: Family, versions: list[str]) -> list[LineCheck]:
    """Every cited log line of the family on each release."""
    source = family.source
    return [LineCheck(source, what, CHECK_NAME.format(what=what), line,
                      {str(v): list(where_logged(str(v), line)) for v in versions})
            for what, lines in family.shares.items() for line in lines]


def unseen(checks: list[LineCheck], version: str) -> dict[tuple[str, str], list[LineCheck]]:
    """(family file, what) -> its lines, where none of the lines of that check is in `version`'s
    source: verify's check cannot see the drafter take it there."""
    grouped: dict[tuple[str, str], list[LineCheck]] = {}
    for check in checks:
        grouped.setdefault((check.family_file, check.what), []).append(check)
    return {key: lines for key, lines in grouped.items()
            if not any(c.found.get(str(version)) for c in lines)}
