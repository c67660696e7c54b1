"""README.md, the front door: its patch status table matches the manifest and the releases' real
sources; its lists that could drift (targets, recipes, commands) are the repository's; it stays
short; and every build.py command it (or a page under docs/) tells a user to type exists."""
import re
import textwrap
from pathlib import Path

import pytest

from forge.commands.cli import build_parser
from forge.errors import ForgeError
from forge.patching import readme_table
from tests.build_cli import run_build

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
# the pages a user is sent to for commands: the README and the pages under docs/ it links
PAGES = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
MAX_LINES = 220


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


def command_names() -> list[str]:
    return list(build_parser()._subparsers._group_actions[0].choices)  # noqa: SLF001


def test_every_build_py_command_in_the_readme_and_docs_exists():
    commands = set(command_names())
    for page in PAGES:
        used = set(re.findall(r"python3? build\.py ([a-z][a-z-]*)", page.read_text()))
        assert used <= commands, f"{page.name} names unknown commands: {sorted(used - commands)}"
    used = set(re.findall(r"python3? build\.py ([a-z][a-z-]*)", README.read_text()))
    assert {"published", "serve", "upgrade", "apply", "patches", "lock", "bake"} <= used


def test_readme_and_docs_say_python3_throughout():
    """Debian 12 has no `python` outside a virtual environment: every command the README gives
    runs python3 (before, it mixed `python3 build.py` and `python3 -m`)."""
    for page in PAGES:
        commands = re.findall(r"\bpython3?\b(?= (?:-m|build\.py|verify/))", page.read_text())
        assert set(commands) <= {"python3"}, page.name
    assert re.findall(r"\bpython3\b(?= (?:-m|build\.py|verify/))", README.read_text())


def block(name: str) -> str:
    """The text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in the README."""
    text = README.read_text()
    return text.split(f"<!-- {name}:begin -->\n", 1)[1].split(f"\n<!-- {name}:end -->", 1)[0]


def targets_rows() -> str:
    from forge.targets import load_targets

    return "\n".join(f"| `{t.name}` | {t.description} | {t.platform} | {t.cuda} | {t.cuda_arch} |"
                     for t in load_targets().values())


def recipes_rows() -> str:
    import yaml

    from forge.serving.recipes import recipe_names, recipe_path

    rows = ["| recipe | model | targets |", "|---|---|---|"]
    for name in recipe_names():
        data = yaml.safe_load(recipe_path(name).read_text())
        rows.append(f"| `{name}` | `{data['model']}` | {', '.join(sorted(data['targets']))} |")
    return "\n".join(rows)


def commands_text() -> str:
    """Every command, as the README lists them: the default first, then in the parser's order."""
    names = [f"`{name}`" + (" (the default)" if name == "build" else "") for name in command_names()]
    return "\n".join(textwrap.wrap(", ".join(names) + ".", 100, break_on_hyphens=False))


@pytest.mark.parametrize("name, rows", [("targets", targets_rows), ("recipes", recipes_rows),
                                        ("commands", commands_text)])
def test_the_readmes_lists_are_the_repositorys(name, rows):
    """Before, the model list lacked the qwen3.6-35b-a3b recipe; now each list is compared with
    what images/targets.yaml, recipes/ and the parser hold (the failure shows the block to paste)."""
    expected = rows()
    if name == "targets":
        expected = "\n".join(block(name).splitlines()[:2] + [expected])
    assert block(name) == expected, f"README.md's {name} block should read:\n{expected}"


def test_the_recipes_list_names_every_recipe():
    from forge.serving.recipes import recipe_names

    assert "qwen3.6-35b-a3b" in recipe_names() and "`qwen3.6-35b-a3b`" in block("recipes")


