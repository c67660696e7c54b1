"""build.py new-target, new-recipe, new-family and recipes-table in a copied checkout: what they
write loads as every command loads it, and what they refuse is one line naming the flag, with
nothing written. The guides' own examples run in tests/test_guides.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.build_cli import REPO_ROOT, copy_checkout, run_build

CARD = ["--description", "A card", "--platform", "linux/amd64", "--cuda", "13.0",
        "--cuda-arch", "12.0", "--device-name", "NVIDIA Card X", "--gpu-memory-gib", "47.5"]


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = copy_checkout(tmp_path / "repo")
    for name in ("images", "recipes", "models"):
        shutil.copytree(REPO_ROOT / name, repo / name)
    return repo


def data(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for name in ("images", "recipes", "models")
            for p in (repo / name).rglob("*") if p.is_file()}


def refused(repo: Path, *args: str) -> str:
    before = data(repo)
    result = run_build(*args, cwd=repo)
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert data(repo) == before                       # nothing written
    return result.stderr


def test_new_target_appends_an_entry_that_loads(repo):
    result = run_build("new-target", "card-x", *CARD, cwd=repo)
    assert result.returncode == 0, result.stderr
    entry = yaml.safe_load((repo / "images" / "targets.yaml").read_text())["targets"]["card-x"]
    assert entry["moe_device_name"] == "NVIDIA_Card_X"          # spaces as vLLM's file names have
    assert entry["env"] == {"VLLM_FORGE_TARGET": "card-x"} and "memory_bandwidth_gb_s" not in entry
    plan = run_build("--target", "card-x", "--vllm", "0.27.1", "--plan", "--allow-unlocked", cwd=repo)
    assert plan.returncode == 0, plan.stderr
    assert "plan: vLLM 0.27.1 for card-x (linux/amd64, CUDA 13.0, sm 12.0)" in plan.stdout


@pytest.mark.parametrize("args, message", [
    (["new-target", "h200", *CARD], "targets.h200 exists; edit it there"),
    (["new-target", "Card", *CARD], "error: new-target NAME: target names are lowercase letters"),
    (["new-target", "card-x", *CARD[:-2], "--gpu-memory-gib", "0"], "error: --gpu-memory-gib: must be positive"),
    (["new-target", "card-x", *CARD, "--platform", "linux/x86_64"],
     "error: --platform: must be one of linux/amd64, linux/arm64 (got 'linux/x86_64')"),
    (["new-target", "card-x", *CARD, "--bandwidth-gb-s", "900"], "error: --bandwidth-source: give it"),
    (["new-target", "card-x", *CARD, "--base-image", "vllm/vllm-openai@sha256:00"],
     "error: --base-image: must be a tag, not a digest"),
])
def test_new_target_refuses_in_one_line(repo, args, message):
    assert message in refused(repo, *args)


def test_new_target_refuses_a_file_whose_last_section_is_not_targets(repo):
    path = repo / "images" / "targets.yaml"
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({"targets": data["targets"], "env": data["env"]}, sort_keys=False))
    assert "targets: must be the file's last section" in refused(repo, "new-target", "card-x", *CARD)


def test_new_recipe_adds_a_target_and_starts_a_file(repo):
    assert run_build("new-target", "card-x", *CARD, cwd=repo).returncode == 0
    added = run_build("new-recipe", "gemma-4-31b-it", "--target", "card-x", cwd=repo)
    assert added.returncode == 0, added.stderr
    served = run_build("serve", "--recipe", "gemma-4-31b-it", "--target", "card-x", "--vllm", "0.27.1", cwd=repo)
    assert served.returncode == 0 and "serve google/gemma-4-31B-it" in served.stdout, served.stderr
    started = run_build("new-recipe", "gemma-4-e2b", "--model", "google/gemma-4-31B-it",
                        "--target", "h200", "--target", "card-x", cwd=repo)
    assert started.returncode == 0, started.stderr
    file = yaml.safe_load((repo / "recipes" / "gemma-4-e2b.yaml").read_text())
    assert set(file["targets"]) == {"h200", "card-x"}
    assert file["targets"]["h200"]["thresholds"]["step_cost_source"].startswith("assumption")
    stale = run_build("recipes-table", "--check", cwd=repo)
    assert stale.returncode == 1 and "the thresholds table is stale" in stale.stdout
    assert run_build("recipes-table", cwd=repo).returncode == 0
    assert "| gemma-4-e2b | card-x | v2 | bf16 | 2.0 | 1.0 |" in (repo / "recipes" / "README.md").read_text()
    assert run_build("recipes-table", "--check", cwd=repo).returncode == 0


@pytest.mark.parametrize("args, message", [
    (["new-recipe", "gemma-4-31b-it", "--target", "h200"], "targets.h200 exists; edit it there"),
    (["new-recipe", "gemma-4-31b-it", "--target", "tpu"], "error: --target: unknown target 'tpu'"),
    (["new-recipe", "gemma-9", "--target", "h200"], "recipes/gemma-9.yaml does not exist; give --model"),
    (["new-recipe", "gemma-9", "--target", "h200", "--model-runner", "v1"], "error: --model-runner: only with --model"),
    (["new-recipe", "gemma-9", "--target", "h200", "--model", "org/unknown"],
     "error: --model: no model family lists 'org/unknown'"),
    (["new-recipe", "../gemma-9", "--target", "h200"], "error: new-recipe NAME: lowercase letters"),
])
def test_new_recipe_refuses_in_one_line(repo, args, message):
    assert message in refused(repo, *args)


def test_new_family_copies_a_family_with_one_model(repo):
    result = run_build("new-family", "gemma5", "--like", "gemma4", "--model-id", "google/gemma-5-9B-it",
                       cwd=repo)
    assert result.returncode == 0, result.stderr
    family = yaml.safe_load((repo / "models" / "gemma5.yaml").read_text())
    assert family["family"] == "gemma5" and list(family["models"]) == ["gemma-5-9b-it"]
    assert family["models"]["gemma-5-9b-it"]["source"].startswith("assumption: the shapes of gemma4's")
    started = run_build("new-recipe", "gemma-5-9b-it", "--model", "google/gemma-5-9B-it",
                        "--target", "h200", cwd=repo)
    assert started.returncode == 0, started.stderr


@pytest.mark.parametrize("args, message", [
    (["new-family", "gemma4", "--like", "gemma4", "--model-id", "a/b"], "gemma4.yaml exists"),
    (["new-family", "Gemma5", "--like", "gemma4", "--model-id", "a/b"], "error: new-family NAME: a family name"),
    (["new-family", "gemma5", "--like", "llama", "--model-id", "a/b"], "error: --like: no family 'llama'"),
    (["new-family", "gemma5", "--like", "gemma4", "--model-id", "google/gemma-4-31B-it"],
     "error: --model-id: models/gemma4.yaml already lists 'google/gemma-4-31B-it'"),
    (["new-family", "gemma5", "--like", "gemma4", "--model-id", "gemma"], "error: --model-id: must be"),
    (["new-family", "gemma5", "--like", "gemma4", "--model-id", "google/g\x1b]0;x\x07"],
     "error: --model-id: must be a Hugging Face id like org/name (got 'google/g\\x1b]0;x\\x07')"),
])
def test_new_family_refuses_in_one_line(repo, args, message):
    assert message in refused(repo, *args)
