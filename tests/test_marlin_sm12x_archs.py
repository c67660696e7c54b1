"""What vLLM 0.34.0's build files do to Marlin on sm_12x (GB10), read from the real 0.33.0 and
0.34.0 sdists (~/.cache/vllm-forge), against the record that states it
(benchmarks/results/src-0.34.0-build-marlin-sm12x): its excerpts are the releases' own lines."""
import functools
import json
import re
import tarfile
from pathlib import Path

import pytest

from forge.upstream.releases import fetch_sdist

RECORD = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "src-0.34.0-build-marlin-sm12x"
ARCH_LIST = re.compile(r'cuda_archs_loose_intersection\((MARLIN\w*_ARCHS) "([^"]+)"')
FP8_LISTS = {"MARLIN_FP8_ARCHS", "MARLIN_MOE_FP8_ARCHS"}


@functools.cache
def member(version: str, path: str) -> list[str]:
    """The file from the release's verified sdist (read once per test run)."""
    with tarfile.open(fetch_sdist(version, offline=True)) as sdist:
        handle = sdist.extractfile(f"vllm-{version}/{path}")
        assert handle is not None
        return handle.read().decode().splitlines()


def marlin_lists(version: str) -> dict[int, tuple[str, list[str]]]:
    """Line number -> (list name, its archs) for every Marlin arch list of the release."""
    found = {}
    for number, line in enumerate(member(version, "CMakeLists.txt"), start=1):
        if match := ARCH_LIST.search(line):
            found[number] = (match.group(1), match.group(2).split(";"))
    return found


def names_sm12x(archs: list[str]) -> bool:
    return any(arch.startswith("12.") for arch in archs)


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_the_records_excerpts_are_the_releases_own_lines(version):
    lines = member(version, "CMakeLists.txt")
    generator = member(version, "csrc/quantization/marlin/generate_kernels.py")
    excerpt = (RECORD / f"cmake-marlin-{version}.txt").read_text().splitlines()
    for entry in excerpt:
        where, number, text = entry.split(":", 2) if entry.startswith("generate_kernels.py:") else ("", *entry.split(":", 1))
        source = generator if where else lines
        assert source[int(number) - 1] == text, (version, entry)
    assert len([e for e in excerpt if not e.startswith("generate_kernels.py:")]) == len(marlin_lists(version))


def test_0_33_0_builds_marlin_and_marlin_moe_for_sm12x_and_0_34_0_does_not():
    old, new = marlin_lists("0.33.0"), marlin_lists("0.34.0")
    with_sm12x = {name for name, archs in old.values() if names_sm12x(archs)}
    assert {"MARLIN_ARCHS", "MARLIN_BF16_ARCHS", "MARLIN_MOE_ARCHS"} | FP8_LISTS <= with_sm12x
    assert not any(names_sm12x(archs) for _, archs in new.values())
    assert not FP8_LISTS & {name for name, _ in new.values()}
    figures = json.loads((RECORD / "result.json").read_text())["figures"]
    assert figures["marlin_arch_lists_naming_sm12x_0_33_0"] == sum(names_sm12x(a) for _, a in old.values())
    assert figures["marlin_arch_lists_naming_sm12x_0_34_0"] == 0
    assert figures["fp8_activation_marlin_lists_0_33_0"] == sum(name in FP8_LISTS for name, _ in old.values())


def test_0_34_0_still_builds_marlin_for_sm12x_as_sm80_ptx():
    """The block stays gated by MARLIN_OTHER_ARCHS "7.5;8.0+PTX" and a +PTX entry matches across
    major versions (cmake/utils.cmake), so a 12.1 build gets Marlin as compute_80 PTX only; the
    FP8-activation kernels are no longer generated for any arch."""
    new = {name: archs for name, archs in marlin_lists("0.34.0").values()}
    assert new["MARLIN_OTHER_ARCHS"] == new["MARLIN_MOE_OTHER_ARCHS"] == ["7.5", "8.0+PTX"]
    assert new["MARLIN_ARCHS"] == new["MARLIN_MOE_ARCHS"] == ["8.0+PTX"]
    utils = "\n".join(member("0.34.0", "cmake/utils.cmake"))
    assert "if (_SRC_ARCH IN_LIST _PTX_ARCHS OR SRC_ARCH_MAJOR STREQUAL TGT_ARCH_MAJOR)" in utils
    fp8_generation = "if arch == 89 or arch // 10 == 12:"
    assert any(fp8_generation in line for line in member("0.33.0", "csrc/quantization/marlin/generate_kernels.py"))
    assert not any(fp8_generation in line for line in member("0.34.0", "csrc/quantization/marlin/generate_kernels.py"))
