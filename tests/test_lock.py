"""images/lock.yaml and the registry digest lookup (against the real local registry)."""
import pytest

from forge.errors import ForgeError
from forge.images.lock import DEFAULT_LOCK_FILE, load_lock, save_lock
from forge.images.registry import manifest_digest, parse_reference
from tests.build_cli import run_build

DIGEST = "sha256:" + "ab" * 32


def test_committed_lock_file_is_valid():
    pins = load_lock(DEFAULT_LOCK_FILE)
    assert DEFAULT_LOCK_FILE.exists()
    assert all(ref.startswith("vllm/vllm-openai:v") for ref in pins)


def test_save_then_load_round_trips_sorted_with_header(tmp_path):
    path = save_lock({"vllm/vllm-openai:v0.27.1": DIGEST, "vllm/vllm-openai:v0.25.0": DIGEST}, tmp_path / "l.yaml")
    text = path.read_text()
    assert text.startswith("# Base image pins")
    assert text.index("v0.25.0") < text.index("v0.27.1")
    assert load_lock(path) == {"vllm/vllm-openai:v0.25.0": DIGEST, "vllm/vllm-openai:v0.27.1": DIGEST}


def test_platforms_round_trip(tmp_path):
    from forge.images.lock import locked_platforms

    path = save_lock({"r:1": DIGEST, "r:2": DIGEST}, tmp_path / "l.yaml",
                     {"r:1": ["linux/arm64", "linux/amd64"], "r:3": ["linux/amd64"]})
    assert locked_platforms(path) == {"r:1": ["linux/amd64", "linux/arm64"]}
    assert load_lock(path) == {"r:1": DIGEST, "r:2": DIGEST}


def test_missing_lock_is_empty(tmp_path):
    assert load_lock(tmp_path / "none.yaml") == {}


