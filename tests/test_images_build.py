"""Real image builds: a real Docker engine, a real local registry serving a stand-in for upstream's
multi-platform vllm/vllm-openai:v0.25.0 (Debian + the real vLLM 0.25.0 tree), amd64 natively and arm64
under qemu; `build.py` run as users run it, as a subprocess."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
import yaml

from forge.images.lock import load_lock, locked_platforms, save_lock
from forge.patching.series import load_series
from forge.patching.status import applied_statuses, release_status
from forge.targets import load_targets
from tests.build_cli import run_build

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
VERSION = "0.25.0"
PATCHED_FILE = "/usr/local/lib/python3.11/dist-packages/vllm/v1/spec_decode/llm_base_proposer.py"
PATCHED_LINE = 'if share_embeddings and hasattr(self.model, "has_own_embed_tokens"):'
DEAD_PORT = "127.0.0.1:9"   # discard port: nothing listens there
DEAD_ENGINE = "unix:///tmp/vllm-forge-no-such-engine.sock"


# The tests build from a committed snapshot of the repository (its own git history), so edits other
# people make to the working tree meanwhile cannot change a plan between a build and its checks.
SNAPSHOT: dict[str, Path] = {}
GIT_ENV = {"GIT_AUTHOR_NAME": "forge-test", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "forge-test", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_AUTHOR_DATE": "1790000000 +0000", "GIT_COMMITTER_DATE": "1790000000 +0000"}


def forge(*args, env=None, cwd=None, timeout=900):
    return run_build(*args, cwd=cwd or SNAPSHOT["repo"], env=env, timeout=timeout)


def _copy_tree(source: Path, copy: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
    for name in ("forge", "patches", "verify", "models", "recipes", "images"):
        shutil.copytree(source / name, copy / name, ignore=ignore)
    shutil.copy2(source / "build.py", copy / "build.py")
    shutil.copy2(source / ".gitignore", copy / ".gitignore")
    return copy


def _snapshot(into: Path) -> Path:
    repo = _copy_tree(REPO, into / "snapshot")
    for command in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, capture_output=True,
                       env={**os.environ, **GIT_ENV})
    return repo


def one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def setup(standin_base, tmp_path_factory, docker_engine, buildx):
    """Environment that points forge at the local registry (as a mirror of upstream) and a lock file
    made by `build.py lock` against it."""
    work = tmp_path_factory.mktemp("images")
    SNAPSHOT["repo"] = _snapshot(work)
    repository = f"{standin_base.mirror}/forge-test"
    env = {"VLLM_FORGE_BASE_MIRROR": standin_base.mirror, "VLLM_FORGE_LOCK": str(work / "lock.yaml"),
           "VLLM_FORGE_REPOSITORY": repository}
    result = forge("lock", "--vllm", VERSION, env=env)
    assert result.returncode == 0, result.stderr
    yield {"env": env, "work": work, "repository": repository, "standin": standin_base}


def _run_in(client, image: str, command: str, platform: str | None = None) -> str:
    return client.containers.run(image, ["sh", "-c", command], remove=True,
                                 platform=platform).decode()


# Between the answers of one container's commands; no answer holds such a line.
ANSWER_END = "--- vllm-forge-test answer end ---"


def _answers(client, image: str, commands: dict[str, str], platform: str | None = None) -> dict[str, str]:
    """Each command's output (its last newline dropped), all run in one container by one shell
    that stops at the first failing command (the run then raises with its stderr): one container
    start, not one per question, which counts under qemu."""
    script = "set -e\n" + "".join(f"{command}\necho '{ANSWER_END}'\n" for command in commands.values())
    parts = _run_in(client, image, script, platform).split(f"{ANSWER_END}\n")
    assert len(parts) == len(commands) + 1 and parts[-1] == "", parts
    return {name: part.removesuffix("\n") for name, part in zip(commands, parts)}


def _look_inside(client, tag: str, arch: str, target: str) -> dict[str, str]:
    """The machine, build record, patched line count, tuned config folder and {recipe: target}
    of the target's recipes as the image's forge loads them, from one container and (for the
    recipes) one Python process: under qemu each Python start costs seconds."""
    recipes = ", ".join(repr(name) for name in load_targets()[target].recipes)
    return _answers(client, tag, {
        "machine": "uname -m",
        "record": "cat /opt/vllm-forge/build-record.json",
        "patched lines": f"grep -c '{PATCHED_LINE}' {PATCHED_FILE}",
        "tuned config folder": "echo $VLLM_TUNED_CONFIG_FOLDER",
        "recipes": (f"cd /opt/vllm-forge && python3 -c \"import json; from forge.serving.recipes import "
                    f"load_recipe; print(json.dumps({{r: load_recipe(r, '{target}').target for r in "
                    f"({recipes},)}}))\""),
    }, platform=f"linux/{arch}")


def _check_verify_scripts_run_as_files(client, tag: str) -> None:
    """The verify scripts run as files from any directory of the image, no PYTHONPATH (before:
    ModuleNotFoundError: No module named 'forge'; only `python3 -m verify.X` from /opt/vllm-forge).
    The same COPY steps and scripts on every platform: checked natively (amd64), where a Python
    start does not cost what it does under qemu."""
    scripts = ("mtp_smoke.py", "bench.py", "profile.py")
    usages = _answers(client, tag, {script: f"cd / && env -u PYTHONPATH python3 /opt/vllm-forge/verify/{script} --help"
                                    for script in scripts})
    for script, usage in usages.items():
        assert usage.startswith(f"usage: {script} ") and "--recipe" in usage, usage


def test_lock_pins_the_multi_platform_index_digest(setup):
    standin = setup["standin"]
    assert load_lock(setup["env"]["VLLM_FORGE_LOCK"]) == {standin.ref: standin.digest}
    assert locked_platforms(setup["env"]["VLLM_FORGE_LOCK"]) == {standin.ref: ["linux/amd64", "linux/arm64"]}
    again = forge("lock", "--vllm", VERSION, "--target", "gb10", env=setup["env"])
    assert again.returncode == 0, again.stderr
    assert f"{standin.ref} -> {standin.digest} (unchanged; linux/amd64, linux/arm64)" in again.stdout


def _check_image(client, tag: str, target: str, arch: str, setup) -> dict:
    attrs = client.api.inspect_image(tag)
    assert attrs["Architecture"] == arch
    labels = attrs["Config"]["Labels"]
    assert labels["io.vllm-forge.target"] == target
    assert labels["io.vllm-forge.vllm-version"] == VERSION
    series = load_series(SNAPSHOT["repo"] / "patches" / "series.yaml")
    device = load_targets()[target].moe_device_name
    # an image carries every patch of the series but a candidate (never asked for in a build)
    shipped = applied_statuses(release_status(VERSION, series=series, moe_device=device), series)
    expected = {s.id: s.status for s in shipped}
    assert not {s.id for s in shipped} & {p.id for p in series.patches if p.candidate}
    assert expected["gemma4-mtp-share-embeddings"] == "applies"
    assert labels["io.vllm-forge.patches"] == ",".join(f"{k}={v}" for k, v in expected.items())
    assert labels["org.opencontainers.image.base.digest"] == setup["standin"].digest
    assert labels["org.opencontainers.image.revision"]
    inside = _look_inside(client, tag, arch, target)
    assert inside["machine"] == {"amd64": "x86_64", "arm64": "aarch64"}[arch]
    record = json.loads(inside["record"])
    assert (record["target"], record["vllm_version"]) == (target, VERSION)
    assert record["base"]["digest"] == setup["standin"].digest
    assert {p["id"]: p["status"] for p in record["patches"]} == expected
    assert record["patch_set_hash"] == labels["io.vllm-forge.patch-set-hash"]
    digest = labels["io.vllm-forge.content-digest"].removeprefix("sha256:")
    assert labels["org.opencontainers.image.version"] == f"vllm{VERSION}-{target}-{digest[:12]}"
    assert record["source"]["revision"] == labels["org.opencontainers.image.revision"]
    head = subprocess.run(["git", "-C", str(SNAPSHOT["repo"]), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert record["source"] == {"revision": head, "source_date_epoch": 1790000000}
    assert labels["org.opencontainers.image.created"] == "2026-09-21T14:13:20Z"
    assert inside["patched lines"] == "1", "the patched line must be in the image's vLLM exactly once"
    assert inside["tuned config folder"] == "/opt/vllm-forge/moe-configs"
    # verify loads its recipes inside the image with every cross-file check (targets.yaml is there).
    assert json.loads(inside["recipes"]) == {recipe: target for recipe in load_targets()[target].recipes}
    return record


def test_build_amd64_target_runs_patched(setup, docker_engine):
    result = forge("--target", "a100", "--vllm", VERSION, env=setup["env"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "exporting to image" in result.stdout, "the build shows BuildKit's progress"
    assert "attestations: none (this engine's image store cannot keep them" in result.stdout
    plan = json.loads(forge("--target", "a100", "--vllm", VERSION, "--plan", "--json", env=setup["env"]).stdout)
    immutable, moving = plan["tags"]
    assert immutable.endswith(f"vllm{VERSION}-a100-{plan['content_digest'][:12]}") and moving.endswith(f"vllm{VERSION}-a100")
    _check_image(docker_engine, immutable, "a100", "amd64", setup)
    _check_verify_scripts_run_as_files(docker_engine, immutable)
    assert docker_engine.images.get(immutable).id == docker_engine.images.get(moving).id
    # The local-only tag that held the image between build and tagging is gone again.
    held = [t for image in docker_engine.images.list(name="vllm-forge-build") for t in image.tags
            if t.startswith(f"vllm-forge-build:{immutable.rsplit(':', 1)[1]}-")]
    assert not held, held


def test_build_arm64_target_under_qemu(setup, docker_engine, arm64_emulation):
    result = forge("--target", "gb10", "--vllm", VERSION, env=setup["env"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    tag = f"{setup['repository']}:vllm{VERSION}-gb10"
    record = _check_image(docker_engine, tag, "gb10", "arm64", setup)
    assert record["platform"] == "linux/arm64" and record["cuda_arch"] == "12.1"


def test_push_sends_the_immutable_tag_only_then_rebuild_from_lock_is_identical(setup, docker_engine):
    """Before: --push pushed the moving tag too, before any verify. Now the registry gets the
    immutable tag alone; `publish --move-tag` moves the moving tag once verify passed."""
    registry = setup["standin"].registry
    first = forge("--target", "a100", "--vllm", VERSION, "--push", env=setup["env"])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    plan = json.loads(forge("--target", "a100", "--vllm", VERSION, "--plan", "--json", env=setup["env"]).stdout)
    immutable, moving = (t.rsplit(":", 1)[1] for t in plan["tags"])
    pushed = registry.digest("forge-test", immutable)
    assert pushed and registry.digest("forge-test", moving) is None
    assert f"{plan['tags'][1]} not moved: after verify passes on {pushed}" in first.stdout
    assert docker_engine.images.get(plan["tags"][1]).id == docker_engine.images.get(plan["tags"][0]).id, \
        "the local engine still has both tags"
    # Rebuild from the same commit and lock: same context, same labels, same image, same digest.
    again = forge("--target", "a100", "--vllm", VERSION, "--push", env=setup["env"])
    assert again.returncode == 0, again.stderr
    plan_again = json.loads(forge("--target", "a100", "--vllm", VERSION, "--plan", "--json", env=setup["env"]).stdout)
    assert plan_again["context"]["sha256"] == plan["context"]["sha256"]
    assert plan_again["labels"] == plan["labels"]
    assert registry.digest("forge-test", immutable) == pushed


def _repo_copy(tmp_path: Path) -> Path:
    """A copy of the snapshot (no git: revision "unknown") for tests that change files."""
    return _copy_tree(SNAPSHOT["repo"], tmp_path / "repo")


def _edit_patch(copy: Path, old: str, new: str) -> None:
    """Change the patch file and keep the manifest's sha256 honest, as a maintainer would."""
    diff = copy / "patches/source/gemma4-mtp-share-embeddings.diff"
    text = diff.read_text()
    assert old in text
    diff.write_text(text.replace(old, new))
    series = copy / "patches/series.yaml"
    old_sha = hashlib.sha256(text.encode()).hexdigest()
    new_sha = hashlib.sha256(diff.read_bytes()).hexdigest()
    series.write_text(series.read_text().replace(old_sha, new_sha))


