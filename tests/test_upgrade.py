"""`build.py upgrade` on real vLLM sdists (0.25.0, 0.27.1, 0.33.0, 0.34.0; cached in
~/.cache/vllm-forge), run as users run it. What each report must name is derived here, per pair,
from the two releases' own files (the sdists' CMakeLists.txt and requirements/, their package
trees) and the project's data (patches/series.yaml, recipes/), never written down per pair."""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.errors import ForgeError
from forge.image_names import moving_tag
from forge.images.lock import load_lock
from forge.patching.series import load_series
from forge.patching.status import release_status
from forge.serving.recipes import load_recipe
from forge.targets import get_target
from forge.upgrade import evidence
from forge.upgrade.schema import check_report
from forge.upstream import releases
from tests.build_cli import REPO_ROOT, run_build

PAIRS = [("0.27.1", "0.34.0", "gb10"), ("0.25.0", "0.27.1", "a100"), ("0.33.0", "0.34.0", "h200"),
         ("0.27.1", "0.34.0", "a100")]
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"     # vLLM's V1 GPU model runner module
MARLIN_VARIABLES = ("MARLIN_ARCHS", "MARLIN_MOE_ARCHS", "FP4_SM120_ARCHS")
WATCHED = ("torch", "transformers", "flashinfer-python")
REPORTS: dict[tuple[str, str, str], tuple[int, dict, str]] = {}


BRIEF: dict[tuple[str, str, str], str] = {}


def upgrade(before: str, after: str, target: str):
    """(exit code, the --json report, the --verbose text report) of one pair, run once per
    session."""
    key = (before, after, target)
    if key not in REPORTS:
        args = ["upgrade", "--from", before, "--to", after, "--target", target]
        as_json, as_text = run_build(*args, "--json"), run_build(*args, "--verbose")
        assert as_json.returncode == as_text.returncode, (as_json.stderr, as_text.stderr)
        REPORTS[key] = (as_json.returncode, json.loads(as_json.stdout), as_text.stdout)
    return REPORTS[key]


def brief(before: str, after: str, target: str) -> str:
    """The default (brief) text report of one pair, run once per session."""
    key = (before, after, target)
    if key not in BRIEF:
        result = run_build("upgrade", "--from", before, "--to", after, "--target", target)
        assert result.returncode == upgrade(before, after, target)[0], result.stderr
        BRIEF[key] = result.stdout
    return BRIEF[key]


# --- what the releases' own files say, read here --------------------------------------------

def sdist_text(version: str, name: str) -> str:
    """CMakeLists.txt or a requirements/ file of the release's sdist."""
    read = sdist_build_files(version)
    assert name in read, f"vLLM {version}'s sdist has no {name}"
    return read[name]


