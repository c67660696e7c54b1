"""README.md: its patch status table matches the manifest and the releases' real sources, and
every build.py command it tells a user to type exists."""
import re
from pathlib import Path

import pytest

from forge.commands.cli import build_parser
from forge.errors import ForgeError
from forge.patching import readme_table
from tests.build_cli import run_build

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"


run_cli = run_build


def test_readme_patch_table_is_current():
    result = run_cli("readme-table", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "README.md: the patch table is current"


def test_readme_table_shows_the_embedding_patch_per_release():
    table = README.read_text().split(readme_table.BEGIN, 1)[1].split(readme_table.END, 1)[0]
    rows = dict(re.findall(r"^\| (\d+\.\d+\.\d+) \| ([a-z-]+) \|", table, re.M))
    # docs/reference.md §1: no guard before 0.25.0, the guard in 0.25.0-0.26.0, the fix from 0.27.0.
    assert rows["0.24.0"] == "not-needed"
    assert rows["0.25.0"] == rows["0.25.1"] == rows["0.26.0"] == "applies"
    assert rows["0.27.0"] == rows["0.33.0"] == "already-upstream"


def test_stale_table_is_detected_and_regenerated(tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(f"# x\n\n{readme_table.BEGIN}\n| old | table |\n{readme_table.END}\n\nafter\n")
    result = run_cli("readme-table", "--readme", str(stale), "--check")
    assert result.returncode == 1
    assert "the patch table is stale; run `python3 build.py readme-table`" in result.stdout
    assert "| old | table |" in stale.read_text()  # --check writes nothing
    assert run_cli("readme-table", "--readme", str(stale)).returncode == 0
    text = stale.read_text()
    assert "| old | table |" not in text and "| 0.25.0 | applies |" in text
    assert text.startswith("# x\n\n") and text.endswith("\n\nafter\n")
    assert run_cli("readme-table", "--readme", str(stale), "--check").returncode == 0


def test_readme_without_markers_names_the_file():
    with pytest.raises(ForgeError, match=r"^README\.md: no '<!-- patch-table:begin -->'"):
        readme_table.replace_table("# no markers\n", "table", "README.md")


def test_every_build_py_command_in_the_readme_exists():
    commands = set(build_parser()._subparsers._group_actions[0].choices)  # noqa: SLF001
    used = set(re.findall(r"python3? build\.py ([a-z][a-z-]*)", README.read_text()))
    assert {"readme-table", "publish", "upstream-watch", "serve", "lock", "bake"} <= used
    assert used <= commands, f"README names unknown commands: {sorted(used - commands)}"


def test_readme_says_python3_throughout():
    """Debian 12 has no `python` outside a virtual environment: every command the README gives
    runs python3 (before, it mixed `python3 build.py` and `python3 -m`)."""
    commands = re.findall(r"\bpython3?\b(?= (?:-m|build\.py|verify/))", README.read_text())
    assert commands and set(commands) == {"python3"}


def test_readme_main_job_is_one_command():
    assert "python3 build.py --target gb10 --vllm 0.27.1" in README.read_text()
    plan = run_cli("--target", "gb10", "--vllm", "0.27.1", "--plan", "--allow-unlocked")
    assert plan.returncode == 0, plan.stderr
    assert "vllm0.27.1-gb10" in plan.stdout
