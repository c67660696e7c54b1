"""The whole corpus: every table, in one list, each case id unique and readable."""
from __future__ import annotations

from tests.hostile.cases_cache import cache_cases
from tests.hostile.cases_faults import (
    control_cases,
    env_cases,
    full_disk_cases,
    read_only_cases,
    server_cases,
    sigint_cases,
)
from tests.hostile.cases_files import file_cases
from tests.hostile.cases_flags import flag_cases
from tests.hostile.cases_network import network_cases
from tests.hostile.cases_numbers import number_cases
from tests.hostile.cases_typed import typed_cases


def all_cases() -> list[dict]:
    cases = [*control_cases(), *file_cases(), *flag_cases(), *env_cases(), *full_disk_cases(),
             *read_only_cases(), *sigint_cases(), *server_cases(), *cache_cases(), *network_cases(),
             *number_cases(), *typed_cases()]
    ids = [case["id"] for case in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"duplicate case ids: {duplicates}"
    return cases


CASES = all_cases()
