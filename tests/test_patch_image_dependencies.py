"""An image build on a base that carries a dependency outside its constraint (issue 9, "Done
when", 2nd bullet): a stand-in for upstream's vllm/vllm-openai:v<release> (the real vLLM package
tree from its sdist, tests/fixtures_docker.py) with the real transformers 5.15.0 wheel, pip and
requests from PyPI, and this machine's CA bundle as PIP_CERT (containers here reach PyPI through
a TLS-intercepting proxy). The build's `build.py apply --pin` fetches the pinned transformers from
PyPI inside the build, and `--plan`, the image, its record and its labels say which version it
ends up with. Two cases: (h200, 0.25.0) on amd64, and the issue's own (gb10, 0.27.1) on arm64,
built and run under qemu emulation.

pip under qemu is no obstacle (measured 2026-11-30 on the 2-core amd64 test machine, qemu-user
7.2): the apply step's pip (`pip install --no-deps --no-compile --target DIR transformers==5.14.1`
in the arm64 stand-in) takes 13 s (3 s natively on amd64), the whole `build.py apply --pin` step
23 s, and the gb10 case 50-75 s with warm caches (98 s when the stand-in is built first). What would
be slow under emulation is Debian's pip from apt (dpkg and byte-compiling under qemu), so the
stand-in gets pip and requests as PyPI wheels, copied in, with no RUN step at all. What is slow
under emulation is every Python start in the image (seconds each): the gb10 image is read by one
Python process, and `build.py apply --revert` (the same Python on every platform) runs in the
h200 case, natively. Warm, the gb10 case now takes 11 CPU-s (2026-12-04, same machine)."""
from __future__ import annotations

import json
import re

import pytest
from packaging.specifiers import SpecifierSet

from forge.upstream import pypi
from tests.build_cli import run_build
from tests.fixtures_docker import STANDIN_SITE, Upload, publish_seeded, standin_with_wheels

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CONSTRAINT = "transformers-gemma4-per-layer-config"
BROKEN_TRANSFORMERS = "5.15.0"    # makes Gemma 4's config per-layer (issue 9)
# What upstream's image carries besides vLLM that the apply step needs: pip to fetch the pin,
# requests (a vLLM requirement) for forge to ask the index which versions exist.
BASE_WHEELS = (f"transformers=={BROKEN_TRANSFORMERS}", "pip==24.3.1", "requests==2.32.3",
               "urllib3==2.2.3", "idna==3.10", "certifi==2024.8.30", "charset-normalizer==3.4.0")
VERSION_OF = "import importlib.metadata as m; print(m.version('transformers'))"
# The Version field of the installed transformers' METADATA, which importlib.metadata reads, read
# by sed: no Python start, which costs seconds under qemu.
METADATA_VERSION = f"sed -n 's/^Version: //p' {STANDIN_SITE}/transformers-*.dist-info/METADATA"
MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}
NATIVE_ARCH = "amd64"   # the test machine's: arm64 runs under qemu emulation

CASES = [pytest.param("h200", "0.25.0", "amd64", id="h200-0.25.0-amd64"),
         pytest.param("gb10", "0.27.1", "arm64", id="gb10-0.27.1-arm64")]


def publish_base(client, registry, version: str, arch: str) -> str:
    """The stand-in with transformers 5.15.0, pushed as upstream's tag for `version`."""
    local = standin_with_wheels(client, arch, version, BASE_WHEELS, host_ca=True)
    remote = f"vllm/vllm-openai:v{version}-{arch}-transformers{BROKEN_TRANSFORMERS}"
    publish_seeded(client, registry, f"transformers-base-v{version}-{arch}",
                   [Upload(local, remote, f"linux/{arch}")])
    return f"{registry.host}/{remote}"


def in_image(client, image: str, command: str) -> str:
    return client.containers.run(image, ["sh", "-c", command], remove=True).decode()


def expected_pin() -> str:
    """The newest transformers PyPI offers inside the constraint (<5.15) and what vLLM 0.25-0.27
    require (>=5.5.3, requirements/common.txt line 10 in both): asked of the index, never fixed."""
    return str(max(v for v in pypi.published_versions("transformers")
                   if v in SpecifierSet("<5.15,>=5.5.3")))


def printed_plan(stdout: str) -> str:
    """The plan a build prints before the engine's own output: its `plan:` header and the
    indented lines under it (the classic builder's `Step 1/N` and BuildKit's `#1 ...` are not
    indented)."""
    lines = stdout.splitlines()
    assert lines and lines[0].startswith("plan: "), stdout[:500]
    end = next((i for i, line in enumerate(lines[1:], 1) if not line.startswith(" ")), len(lines))
    return "\n".join(lines[:end])