def _image_id(client, ref: str) -> str:
    return client.images.get(ref).id


def step_status(output: str, step: str) -> str:
    """What BuildKit's plain progress says of the Dockerfile step starting `step`: CACHED or DONE."""
    number = re.search(rf"^#(\d+) \[[ \d/]+\] {re.escape(step)}", output, re.M)
    assert number, f"no step {step!r} in the build output"
    return re.search(rf"^#{number[1]} (CACHED|DONE)", output, re.M)[1]


def test_a_changed_image_ships_under_a_new_immutable_tag(setup, docker_engine, tmp_path):
    """Before: a new verify script kept the patch-set tag, so the push was refused and the fix could
    not ship. Now the new content has its own tag; the old tag keeps its digest; the registry's
    moving tag is left to `publish --move-tag`."""
    registry = setup["standin"].registry
    assert forge("--target", "a100", "--vllm", VERSION, "--push", env=setup["env"]).returncode == 0
    old = json.loads(forge("--target", "a100", "--vllm", VERSION, "--plan", "--json", env=setup["env"]).stdout)
    old_tag, moving = (t.rsplit(":", 1)[1] for t in old["tags"])
    old_digest = registry.digest("forge-test", old_tag)
    copy = _repo_copy(tmp_path)
    # new to this engine on every run: its COPY cannot come from an earlier run's cache
    (copy / "verify" / "extra_check.py").write_text(f"print('a different image {uuid.uuid4()}')\n")
    result = forge("--target", "a100", "--vllm", VERSION, "--push", env=setup["env"], cwd=copy)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    # The apply step reads no verify script: BuildKit copies the new verify/ and reuses the step.
    assert step_status(result.stdout, "RUN cd /opt/vllm-forge") == "CACHED"
    assert step_status(result.stdout, "COPY verify/") == "DONE"
    new = json.loads(forge("--target", "a100", "--vllm", VERSION, "--plan", "--json", env=setup["env"],
                           cwd=copy).stdout)
    new_tag = new["tags"][0].rsplit(":", 1)[1]
    assert new_tag != old_tag and new["patch_set_hash"] == old["patch_set_hash"]
    new_digest = registry.digest("forge-test", new_tag)
    assert new_digest and new_digest != old_digest
    assert registry.digest("forge-test", old_tag) == old_digest, "an immutable tag never moves"
    assert registry.digest("forge-test", moving) is None