@functools.cache   # a 40 MB .tar.gz: read once per release, in one pass for every file wanted
def sdist_build_files(version: str) -> dict[str, str]:
    """CMakeLists.txt and every requirements/ file of the release's sdist, by path inside it,
    as GNU tar extracts them (in C: half the CPU of tarfile's pass over 30,000 members)."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(["tar", "-xzf", str(releases.fetch_sdist(version)), "-C", folder, "--wildcards",
                        f"vllm-{version}/CMakeLists.txt", f"vllm-{version}/requirements/*",
                        f"vllm-{version}/cmake/utils.cmake",
                        f"vllm-{version}/.buildkite/release-pipeline.yaml"], check=True)
        root = Path(folder) / f"vllm-{version}"
        return {str(path.relative_to(root)): path.read_text() for path in root.rglob("*")
                if path.is_file()}


def requirement_specs(version: str) -> dict[str, SpecifierSet]:
    """package -> what requirements/cuda.txt (and its -r includes) put on it, on Linux."""
    environment = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux",
                   "platform_machine": "x86_64", "python_version": "3.12", "extra": ""}
    specs: dict[str, SpecifierSet] = {}

    def read(name: str) -> None:
        for raw in sdist_text(version, f"requirements/{name}").splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("-r "):
                read(line.split()[1])
            elif line and not line.startswith("-"):
                requirement = Requirement(line)
                if requirement.marker is None or requirement.marker.evaluate(environment):
                    key = canonicalize_name(requirement.name)
                    specs[key] = specs.get(key, SpecifierSet()) & requirement.specifier
    read("cuda.txt")
    return specs


def first_archs(version: str, variable: str) -> list[str] | None:
    """The arch list of the first `cuda_archs_loose_intersection(VARIABLE "...")` in the release's
    CMakeLists.txt: where the file branches on the compiler, the CUDA >= 13 branch comes first."""
    found = re.search(rf'cuda_archs_loose_intersection\({variable}\s+"([^"]*)"',
                      sdist_text(version, "CMakeLists.txt"))
    return found.group(1).split(";") if found else None


def pipeline_list(version: str, platform: str) -> list[str]:
    """The arch list vLLM's release pipeline builds the platform's CUDA 13 wheel and image with."""
    import yaml

    name = {"linux/amd64": "CUDA_ARCH_X86", "linux/arm64": "CUDA_ARCH_AARCH64"}[platform]
    env = yaml.safe_load(sdist_text(version, ".buildkite/release-pipeline.yaml"))["env"]
    return env[name].replace("+PTX", "").split()


def gencode_of_ptx_entry(version: str) -> set[str]:
    """The `-gencode` codes cmake/utils.cmake's set_gencode_flags_for_srcs emits for an `X+PTX`
    entry, read from its +PTX branch: {"sm", "compute"} when it builds the cubin and the PTX."""
    text = sdist_text(version, "cmake/utils.cmake")
    start = text.index('string(FIND "${_ARCH}" "+PTX" _HAS_PTX)')
    branch = text[start:text.index("else()", start)]
    return set(re.findall(r'CODE "(sm|compute)_\$\{_STRIPPED_ARCH\}"', branch))


def expected_state(archs: list[str] | None, capability: str, built_for: list[str],
                   ptx_codes: set[str]) -> str:
    """native / ptx / absent for the capability, from the request, the pipeline's list and what
    an X+PTX entry emits. An entry counts where the pipeline builds an arch of the same major at
    or above it (or any arch at or above it, for its PTX); a cubin runs on its major from its
    minor up (an `a` cubin on its arch alone)."""
    wanted, state = Version(capability), "absent"
    listed = [Version(a) for a in built_for]
    for arch in archs or []:
        ptx = arch.endswith("+PTX")
        core = arch.removesuffix("+PTX")
        base = Version(core.rstrip("af"))
        cubin = not ptx or "sm" in ptx_codes
        same_major_built = any(t.major == base.major and t >= base for t in listed)
        runs = base == wanted if core.endswith("a") else (base.major == wanted.major and base <= wanted)
        if cubin and runs and same_major_built:
            return "native"
        if ptx and "compute" in ptx_codes and base <= wanted and any(t >= base for t in listed):
            state = "ptx"
    return state


def target_recipes(target: str, version: str):
    return [r for r in (load_recipe(n, target) for n in get_target(target).recipes) if r.admits(version)]


def recipe_entry(report: dict, name: str) -> dict:
    return next(r for r in report["recipes"] if r["recipe"] == name)


# --- the three pairs -------------------------------------------------------------------------

@pytest.mark.parametrize("before,after,target", PAIRS)
def test_the_report_validates_and_its_exit_code_follows_what_blocks(before, after, target):
    code, report, text = upgrade(before, after, target)
    assert check_report(report) is not None
    assert (report["from"], report["to"], report["target"]) == (before, after, target)
    assert code == (1 if report["blocking"] else 0)
    assert report["verdict"] == ("needs-work" if report["blocking"] else "ready")
    assert text.splitlines()[0].endswith(report["verdict"])


@pytest.mark.parametrize("before,after,target", PAIRS)
def test_patches_that_retire_or_drop_are_named_with_their_upstream_pr(before, after, target):
    _, report, text = upgrade(before, after, target)
    series = load_series()
    device = get_target(target).moe_device_name
    old = {s.id: s.status for s in release_status(before, series=series, moe_device=device)}
    new = {s.id: s.status for s in release_status(after, series=series, moe_device=device)}
    by_id = {p["id"]: p for p in report["patches"]}
    assert set(by_id) == set(new)
    for patch_id in new:
        assert (by_id[patch_id]["from"], by_id[patch_id]["to"]) == (old[patch_id], new[patch_id])
        if old[patch_id] == "applies" and new[patch_id] in ("already-upstream", "not-needed"):
            expected = "retires" if new[patch_id] == "already-upstream" else "drops"
            assert by_id[patch_id]["change"] == expected
            line = next(line for line in text.splitlines() if f" {patch_id}" in line and expected in line)
            pr = (series.get(patch_id).upstream or {}).get("pr")
            if pr:
                assert f"PR #{pr}" in line
        if new[patch_id] == "conflict":
            assert f"refresh-patch {patch_id} --vllm {after}" in " ".join(report["next"])


@pytest.mark.parametrize("before,after,target", PAIRS)
def test_a_removed_v1_runner_refuses_exactly_the_v1_recipes(before, after, target):
    _, report, text = upgrade(before, after, target)
    had = (releases.release_tree(before) / V1_RUNNER).is_file()
    has = (releases.release_tree(after) / V1_RUNNER).is_file()
    v1_recipes = [r.name for r in target_recipes(target, after) if r.serve.model_runner == "v1"]
    runners = report["defaults"]["runners"]
    assert runners["removed"] == (["v1"] if had and not has else [])
    expected = v1_recipes if had and not has else []
    assert runners["recipes"] == expected
    for name in v1_recipes:
        refused = recipe_entry(report, name)["refused"]
        assert bool(refused) == (not has)
        assert all("no V1 runner" in line for line in refused)
    if expected:
        removal = next(line for line in text.splitlines() if "V1 runner is removed" in line)
        assert all(name in removal for name in expected)


@pytest.mark.parametrize("before,after,target", PAIRS)
def test_new_spellings_of_the_recipes_flags_are_named(before, after, target):
    from forge.serving.vllm_args import release_args

    _, report, _ = upgrade(before, after, target)
    old, new = release_args(before), release_args(after)
    for recipe in target_recipes(target, after):
        renamed = " ".join(recipe_entry(report, recipe.name)["renamed"])
        for flag in {t for t in recipe.cli_args() if t.startswith("--")}:
            fresh = [alias for alias, canonical in new.aliases.items() if alias.startswith("--")
                     and canonical == new.canonical(flag) and old.aliases.get(alias) != canonical]
            for alias in fresh:
                assert f"{flag}: vLLM {after} also spells it" in renamed and alias in renamed


def test_a_variable_the_new_release_no_longer_reads_is_refused():
    from dataclasses import replace

    from forge.serving.recipes import Section
    from forge.serving.vllm_args import release_args
    from forge.upgrade.recipe_changes import refusals

    old, new = release_args("0.27.1"), release_args("0.34.0")
    gone = sorted(name for name in old.env_vars - new.env_vars if name.startswith("VLLM_")
                  and name != "VLLM_USE_V2_MODEL_RUNNER")[0]
    recipe = load_recipe("gemma-4-26b-a4b-it", "gb10")
    recipe = replace(recipe, serve=Section({**recipe.serve.values, "env": {gone: "1"}}))
    assert refusals(recipe, old, new) == [
        f"recipes/gemma-4-26b-a4b-it.yaml: targets.gb10.serve.env.{gone}: vLLM 0.34.0 does not "
        f"read it (read by 0.27.1)"]
    assert refusals(recipe, old, old) == []


@pytest.mark.parametrize("before,after,target", PAIRS)
def test_pins_and_constraints_that_change_come_from_both_releases_requirements(before, after, target):
    _, report, text = upgrade(before, after, target)
    old, new = requirement_specs(before), requirement_specs(after)
    listed = {r["package"]: r for r in report["dependencies"]["requirements"]}
    for package in WATCHED:
        if old.get(package) == new.get(package):
            assert package not in listed
            continue
        entry = listed[package]
        assert SpecifierSet(entry["from"] or "") == old.get(package, SpecifierSet())
        assert SpecifierSet(entry["to"] or "") == new.get(package, SpecifierSet())
    # A dependency constraint of the series in range before and not after no longer applies.
    for patch in load_series().patches:
        if patch.kind == "dependency" and patch.in_range(Version(before)) \
                and not patch.in_range(Version(after)):
            constraint = next(c for c in report["dependencies"]["constraints"] if c["id"] == patch.id)
            assert constraint["to"] == "not-needed" and constraint["change"] == "drops"
            drift = [d for d in report["dependencies"]["drift"] if d["package"] == patch.package]
            assert all(patch.id in d["no_longer_needed"] for d in drift)
            assert f"{patch.id} no longer applies" in text or not drift


@pytest.mark.parametrize("before,after,target", PAIRS)
def test_marlin_and_fp4_builds_are_read_as_vllms_cmake_builds_them(before, after, target):
    _, report, text = upgrade(before, after, target)
    spec = get_target(target)
    capability = spec.cuda_arch
    kernels = {k["variable"]: k for k in report["kernels"]}
    states = {}
    for variable in MARLIN_VARIABLES:
        archs = (first_archs(before, variable), first_archs(after, variable))
        entry = kernels[variable]
        assert [side and side["archs"].split(";") for side in (entry["from"], entry["to"])] == list(archs)
        states[variable] = tuple(
            expected_state(a, capability, pipeline_list(v, spec.platform), gencode_of_ptx_entry(v))
            for a, v in zip(archs, (before, after)))
        assert (entry["state_from"], entry["state_to"]) == states[variable], variable
        assert (entry["native_from"], entry["native_to"]) == tuple(s == "native" for s in states[variable])
    marlin_changed = states["MARLIN_ARCHS"][0] != states["MARLIN_ARCHS"][1]
    for recipe in target_recipes(target, after):
        lines = recipe_entry(report, recipe.name)["kernels"]
        on_marlin = [line for line in lines if line.startswith(f"{recipe.weights} weights: Marlin (")]
        # NVFP4 falls back to Marlin everywhere; FP8 goes through it only below sm_89.
        routed = recipe.weights == "nvfp4" or (recipe.weights == "fp8" and Version(capability) < Version("8.9"))
        assert bool(on_marlin) == (marlin_changed and routed), (recipe.name, lines)
        for line in on_marlin:
            assert f'MARLIN_ARCHS "{";".join(first_archs(before, "MARLIN_ARCHS") or [])}"' in line
    assert "no native code" not in text or "FP8-activation" in text


def test_a100_keeps_native_marlin_and_gb10_gets_its_ptx_only_on_0_34_0():
    """The claim per target, from the sdist: `8.0+PTX` builds the sm_80 cubin and the compute_80
    PTX (cmake/utils.cmake); the x86 pipeline builds 8.0, so the A100 runs Marlin natively;
    nothing of major 12 is in 0.34.0's request, so GB10 runs only the PTX."""
    assert gencode_of_ptx_entry("0.34.0") == {"sm", "compute"}
    archs = first_archs("0.34.0", "MARLIN_ARCHS")
    assert archs is not None and "8.0+PTX" in archs and not any(a.startswith("12.") for a in archs)
    assert "8.0" in pipeline_list("0.34.0", "linux/amd64")
    _, a100, a100_text = upgrade("0.27.1", "0.34.0", "a100")
    _, gb10, gb10_text = upgrade("0.27.1", "0.34.0", "gb10")
    marlin = {r["variable"]: r for r in a100["kernels"]}["MARLIN_ARCHS"]
    assert (marlin["state_from"], marlin["state_to"]) == ("native", "native")
    assert "native -> PTX-JIT only" not in a100_text and "no native code" not in a100_text
    marlin = {r["variable"]: r for r in gb10["kernels"]}["MARLIN_ARCHS"]
    assert (marlin["state_from"], marlin["state_to"]) == ("native", "ptx")
    fp8 = {r["variable"]: r for r in gb10["kernels"]}["MARLIN_FP8_ARCHS"]
    assert fp8["family"] == "Marlin FP8-activation" and fp8["to"] is None
    # The FP8-activation kernels are no part of an NVFP4 recipe's W4A16 fallback.
    for recipe in gb10["recipes"]:
        assert not any("MARLIN_FP8_ARCHS" in line for line in recipe["kernels"]), recipe["recipe"]


