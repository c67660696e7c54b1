"""Repository and tag naming (forge.image_names) that recipes, CI and the build share."""
import pytest

from forge import image_names as images
from forge.errors import ForgeError


def test_tags():
    assert images.moving_tag("gb10", "0.27.1") == "vllm0.27.1-gb10"
    digest = "3f2a9c1b7d4e" + "0" * 52
    assert images.immutable_tag("gb10", "0.27.1", digest) == "vllm0.27.1-gb10-3f2a9c1b7d4e"
    assert images.immutable_tag("gb10", "0.27.1", "sha256:" + digest) == "vllm0.27.1-gb10-3f2a9c1b7d4e"
    assert images.image_ref("a100", "0.25.0", "127.0.0.1:5000/forge") == "127.0.0.1:5000/forge:vllm0.25.0-a100"


@pytest.mark.parametrize("call", [
    lambda: images.moving_tag("GB 10", "0.27.1"),
    lambda: images.moving_tag("gb10", "latest"),
    lambda: images.immutable_tag("gb10", "0.27.1", "XYZ"),
    lambda: images.immutable_tag("gb10", "0.27.1", "3f2a9c"),   # too short to name content
])
def test_bad_names_refused(call):
    with pytest.raises(ForgeError):
        call()


def test_default_repository_env_wins(monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_REPOSITORY", "registry.example/team/forge")
    assert images.default_repository() == "registry.example/team/forge"
    assert images.image_ref("h200", "0.33.0") == "registry.example/team/forge:vllm0.33.0-h200"


def test_default_repository_owner_from_github_env(monkeypatch):
    monkeypatch.delenv("VLLM_FORGE_REPOSITORY", raising=False)
    monkeypatch.setenv("GITHUB_REPOSITORY_OWNER", "Acme-Labs")
    assert images.default_repository() == "ghcr.io/acme-labs/vllm-forge"


@pytest.mark.parametrize("owner", ["a\x1b[2Jb", "two words", "x" * 250])
def test_a_github_owner_that_makes_no_repository_name_is_refused_naming_the_variable(monkeypatch, owner):
    # the default repository becomes every tag, bake file and printed reference
    monkeypatch.delenv("VLLM_FORGE_REPOSITORY", raising=False)
    monkeypatch.setenv("GITHUB_REPOSITORY_OWNER", owner)
    with pytest.raises(ForgeError, match=r"^\$GITHUB_REPOSITORY_OWNER: not a valid image repository"
                       ) as refused:
        images.default_repository()
    assert "\x1b" not in str(refused.value)


def test_default_repository_owner_from_git_remote(monkeypatch, tmp_path):
    monkeypatch.delenv("VLLM_FORGE_REPOSITORY", raising=False)
    monkeypatch.delenv("GITHUB_REPOSITORY_OWNER", raising=False)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text(
        '[core]\n\tbare = false\n[remote "origin"]\n\turl = git@github.com:someone/vllm-forge.git\n')
    monkeypatch.setattr(images, "REPO_ROOT", tmp_path)
    assert images.default_repository() == "ghcr.io/someone/vllm-forge"
    (tmp_path / ".git" / "config").write_text("[core]\n\tbare = false\n")
    assert images.default_repository() == images.FALLBACK_REPOSITORY


def test_plan_of_the_real_targets_without_a_lock_says_so(tmp_path):
    """The committed targets resolve for a real release; with --locked a plan shows an unlocked
    base, then fails as the build would (the immutable tag names the base digest too, so it is
    unknown yet)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "VLLM_FORGE_LOCK": str(tmp_path / "none.yaml"), "VLLM_FORGE_REPOSITORY": "ghcr.io/acme/vllm-forge"}
    env.pop("VLLM_FORGE_BASE_MIRROR", None)
    result = subprocess.run([sys.executable, "build.py", "--target", "h200", "--vllm", "0.27.1", "--plan", "--json",
                             "--locked"], cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'none.yaml'}: bases: vllm/vllm-openai:v0.27.1 is not locked and --locked "
        "forbids adding it; run `python3 build.py lock --vllm 0.27.1` and commit none.yaml"]
    plan = json.loads(result.stdout)
    assert plan["base"] == {"image": "vllm/vllm-openai:v0.27.1", "digest": None, "locked": False}
    assert plan["tags"] == ["ghcr.io/acme/vllm-forge:vllm0.27.1-h200"] and plan["immutable_tag"] is None
    assert {p["id"]: p["status"] for p in plan["patches"]}["gemma4-mtp-share-embeddings"] == "already-upstream"
    build = subprocess.run([sys.executable, "build.py", "--target", "h200", "--vllm", "0.27.1", "--locked"],
                           cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert build.returncode == 2 and "vllm/vllm-openai:v0.27.1 is not locked" in build.stderr
    assert not (tmp_path / "none.yaml").exists()


def test_a_tag_is_at_most_the_128_characters_oci_allows():
    longest = "t" * images.TARGET_NAME_MAX
    assert len(images.immutable_tag(longest, "0.27.1", "a" * 64)) <= images.TAG_MAX
    with pytest.raises(ForgeError, match="over the 128 an OCI tag may have"):
        images.immutable_tag("t" * 150, "0.27.1", "a" * 64)
    with pytest.raises(ForgeError, match="over the 128 an OCI tag may have"):
        images.moving_tag(longest, "0.27.1+" + "a" * 60)


def test_a_target_name_longer_than_its_share_of_a_tag_is_refused_on_load():
    from forge.targets import target_name_problem

    assert target_name_problem("t" * images.TARGET_NAME_MAX) is None
    assert "64 characters at most" in target_name_problem("t" * (images.TARGET_NAME_MAX + 1))