def test_refused_push_moves_no_tag_local_or_remote(setup, docker_engine):
    """The immutable tag already names another image in the registry (pushed by someone else):
    refused before anything is tagged. Before: the local tags were moved, then the push refused."""
    standin, registry = setup["standin"], setup["standin"].registry
    repository = f"{standin.mirror}/forge-taken"
    env = {**setup["env"], "VLLM_FORGE_REPOSITORY": repository}
    plan = json.loads(forge("--target", "a100", "--vllm", VERSION, "--plan", "--json", env=env).stdout)
    immutable_ref, moving_ref = plan["tags"]
    # Someone else's image under our immutable tag and, locally, our two tags on that image too.
    other = f"vllm-forge-test/standin:v{VERSION}-amd64"
    for ref in (immutable_ref, moving_ref):
        repo, tag = ref.rsplit(":", 1)
        docker_engine.api.tag(other, repo, tag)
    for line in docker_engine.api.push(repository, tag=immutable_ref.rsplit(":", 1)[1], stream=True, decode=True):
        assert "error" not in line, line
    taken = registry.digest("forge-taken", immutable_ref.rsplit(":", 1)[1])
    assert taken
    result = forge("--target", "a100", "--vllm", VERSION, "--push", env=env)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr
    line = one_line_error(result)
    assert f"refusing to push {immutable_ref}: that immutable tag already names {taken}" in line
    assert "no tag was set or moved" in line
    assert registry.digest("forge-taken", immutable_ref.rsplit(":", 1)[1]) == taken
    assert registry.digest("forge-taken", moving_ref.rsplit(":", 1)[1]) is None
    other_id = _image_id(docker_engine, other)
    assert _image_id(docker_engine, immutable_ref) == other_id, "the local immutable tag must not move"
    assert _image_id(docker_engine, moving_ref) == other_id, "the local moving tag must not move"