def test_the_loose_intersection_follows_the_examples_in_vllms_cmake_file():
    """cmake/utils.cmake documents cuda_archs_loose_intersection with worked examples: those
    without `a`/`f` entries are read from the file and run through forge's reading of the
    function. (The file's 9.0a example still lists 9.0 in its result, which the function's own
    code removes when it takes 9.0a by its base: the code is what forge follows.)"""
    from forge.upgrade.kernels import loose_intersection

    text = sdist_text("0.34.0", "cmake/utils.cmake")
    examples = re.findall(r'#\s+SRC_CUDA_ARCHS="([^"]*)"\n#\s+TGT_CUDA_ARCHS="([^"]*)"\n'
                          r'#\s+cuda_archs_loose_intersection\(.*\)\n#\s+OUT_CUDA_ARCHS="([^"]*)"', text)
    plain = [e for e in examples if not re.search(r"[af](;|$)", e[0] + ";" + e[1])]
    assert len(examples) >= 2 and plain
    for source, target, out in plain:
        assert sorted(loose_intersection(source.split(";"), target.split(";"))) == sorted(out.split(";"))


def test_a_build_file_is_taken_from_the_sdist_once():
    path = releases.release_build_file("0.34.0", "CMakeLists.txt")
    assert path is not None and path.read_text() == sdist_text("0.34.0", "CMakeLists.txt")
    assert releases.release_build_file("0.34.0", "CMakeLists.txt") == path
    assert releases.release_build_file("0.34.0", "no/such/file.txt") is None


