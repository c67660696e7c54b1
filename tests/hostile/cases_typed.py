"""Files of the right JSON syntax and the wrong shape, where a typed model (forge/typed.py) reads
them: each is refused in one line naming the file and the field, and nothing is written. Before
the models, a verify report's recipe that was a list became a key of the published index (its
repr), a work tree's state whose command was a list was named as the command that made it, and a
finish journal that was a list stopped --finish with a traceback, tune results whose decisions
held a number stopped tune-moe --import-results with one, and a bench run whose decode figure was
1e999 (json reads it as infinity) proved a tuned MoE config won end to end: it was shipped; an
engine result whose `engine` was a list stopped bench.py --collect with a traceback."""
from __future__ import annotations

from pathlib import Path

from tests.hostile.commands import PUBLISH, RECIPE, TUNE_IMPORT, build, out_dir

WORK = "repo/build/patch-work/hostile-new"
STATE = '{"id": "hostile-new", "vllm": "0.27.1", "command": "new-patch"}'
FINISH = build("new-patch", "hostile-new", "--vllm", "0.27.1", "--finish")


def _work_tree(state: str, *journal: str) -> list[tuple]:
    """A work tree new-patch made (its state file and vllm/), with a finish journal if given."""
    return [("write", f"{WORK}/patch-work.json", state), ("write", f"{WORK}/vllm/__init__.py", ""),
            *[("write", f"{WORK}/finish.json", text) for text in journal]]


# The case tree holds no benchmarks/results: the H200 run's files are written into it.
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
TUNE_RESULTS = (RESULTS / "h200-0.25.0-tune-moe-26b-a4b" / "tune-moe-fp8_w8a8.json").read_text()
BENCH_RUN = (RESULTS / "h200-0.25.0-bench-26b-a4b-l30-moe-config" / "bench.json").read_text()
# The measured run, compared as tests/test_moe_tune.py does: the tuned engine against none.
END_TO_END = {**TUNE_IMPORT, "argv": [*TUNE_IMPORT["argv"], "--end-to-end", "{work}/bench.json",
                                      "--with-engine", "fp8-mtp4-v2-moe-tuned-kplus1",
                                      "--without-engine", "fp8-mtp4-v2-moe-none"]}
MEASURED = [("write", "work/tune.json", TUNE_RESULTS), ("write", "work/bench.json", BENCH_RUN)]


# bench.py --collect: the results a run left under --out, read again (no engine starts).
COLLECT = {"run": "bench", "argv": ["--recipe", RECIPE, "--target", "h200", "--dummy", "--layers", "2",
                                    "--collect", "--configs", "", "--engine", "name=e", "--windows",
                                    "sustained", "--out", "{work}/out"],
           "exit": 1, "creates": out_dir("work/out"), "reports_in": "work/out"}


def typed_cases() -> list[dict]:
    return [
        {**PUBLISH, "id": "typed-report-recipe-a-list",
         "setup": [("replace", "work/report.json", '"target": "gb10"', '"recipe": ["gemma"], "target": "gb10"')],
         "exit": 2, "stderr": ["{work}/report.json", "recipe: must be a string (got a list)"], "creates": []},
        {**FINISH, "id": "typed-work-state-command-a-list",
         "setup": _work_tree(STATE.replace('"new-patch"', '["new-patch"]')),
         "exit": 2, "stderr": ["build/patch-work/hostile-new/patch-work.json", "command"], "creates": []},
        {**FINISH, "id": "typed-finish-journal-a-list", "setup": _work_tree(STATE, "[1, 2]"),
         "exit": 2, "stderr": ["build/patch-work/hostile-new/finish.json", "(top level)"], "creates": []},
        {**END_TO_END, "id": "typed-tune-results-decision-a-number",
         "setup": [*MEASURED, ("replace", "work/tune.json", '"decisions": [', '"decisions": [1,')],
         "exit": 2, "stderr": ["{work}/tune.json", "decisions[0]: must be a mapping (got an integer)"],
         "creates": []},
        {**END_TO_END, "id": "typed-bench-run-decode-figure-infinite",
         "setup": [*MEASURED, ("replace", "work/bench.json", '"decode_tok_s": 663.3', '"decode_tok_s": 1e999')],
         "exit": 2, "stderr": ["{work}/bench.json", "figures.sustained@agree.decode_tok_s: Input should be "
                               "a finite number"], "creates": []},
            {**COLLECT, "id": "typed-engine-result-engine-a-list",
         "setup": [("write", "work/out/engines/e.result.json", '{"engine": ["started"], "windows": {}}')],
         "stdout": "e.result.json: engine: must be a mapping (got a list)", "stderr": None},
    ]