def test_base_whose_tag_moved_is_refused_unless_allowed(setup, docker_engine, tmp_path):
    standin = setup["standin"]
    # Pin the tag to another real digest in the registry (the amd64 manifest): the tag has "moved".
    other = standin.registry.digest("vllm/vllm-openai", f"v{VERSION}-amd64",
                                    accept="application/vnd.docker.distribution.manifest.v2+json")
    lock = tmp_path / "lock.yaml"
    save_lock({standin.ref: other}, lock, {standin.ref: ["linux/amd64"]})
    repository = f"{standin.mirror}/forge-moved"
    env = {**setup["env"], "VLLM_FORGE_LOCK": str(lock), "VLLM_FORGE_REPOSITORY": repository}
    result = forge("--target", "a100", "--vllm", VERSION, env=env)
    assert result.returncode == 2
    assert f"base {standin.ref} moved: locked {other}, registry now {standin.digest}" in one_line_error(result)
    assert not docker_engine.images.list(name=repository), "nothing may be built"
    allowed = forge("--target", "a100", "--vllm", VERSION, "--allow-base-change", env=env)
    assert allowed.returncode == 0, allowed.stderr
    attrs = docker_engine.api.inspect_image(f"{repository}:vllm{VERSION}-a100")
    assert attrs["Config"]["Labels"]["org.opencontainers.image.base.digest"] == other


