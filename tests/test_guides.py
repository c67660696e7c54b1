"""Each guide of docs/guides/, followed as written: its example (every ```sh block right after a
`<!-- guide-example -->` line, in order) runs in a copy of the checkout, and must succeed. The
example's last block runs the tests the change affects, in the copy, so a guide whose example
leaves a test red fails here; the blocks are read from the guide, so the guide and this test
cannot disagree.

Each test also checks which files the example changed (nothing else is written), and what the
guide quotes of the commands' output.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.build_cli import REPO_ROOT, run_build

GUIDES = REPO_ROOT / "docs" / "guides"
EXAMPLE = re.compile(r"^<!-- guide-example -->\n```sh\n(.*?)^```$", re.M | re.S)
# Written by running anything (Python, pytest, the patch work trees): not part of a change.
SCRATCH = ("__pycache__", ".pytest_cache", "build")


def example(guide: str) -> list[str]:
    blocks = EXAMPLE.findall((GUIDES / guide).read_text())
    assert blocks, f"{guide} marks no example"
    return blocks


def listed_files() -> list[str]:
    """The files git knows (tracked, and new ones it does not ignore) that are there now: a file
    deleted in the work tree stays deleted."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO_ROOT, capture_output=True, check=True).stdout
    return [name for name in filter(None, listed.decode().split("\0")) if (REPO_ROOT / name).is_file()]


def checkout_copy(into: Path) -> Path:
    """The files git knows, as they are now."""
    for name in listed_files():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, into / name)
    return into


def run_example(guide: str, repo: Path) -> list[str]:
    """Each block in bash (-e: a failing command fails the block), in the copy; their stdout."""
    outputs = []
    for block in example(guide):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=repo,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{guide}:\n{block}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        outputs.append(done.stdout)
    return outputs


def changed_files(repo: Path) -> set[str]:
    """The files the example added, changed or removed in `repo`, a copy of the checkout (read
    from the checkout itself: a second copy to compare with would double the copying)."""
    def kept(name: str) -> bool:
        return not set(Path(name).parts) & set(SCRATCH)

    before = {name: (REPO_ROOT / name).read_bytes() for name in listed_files() if kept(name)}
    after = {str(p.relative_to(repo)): p.read_bytes() for p in repo.rglob("*")
             if p.is_file() and kept(str(p.relative_to(repo)))}
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


def test_the_hardware_target_guide(tmp_path):
    repo = checkout_copy(tmp_path / "repo")
    outputs = run_example("adding-a-hardware-target.md", repo)
    assert changed_files(repo) == {"images/targets.yaml", "recipes/gemma-4-26b-a4b-it.yaml",
                                   "recipes/README.md", "tests/fixtures/serve-commands.json"}
    guide = (GUIDES / "adding-a-hardware-target.md").read_text()
    # the entry the guide shows is the one new-target wrote
    (shown,) = [b for b in re.findall(r"```yaml\n(.*?)```", guide, re.S) if "bases:" in b]
    written = (repo / "images" / "targets.yaml").read_text()
    assert written.endswith("\n" + shown)
    assert yaml.safe_load(written)["targets"]["rtx-pro-6000"] == yaml.safe_load(shown)["rtx-pro-6000"]
    # what the guide quotes of roofline
    on_the_cpu = outputs[2]             # serve, roofline, the plan
    first_line = re.search(r"`roofline` prints `(.*?)`", guide, re.S)[1].replace("\n", " ")
    assert first_line + ", vLLM 0.27.1" in on_the_cpu, on_the_cpu
    floor = re.search(r"the floor the bandwidth allows \(([\d.]+) ms/token, ([\d.]+) tok/s\)", guide)
    assert f"floor: {floor[1]} ms/token, {floor[2]} tok/s" in on_the_cpu
    assert "  recipes     gemma-4-26b-a4b-it (checked against vLLM 0.27.1)" in on_the_cpu
    assert "  moe configs (for NVIDIA_RTX_PRO_6000_Blackwell_Workstation_Edition)" in on_the_cpu
    assert "vllm0.27.1-rtx-pro-6000 serve google/gemma-4-26B-A4B-it" in on_the_cpu


def test_the_hardware_guides_quoted_errors(tmp_path):
    """The one-line errors the guide quotes: of the file (an edited entry) and of the flag."""
    guide = (GUIDES / "adding-a-hardware-target.md").read_text()
    quoted = re.search(r"^error: \S+/images/targets\.yaml: (targets\.(\S+?)\.(\w+): .*\(got '(.+)'\))$",
                       guide, re.M)
    message, name, field, value = quoted.groups()
    (shown,) = [b for b in re.findall(r"```yaml\n(.*?)```", guide, re.S) if "bases:" in b]
    targets = tmp_path / "targets.yaml"
    bad = re.sub(rf"^    {field}: .*$", f"    {field}: {value}", shown, flags=re.M)
    assert bad != shown
    targets.write_text((REPO_ROOT / "images" / "targets.yaml").read_text() + "\n" + bad)
    result = run_build("--target", name, "--vllm", "0.27.1", "--plan", "--allow-unlocked",
                       env={"VLLM_FORGE_TARGETS": str(targets)})
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {targets}: {message}\n"
    flag_error = re.search(r"`new-target --cuda-arch sm_120` refuses the flag the same way: `(.*?)`",
                           guide, re.S)[1].replace("\n", " ")
    targets.write_text((REPO_ROOT / "images" / "targets.yaml").read_text())
    before = targets.read_text()
    refused = run_build("new-target", "other-card", "--description", "x", "--platform",
                        "linux/amd64", "--cuda", "13.0", "--cuda-arch", "sm_120", "--device-name",
                        "X", "--gpu-memory-gib", "1", env={"VLLM_FORGE_TARGETS": str(targets)})
    assert (refused.returncode, refused.stderr) == (2, flag_error + "\n")
    assert targets.read_text() == before


def test_the_model_family_guide(tmp_path):
    repo = checkout_copy(tmp_path / "repo")
    outputs = run_example("adding-a-model-family.md", repo)
    assert changed_files(repo) == {
        "models/qwen3_next.yaml", "recipes/qwen3-next-80b-a3b.yaml", "recipes/README.md",
        "tests/fixtures/serve-commands.json"}
    family = yaml.safe_load((repo / "models" / "qwen3_next.yaml").read_text())
    assert family["family"] == "qwen3_next"
    assert [m["ids"] for m in family["models"].values()] == [["Qwen/Qwen3-Next-80B-A3B-Instruct"]]
    assert "recorded qwen3-next-80b-a3b/h200" in outputs[1]
    assert "vllm0.27.1-h200 serve Qwen/Qwen3-Next-80B-A3B-Instruct" in outputs[1]


def test_the_patch_guide(tmp_path):
    repo = checkout_copy(tmp_path / "repo")
    outputs = run_example("adding-a-patch.md", repo)
    assert changed_files(repo) == {
        "patches/series.yaml", "patches/source/spec-prom-doc-mark.diff", "README.md"}
    assert "spec-prom-doc-mark  0.25.0  applies" in outputs[2]
    diff = (repo / "patches" / "source" / "spec-prom-doc-mark.diff").read_text()
    assert '+                documentation="Accepted tokens per draft position (vllm-forge).",' in diff
    assert not (repo / "build" / "patch-work" / "spec-prom-doc-mark").exists()