def test_the_readme_is_a_front_door():
    """At most MAX_LINES lines, each section a few lines and a link; every page it links exists."""
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_LINES
    for heading in ("Set up (one command)", "Build an image (one more)", "Pull a published image",
                    "Serve a model", "Verify after an upgrade", "Upgrade an image to a new vLLM release",
                    "Patch an existing vLLM install", "Run the tests (one command)"):
        assert f"\n## {heading}\n" in text
    assert "apply --site-packages" in " ".join(text.split()) or "`--site-packages DIR`" in text
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not link.startswith("http"):
            assert (REPO_ROOT / link).exists(), link


def test_the_readmes_anchors_into_docs_exist():
    for page, anchor in re.findall(r"\]\((docs/[\w.-]+\.md)#([\w-]+)\)", README.read_text()):
        headings = re.findall(r"^#+ (.+)$", (REPO_ROOT / page).read_text(), re.M)
        slugs = {re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-") for h in headings}
        assert anchor in slugs, (page, anchor)


def test_readme_main_job_is_one_command():
    assert "python3 build.py --target gb10 --vllm 0.27.1" in README.read_text()
    plan = run_cli("--target", "gb10", "--vllm", "0.27.1", "--plan", "--allow-unlocked")
    assert plan.returncode == 0, plan.stderr
    assert "vllm0.27.1-gb10" in plan.stdout


# The README's commands that run here as written, read-only (a lock copy keeps a plan from pinning
# into images/lock.yaml), and those that do not, with why.
NOT_RUN_HERE = {
    "apply": "patches the vLLM this interpreter imports (tests/test_patch_apply*.py run it on real installs)",
    "lock": "asks Docker Hub (tests/test_lock.py: a loopback registry)",
    "bake": "writes docker-bake.json into the checkout (tests/test_bake.py)",
    "readme-table": "rewrites README.md (test_readme_patch_table_is_current runs --check)",
    "smoke": "starts two vLLM engines for minutes and writes its --out folder (tests/test_engine_cpu.py runs it)",
    "COMMAND": "a placeholder",
}


def readme_commands() -> list[list[str]]:
    """Every `python3 build.py ...` the README gives, in its ```sh blocks or in backticks."""
    text = README.read_text()
    lines = [line for b in re.findall(r"```sh\n(.*?)```", text, re.S) for line in b.splitlines()]
    lines += re.findall(r"`(python3 build\.py [^`]*)`", " ".join(text.split()))
    return [line.split()[2:] for line in dict.fromkeys(lines) if line.startswith("python3 build.py ")]


def test_every_readme_command_runs_as_written(tmp_path):
    from forge.images.published import known_good_entries, load_index

    shipped = (REPO_ROOT / "images" / "lock.yaml").read_bytes()
    lock = tmp_path / "lock.yaml"
    lock.write_bytes(shipped)
    ran = []
    for argv in readme_commands():
        command = argv[0] if not argv[0].startswith("-") else "build"
        if command in NOT_RUN_HERE or any(re.fullmatch(r"[A-Z][A-Z_]*", a) for a in argv):
            continue                       # or a placeholder to fill in (DIR, V, ID)
        if command == "build" and "--help" not in argv:
            argv = [*argv, "--plan"]      # the build itself needs an engine: tests/test_images_build.py
        result = run_build(*argv, env={"VLLM_FORGE_LOCK": str(lock)})
        ran.append(command)
        if command == "published":        # exit 1 until a verified image is recorded
            published = known_good_entries(load_index(None), "gb10", "0.27.1")
            assert result.returncode == (0 if published else 1), result.stderr
            assert ("no verified image published yet" in result.stdout) == (not published)
        elif command == "upgrade":        # 1: needs work (named under blocking:), not a failure
            assert result.returncode in (0, 1), result.stderr
            assert result.stdout.startswith("upgrade vLLM 0.27.1 -> 0.34.0 for gb10")
        else:
            assert result.returncode == 0, (argv, result.stderr)
            assert result.stdout, argv
    assert {"build", "published", "serve", "upgrade", "patches", "roofline"} <= set(ran)
    assert (REPO_ROOT / "images" / "lock.yaml").read_bytes() == shipped