def test_unlocked_base_is_refused_with_locked(setup, tmp_path):
    env = {**setup["env"], "VLLM_FORGE_LOCK": str(tmp_path / "empty-lock.yaml")}
    result = forge("--target", "a100", "--vllm", VERSION, "--locked", env=env)
    assert result.returncode == 2
    assert f"{tmp_path / 'empty-lock.yaml'}: bases: {setup['standin'].ref} is not locked" in one_line_error(result)
    planned = forge("--target", "a100", "--vllm", VERSION, "--plan", "--locked", env=env)
    assert "unknown: not locked. A build pins it first (with --locked it refuses" in planned.stdout
    assert planned.returncode == 2 and one_line_error(planned) == one_line_error(result)
    assert not (tmp_path / "empty-lock.yaml").exists()


def test_plan_needs_no_network_nor_engine(setup):
    dead = {"DOCKER_HOST": DEAD_ENGINE, "HTTP_PROXY": f"http://{DEAD_PORT}", "HTTPS_PROXY": f"http://{DEAD_PORT}",
            "http_proxy": f"http://{DEAD_PORT}", "https_proxy": f"http://{DEAD_PORT}", "NO_PROXY": ""}
    result = forge("--target", "gb10", "--vllm", VERSION, "--plan", "--json", env={**setup["env"], **dead})
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["base"] == {"image": setup["standin"].ref, "digest": setup["standin"].digest, "locked": True}
    assert plan["build_args"]["BASE_IMAGE"] == f"{setup['standin'].mirror}/vllm/vllm-openai@{setup['standin'].digest}"
    assert plan["labels"]["io.vllm-forge.platform"] == "linux/arm64"
    assert re.fullmatch(r"[0-9a-f]{64}", plan["context"]["sha256"])
    human = forge("--target", "gb10", "--vllm", VERSION, "--plan", env={**setup["env"], **dead})
    assert "gemma4-mtp-share-embeddings" in human.stdout and "applies" in human.stdout