@pytest.mark.parametrize("body, message", [
    ("bases:\n  vllm/vllm-openai:v0.25.0: latest\n", r"bases\.vllm/vllm-openai:v0\.25\.0: must be a digest"),
    ("pins: {}\n", r"\(top level\): must be a mapping with only `bases`"),
    ("bases: [1, 2]\n", r"bases: must be a mapping"),
    ("bases: {a: [\n", r"not valid YAML"),
    (f"bases: {{x:y: {DIGEST}}}\nplatforms: {{other:y: [linux/amd64]}}\n",
     r"platforms\.other:y: not a pinned base"),
    (f"bases: {{x:y: {DIGEST}}}\nplatforms: {{x:y: linux/amd64}}\n",
     r"platforms\.x:y: must be a list of os/arch platforms"),
])
def test_bad_lock_is_one_line_naming_file_and_field(tmp_path, body, message):
    path = tmp_path / "lock.yaml"
    path.write_text(body)
    with pytest.raises(ForgeError, match=message) as caught:
        load_lock(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("ref, registry, repository, tag", [
    ("vllm/vllm-openai:v0.27.1", "docker.io", "vllm/vllm-openai", "v0.27.1"),
    ("debian", "docker.io", "library/debian", "latest"),
    ("127.0.0.1:5000/vllm/vllm-openai:v0.25.0", "127.0.0.1:5000", "vllm/vllm-openai", "v0.25.0"),
    ("localhost/forge:x", "localhost", "forge", "x"),
    ("ghcr.io/owner/vllm-forge:vllm0.27.1-gb10", "ghcr.io", "owner/vllm-forge", "vllm0.27.1-gb10"),
])
def test_parse_reference_like_the_engine(ref, registry, repository, tag):
    parsed = parse_reference(ref)
    assert (parsed.registry, parsed.repository, parsed.tag) == (registry, repository, tag)


@pytest.mark.parametrize("ref", ["Vllm/Openai:v1", "x/y@sha256:" + "0" * 64, "x/y:bad tag"])
def test_bad_references_refused(ref):
    with pytest.raises(ForgeError):
        parse_reference(ref)


@pytest.mark.docker
def test_digest_of_a_real_registry_tag(standin_base):
    assert manifest_digest(standin_base.ref) == standin_base.digest
    assert manifest_digest(f"{standin_base.mirror}/vllm/vllm-openai:v9.9.9") is None


@pytest.mark.docker
def test_lock_for_a_tag_the_registry_lacks_writes_nothing(standin_base, tmp_path):
    lock = tmp_path / "lock.yaml"
    result = run_build("lock", "--vllm", "0.27.1", "--target", "a100", timeout=120,
                       env={"VLLM_FORGE_BASE_MIRROR": standin_base.mirror, "VLLM_FORGE_LOCK": str(lock)})
    assert result.returncode == 2
    assert f"error: registry has no tag {standin_base.mirror}/vllm/vllm-openai:v0.27.1" in result.stderr
    assert not lock.exists()


def test_lock_unknown_target_is_one_line():
    result = run_build("lock", "--vllm", "0.27.1", "--target", "tpu", timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: ") and "targets.yaml: unknown target 'tpu' (known: " in result.stderr


@pytest.mark.docker
def test_lock_refuses_a_base_lacking_a_target_platform(standin_base, docker_engine, tmp_path):
    """Before: `lock` pinned an amd64-only base for gb10 (arm64) and the build met a raw Docker
    error. Now: one line naming base, platform and target, nothing written; the targets the base
    fits can still be locked, and the lock records what the digest offers."""
    from forge.images.lock import locked_platforms
    from tests.fixtures_docker import push

    mirror = standin_base.mirror
    # An amd64-only release tag, as a registry could serve one: the stand-in's amd64 image.
    push(docker_engine, "vllm-forge-test/standin:v0.25.0-amd64", f"{mirror}/vllm/vllm-openai:v0.26.0")
    ref = f"{mirror}/vllm/vllm-openai:v0.26.0"
    lock = tmp_path / "lock.yaml"
    env = {"VLLM_FORGE_BASE_MIRROR": mirror, "VLLM_FORGE_LOCK": str(lock)}

    def lock_cmd(*extra):
        return run_build("lock", "--vllm", "0.26.0", *extra, timeout=120, env=env)

    refused = lock_cmd()
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: base {ref} (sha256:")
    assert "has no linux/arm64 image (it offers linux/amd64), which target gb10 needs; nothing locked" in line
    assert not lock.exists()
    fits = lock_cmd("--target", "a100", "--target", "h200")
    assert fits.returncode == 0, fits.stderr
    assert locked_platforms(lock) == {ref: ["linux/amd64"]}
    assert load_lock(lock)[ref] == manifest_digest(ref)


def _first_run(standin, lock, *args):
    return run_build(*args, timeout=300,
                     env={"VLLM_FORGE_BASE_MIRROR": standin.mirror, "VLLM_FORGE_LOCK": str(lock)})


@pytest.mark.docker
def test_the_first_plan_of_an_unlocked_release_pins_its_base_and_says_so(standin_base, tmp_path):
    """Before: `--plan` (and the build) exited 2 with "is not locked; run python3 build.py lock".
    Now the first run resolves the digest through the registry, writes it, says so in one line
    (stderr: stdout stays the plan's JSON); the next run finds it and says nothing."""
    import json

    from forge.images.lock import locked_platforms

    lock = tmp_path / "lock.yaml"
    first = _first_run(standin_base, lock, "--target", "gb10", "--vllm", "0.25.0", "--plan", "--json")
    assert first.returncode == 0, first.stderr
    assert first.stderr == (f"locked {standin_base.ref} -> {standin_base.digest} (linux/amd64, "
                            f"linux/arm64) in {lock}\n")
    plan = json.loads(first.stdout)
    assert plan["base"] == {"image": standin_base.ref, "digest": standin_base.digest, "locked": True}
    assert load_lock(lock) == {standin_base.ref: standin_base.digest}
    assert locked_platforms(lock) == {standin_base.ref: ["linux/amd64", "linux/arm64"]}
    before = lock.read_bytes()
    again = _first_run(standin_base, lock, "--target", "a100", "--vllm", "0.25.0", "--plan", "--locked")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert lock.read_bytes() == before


@pytest.mark.docker
def test_the_first_build_pins_its_base_before_it_needs_the_engine(standin_base, tmp_path):
    """The build path locks as --plan does: the pin is written, then the missing engine refused."""
    lock = tmp_path / "lock.yaml"
    dead = f"unix://{tmp_path}/no-engine.sock"
    result = run_build("--target", "a100", "--vllm", "0.25.0", timeout=300,
                       env={"VLLM_FORGE_BASE_MIRROR": standin_base.mirror, "VLLM_FORGE_LOCK": str(lock),
                            "DOCKER_HOST": dead})
    assert result.returncode == 2
    locked, refused = result.stderr.splitlines()
    assert locked == f"locked {standin_base.ref} -> {standin_base.digest} (linux/amd64, linux/arm64) in {lock}"
    assert refused.startswith(f"error: cannot reach the Docker engine at {dead}: no engine is running")
    assert load_lock(lock) == {standin_base.ref: standin_base.digest}


@pytest.mark.docker
def test_a_first_plan_keeps_the_other_pins_and_refuses_a_base_without_the_platform(standin_base,
                                                                                   docker_engine, tmp_path):
    from tests.fixtures_docker import push

    mirror = standin_base.mirror
    amd64_only = f"{mirror}/vllm/vllm-openai:v0.26.0"
    push(docker_engine, "vllm-forge-test/standin:v0.25.0-amd64", amd64_only)
    lock = tmp_path / "lock.yaml"
    save_lock({"other/base:v1": DIGEST}, lock, {"other/base:v1": ["linux/amd64"]})
    before = lock.read_bytes()
    refused = _first_run(standin_base, lock, "--target", "gb10", "--vllm", "0.26.0", "--plan")
    assert refused.returncode == 2
    assert f"error: base {amd64_only} (sha256:" in refused.stderr and "which target gb10 needs" in refused.stderr
    assert lock.read_bytes() == before, "nothing locked"
    fits = _first_run(standin_base, lock, "--target", "a100", "--vllm", "0.26.0", "--plan")
    assert fits.returncode == 0, fits.stderr
    assert load_lock(lock) == {"other/base:v1": DIGEST, amd64_only: manifest_digest(amd64_only)}


@pytest.mark.docker
@pytest.mark.parametrize("platform, field", [
    ({"os": "linux\u001b]0;owned\u0007", "architecture": "amd64"}, "manifests[0].platform.os"),
    ({"os": "linux", "architecture": "amd64/../../x"}, "manifests[0].platform.architecture"),
])
def test_lock_refuses_a_registry_index_naming_a_platform_no_lock_can_hold(standin_base, tmp_path, platform,
                                                                          field):
    """A registry's answer is typed (forge/images/registry_answers.py): an index whose platform is
    no lowercase word (a control sequence, a path) is refused in one line naming the registry, the
    index and the field, and nothing is locked; before, its name went into images/lock.yaml as it
    came."""
    import json

    import requests

    from tests.fixtures_docker import MANIFEST_LIST, MANIFEST_V2, STANDIN_REPO

    registry = standin_base.registry
    single = requests.get(registry.url(f"{STANDIN_REPO}/manifests/v{standin_base.version}-amd64"),
                          headers={"Accept": MANIFEST_V2}, timeout=10)
    single.raise_for_status()
    index = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_LIST, "manifests": [
        {"mediaType": MANIFEST_V2, "size": len(single.content),
         "digest": single.headers["Docker-Content-Digest"], "platform": platform}]})
    put = requests.put(registry.url(f"{STANDIN_REPO}/manifests/v0.23.0"), data=index,
                       headers={"Content-Type": MANIFEST_LIST}, timeout=30)
    put.raise_for_status()
    lock = tmp_path / "lock.yaml"
    result = run_build("lock", "--vllm", "0.23.0", "--target", "a100", timeout=120,
                       env={"VLLM_FORGE_BASE_MIRROR": standin_base.mirror, "VLLM_FORGE_LOCK": str(lock)})
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: registry {standin_base.mirror} ") and f"@{put.headers['Docker-Content-Digest']}" in line
    assert f": {field}: " in line and "\x1b" not in line
    assert not lock.exists()
