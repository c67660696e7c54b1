"""Property-based tests of the typed boundary of every data file (issue 48, items 2 and 6): a
near miss of a real committed file, written and read through the project's own loader, either
loads or is refused in ONE line that starts with the file's path; never any other exception.

Each example starts from the real file's parsed data and applies one to three mutations where
the data holds something: a key dropped or added (a non-text key among them), a value replaced
by one of another type, a huge or non-finite number, a long text, a long list, deep nesting, or
a newline after a text (an id that a `$` would let through)."""
from __future__ import annotations

import copy
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

# Hypothesis keeps caches in ./.hypothesis unless told: outside the checkout, which stays clean.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "vllm-forge-hypothesis"))

import pytest  # noqa: E402
import yaml  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402 (after the storage folder is set)
from hypothesis import strategies as st  # noqa: E402

from benchmarks.gpu.runner.plan import PlanError, load_plan  # noqa: E402
from forge.data_formats import load_yaml, parse_json  # noqa: E402
from forge.engines.cpu_builds import load_cpu_engines  # noqa: E402
from forge.engines.cpu_lock import load_cpu_lock  # noqa: E402
from forge.errors import ForgeError  # noqa: E402
from forge.evidence.records import load_record  # noqa: E402
from forge.models import load_family  # noqa: E402
from forge.patching.series import load_series  # noqa: E402
from forge.serving.recipes import load_all  # noqa: E402
from forge.targets import load_targets  # noqa: E402
from forge.watch.dependencies import load_watch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# No example database: the tests leave nothing behind in the checkout (.hypothesis/).
SETTINGS = settings(max_examples=50, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


def _nested(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = {"deeper": value}
    return value


# What a value is replaced by, or a key added with: other types, numbers past every range, and
# sizes past the caps (forge.schema.MAX_TEXT, MAX_ITEMS; the loader's MAX_DEPTH).
HOSTILE = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 2**63, 10**30, 10**400, -0.0, 1e308,
                     float("nan"), float("inf"), float("-inf"), "", "0.27.1", "0.27.1\n", "a\nb",
                     "{model}", "../../etc/passwd", [], [None], {}, {"k": 1}, {1: "x"}]),
    st.integers(), st.floats(), st.text(max_size=20),
    st.lists(st.integers() | st.text(max_size=5), max_size=4),
    st.just("x" * 100_001), st.just(["x"] * 10_001), st.just(_nested(80)), st.just(_nested(8)),
)
MUTATIONS = ("replace", "drop", "add", "swap", "newline")


def _paths(data, path=()) -> list[tuple]:
    """Every place in `data`: the root, each mapping value, each list item."""
    found = [path]
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found += _paths(value, (*path, key))
    return found


