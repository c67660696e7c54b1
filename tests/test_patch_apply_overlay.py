"""`build.py apply` and `--revert` inside a real container, on the engine's real overlayfs: the
vLLM 0.25.0 tree sits in a lower layer of the stand-in base image (tests/fixtures_docker.py), and
the apply record sits in a lower layer too once the patched container is committed to an image,
as `RUN build.py apply` leaves it in a vllm-forge image. Renaming a directory of a lower layer
fails there with EXDEV ("Invalid cross-device link"); apply and revert must never need to."""
from __future__ import annotations

import json

import pytest

from tests.fixtures_docker import REPO, standin_image
from tests.fixtures_patches import source_patches_applying

pytestmark = [pytest.mark.docker]

SITE = "/usr/local/lib/python3.11/dist-packages"
TARGET = f"{SITE}/vllm/v1/spec_decode/llm_base_proposer.py"
# Hashes of every file under the site directory, from inside the container.
HASHES = (f"import hashlib, json, pathlib; root = pathlib.Path('{SITE}'); print(json.dumps({{"
          "str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() "
          "for p in sorted(root.rglob('*')) if p.is_file()}))")


@pytest.fixture(scope="module")
def engine(docker_engine):
    return docker_engine


def run_in(client, image: str, script: str, commit: bool = False) -> tuple[int, str, str | None]:
    """Run `script` (bash) in a fresh container of `image` with this checkout at /forge
    (read-only); return (exit code, output, the container committed to an image if asked)."""
    container = client.containers.run(image, ["bash", "-c", script], detach=True,
                                      volumes={str(REPO): {"bind": "/forge", "mode": "ro"}},
                                      working_dir="/forge",
                                      environment={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        code = container.wait(timeout=600)["StatusCode"]
        output = container.logs().decode()
        committed = container.commit().id if commit else None
    finally:
        container.remove(force=True)
    return code, output, committed


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_apply_in_an_image_then_revert_in_a_container_is_byte_for_byte(engine):
    base = standin_image(engine, "amd64")
    images = []
    try:
        code, output, _ = run_in(engine, base, f"stat -f -c %T {SITE}; python3 -c \"{HASHES}\"")
        assert code == 0, output
        assert output.splitlines()[0] == "overlayfs"          # really on overlayfs
        original = last_json(output)
        # As the image build does: apply in one layer, committed.
        code, output, patched_image = run_in(
            engine, base, f"python3 build.py apply --site-packages {SITE} --vllm 0.25.0",
            commit=True)
        images.append(patched_image)
        assert code == 0, output
        assert f"applied {len(source_patches_applying('0.25.0'))} patch(es)" in output
        # A user of that image reverts, then applies again, then reverts: all in lower layers.
        code, output, _ = run_in(engine, patched_image, (
            f"grep -c has_own_embed_tokens {TARGET}; "
            f"python3 build.py apply --site-packages {SITE} --revert && "
            f"python3 build.py apply --site-packages {SITE} && "
            f"python3 build.py apply --site-packages {SITE} --revert && "
            f"python3 -c \"{HASHES}\""))
        assert code == 0, output
        assert "Invalid cross-device link" not in output
        assert output.count("restored byte for byte") == 2
        assert last_json(output) == original
    finally:
        for image in images:
            engine.images.remove(image, force=True)


def test_a_failed_apply_in_a_container_leaves_the_lower_layer_tree_as_it_was(engine):
    base = standin_image(engine, "amd64")
    code, output, _ = run_in(engine, base, (
        f"python3 -c \"{HASHES}\" > /tmp/before.json; "
        f"VLLM_FORGE_FAIL_AFTER_RENAMES=2 python3 build.py apply --site-packages {SITE} "
        "--moe-config-dir /opt/moe-configs; echo exit=$?; "
        "test -e /opt/moe-configs && echo moe-dir-created; "
        f"python3 -c \"{HASHES}\" > /tmp/after.json; cmp /tmp/before.json /tmp/after.json "
        "&& echo identical"))
    assert code == 0, output
    assert "rolled back 2 step(s), nothing changed" in output and "exit=2" in output
    assert "moe-dir-created" not in output and "identical" in output