# --- bad input: one line, non-zero, nothing built ---------------------------------------------

def test_release_without_base_is_refused_before_the_engine(setup):
    result = forge("--target", "gb10", "--vllm", "0.10.0", env={**setup["env"], "DOCKER_HOST": DEAD_ENGINE})
    assert result.returncode == 2
    assert "vLLM 0.10.0 is before checked_from 0.21.0" in one_line_error(result)


def test_conflicting_patch_is_caught_before_the_engine(setup, docker_engine, tmp_path):
    copy = _repo_copy(tmp_path)
    _edit_patch(copy, '"Sharing target model embedding weights with the draft model."',
                '"Sharing the embedding of the target with the draft."')
    env = {**setup["env"], "DOCKER_HOST": DEAD_ENGINE, "VLLM_FORGE_REPOSITORY": f"{setup['standin'].mirror}/forge-conflict"}
    result = forge("--target", "a100", "--vllm", VERSION, cwd=copy, env=env)
    assert result.returncode == 3, result.stderr
    line = one_line_error(result)
    assert "gemma4-mtp-share-embeddings" in line and "Docker engine" not in line
    assert not docker_engine.images.list(name=f"{setup['standin'].mirror}/forge-conflict")


def test_unreachable_engine(setup):
    result = forge("--target", "a100", "--vllm", VERSION, env={**setup["env"], "DOCKER_HOST": DEAD_ENGINE})
    assert result.returncode == 2
    assert f"cannot reach the Docker engine at {DEAD_ENGINE}" in one_line_error(result)


def test_registry_down_for_lock_keeps_the_lock(setup, tmp_path):
    lock = tmp_path / "lock.yaml"
    shutil.copy(setup["env"]["VLLM_FORGE_LOCK"], lock)
    before = lock.read_bytes()
    result = forge("lock", "--vllm", VERSION, env={**setup["env"], "VLLM_FORGE_BASE_MIRROR": DEAD_PORT,
                                                   "VLLM_FORGE_LOCK": str(lock)})
    assert result.returncode == 2
    assert f"registry {DEAD_PORT} unreachable" in one_line_error(result)
    assert lock.read_bytes() == before


def test_registry_down_for_build_builds_nothing(setup, docker_engine, tmp_path):
    lock = tmp_path / "lock.yaml"
    dead_ref = f"{DEAD_PORT}/vllm/vllm-openai:v{VERSION}"
    save_lock({dead_ref: setup["standin"].digest}, lock, {dead_ref: ["linux/amd64", "linux/arm64"]})
    repository = f"{setup['standin'].mirror}/forge-down"
    env = {**setup["env"], "VLLM_FORGE_BASE_MIRROR": DEAD_PORT, "VLLM_FORGE_LOCK": str(lock),
           "VLLM_FORGE_REPOSITORY": repository}
    result = forge("--target", "a100", "--vllm", VERSION, env=env)
    assert result.returncode == 2
    assert f"registry {DEAD_PORT} unreachable" in one_line_error(result)
    pushing = forge("--target", "a100", "--vllm", VERSION, "--push",
                    env={**setup["env"], "VLLM_FORGE_REPOSITORY": f"{DEAD_PORT}/forge-down"})
    assert pushing.returncode == 2
    assert f"registry {DEAD_PORT} unreachable" in one_line_error(pushing)
    assert not docker_engine.images.list(name=repository)
    assert not docker_engine.images.list(name=f"{DEAD_PORT}/forge-down")


