"""Every value a recipe serves stays what it was when the recipes were one file per target.

tests/fixtures/serve-commands.json is a recorded result of the old code: `capture()` below, run
once against the per-target recipe files (recipes/<model>/<target>.yaml, before they became one
file per model). It holds, for every (recipe, target): the single-node `build.py serve` argv at
vLLM 0.25.0, 0.27.1, 0.33.0 and the recipe's lowest admitted release, the multi-node argv where a
layout exists, and everything verify and bench read from a recipe (engine kwargs with and
without the drafter, cli args, env, thresholds, expect, sampling, moe_config per tensor parallel
size, the releases it admits). The qwen3.6-35b-a3b entries were recorded the same way from the
code of the branch that added them (commit cb74f98, its per-target files), before they were
converted to one file, and re-recorded on 2026-12-01 when the family's drafter pin joined their
speculative config (models/qwen3_5_moe.yaml drafter.attention_backend, record
h200-0.27.1-smoke-35b-a3b-v1-flash-attn: on vLLM 0.27.1 the MTP drafter ignored --attention-backend), and again when the H200
bench moved them to the V2 runner with the step cost it measured and the MoE backend it saw
(record h200-0.27.1-bench-35b-a3b-v2). The recipes may be reorganised freely; what they serve may not
change without this file changing with it, on purpose, in the same commit. A new (recipe,
target) pair is recorded by `python3 -m tests.test_recipes_golden --record-new` (docs/guides/),
which never rewrites a recorded pair.
"""
import json
import os
import re
from pathlib import Path

import pytest

from forge.serving.recipes import load_all, load_recipe
from forge.serving.serve import Interconnect, plan_multi_node, plan_serve

FIXTURE = Path(__file__).parent / "fixtures" / "serve-commands.json"
# Values that differ from the record on purpose: (recipe, section, key) -> (recorded, now, why).
DELIBERATE = {
    ("gemma-4-31b-it/h200", "thresholds", "min_acceptance_rate"): (
        0.51, 0.5, "derived as (2.51 - 1) / 3 = 0.503, rounded: the file stated 0.51, one more "
                   "than the relation recipes/README.md states (the length gate 2.51 binds)"),
    ("gemma-4-31b-it/h200", "thresholds", "step_cost_source"): (
        "measured: H200, vLLM 0.25.0, FP8, V2 runner, k=3, 31B shapes, 10 layers, dummy weights, "
        "eager compile backend, every draft accepted: 4.60 ms per step against 2.76 ms plain, "
        "2026-11-30 (recipes/gemma-4-31b-it/h200.sweep.md, docs/gpu-evidence.md §7)",
        "measured: H200, vLLM 0.25.0, FP8, V2 runner, k=3, 31B shapes, 10 layers, dummy weights, "
        "eager compile backend, every draft accepted: 4.60 ms per step against 2.76 ms plain, "
        "2026-11-30 (record h200-0.25.0-bench-31b-sweep-v2)",
        "the sweep's evidence moved beside the model's file, then into a result record"),
}
RELEASES = ("0.25.0", "0.27.1", "0.33.0")
# Releases the admitted ranges are probed at (below, inside and past the checked range).
PROBES = ("0.21.0", "0.24.0", "0.24.1", "0.25.0", "0.26.0", "0.29.0", "0.33.0", "0.33.1",
          "0.33.2", "0.34.0", "0.35.0", "1.0.0")
REPOSITORY = "127.0.0.1:5000/forge"
HF_CACHE = "/hf-cache"
NETWORK = Interconnect("192.168.100.10", ("192.168.100.10", "192.168.100.11"), "enp1s0f0np0",
                       ("rocep1s0f0", "roceP2p1s0f0"))


def _section(section):
    return None if section is None else dict(section.values)


def _layout(layout):
    return {**layout.values, "moe_config": _section(layout.moe_config)}


def recipe_facts(name: str, target: str) -> dict:
    """What verify, bench, roofline, tune-moe and the image plan read from a recipe."""
    recipe = load_recipe(name, target)
    return {
        "model": recipe.model, "drafter": recipe.drafter, "base_model": recipe.base_model,
        "weights": recipe.weights, "vllm": recipe.vllm,
        "admits": [v for v in PROBES if recipe.admits(v)],
        "serve": _section(recipe.serve), "speculative": _section(recipe.speculative),
        "sampling": _section(recipe.sampling), "thresholds": _section(recipe.thresholds),
        "expect": _section(recipe.expect), "checkpoint": _section(recipe.checkpoint),
        "moe_config": {str(tp): _section(recipe.moe_config_for(tp)) for tp in (1, 2)},
        "multi_node": [_layout(layout) for layout in recipe.multi_node],
        "env": recipe.env(), "speculative_config": recipe.speculative_config(),
        "engine_kwargs": recipe.engine_kwargs(),
        "engine_kwargs_no_draft": recipe.engine_kwargs(speculative=False),
        "cli_args": recipe.cli_args(), "cli_args_no_draft": recipe.cli_args(speculative=False),
    }


def serve_commands(name: str, target: str) -> dict:
    recipe = load_recipe(name, target)
    lowest = next(v for v in PROBES if recipe.admits(v))
    single = {}
    for version in sorted({*RELEASES, lowest}):
        plan = plan_serve(name, target, version, repository=REPOSITORY, hf_cache=HF_CACHE)
        single[version] = {"argv": plan.argv, "notes": plan.notes}
    multi = {}
    for layout in recipe.multi_node:
        for version in RELEASES:
            plan = plan_multi_node(name, target, version, layout.nodes, NETWORK,
                                   repository=REPOSITORY, hf_cache=HF_CACHE)
            multi[f"{layout.nodes}@{version}"] = {"argvs": plan.argvs, "notes": plan.notes}
    return {"single_node": single, "multi_node": multi}


