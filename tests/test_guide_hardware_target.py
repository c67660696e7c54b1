"""docs/guides/adding-a-hardware-target.md, followed as written: the guide's target entry and
recipe override (its yaml blocks, read from the guide) go into copies of the project's data, and
the real commands run on them in fresh processes. The error the guide quotes is read from its text,
so the guide and forge/targets.py cannot drift apart.

images/targets.yaml: $VLLM_FORGE_TARGETS points every command at a copy. Recipes: `roofline` and
`serve` take --recipes-dir, but the plan's recipe list reads the checkout's recipes/ (no override),
so the plan runs in a copied checkout (forge finds its data beside its own code)."""
import json
import re
import shlex
import shutil
from pathlib import Path

from forge.commands.cli import DEFAULT_COMMAND, build_parser
from tests.build_cli import REPO_ROOT, copy_checkout, run_build

GUIDE = REPO_ROOT / "docs" / "guides" / "adding-a-hardware-target.md"
NEW = "rtx-pro-6000"
RECIPE = "gemma-4-26b-a4b-it"


def guide_text() -> str:
    return GUIDE.read_text()


def guide_blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", guide_text(), re.S)


def target_entry() -> str:
    (entry,) = [b for b in guide_blocks("yaml") if "bases:" in b]
    assert entry.startswith(f"  {NEW}:\n")        # indented to sit under targets:
    return entry


def recipe_override() -> str:
    (override,) = [b for b in guide_blocks("yaml") if "step_cost_source" in b]
    assert override.startswith(f"  {NEW}:\n")
    return override


def with_entry(targets: Path, entry: str) -> Path:
    """images/targets.yaml ends in its `targets:` mapping: the entry is appended under it."""
    targets.write_text((REPO_ROOT / "images" / "targets.yaml").read_text() + "\n" + entry)
    return targets


def with_override(recipes: Path) -> Path:
    path = recipes / f"{RECIPE}.yaml"
    path.write_text(path.read_text() + "\n" + recipe_override())
    return recipes


def test_every_build_py_command_of_the_guide_parses_as_typed():
    lines = "\n".join(guide_blocks("sh")).replace("\\\n", " ").splitlines()
    commands = [shlex.split(line)[2:] for line in lines if line.startswith("python3 build.py ")]
    # `build.py --target ...` is the build command without its word (forge.commands.cli.main)
    commands = [[DEFAULT_COMMAND, *c] if c[0].startswith("-") else c for c in commands]
    assert {c[0] for c in commands} >= {"serve", "roofline", "tune-moe", "lock", "build"}
    parser = build_parser()
    for words in commands:
        parser.parse_args(words)        # argparse exits (fails the test) on a flag it lacks


def test_the_guides_target_appears_in_the_plan_with_its_recipe(tmp_path):
    repo = copy_checkout(tmp_path / "repo")
    for name in ("images", "recipes", "models"):
        shutil.copytree(REPO_ROOT / name, repo / name)
    with_entry(repo / "images" / "targets.yaml", target_entry())
    before = run_build("--target", NEW, "--vllm", "0.27.1", "--plan", "--allow-unlocked", cwd=repo)
    assert before.returncode == 0, before.stderr
    assert f"plan: vLLM 0.27.1 for {NEW} (linux/amd64, CUDA 13.0, sm 12.0)" in before.stdout
    assert "  recipes     none (checked" in before.stdout       # no recipe file names it yet
    with_override(repo / "recipes")
    plan = run_build("--target", NEW, "--vllm", "0.27.1", "--plan", "--allow-unlocked", cwd=repo)
    assert plan.returncode == 0, plan.stderr
    assert "  moe configs (for NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition)" in plan.stdout
    assert f"  recipes     {RECIPE} (checked against vLLM 0.27.1)" in plan.stdout
    assert f"ghcr.io/vllm-forge/vllm-forge:vllm0.27.1-{NEW}" in plan.stdout
    served = run_build("serve", "--recipe", RECIPE, "--target", NEW, "--vllm", "0.27.1", cwd=repo)
    assert served.returncode == 0, served.stderr
    assert f"vllm0.27.1-{NEW} serve google/gemma-4-26B-A4B-it" in served.stdout


def test_roofline_uses_the_guides_bandwidth_and_prints_what_the_guide_quotes(tmp_path):
    targets = with_entry(tmp_path / "targets.yaml", target_entry())
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO_ROOT / "recipes", recipes, ignore=shutil.ignore_patterns("*.md"))
    with_override(recipes)
    args = ("roofline", "--recipe", RECIPE, "--target", NEW, "--vllm", "0.27.1", "--recipes-dir", str(recipes))
    env = {"VLLM_FORGE_TARGETS": str(targets)}
    result = run_build(*args, "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (card,) = re.findall(r'device_names: \["([^"]+)"\]', target_entry())
    (figure,) = re.findall(r"memory_bandwidth_gb_s: \{[^:]+: (\d+)\}", target_entry())
    (source,) = re.findall(r'memory_bandwidth_source: "([^"]+)"', target_entry())
    assert (report["target"], report["device"]) == (NEW, card)
    assert report["bandwidth_gb_s"] == float(figure) and report["bandwidth_source"] == source
    assert abs(report["floor_ms"] - report["bytes_per_token"] / (float(figure) * 1e9) * 1e3) < 1e-9
    text = run_build(*args, env=env)
    assert text.returncode == 0, text.stderr
    first_line = re.search(r"`roofline` prints `(.*?)`", guide_text(), re.S)[1].replace("\n", " ")
    assert text.stdout.startswith(first_line + ", vLLM 0.27.1"), text.stdout
    floor = re.search(r"the floor the bandwidth allows \(([\d.]+) ms/token, ([\d.]+) tok/s\)", guide_text())
    assert f"floor: {floor[1]} ms/token, {floor[2]} tok/s" in text.stdout


def test_a_wrong_field_gives_the_one_line_error_the_guide_quotes(tmp_path):
    quoted = re.search(r"^error: \S+/images/targets\.yaml: (targets\.(\S+?)\.(\w+): .*\(got '(.+)'\))$",
                       guide_text(), re.M)
    assert quoted, "the guide quotes no targets.yaml error"
    message, name, field, value = quoted.groups()
    assert name == NEW
    entry = target_entry()
    assert f"    {field}: " in entry
    bad_entry = re.sub(rf"^    {field}: .*$", f"    {field}: {value}", entry, flags=re.M)
    targets = with_entry(tmp_path / "targets.yaml", bad_entry)
    result = run_build("--target", NEW, "--vllm", "0.27.1", "--plan", "--allow-unlocked",
                       env={"VLLM_FORGE_TARGETS": str(targets)})
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr == f"error: {targets}: {message}\n"
