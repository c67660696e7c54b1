"""`build.py bake`: a buildx bake file for every target, checked by the real `docker buildx bake --print`."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forge.images.lock import load_lock, save_lock

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[1]
VERSION = "0.25.0"


def bake(tmp_path, standin, *extra, lock=None):
    env = {**os.environ, "VLLM_FORGE_BASE_MIRROR": standin.mirror,
           "VLLM_FORGE_REPOSITORY": "ghcr.io/acme/vllm-forge"}
    if lock:
        env["VLLM_FORGE_LOCK"] = str(lock)
    output = tmp_path / "docker-bake.json"
    result = subprocess.run([sys.executable, str(REPO / "build.py"), "bake", "--vllm", VERSION,
                             "-o", str(output), *extra], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=300)
    return result, output


def lock_standin(standin, lock):
    return save_lock({standin.ref: standin.digest}, lock, {standin.ref: ["linux/amd64", "linux/arm64"]})


@pytest.fixture(scope="module")
def every_target_baked(standin_base, tmp_path_factory):
    """(result, bake file, lock) of one bake of every target against a lock of the stand-in: read
    by two tests, made once (a bake of four targets resolves four plans and unpacks four contexts)."""
    folder = tmp_path_factory.mktemp("every-target")
    lock = folder / "lock.yaml"
    lock_standin(standin_base, lock)
    result, output = bake(folder, standin_base, lock=lock)
    return result, output, lock


def test_bake_file_covers_every_target_with_attestations(standin_base, buildx, every_target_baked):
    result, output, _ = every_target_baked
    folder = output.parent
    assert result.returncode == 0, result.stderr
    data = json.loads(output.read_text())
    assert sorted(data["group"]["default"]["targets"]) == ["a100", "gb10", "h100", "h200"]
    for name, target in data["target"].items():
        assert target["platforms"] == [{"gb10": "linux/arm64"}.get(name, "linux/amd64")]
        assert "type=sbom" in target["attest"] and "type=provenance,mode=max" in target["attest"]
        assert target["args"]["BASE_IMAGE"] == f"{standin_base.mirror}/vllm/vllm-openai@{standin_base.digest}"
        assert target["args"]["SOURCE_DATE_EPOCH"].isdigit()
        # The immutable tag alone: pushing the file must not move the moving tag before verify.
        assert len(target["tags"]) == 1
        assert re.fullmatch(rf"ghcr\.io/acme/vllm-forge:vllm{VERSION}-{name}-[0-9a-f]{{12}}", target["tags"][0])
        assert target["labels"]["io.vllm-forge.target"] == name
        context = folder / target["context"]
        record = json.loads((context / "build-record.json").read_text())
        assert record["target"] == name and record["base"]["digest"] == standin_base.digest
        assert (context / "Dockerfile").read_text() == (REPO / "images/Dockerfile").read_text()
        assert (context / "forge" / "patching" / "status.py").exists() and (context / "patches" / "series.yaml").exists()
    # The real tool reads it back: the same targets, platforms, args and attestations.
    printed = subprocess.run([buildx, "buildx", "bake", "-f", output.name, "--print"], cwd=folder,
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    seen = json.loads(printed.stdout)["target"]
    assert set(seen) == {"a100", "gb10", "h100", "h200"}
    assert seen["gb10"]["platforms"] == ["linux/arm64"]
    assert seen["a100"]["args"]["BASE_IMAGE"].endswith(standin_base.digest)
    assert any("sbom" in str(a) for a in seen["h200"].get("attest", [])), seen["h200"]


def test_bake_same_commit_and_lock_gives_same_contexts(standin_base, every_target_baked, tmp_path):
    r1, out1, lock = every_target_baked
    r2, out2 = bake(tmp_path, standin_base, lock=lock)
    assert r1.returncode == r2.returncode == 0
    t1, t2 = json.loads(out1.read_text())["target"], json.loads(out2.read_text())["target"]
    assert {n: t["labels"] for n, t in t1.items()} == {n: t["labels"] for n, t in t2.items()}
    assert len({t["labels"]["io.vllm-forge.context-sha256"] for t in t1.values()}) == 4


def test_bake_locked_refuses_an_unlocked_base_and_writes_nothing(standin_base, tmp_path):
    result, output = bake(tmp_path, standin_base, "--locked", lock=tmp_path / "empty.yaml")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "is not locked and --locked forbids adding it" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # Before: "(or pass --allow-unlocked)", a flag bake does not take (a bake file pins digests).
    assert "--allow-unlocked" not in result.stderr
    assert f"run `python3 build.py lock --vllm {VERSION}`" in result.stderr
    assert not output.exists() and not (tmp_path / "build-context").exists()
    assert not (tmp_path / "empty.yaml").exists()


def test_bake_of_an_unlocked_release_pins_its_base_first(standin_base, tmp_path):
    lock = tmp_path / "lock.yaml"
    result, output = bake(tmp_path, standin_base, "--target", "a100", "--target", "gb10", lock=lock)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (f"locked {standin_base.ref} -> {standin_base.digest} (linux/amd64, "
                             f"linux/arm64) in {lock}\n"), "one base, one line, for both targets"
    assert load_lock(lock) == {standin_base.ref: standin_base.digest}
    assert json.loads(output.read_text())["target"]["gb10"]["args"]["BASE_IMAGE"].endswith(standin_base.digest)


OCI_INDEX = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _get(registry, path, accept=OCI_MANIFEST):
    import requests

    response = requests.get(registry.url(path), headers={"Accept": accept}, timeout=30)
    response.raise_for_status()
    return response.json()


def test_buildx_bake_builds_both_platforms_with_sbom_and_provenance(
        standin_base, buildx, buildkit_engine, sbom_scanner, tmp_path):
    """The bake file, run by a real BuildKit (Engine 26), builds amd64 and arm64 (qemu) targets in
    one go and pushes images with SPDX SBOM and SLSA provenance attestations."""
    lock = tmp_path / "lock.yaml"
    lock_standin(standin_base, lock)
    registry = standin_base.registry
    env = {**os.environ, "VLLM_FORGE_BASE_MIRROR": standin_base.mirror, "VLLM_FORGE_LOCK": str(lock),
           "VLLM_FORGE_REPOSITORY": f"{standin_base.mirror}/forge-bake",
           "VLLM_FORGE_SBOM_GENERATOR": sbom_scanner}
    made = subprocess.run([sys.executable, str(REPO / "build.py"), "bake", "--vllm", VERSION, "--target", "a100",
                           "--target", "gb10", "-o", str(tmp_path / "docker-bake.json")], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    bake_targets = json.loads((tmp_path / "docker-bake.json").read_text())["target"]
    built = subprocess.run([buildx, "buildx", "bake", "-f", "docker-bake.json", "--push", "--progress", "plain"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                           env={**os.environ, "DOCKER_HOST": buildkit_engine})
    assert built.returncode == 0, built.stderr[-4000:]
    assert "generating sbom using" in built.stderr
    for name, arch in (("a100", "amd64"), ("gb10", "arm64")):
        moving = f"vllm{VERSION}-{name}"
        immutable = bake_targets[name]["tags"][0].rsplit(":", 1)[1]
        index = _get(registry, f"forge-bake/manifests/{immutable}", OCI_INDEX)
        images = [m for m in index["manifests"] if m["platform"]["architecture"] == arch]
        attestations = [m for m in index["manifests"]
                        if m.get("annotations", {}).get("vnd.docker.reference.type") == "attestation-manifest"]
        assert len(images) == 1 and len(attestations) == 1, index
        assert attestations[0]["annotations"]["vnd.docker.reference.digest"] == images[0]["digest"]
        statement_types = {layer["annotations"]["in-toto.io/predicate-type"]
                           for layer in _get(registry, f"forge-bake/manifests/{attestations[0]['digest']}")["layers"]}
        assert "https://spdx.dev/Document" in statement_types
        assert any(t.startswith("https://slsa.dev/provenance/") for t in statement_types), statement_types
        image = _get(registry, f"forge-bake/manifests/{images[0]['digest']}")
        config = _get(registry, f"forge-bake/blobs/{image['config']['digest']}", "*/*")
        labels = config["config"]["Labels"]
        assert labels["io.vllm-forge.target"] == name
        assert labels["io.vllm-forge.context-sha256"] == bake_targets[name]["labels"]["io.vllm-forge.context-sha256"]
        assert registry.digest("forge-bake", moving, accept=OCI_INDEX) is None, "bake pushes no moving tag"


def test_bake_says_what_attestations_need_and_no_attest_leaves_them_out(standin_base, tmp_path):
    lock = lock_standin(standin_base, tmp_path / "lock.yaml")
    with_attest, output = bake(tmp_path, standin_base, "--target", "a100", lock=lock)
    assert with_attest.returncode == 0, with_attest.stderr
    assert "attestations need a docker-container builder" in with_attest.stdout
    assert "`python3 build.py bake --no-attest`" in with_attest.stdout
    assert "attest" in json.loads(output.read_text())["target"]["a100"]
    without, output = bake(tmp_path, standin_base, "--target", "a100", "--no-attest", lock=lock)
    assert without.returncode == 0, without.stderr
    assert "attest" not in json.loads(output.read_text())["target"]["a100"]


def test_bake_on_the_readme_engine_debian_12_docker_driver(standin_base, buildx, docker_engine, tmp_path):
    """The engine the README installs (Debian 12's docker.io 20.10, buildx's plain docker driver)
    refuses attestations: the real error, the way out bake printed, and that way out building."""
    version = docker_engine.version()["Version"]
    assert version.startswith("20.10"), version
    lock = lock_standin(standin_base, tmp_path / "lock.yaml")
    made, output = bake(tmp_path, standin_base, "--target", "a100", lock=lock)
    assert made.returncode == 0, made.stderr
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    refused = subprocess.run([buildx, "buildx", "bake", "-f", output.name, "--load"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=600, env=env)
    assert refused.returncode != 0
    assert "Attestation is not supported for the docker driver" in refused.stderr, refused.stderr[-2000:]
    assert "--no-attest" in made.stdout
    made, output = bake(tmp_path, standin_base, "--target", "a100", "--no-attest", lock=lock)
    assert made.returncode == 0, made.stderr
    built = subprocess.run([buildx, "buildx", "bake", "-f", output.name, "--load", "--progress", "plain"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=1200, env=env)
    assert built.returncode == 0, built.stderr[-4000:]
    tags = json.loads(output.read_text())["target"]["a100"]["tags"]
    try:
        labels = docker_engine.api.inspect_image(tags[0])["Config"]["Labels"]
        assert labels["io.vllm-forge.target"] == "a100"
        assert tags[0].endswith(labels["org.opencontainers.image.version"]) and len(tags) == 1
    finally:
        for tag in tags:
            docker_engine.images.remove(tag, force=True)


def _platform_image(registry, repository: str, tag: str, arch: str) -> tuple[dict, list]:
    """(the arch's image entry, the attestation entries) of the index a tag names."""
    index = _get(registry, f"{repository}/manifests/{tag}", OCI_INDEX)
    images = [m for m in index["manifests"] if m["platform"]["architecture"] == arch]
    attestations = [m for m in index["manifests"]
                    if m.get("annotations", {}).get("vnd.docker.reference.type") == "attestation-manifest"]
    assert len(images) == 1, index
    return images[0], attestations


def test_local_build_on_engine_26_gets_attestations_and_is_the_bake_image(
        standin_base, buildx, buildkit_engine, sbom_scanner, tmp_path):
    """`build.py --push` on Engine 26 (containerd image store) is the release's BuildKit build:
    SBOM and provenance attestations, and the very image manifest `docker buildx bake --push` makes
    from `build.py bake`'s file. A second `--push` leaves the immutable tag where it was (a new
    index would differ only in its provenance); neither push sends the moving tag (that is
    `publish --move-tag`'s, after verify)."""
    lock = lock_standin(standin_base, tmp_path / "lock.yaml")
    registry = standin_base.registry
    env = {**os.environ, "VLLM_FORGE_BASE_MIRROR": standin_base.mirror, "VLLM_FORGE_LOCK": str(lock),
           "VLLM_FORGE_SBOM_GENERATOR": sbom_scanner, "DOCKER_HOST": buildkit_engine}

    def forge(repository, *args):
        return subprocess.run([sys.executable, str(REPO / "build.py"), *args], cwd=REPO, capture_output=True,
                              text=True, env={**env, "VLLM_FORGE_REPOSITORY": f"{standin_base.mirror}/{repository}"},
                              timeout=1200)

    built = forge("forge-local26", "--target", "a100", "--vllm", VERSION, "--push")
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr
    assert "attestations: SBOM and provenance" in built.stdout
    assert "generating sbom using" in built.stdout
    plan = json.loads(forge("forge-local26", "--target", "a100", "--vllm", VERSION, "--plan", "--json").stdout)
    immutable, moving = (t.rsplit(":", 1)[1] for t in plan["tags"])
    first = registry.digest("forge-local26", immutable, accept=OCI_INDEX)
    assert first and registry.digest("forge-local26", moving, accept=OCI_INDEX) is None
    image, attestations = _platform_image(registry, "forge-local26", immutable, "amd64")
    assert len(attestations) == 1 and attestations[0]["annotations"]["vnd.docker.reference.digest"] == image["digest"]
    statement_types = {layer["annotations"]["in-toto.io/predicate-type"]
                       for layer in _get(registry, f"forge-local26/manifests/{attestations[0]['digest']}")["layers"]}
    assert "https://spdx.dev/Document" in statement_types
    assert any(t.startswith("https://slsa.dev/provenance/") for t in statement_types), statement_types

    # The release route, same commit and lock, another repository: the same image manifest.
    made = forge("forge-baked26", "bake", "--vllm", VERSION, "--target", "a100", "-o", str(tmp_path / "docker-bake.json"))
    assert made.returncode == 0, made.stderr
    baked = subprocess.run([buildx, "buildx", "bake", "-f", "docker-bake.json", "--push", "--progress", "plain"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=1200, env=env)
    assert baked.returncode == 0, baked.stderr[-4000:]
    assert json.loads((tmp_path / "docker-bake.json").read_text())["target"]["a100"]["tags"][0].endswith(immutable)
    baked_image, _ = _platform_image(registry, "forge-baked26", immutable, "amd64")
    assert baked_image["digest"] == image["digest"]
    config_digest = _get(registry, f"forge-local26/manifests/{image['digest']}")["config"]["digest"]
    local_config = _get(registry, f"forge-local26/blobs/{config_digest}", "*/*")
    assert local_config["config"]["Labels"] == plan["labels"]
    assert local_config["config"]["Labels"]["io.vllm-forge.context-sha256"] == plan["context"]["sha256"]

    again = forge("forge-local26", "--target", "a100", "--vllm", VERSION, "--push")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr
    assert "already names this image" in again.stdout
    assert registry.digest("forge-local26", immutable, accept=OCI_INDEX) == first, "an immutable tag never moves"
    assert registry.digest("forge-local26", moving, accept=OCI_INDEX) is None