def test_the_branch_for_the_target_cuda_is_taken():
    """CUDA 12.8 takes the `else()` branch of each compiler test: there the second request of a
    variable in the file (12.0a;12.1a, no family cubin) is the one that counts."""
    from forge.upgrade.kernels import arch_requests

    text = sdist_text("0.27.1", "CMakeLists.txt")
    requests_of = re.findall(r'cuda_archs_loose_intersection\(MARLIN_ARCHS\s+"([^"]*)"', text)
    assert len(requests_of) == 2
    assert arch_requests(text, "13.0")["MARLIN_ARCHS"].text == requests_of[0]
    assert arch_requests(text, "12.8")["MARLIN_ARCHS"].text == requests_of[1]


@pytest.mark.parametrize("before,after,target", PAIRS)
def test_image_tags_lock_state_and_next_commands(before, after, target):
    _, report, _ = upgrade(before, after, target)
    pins = load_lock()
    for side, version in (("from", before), ("to", after)):
        image = report["image"][side]
        base = get_target(target).base_for(version).ref
        assert (image["moving_tag"], image["base"]) == (moving_tag(target, version), base)
        assert image["locked"] == (base in pins) and (image["digest"] == pins.get(base))
    commands = report["next"]
    assert f"python3 build.py --target {target} --vllm {after}" in commands
    assert any(c.startswith(f"python3 build.py publish --target {target} --vllm {after} ") for c in commands)
    if not report["image"]["to"]["locked"]:
        assert f"python3 build.py lock --vllm {after}" in commands
    for recipe in report["recipes"]:
        smoke = f"--recipe {recipe['recipe']} --target {target} "
        assert any(smoke in c for c in commands) == (recipe["served_to"] and not recipe["refused"])