def test_tuned_moe_config_lands_where_vllm_reads_it(setup, docker_engine, tmp_path):
    copy = _repo_copy(tmp_path)
    name = "E=128,N=704,device_name=NVIDIA_A100-SXM4-80GB.json"
    config = json.dumps({"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128,
                               "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}})
    (copy / "patches" / "moe-configs").mkdir(exist_ok=True)
    (copy / "patches" / "moe-configs" / name).write_text(config)
    series = copy / "patches" / "series.yaml"
    data = yaml.safe_load(series.read_text())
    data["patches"].append({"id": "moe-test-a100-bf16", "title": "a tuned config for the test",
                            "kind": "moe-config", "releases": ">=0.21.0", "why": "test",
                            "files": [{"path": f"moe-configs/{name}",
                                       "sha256": hashlib.sha256(config.encode()).hexdigest()}]})
    series.write_text(yaml.safe_dump(data, sort_keys=False))
    repository = f"{setup['standin'].mirror}/forge-moe"
    env = {**setup["env"], "VLLM_FORGE_REPOSITORY": repository}
    result = forge("--target", "a100", "--vllm", VERSION, cwd=copy, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    tag = f"{repository}:vllm{VERSION}-a100"
    labels = docker_engine.api.inspect_image(tag)["Config"]["Labels"]
    # The series also ships H200 tunes: an a100 image carries its own device's file alone.
    assert labels["io.vllm-forge.moe-configs"] == name
    out = _run_in(docker_engine, tag, f"cat \"$VLLM_TUNED_CONFIG_FOLDER/{name}\"; echo; "
                                      "ls \"$VLLM_TUNED_CONFIG_FOLDER\" | wc -l; "
                                      "python3 -c \"import json; print(json.load(open('/opt/vllm-forge/build-record.json'))['moe_configs'])\"")
    body, count, listed = out.strip().split("\n")
    assert json.loads(body) == json.loads(config)
    assert int(count) == 1
    assert listed == str([name])


# --- one build engine: a local build is the bake build ----------------------------------------

def test_local_build_and_bake_build_are_the_same_image(setup, docker_engine, buildx, tmp_path):
    """`build.py` and `build.py bake` + `docker buildx bake` (on the README's engine, so
    --no-attest) from the same commit and lock: same content tag, context digest, labels, image."""
    repository = f"{setup['standin'].mirror}/forge-same"
    env = {**setup["env"], "VLLM_FORGE_REPOSITORY": repository}
    local = forge("--target", "a100", "--vllm", VERSION, env=env)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr
    plan = json.loads(forge("--target", "a100", "--vllm", VERSION, "--plan", "--json", env=env).stdout)
    immutable = plan["tags"][0]
    local_attrs = docker_engine.api.inspect_image(immutable)
    docker_engine.images.remove(immutable, force=True)
    docker_engine.images.remove(plan["tags"][1], force=True)

    made = forge("bake", "--vllm", VERSION, "--target", "a100", "--no-attest", "-o",
                 str(tmp_path / "docker-bake.json"), env=env)
    assert made.returncode == 0, made.stderr
    bake_target = json.loads((tmp_path / "docker-bake.json").read_text())["target"]["a100"]
    assert bake_target["tags"] == plan["tags"][:1], "bake names the image by the same content tag alone"
    baked = subprocess.run([buildx, "buildx", "bake", "-f", "docker-bake.json", "--load", "--progress",
                            "plain"], cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                           env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"})
    assert baked.returncode == 0, baked.stderr[-4000:]
    baked_attrs = docker_engine.api.inspect_image(immutable)
    local_labels, baked_labels = local_attrs["Config"]["Labels"], baked_attrs["Config"]["Labels"]
    assert baked_labels["io.vllm-forge.context-sha256"] == local_labels["io.vllm-forge.context-sha256"] \
        == plan["context"]["sha256"]
    assert baked_labels["io.vllm-forge.content-digest"] == local_labels["io.vllm-forge.content-digest"] \
        == f"sha256:{plan['content_digest']}"
    assert baked_labels == local_labels == plan["labels"]
    # The same BuildKit build of the same definition: the very same image (config, layers).
    assert baked_attrs["RootFS"]["Layers"] == local_attrs["RootFS"]["Layers"]
    assert baked_attrs["Id"] == local_attrs["Id"]


def test_build_without_buildx_says_how_to_get_it(setup, docker_engine):
    """No docker CLI (so no buildx plugin) on PATH: one line naming what is missing and where the
    README says how to get it; nothing built."""
    repository = f"{setup['standin'].mirror}/forge-no-buildx"
    env = {**setup["env"], "VLLM_FORGE_REPOSITORY": repository, "PATH": "/nonexistent"}
    result = forge("--target", "a100", "--vllm", VERSION, env=env)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr
    line = one_line_error(result)
    assert "the docker CLI is not on PATH" in line and "docker buildx" in line
    assert "tests/infra/install-buildx.sh" in line
    assert not docker_engine.images.list(name=repository)


def test_a_conflict_inside_the_build_exits_3_with_the_apply_step_s_reason(setup, docker_engine):
    """The plan checks the release's sdist; a base whose installed vLLM differs from it (here: one
    line of the patched file edited) fails inside BuildKit's RUN of `build.py apply`: exit 3, one
    line with apply's own reason, nothing tagged."""
    registry = setup["standin"].registry
    odd = f"{registry.host}/forge-odd/vllm-openai:v{VERSION}"
    dockerfile = (f"FROM vllm-forge-test/standin:v{VERSION}-amd64\n"
                  f"RUN sed -i 's/Sharing target model embedding weights/Sharing the embedding/' {PATCHED_FILE}\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile.encode()))
    for chunk in docker_engine.api.build(fileobj=io.BytesIO(buffer.getvalue()), custom_context=True,
                                         tag=odd, rm=True, decode=True):
        assert "error" not in chunk, chunk
    for chunk in docker_engine.api.push(odd.rsplit(":", 1)[0], tag=f"v{VERSION}", stream=True, decode=True):
        assert "error" not in chunk, chunk
    repository = f"{setup['standin'].mirror}/forge-odd-build"
    env = {**setup["env"], "VLLM_FORGE_REPOSITORY": repository}
    result = forge("--target", "a100", "--vllm", VERSION, "--base-image", odd, "--allow-unlocked", env=env)
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr
    line = one_line_error(result)
    assert "the patch step failed on the base image's vLLM" in line
    assert "patch gemma4-mtp-share-embeddings:" in line, "apply's own reason, from inside the RUN"
    assert not docker_engine.images.list(name=repository)


def test_a_same_size_edit_reaches_the_image(setup, docker_engine, tmp_path):
    """BuildKit sends the context incrementally and takes a file of a size and mtime it has seen
    for unchanged, from whichever directory: two checkouts whose one file differs at equal size
    (and equal SOURCE_DATE_EPOCH) must each build their own file into the image."""
    repository = f"{setup['standin'].mirror}/forge-same-size"
    env = {**setup["env"], "VLLM_FORGE_REPOSITORY": repository, "SOURCE_DATE_EPOCH": "1790000000"}
    for word in ("first", "other"):  # same length
        copy = _copy_tree(SNAPSHOT["repo"], tmp_path / f"repo-{word}")
        (copy / "verify" / "marker.py").write_text(f"MARK = '{word}'\n")
        result = forge("--target", "a100", "--vllm", VERSION, cwd=copy, env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        shipped = _run_in(docker_engine, f"{repository}:vllm{VERSION}-a100",
                          "cat /opt/vllm-forge/verify/marker.py")
        assert shipped == f"MARK = '{word}'\n"
