"""An image build on a base that carries a dependency outside its constraint: a stand-in for
upstream's vllm/vllm-openai:v0.25.0 (the real vLLM 0.25.0 tree, tests/fixtures_docker.py) with
the real transformers 5.15.0 wheel installed, pip, and this machine's CA bundle as PIP_CERT
(containers here reach PyPI through a TLS-intercepting proxy; engine notes). The build's
`build.py apply --pin` fetches the pinned transformers from PyPI inside the build, and the image,
its record and its labels say which version it ends up with. amd64 (h200): pip under qemu for
the arm64 targets takes too long for a test; the apply step is the same on both."""
from __future__ import annotations

import io
import json
import re
import tarfile

import pytest
from packaging.specifiers import SpecifierSet

from forge import pypi
from tests.build_cli import run_build
from tests.fixtures_docker import push, standin_image
from tests.fixtures_patches import install_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SITE = "/usr/local/lib/python3.11/dist-packages"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
CA_IN_IMAGE = "/usr/local/share/ca-certificates/vllm-forge-host-ca.crt"
CONSTRAINT = "transformers-gemma4-per-layer-config"
VERSION_OF = ("import importlib.metadata as m; print(m.version('transformers'))")


def _base_context(tmp_path) -> bytes:
    site = tmp_path / "site"
    install_wheel(site, "transformers", "5.15.0")
    dockerfile = (
        "ARG STANDIN\nFROM ${STANDIN}\n"
        f"COPY ca.crt {CA_IN_IMAGE}\n"
        f"ENV PIP_CERT={CA_IN_IMAGE} REQUESTS_CA_BUNDLE={CA_IN_IMAGE}\n"
        # Debian's pip and requests, as the upstream image carries pip and vLLM needs requests.
        "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends "
        "python3-pip python3-requests >/dev/null && rm -rf /var/lib/apt/lists/*\n"
        f"COPY site/ {SITE}/\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
        archive.add(CA_BUNDLE, "ca.crt")
        archive.add(site, "site")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def base_with_transformers_5_15(docker_engine, local_registry, tmp_path_factory):
    standin = standin_image(docker_engine, "amd64")
    tag = "vllm-forge-test/standin:v0.25.0-amd64-transformers5.15.0"
    context = _base_context(tmp_path_factory.mktemp("base"))
    for chunk in docker_engine.api.build(fileobj=io.BytesIO(context), custom_context=True,
                                         tag=tag, buildargs={"STANDIN": standin}, rm=True,
                                         decode=True):
        assert "error" not in chunk, chunk
    ref = f"{local_registry.host}/vllm/vllm-openai:v0.25.0-transformers5.15.0"
    push(docker_engine, tag, ref)
    return ref


def _in_image(client, image: str, command: str) -> str:
    return client.containers.run(image, ["sh", "-c", command], remove=True).decode()


def test_image_on_a_base_with_transformers_5_15_ends_up_with_the_pinned_version(
        docker_engine, local_registry, base_with_transformers_5_15):
    base = base_with_transformers_5_15
    assert _in_image(docker_engine, base, f"python3 -c \"{VERSION_OF}\"").strip() == "5.15.0"
    pin = str(max(v for v in pypi.published_versions("transformers")
                  if v in SpecifierSet("<5.15,>=5.5.3")))
    repository = f"{local_registry.host}/forge-deps-test"
    args = ("--target", "h200", "--vllm", "0.25.0", "--base-image", base, "--allow-unlocked",
            "--repository", repository)
    built = run_build(*args, timeout=1500)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert f"transformers=={pin}  (constraint <5.15" in built.stdout       # the plan it printed
    image_id = re.search(r"^built (\S+) as ", built.stdout, re.MULTILINE)[1]
    image = docker_engine.images.get(image_id)
    try:
        assert image.labels["io.vllm-forge.dependencies"] == f"transformers<5.15=={pin}"
        inside = json.loads(_in_image(docker_engine, image_id, (
            "python3 -c \"import importlib.metadata as m, json, pathlib; print(json.dumps({"
            "'version': m.version('transformers'), "
            f"'applied': json.loads(pathlib.Path('{SITE}/vllm/.vllm-forge/applied.json')"
            ".read_text()), "
            "'record': json.loads(pathlib.Path('/opt/vllm-forge/build-record.json').read_text())"
            "}))\"")))
        assert inside["version"] == pin
        [dependency] = inside["applied"]["dependencies"]
        assert (dependency["previous"], dependency["installed"]) == ("5.15.0", pin)
        entry = next(p for p in inside["record"]["patches"] if p["id"] == CONSTRAINT)
        assert (entry["status"], entry["pin"]) == ("applies", pin)
        # The documented way back works in the image: 5.15.0 again, from the record alone.
        reverted = _in_image(docker_engine, image_id, (
            "cd /opt/vllm-forge && python3 build.py apply --revert >/dev/null && "
            f"python3 -c \"{VERSION_OF}\""))
        assert reverted.strip().splitlines()[-1] == "5.15.0"
    finally:
        docker_engine.images.remove(image_id, force=True)