@pytest.mark.parametrize("before,after,target", PAIRS)
def test_evidence_coverage_follows_the_records_each_recipe_cites(before, after, target):
    _, report, _ = upgrade(before, after, target)
    measured_on = evidence.record_releases()     # what record_release looks each id up in
    for recipe in target_recipes(target, after):
        ids = evidence.cited_ids(recipe)
        states = [c["state"] for c in recipe_entry(report, recipe.name)["evidence"]]
        assert states == [evidence.MEASURED if any(measured_on.get(i) == v for i in ids)
                          else evidence.NOT_MEASURED for v in (before, after)]


def write_record(results: Path, record_id: str, kind: str, vllm: str, command: str, verdict: str) -> Path:
    """A record as forge.evidence's loader validates it (the fields it requires)."""
    path = results / record_id / evidence.RECORD_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"schema": 1, "id": record_id, "kind": kind, "date": "2026-12-03",
                                "command": command, "versions": {"vllm": vllm}, "figures": {},
                                "verdict": verdict}))
    return path


def test_evidence_reads_versions_vllm_of_each_cited_record(tmp_path):
    write_record(tmp_path, "h200-0.34.0-smoke-26b", "smoke", "0.34.0", "python3 verify/mtp_smoke.py", "pass")
    ids = ["h200-0.34.0-smoke-26b", "h200-0.27.1-gone"]
    assert evidence.coverage_of(ids, "0.34.0", tmp_path).records == ["h200-0.34.0-smoke-26b"]
    assert evidence.coverage_of(ids, "0.27.1", tmp_path).state == evidence.NOT_MEASURED
    assert evidence.missing_records(ids, tmp_path) == ["h200-0.27.1-gone"]