def _swapped(value):
    """The value in another type that means the same to a reader: 5 -> "5", "5" -> 5, a list
    -> a mapping of its items, a mapping -> the list of its values, true -> 1."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return int(value) if value.isdigit() else [value]
    if isinstance(value, list):
        return {str(i): item for i, item in enumerate(value)}
    if isinstance(value, dict):
        return list(value.values())
    return "null"


def _mutate(data, draw) -> object:
    kind = draw(st.sampled_from(MUTATIONS))
    path = draw(st.sampled_from(_paths(data)))
    value = copy.deepcopy(draw(HOSTILE))     # never a value another example holds too
    if not path:                 # the whole file
        return value if kind == "replace" else data
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if kind == "replace":
        parent[key] = value
    elif kind == "drop":
        del parent[key]
    elif kind == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(["zz", "id", "", 1, "colour"]))] = value
    elif kind == "add":
        parent.insert(key, value)
    elif kind == "swap":
        parent[key] = _swapped(parent[key])
    elif isinstance(parent[key], str):
        parent[key] += "\n"
    return data


def near_misses(real) -> st.SearchStrategy:
    @st.composite
    def mutated(draw):
        data = copy.deepcopy(real)
        for _ in range(draw(st.integers(1, 3))):
            data = _mutate(data, draw)
        return data
    return mutated()


_names = itertools.count()


def _write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1 << 20))
    return path


def assert_loads_or_refuses_in_one_line(load, path: Path, errors=(ForgeError,)) -> None:
    try:
        load()
    except errors as error:
        message = str(error)
        assert "\n" not in message, message[:2000]
        assert message.startswith(f"{path}:"), message[:2000]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data-file-properties")


def _real_yaml(relative: str):
    return load_yaml(REPO / relative)


# --- one test per loader ---------------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_series(scratch, data):
    """patches/series.yaml, beside a copy of the patch files it names (their hashes are checked)."""
    folder = scratch / "patches"
    if not folder.is_dir():
        shutil.copytree(REPO / "patches", folder)
    path = _write_yaml(folder / f"series-{next(_names)}.yaml",
                       data.draw(near_misses(_real_yaml("patches/series.yaml"))))
    assert_loads_or_refuses_in_one_line(lambda: load_series(path, offline=True, check_index=False), path)


@SETTINGS
@given(st.data())
def test_targets(scratch, data):
    path = _write_yaml(scratch / f"targets-{next(_names)}.yaml",
                       data.draw(near_misses(_real_yaml("images/targets.yaml"))))
    assert_loads_or_refuses_in_one_line(lambda: load_targets(path), path)


@SETTINGS
@given(st.data())
def test_recipe(scratch, data):
    """One model file in a recipes folder of its own, every target's recipe merged and checked
    (against the real targets, model families and known failures)."""
    folder = scratch / f"recipes-{next(_names)}"
    folder.mkdir()
    path = _write_yaml(folder / "gemma-4-26b-a4b-it.yaml",
                       data.draw(near_misses(_real_yaml("recipes/gemma-4-26b-a4b-it.yaml"))))
    assert_loads_or_refuses_in_one_line(lambda: load_all(folder), path)


@SETTINGS
@given(st.data(), st.sampled_from(["gemma4", "qwen3_5_moe"]))
def test_model_family(scratch, data, family):
    """A family file, its tiny model's shapes included."""
    folder = scratch / f"models-{next(_names)}"
    folder.mkdir()
    path = _write_yaml(folder / f"{family}.yaml", data.draw(near_misses(_real_yaml(f"models/{family}.yaml"))))
    assert_loads_or_refuses_in_one_line(lambda: load_family(family, folder), path)


@SETTINGS
@given(st.data())
def test_cpu_engines(scratch, data):
    path = _write_yaml(scratch / f"cpu-engines-{next(_names)}.yaml",
                       data.draw(near_misses(_real_yaml("images/cpu-engines.yaml"))))
    assert_loads_or_refuses_in_one_line(lambda: load_cpu_engines(path), path)


def _lock_excerpt() -> dict:
    """One release of the lock with a few of its wheels, a URL among them: each of its 456 wheels
    is the same shape, and near misses of the whole file cost seconds an example to write."""
    lock = _real_yaml("images/cpu-engines-lock.yaml")
    version = next(iter(lock))
    return {version: {**lock[version], "wheels": lock[version]["wheels"][:3]}}


@SETTINGS
@given(st.data())
def test_cpu_engines_lock(scratch, data):
    path = _write_yaml(scratch / f"cpu-engines-lock-{next(_names)}.yaml", data.draw(near_misses(_lock_excerpt())))
    assert_loads_or_refuses_in_one_line(lambda: load_cpu_lock(path), path)


@SETTINGS
@given(st.data())
def test_dependency_watch(scratch, data):
    path = _write_yaml(scratch / f"dependency-watch-{next(_names)}.yaml",
                       data.draw(near_misses(_real_yaml("patches/dependency-watch.yaml"))))
    assert_loads_or_refuses_in_one_line(lambda: load_watch(path), path)


RECORD = REPO / "benchmarks" / "results" / "h200-0.27.1-bench-26b-a4b-l10-long-attention"


@SETTINGS
@given(st.data())
def test_result_record(scratch, data):
    """A result.json, in a copy of its folder (its files are checked beside it); written as JSON
    with NaN and Infinity as Python writes them, for the loader to refuse."""
    folder = scratch / f"records-{next(_names)}" / RECORD.name
    shutil.copytree(RECORD, folder)
    real = parse_json((RECORD / "result.json").read_bytes(), "result.json")
    path = folder / "result.json"
    path.write_text(json.dumps(data.draw(near_misses(real))))
    assert_loads_or_refuses_in_one_line(lambda: load_record(folder), path)


@SETTINGS
@given(st.data(), st.sampled_from(["smoke", "bench", "serve"]))
def test_gpu_plan(scratch, data, plan):
    path = _write_yaml(scratch / f"plan-{next(_names)}.yaml",
                       data.draw(near_misses(_real_yaml(f"benchmarks/gpu/plans/{plan}.yaml"))))
    assert_loads_or_refuses_in_one_line(lambda: load_plan(path), path, (PlanError,))
