"""The hostile corpus (issue 35, item 7): every case of tests/hostile/cases*.py, one test each.

The cases selected for this run are run once, on two sessions at once (tests/hostile/runner.py),
when the first of them is reached; each test then reports its own case. How a case runs and
what it asserts: tests/hostile/harness.py; how to add one: docs/development.md ("The hostile corpus")."""
import pytest

from tests.hostile.cases import CASES
from tests.hostile.runner import run_cases


@pytest.fixture(scope="module")
def outcomes(request):
    selected = {item.callspec.params["case"]["id"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    return run_cases([case for case in CASES if case["id"] in selected])


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_hostile_case(case, outcomes):
    problems = outcomes[case["id"]]["problems"]
    assert not problems, " | ".join(problems)
