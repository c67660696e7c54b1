"""`build.py --plan` on real release sources (no engine, no network): the immutable tag names the
image's content, and the plan refuses (exit 2, one line naming file and field) whatever the build
would refuse. Each test runs build.py in its own copy of the repository, as a user would."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from forge.images.lock import save_lock
from forge.targets import load_targets
from tests.build_cli import run_build

REPO = Path(__file__).resolve().parents[1]
DIGEST_A = "sha256:" + "a1" * 32
DIGEST_B = "sha256:" + "b2" * 32
EMPTY_SHA256_PREFIX = "e3b0c44298fc"   # sha256 of nothing: what every patch-less image shared
DEAD_ENGINE = "unix:///tmp/vllm-forge-no-such-engine.sock"
GIT_ENV = {"GIT_AUTHOR_NAME": "forge-test", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "forge-test", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_AUTHOR_DATE": "1790000000 +0000", "GIT_COMMITTER_DATE": "1790000000 +0000"}


def copy_repo(into: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
    for name in ("forge", "patches", "verify", "models", "recipes", "images"):
        shutil.copytree(REPO / name, into / name, ignore=ignore)
    shutil.copy2(REPO / "build.py", into / "build.py")
    return into


def write_lock(path: Path, vllm: str, digest: str = DIGEST_A, platforms=("linux/amd64", "linux/arm64")):
    refs = {t.base_for(vllm).ref for t in load_targets().values()}
    return save_lock({ref: digest for ref in refs}, path, {ref: list(platforms) for ref in refs})


def plan(repo: Path, target: str, vllm: str, lock: Path, **env):
    """The JSON plan, from a process that could reach neither an engine nor a registry."""
    result = run_build("--target", target, "--vllm", vllm, "--plan", "--json", cwd=repo, timeout=600,
                       env={"VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_REPOSITORY": "ghcr.io/acme/vllm-forge",
                            "SOURCE_DATE_EPOCH": "1790000000", "DOCKER_HOST": DEAD_ENGINE,
                            "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def refused(repo: Path, *args: str, **env) -> str:
    result = run_build(*args, cwd=repo, timeout=600,
                       env={"DOCKER_HOST": DEAD_ENGINE, "VLLM_FORGE_REPOSITORY": "ghcr.io/acme/vllm-forge",
                            **env})
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- item 3: the immutable tag names the content ------------------------------------------------

@pytest.fixture(scope="module")
def base_repo(tmp_path_factory):
    work = tmp_path_factory.mktemp("plan")
    repo = copy_repo(work / "repo")
    lock = write_lock(work / "lock.yaml", "0.25.0")
    return repo, lock, plan(repo, "a100", "0.25.0", lock)


def test_tag_is_readable_and_names_the_content_digest(base_repo):
    _, _, first = base_repo
    digest = first["content_digest"]
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert first["immutable_tag"] == f"vllm0.25.0-a100-{digest[:12]}"
    assert first["tags"] == [f"ghcr.io/acme/vllm-forge:vllm0.25.0-a100-{digest[:12]}",
                             "ghcr.io/acme/vllm-forge:vllm0.25.0-a100"]
    assert first["labels"]["io.vllm-forge.content-digest"] == f"sha256:{digest}"
    assert first["labels"]["org.opencontainers.image.version"] == first["immutable_tag"]


def test_identical_inputs_give_the_identical_tag(base_repo, tmp_path):
    _, lock, first = base_repo
    twin = copy_repo(tmp_path / "twin")
    again = plan(twin, "a100", "0.25.0", lock)
    assert again["immutable_tag"] == first["immutable_tag"]
    assert again["context"]["sha256"] == first["context"]["sha256"]


def _append(relative: str, text: str):
    def change(repo: Path, lock: Path) -> Path:
        path = repo / relative
        path.write_text(path.read_text() + text)
        return lock
    return change


def _new_file(relative: str, text: str):
    def change(repo: Path, lock: Path) -> Path:
        (repo / relative).write_text(text)
        return lock
    return change


def _relock(repo: Path, lock: Path) -> Path:
    return write_lock(lock.parent / "relocked.yaml", "0.25.0", digest=DIGEST_B)


def _target_env(repo: Path, lock: Path) -> Path:
    path = repo / "images" / "targets.yaml"
    path.write_text(path.read_text().replace("VLLM_FORGE_TARGET: a100", "VLLM_FORGE_TARGET: a100-x"))
    return lock


@pytest.mark.parametrize("what, change", [
    ("a recipe", _append("recipes/gemma-4-26b-a4b-it.yaml", "# tuned differently\n")),
    ("a verify script", _new_file("verify/extra_check.py", "print('one more check')\n")),
    ("the tools", _append("forge/files.py", "\n# a fix in the tools\n")),
    ("the Dockerfile", _append("images/Dockerfile", "# a new step\n")),
    ("the target's build args", _target_env),
    ("the base digest (relocked)", _relock),
])
def test_any_change_to_the_content_gives_a_new_tag(base_repo, tmp_path, what, change):
    """Before: the tag hashed the patch files only, so each of these kept the tag, the push was
    refused and the fix could not ship."""
    _, lock, first = base_repo
    repo = copy_repo(tmp_path / "changed")
    new_lock = change(repo, lock)
    changed = plan(repo, "a100", "0.25.0", new_lock)
    assert changed["patch_set_hash"] == first["patch_set_hash"], "the patch set is the same"
    assert changed["immutable_tag"] != first["immutable_tag"], what
    assert changed["immutable_tag"].startswith("vllm0.25.0-a100-")


def test_images_without_a_patch_get_distinct_content_tags(tmp_path):
    """Before: every image without a patch was tagged with the sha256 of nothing (e3b0c44298fc)."""
    repo = copy_repo(tmp_path / "repo")
    # 0.32.0: the first release that needs none of the patches of this test's day (0.27.1 still
    # needs the transformers pin, 0.27.1-0.31.x the split-KV patch); a patch added since that
    # applies there is left out of the copy's series, so that the images still carry none.
    without_patches_applying_on(repo, "0.32.0")
    lock = write_lock(tmp_path / "lock.yaml", "0.32.0")
    plans = {t: plan(repo, t, "0.32.0", lock) for t in ("a100", "h100", "h200")}
    for name, entry in plans.items():
        assert all(p["status"] != "applies" for p in entry["patches"]), "0.32.0 needs no patch"
        assert not entry["immutable_tag"].endswith(EMPTY_SHA256_PREFIX), name
    assert len({entry["immutable_tag"].rsplit("-", 1)[1] for entry in plans.values()}) == 3


def without_patches_applying_on(repo: Path, version: str) -> None:
    """Drop from the copy's series each entry that applies on `version` (for any GPU)."""
    from forge.patching.series import load_series
    from forge.patching.status import release_status

    path = repo / "patches" / "series.yaml"
    statuses = {s.id: s.status for s in release_status(version, series=load_series(path))}
    data = yaml.safe_load(path.read_text())
    data["patches"] = [p for p in data["patches"] if statuses[p["id"]] != "applies"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _commit(repo: Path, message: str) -> None:
    for command in (["add", "."], ["commit", "-q", "-m", message]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, capture_output=True,
                       env={**os.environ, **GIT_ENV})


def test_a_rebuild_release_from_a_new_commit_gets_a_new_tag(tmp_path):
    """`vllm-0.27.1-r2` after a fix: release-matrix (what the release workflow pushes) names a new
    immutable tag; the same commit names the same one again. Before: the same tag, push refused."""
    repo = copy_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    _commit(repo, "release")
    env = {"VLLM_FORGE_LOCK": str(write_lock(tmp_path / "lock.yaml", "0.27.1")),
           "GITHUB_REPOSITORY_OWNER": "acme", "VLLM_FORGE_REPOSITORY": ""}

    def matrix(tag):
        result = run_build("release-matrix", "--tag", tag, cwd=repo, env=env, timeout=600)
        assert result.returncode == 0, result.stderr
        return {job["target"]: job["immutable_tag"] for job in json.loads(result.stdout)["include"]}

    first = matrix("vllm-0.27.1")
    assert matrix("vllm-0.27.1") == first
    recipe = repo / "recipes" / "gemma-4-31b-it.yaml"
    recipe.write_text(recipe.read_text() + "# r2: a fix to this recipe\n")
    _commit(repo, "fix a recipe")
    rebuild = matrix("vllm-0.27.1-r2")
    assert set(rebuild) == set(first)
    assert all(rebuild[t] != first[t] for t in first), (first, rebuild)


# --- item 5: the plan refuses what the build refuses --------------------------------------------

def test_releases_outside_the_manifest_are_refused_by_plan_and_build(tmp_path):
    """Before: targets offered bases from 0.19.0 and the plan passed; the build failed in `RUN`."""
    repo = copy_repo(tmp_path / "repo")
    from packaging.version import Version

    from forge.patching.series import load_series

    checked = load_series().checked_through
    unchecked = f"{Version(checked).major}.{Version(checked).minor + 1}.0"
    for args in (("--plan",), ()):
        line = refused(repo, "--target", "a100", "--vllm", unchecked, *args)
        assert f"vLLM {unchecked} is newer than checked_through {checked}" in line
    targets = repo / "images" / "targets.yaml"
    targets.write_text(targets.read_text().replace('releases: ">=0.21.0"', 'releases: ">=0.19.0"'))
    line = refused(repo, "--target", "h200", "--vllm", "0.25.0", "--plan")
    assert line == (f"error: {targets}: targets.h200.bases[0].releases: >=0.19.0 offers vLLM 0.19.0, "
                    f"before the manifest's checked_from 0.21.0 ({repo / 'patches' / 'series.yaml'})")


def test_committed_targets_offer_no_release_before_the_manifest():
    from packaging.version import Version

    from forge.patching.series import load_series

    checked_from = Version(load_series().checked_from)
    for target in load_targets().values():
        for rule in target.bases:
            assert not rule.releases.contains(Version("0.20.0")), (target.name, str(rule.releases))
            assert rule.releases.contains(checked_from), (target.name, str(rule.releases))


def _edit_recipe(repo: Path, model: str, target: str, edit) -> Path:
    """Edit one target's overrides in the model's file (recipes/<model>.yaml)."""
    path = repo / "recipes" / f"{model}.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data["targets"][target])
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("edit, field, problem", [
    (lambda d: d.update(serve={"extra_args": ["--no-such-flag"]}), "serve.extra_args[0]",
     "--no-such-flag is not a `vllm serve` flag in vLLM 0.25.0"),
    (lambda d: d.update(serve={"kv_cache_dtype": "fp9"}), "serve.kv_cache_dtype",
     "must be one of auto, "),
    (lambda d: d.update(speculative={"method": "medusa2"}), "speculative.method",
     "must be one of mtp (got 'medusa2')"),
])
def test_a_recipe_the_release_rejects_stops_plan_and_build(tmp_path, edit, field, problem):
    """Before: the recipe was baked into the image and the build exited 0."""
    repo = copy_repo(tmp_path / "repo")
    lock = write_lock(tmp_path / "lock.yaml", "0.25.0")
    _edit_recipe(repo, "gemma-4-e4b-it", "h100", edit)
    for args in (("--plan",), ()):  # the build refuses before it reaches the (dead) engine
        line = refused(repo, "--target", "h100", "--vllm", "0.25.0", *args, VLLM_FORGE_LOCK=str(lock))
        assert line.startswith(f"error: recipes/gemma-4-e4b-it.yaml: targets.h100.{field}: "), line
        assert problem in line


def test_a_recipe_for_an_unknown_target_stops_plan_and_build(tmp_path):
    """A target's recipes are the files that name it: a file naming a target images/targets.yaml
    does not know is refused, naming the file and the entry."""
    repo = copy_repo(tmp_path / "repo")
    lock = write_lock(tmp_path / "lock.yaml", "0.25.0")
    path = repo / "recipes" / "gemma-4-e4b-it.yaml"
    data = yaml.safe_load(path.read_text())
    data["targets"]["a100"]["serve"] = {"max_num_seqs": 32}
    data["targets"]["a10"] = data["targets"]["a100"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for args in (("--plan",), ()):
        line = refused(repo, "--target", "a100", "--vllm", "0.25.0", *args, VLLM_FORGE_LOCK=str(lock))
        known = ", ".join(sorted(load_targets()))
        assert line.startswith("error: recipes/gemma-4-e4b-it.yaml: targets.a10: unknown target "
                               f"(targets: {known})"), line


def test_a_locked_base_without_the_target_platform_stops_plan_and_build(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    lock = write_lock(tmp_path / "lock.yaml", "0.25.0", platforms=("linux/amd64",))
    assert plan(repo, "a100", "0.25.0", lock)["base"]["digest"] == DIGEST_A
    for args in (("--plan",), ()):
        line = refused(repo, "--target", "gb10", "--vllm", "0.25.0", *args, VLLM_FORGE_LOCK=str(lock))
        assert line == (f"error: {lock}: platforms.vllm/vllm-openai:v0.25.0: the locked base offers "
                        f"linux/amd64, not linux/arm64, which target gb10 needs")


def test_a_lock_without_platforms_cannot_be_checked_and_says_how_to_fix(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    lock = save_lock({"vllm/vllm-openai:v0.25.0": DIGEST_A}, tmp_path / "lock.yaml")
    line = refused(repo, "--target", "gb10", "--vllm", "0.25.0", "--plan", VLLM_FORGE_LOCK=str(lock))
    assert "platforms.vllm/vllm-openai:v0.25.0: not recorded" in line
    assert "`python3 build.py lock --vllm 0.25.0`" in line


def test_a_plan_line_quoting_a_control_character_is_cut_after_it_is_escaped():
    """A patch's detail or a label quotes data files and the cache: shown escaped, and cut to the
    plan's width as shown (an ESC is four characters on the screen, `\\x1b`)."""
    from forge.images.plan import WIDTH, _fit

    line = "    detail " + "\x1b[2J" * 30 + " tail"
    lines = _fit(line, " " * 6)
    assert all(len(shown) <= WIDTH for shown in lines), [len(shown) for shown in lines]
    assert "\x1b" not in "".join(lines) and "\\x1b[2J" in "".join(lines)