def test_a_cited_record_that_does_not_validate_is_a_one_line_error(tmp_path):
    path = write_record(tmp_path, "h200-0.34.0-smoke-26b", "smoke", "0.34.0", "python3 verify/mtp_smoke.py", "pass")
    path.write_text(path.read_text().replace('"verdict": "pass"', '"verdict": "maybe"'))
    with pytest.raises(ForgeError, match=r"h200-0.34.0-smoke-26b/result.json: verdict: must be one of") as error:
        evidence.coverage_of(["h200-0.34.0-smoke-26b"], "0.34.0", tmp_path)
    assert "\n" not in str(error.value)


def test_drift_records_of_the_package_on_the_new_release_are_named(tmp_path):
    from forge.upgrade.requirements import drift_records

    def record(name, kind, vllm, command, verdict):
        write_record(tmp_path, name, kind, vllm, command, verdict)
    record("cpu-0.34.0-drift-transformers-5.25.0", "drift", "0.34.0",
           "python3 build.py drift --version 5.25.0 --vllm 0.34.0", "fail")
    record("cpu-0.34.0-drift-fastapi", "drift", "0.34.0",
           "python3 build.py drift --package fastapi --version 0.140.0", "pass")
    record("cpu-0.33.0-drift-transformers", "drift", "0.33.0", "python3 build.py drift --newest", "fail")
    record("h200-0.34.0-smoke-26b", "smoke", "0.34.0", "python3 verify/mtp_smoke.py", "pass")
    assert drift_records("transformers", "0.34.0", tmp_path) == ["cpu-0.34.0-drift-transformers-5.25.0: fail"]
    assert drift_records("fastapi", "0.34.0", tmp_path) == ["cpu-0.34.0-drift-fastapi: pass"]


def test_the_schema_refuses_a_report_it_does_not_describe():
    _, report, _ = upgrade(*PAIRS[0])
    with pytest.raises(ForgeError, match="verdict: must be one of"):
        check_report({**report, "verdict": "maybe"})
    with pytest.raises(ForgeError, match="unknown field"):
        check_report({**report, "extra": 1})
    broken = json.loads(json.dumps(report))
    del broken["recipes"][0]["evidence"]
    with pytest.raises(ForgeError, match=r"recipes\[0\]\.evidence: required field is missing"):
        check_report(broken)


def test_a_downgrade_is_compared_only_when_allowed():
    refused = run_build("upgrade", "--from", "0.34.0", "--to", "0.33.0", "--target", "h200")
    assert refused.returncode == 2 and "--allow-downgrade" in refused.stderr
    allowed = run_build("upgrade", "--from", "0.34.0", "--to", "0.33.0", "--target", "h200",
                        "--allow-downgrade", "--json")
    report = json.loads(allowed.stdout)
    assert report["downgrade"] is True and check_report(report)
    assert allowed.returncode == (1 if report["blocking"] else 0)


# --- bad input: one line, exit 2, nothing written --------------------------------------------

def tree_state(root: Path = REPO_ROOT) -> dict[str, tuple[int, int, int]]:
    """Every file of the checkout -> (size, mtime, ctime in ns). A command that writes, makes,
    replaces or removes a file changes this (the kernel sets ctime on every change to a file
    and nothing can set it back); reading 36 MB of files before and after each run would not
    see more."""
    skip = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
    state = {}
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in skip]
        for name in names:
            found = os.stat(os.path.join(folder, name), follow_symlinks=False)
            state[os.path.relpath(os.path.join(folder, name), root)] = \
                (found.st_size, found.st_mtime_ns, found.st_ctime_ns)
    return state