def image_facts(client, image: str, target: str, recipes: tuple[str, ...] = ()) -> dict:
    """The transformers version, the apply record, the build record and, for each of `recipes`,
    'model quantization' as the image's forge loads it for `target`: read by one Python process
    in one container (under qemu each Python start costs seconds)."""
    names = "".join(f"{name!r}, " for name in recipes)
    return json.loads(in_image(client, image, (
        "cd /opt/vllm-forge && python3 -c \"import importlib.metadata as m, json, pathlib, platform; "
        "from forge.serving.recipes import load_recipe; "
        f"rs = {{n: load_recipe(n, '{target}') for n in ({names})}}; print(json.dumps({{"
        "'version': m.version('transformers'), 'machine': platform.machine(), "
        f"'applied': json.loads(pathlib.Path('{STANDIN_SITE}/vllm/.vllm-forge/applied.json')"
        ".read_text()), "
        "'record': json.loads(pathlib.Path('/opt/vllm-forge/build-record.json').read_text()), "
        "'recipes': {n: r.model + ' ' + r.expect.quantization for n, r in rs.items()}"
        "}))\"")))


NVFP4_RECIPES = {"gemma-4-26b-a4b-it-nvfp4": "nvidia/Gemma-4-26B-A4B-NVFP4 modelopt_fp4",
                 "gemma-4-31b-it-nvfp4": "nvidia/Gemma-4-31B-IT-NVFP4 modelopt_fp4",
                 "gemma-4-31b-it-nvfp4-ct": "RedHatAI/gemma-4-31B-it-NVFP4 compressed-tensors"}


@pytest.mark.parametrize("target, vllm, arch", CASES)
def test_image_on_a_base_with_transformers_5_15_ends_up_with_the_pinned_version(
        docker_engine, local_registry, arm64_emulation, buildx, target, vllm, arch):
    # buildx: the build goes through BuildKit once build.py does (the classic builder ignores it)
    base = publish_base(docker_engine, local_registry, vllm, arch)
    before = in_image(docker_engine, base, METADATA_VERSION).strip()
    assert before == BROKEN_TRANSFORMERS
    pin = expected_pin()
    pin_line = f"transformers=={pin}  (constraint <5.15, {CONSTRAINT};"
    args = ("--target", target, "--vllm", vllm, "--base-image", base, "--allow-unlocked",
            "--repository", f"{local_registry.host}/forge-deps-test")

    planned = run_build(*args, "--plan", timeout=300)
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    assert pin_line in planned.stdout

    built = run_build(*args, timeout=1500)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    # The build prints the same plan, pin included, before the engine builds anything.
    assert pin_line in printed_plan(built.stdout)
    image_id = re.search(r"^built (\S+) as ", built.stdout, re.MULTILINE)[1]
    image = docker_engine.images.get(image_id)
    try:
        assert image.attrs["Architecture"] == arch
        assert image.labels["io.vllm-forge.dependencies"] == f"transformers<5.15=={pin}"
        # The seed's fallback box (a second Spark serving NVFP4) runs the gb10 image: its recipes
        # are in it and load there as strictly as in the repository.
        fallback = tuple(NVFP4_RECIPES) if target == "gb10" else ()
        inside = image_facts(docker_engine, image_id, target, fallback)
        assert (inside["version"], inside["machine"]) == (pin, MACHINE[arch])
        [dependency] = inside["applied"]["dependencies"]
        assert (dependency["previous"], dependency["installed"]) == (BROKEN_TRANSFORMERS, pin)
        # The apply step in the image read vLLM's own requirement from its installed METADATA.
        assert dependency["vllm_requires"].startswith("transformers>=5.5.3 (installed vLLM")
        record = inside["record"]
        assert (record["vllm_version"], record["target"], record["platform"]) == (
            vllm, target, f"linux/{arch}")
        entry = next(p for p in record["patches"] if p["id"] == CONSTRAINT)
        assert (entry["status"], entry["package"], entry["pin"]) == ("applies", "transformers", pin)
        assert inside["recipes"] == (NVFP4_RECIPES if target == "gb10" else {})
        if arch == NATIVE_ARCH:
            # The documented way back works in the image: 5.15.0 again, from the record alone.
            # Checked natively only: revert puts files back from the record in Python, the same
            # on every platform (about 950 files: 4 s natively, 30 s under qemu).
            reverted = in_image(docker_engine, image_id, (
                "cd /opt/vllm-forge && python3 build.py apply --revert >/dev/null && "
                f"python3 -c \"{VERSION_OF}\""))
            assert reverted.strip().splitlines()[-1] == BROKEN_TRANSFORMERS
    finally:
        docker_engine.images.remove(image_id, force=True)
