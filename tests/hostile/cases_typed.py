"""Files of the right JSON syntax and the wrong shape, where a typed model (forge/typed.py) reads
them: each is refused in one line naming the file and the field, and nothing is written. Before
the models, a verify report's recipe that was a list became a key of the published index (its
repr), a work tree's state whose command was a list was named as the command that made it, and a
finish journal that was a list stopped --finish with a traceback."""
from __future__ import annotations

from tests.hostile.commands import PUBLISH, build

WORK = "repo/build/patch-work/hostile-new"
STATE = '{"id": "hostile-new", "vllm": "0.27.1", "command": "new-patch"}'
FINISH = build("new-patch", "hostile-new", "--vllm", "0.27.1", "--finish")


def _work_tree(state: str, *journal: str) -> list[tuple]:
    """A work tree new-patch made (its state file and vllm/), with a finish journal if given."""
    return [("write", f"{WORK}/patch-work.json", state), ("write", f"{WORK}/vllm/__init__.py", ""),
            *[("write", f"{WORK}/finish.json", text) for text in journal]]


def typed_cases() -> list[dict]:
    return [
        {**PUBLISH, "id": "typed-report-recipe-a-list",
         "setup": [("replace", "work/report.json", '"target": "gb10"', '"recipe": ["gemma"], "target": "gb10"')],
         "exit": 2, "stderr": ["{work}/report.json", "recipe: Input should be a valid string"], "creates": []},
        {**FINISH, "id": "typed-work-state-command-a-list",
         "setup": _work_tree(STATE.replace('"new-patch"', '["new-patch"]')),
         "exit": 2, "stderr": ["build/patch-work/hostile-new/patch-work.json", "command"], "creates": []},
        {**FINISH, "id": "typed-finish-journal-a-list", "setup": _work_tree(STATE, "[1, 2]"),
         "exit": 2, "stderr": ["build/patch-work/hostile-new/finish.json", "(top level)"], "creates": []},
    ]