BAD_INPUTS = [
    (["--from", "0.27.1", "--to", "0.99.0", "--target", "gb10"], "--to 0.99.0: not a published vLLM release"),
    (["--from", "0.27.9", "--to", "0.34.0", "--target", "gb10"], "--from 0.27.9: not a published vLLM release"),
    (["--from", "banana", "--to", "0.34.0", "--target", "gb10"], "--from: not a vLLM version"),
    (["--from", "0.20.0", "--to", "0.34.0", "--target", "gb10"], "--from 0.20.0: before the series' checked_from"),
    (["--from", "0.34.0", "--to", "0.27.1", "--target", "gb10"], "--to 0.27.1: older than --from 0.34.0"),
    (["--from", "0.27.1", "--to", "0.27.1", "--target", "gb10"], "--to 0.27.1: the same release as --from"),
    (["--from", "0.27.1", "--to", "0.34.0", "--target", "tpu9"], "unknown target 'tpu9'"),
    (["--from", "0.27.1", "--to", "0.34.0", "--target", "gb10", "--recipe", "no-such"],
     "--recipe no-such: unknown recipe 'no-such'"),
    (["--from", "0.27.1", "--to", "0.34.0", "--target", "h200", "--recipe", "gemma-4-31b-it-nvfp4"],
     "--recipe gemma-4-31b-it-nvfp4: recipes/gemma-4-31b-it-nvfp4.yaml: targets: recipe "
     "'gemma-4-31b-it-nvfp4' has no target 'h200'"),
    (["--from", "0.23.0", "--to", "0.24.0", "--target", "gb10", "--recipe", "gemma-4-26b-a4b-it"],
     "--recipe gemma-4-26b-a4b-it: recipes/gemma-4-26b-a4b-it.yaml: targets.gb10.vllm: the recipe "
     "is for vLLM >=0.25.0"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, message):
    before = tree_state()
    result = run_build("upgrade", *args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert result.stdout == ""
    assert tree_state() == before


# --- --run: the build of --to against a stand-in base, then no GPU ---------------------------

def _snapshot(into: Path) -> Path:
    """A committed copy of the checkout (builds read the source revision from git)."""
    repo = into / "snapshot"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("forge", "patches", "verify", "models", "recipes", "images", "benchmarks"):
        shutil.copytree(REPO_ROOT / name, repo / name, ignore=ignore)
    for name in ("build.py", ".gitignore"):
        shutil.copy2(REPO_ROOT / name, repo / name)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    for command in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(["git", "-C", str(repo), *command], check=True, capture_output=True, env=env)
    return repo


@pytest.mark.docker
def test_run_builds_the_new_image_then_stops_where_there_is_no_gpu(standin_base, docker_engine, buildx,
                                                                  tmp_path):
    repo = _snapshot(tmp_path)
    repository = f"{standin_base.mirror}/forge-upgrade"
    env = {"VLLM_FORGE_BASE_MIRROR": standin_base.mirror, "VLLM_FORGE_LOCK": str(tmp_path / "lock.yaml"),
           "VLLM_FORGE_REPOSITORY": repository}
    assert shutil.which("nvidia-smi") is None      # the host this test runs on has no GPU
    result = run_build("upgrade", "--from", "0.24.0", "--to", standin_base.version, "--target", "a100",
                       "--run", cwd=repo, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "--run: step 1: build the 0.25.0 image for a100" in result.stdout
    stop = [line for line in result.stdout.splitlines() if "step 2 (smoke) not run" in line]
    assert len(stop) == 1 and "no NVIDIA GPU on this host" in stop[0]
    assert "/opt/vllm-forge/verify/mtp_smoke.py --recipe gemma-4-26b-a4b-it --target a100" in stop[0]
    image = docker_engine.images.get(f"{repository}:{moving_tag('a100', '0.25.0')}")
    assert image.labels["io.vllm-forge.vllm-version"] == "0.25.0"
    assert image.labels["org.opencontainers.image.base.digest"] == standin_base.digest
    # Nothing was pushed: the registry holds no tag of the repository.
    tags = requests.get(standin_base.registry.url("forge-upgrade/tags/list"), timeout=30)
    assert tags.status_code == 404 or not tags.json().get("tags")