def capture() -> dict:
    """Every (recipe, target) the recipes state, keyed "model/target"."""
    return {f"{r.name}/{r.target}": {**recipe_facts(r.name, r.target),
                                     **serve_commands(r.name, r.target)}
            for r in sorted(load_all(), key=lambda r: (r.name, r.target))}


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(FIXTURE.read_text())


# The record's ranges were capped at the series' checked_through of its day: the cap belongs to
# the series (tests/test_recipes.py follows it as it moves), so the capture reads a copy of the
# series stopped there.
RECORDED_THROUGH = "0.33.0"


def capture_as_recorded(scratch: Path) -> dict:
    """capture() with the series stopped at RECORDED_THROUGH (a copy in `scratch`), through JSON
    as recorded: tuples become lists, keys strings."""
    from forge.patching.series import DEFAULT_SERIES, load_series

    live = Path(DEFAULT_SERIES).read_text()
    series = scratch / "series.yaml"
    series.write_text(live.replace(f"checked_through: {load_series().checked_through}\n",
                                   f"checked_through: {RECORDED_THROUGH}\n"))
    before = os.environ.get("VLLM_FORGE_SERIES")
    os.environ["VLLM_FORGE_SERIES"] = str(series)
    try:
        return json.loads(json.dumps(capture()))
    finally:
        if before is None:
            del os.environ["VLLM_FORGE_SERIES"]
        else:
            os.environ["VLLM_FORGE_SERIES"] = before


@pytest.fixture(scope="module")
def current(tmp_path_factory) -> dict:
    return capture_as_recorded(tmp_path_factory.mktemp("series"))


def test_the_same_recipes_exist_on_the_same_targets(recorded, current):
    assert sorted(current) == sorted(recorded)
    assert len(recorded) >= 15


def test_every_recorded_serve_command_is_unchanged(recorded, current):
    for key, facts in recorded.items():
        assert current[key]["single_node"] == facts["single_node"], key
        assert current[key]["multi_node"] == facts["multi_node"], key


def _as_now(recorded: dict) -> dict:
    """The record with the deliberate differences applied (each checked to be the recorded one)."""
    expected = json.loads(json.dumps(recorded))
    for (key, section, name), (old, new, _why) in DELIBERATE.items():
        assert expected[key][section][name] == old, (key, section, name)
        expected[key][section][name] = new
    return expected


# expect's prose: where each expectation comes from. Not served and not read by verify, it may be
# reworded and shared (expect.note names a note of the file stated once for several targets,
# such as the H100 and H200 entries' attention measurement), as long as it cites what it cited.
PROSE = ("source", "note")
RECORD_ID = re.compile(r"\brecord ([a-z0-9][a-z0-9.-]*[a-z0-9])")


def _without_prose(expect: dict) -> dict:
    return {k: v for k, v in expect.items() if k not in PROSE}


def test_every_recorded_recipe_value_is_unchanged(recorded, current):
    for key, facts in _as_now(recorded).items():
        for field, value in facts.items():
            if field == "expect":
                assert _without_prose(current[key][field]) == _without_prose(value), key
            elif field not in ("single_node", "multi_node"):
                assert current[key][field] == value, f"{key}: {field}"


def test_the_expectations_still_cite_their_records(recorded):
    """Each recorded expect.source's records are cited by the recipe's source or by its note."""
    import yaml

    from forge.serving.recipes import recipe_path

    for key, facts in recorded.items():
        name, target = key.split("/")
        recipe = load_recipe(name, target)
        notes = yaml.safe_load(recipe_path(name).read_text()).get("notes") or {}
        now = recipe.expect.source + " " + notes.get(recipe.expect.note or "", "")
        assert set(RECORD_ID.findall(facts["expect"]["source"])) <= set(RECORD_ID.findall(now)), key
        if recipe.expect.note:
            assert f"notes.{recipe.expect.note}" in recipe.expect.source, key


def test_the_fixture_covers_the_layouts_and_releases(recorded):
    assert all(set(RELEASES) <= set(f["single_node"]) for f in recorded.values())
    with_layouts = [k for k, f in recorded.items() if f["multi_node"]]
    assert {"gemma-4-26b-a4b-it/gb10", "gemma-4-26b-a4b-it/h200"} <= set(with_layouts)


def record_new() -> list[str]:
    """Add to the record the (recipe, target) pairs it lacks, as the code serves them now (a new
    target or recipe: docs/guides/); a recorded pair is never rewritten here."""
    import tempfile

    from forge.files import write_text_atomically

    recorded = json.loads(FIXTURE.read_text())
    with tempfile.TemporaryDirectory() as scratch:
        current = capture_as_recorded(Path(scratch))
    added = sorted(set(current) - set(recorded))
    if added:
        record = {**recorded, **{key: current[key] for key in added}}
        write_text_atomically(FIXTURE, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return added


if __name__ == "__main__":
    # python3 -m tests.test_recipes_golden --record-new
    import sys

    if sys.argv[1:] != ["--record-new"]:
        sys.exit("usage: python3 -m tests.test_recipes_golden --record-new")
    ADDED = record_new()
    print("\n".join(f"recorded {key}" for key in ADDED) or "every (recipe, target) is recorded")
