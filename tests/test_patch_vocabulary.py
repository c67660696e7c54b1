"""forge.patching.vocabulary: patch kinds and statuses are enums whose members are their spelling
in patches/series.yaml, in cached statuses and in command output."""
import json

from forge.patching.report import SHORT
from forge.patching.series import KINDS, load_series
from forge.patching.status import STATUSES, release_status
from forge.patching.vocabulary import Kind, Status
from tests.build_cli import run_build


def test_members_are_their_spelling():
    assert Status.ALREADY_UPSTREAM == "already-upstream" and str(Status.NOT_NEEDED) == "not-needed"
    assert f"{Kind.MOE_CONFIG}" == "moe-config" and json.dumps([Status.CONFLICT]) == '["conflict"]'
    assert set(KINDS) == {k.value for k in Kind} and set(STATUSES) == set(Status) == set(SHORT)


def test_the_real_series_and_statuses_speak_the_vocabulary():
    series = load_series(offline=True)
    assert {p.kind for p in series.patches} <= set(Kind)
    assert {p.kind for p in series.patches} >= {Kind.SOURCE, Kind.MOE_CONFIG, Kind.DEPENDENCY}
    statuses = release_status("0.27.1", offline=True, series=series)
    assert statuses and all(type(s.status) is str and s.status in set(Status) for s in statuses)


def test_json_output_keeps_the_plain_spelling():
    result = run_build("patches", "--vllm", "0.27.1", "--json", "--offline")
    assert result.returncode in (0, 3), result.stderr
    entries = json.loads(result.stdout)["patches"]
    assert entries and {e["status"] for e in entries} <= {s.value for s in Status}
    assert {e["kind"] for e in entries} <= {k.value for k in Kind}
