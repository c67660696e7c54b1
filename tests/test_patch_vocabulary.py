"""forge.patching.vocabulary: patch kinds and statuses are enums whose members are their spelling
in patches/series.yaml, in cached statuses and in command output."""
import ast
import json
from pathlib import Path

import pytest

import forge
from forge.patching.report import SHORT
from forge.patching.series import KINDS, load_series
from forge.patching.status import STATUSES, release_status
from forge.patching.vocabulary import ApplyOutcome, Kind, RecordState, RevertStep, Status
from tests.build_cli import run_build


def test_members_are_their_spelling():
    assert Status.ALREADY_UPSTREAM == "already-upstream" and str(Status.NOT_NEEDED) == "not-needed"
    assert f"{Kind.MOE_CONFIG}" == "moe-config" and json.dumps([Status.CONFLICT]) == '["conflict"]'
    assert set(KINDS) == {k.value for k in Kind} and set(STATUSES) == set(Status) == set(SHORT)


@pytest.fixture(scope="module")
def cached_0_27_1():
    """What the --offline reads below need, fetched here (a fresh cache has none of it)."""
    release_status("0.27.1", series=load_series())


def test_the_real_series_and_statuses_speak_the_vocabulary(cached_0_27_1):
    series = load_series(offline=True)
    assert {p.kind for p in series.patches} <= set(Kind)
    assert {p.kind for p in series.patches} >= {Kind.SOURCE, Kind.MOE_CONFIG, Kind.DEPENDENCY}
    statuses = release_status("0.27.1", offline=True, series=series)
    assert statuses and all(type(s.status) is str and s.status in set(Status) for s in statuses)


def test_json_output_keeps_the_plain_spelling(cached_0_27_1):
    result = run_build("patches", "--vllm", "0.27.1", "--json", "--offline")
    assert result.returncode in (0, 3), result.stderr
    entries = json.loads(result.stdout)["patches"]
    assert entries and {e["status"] for e in entries} <= {s.value for s in Status}
    assert {e["kind"] for e in entries} <= {k.value for k in Kind}


# --- no module repeats a word of the vocabulary -------------------------------------------------

FORGE = Path(forge.__file__).resolve().parent
VOCABULARY = (Kind, Status, RecordState, RevertStep, ApplyOutcome)
FIELD_GETTERS = {"get", "pop", "setdefault"}


def _field_names_and_docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are not values: docstrings, and the names of fields
    (dict keys, subscripts, the key of .get/.pop/.setdefault), e.g. the apply record's "applied"
    list or a schema's "source" field."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        elif isinstance(node, ast.Dict):
            skipped.update(id(key) for key in node.keys if key is not None)
        elif isinstance(node, ast.Subscript):
            skipped.add(id(node.slice))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in FIELD_GETTERS and node.args):
            skipped.add(id(node.args[0]))
    return skipped


def repeated_words(source: str) -> list[tuple[int, str]]:
    """(line, word) for each string constant in `source` that spells a member of the vocabulary
    where code uses it as a value, instead of naming the member."""
    words = {member.value for enum in VOCABULARY for member in enum}
    tree = ast.parse(source)
    skipped = _field_names_and_docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in words and id(node) not in skipped]


def test_no_module_spells_a_status_or_kind_instead_of_naming_it():
    vocabulary = FORGE / "patching" / "vocabulary.py"
    modules = [p for p in sorted(FORGE.rglob("*.py")) if p != vocabulary]
    assert len(modules) > 30      # the walk found forge/ (a wrong root would find nothing)
    found = {str(p.relative_to(FORGE.parent)): words for p in modules
             if (words := repeated_words(p.read_text()))}
    assert found == {}
    assert repeated_words(vocabulary.read_text())   # the one place that spells them


def test_the_scan_catches_a_spelled_status_and_skips_field_names():
    assert repeated_words('if s.status == "conflict":\n    pass\n') == [(1, "conflict")]
    assert repeated_words('x = dict(record, state="applying")\n') == [(1, "applying")]
    assert repeated_words('Patch(kind="moe-config")\n') == [(1, "moe-config")]
    assert repeated_words('"""applies"""\nrecord = {"applied": []}\nrecord["source"]\n'
                          'run.get("applied", [])\ndef f():\n    """conflict"""\n') == []
