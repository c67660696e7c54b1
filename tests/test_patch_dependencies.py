"""Dependency constraints (patch kind `dependency`): validated on load against the real package
index, status from the releases' real declared requirements (their PyPI sdists) and from the
version a real install carries."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from forge.errors import ForgeError
from forge.patching import dependencies
from forge.patching.series import load_series
from forge.patching.status import release_status
from forge.upstream import pypi, releases
from tests.fixtures_patches import write_series
from tests.sdist_mirror import cold_cache
from tests.test_patch_series import run_build

REPO_ROOT = Path(__file__).resolve().parents[1]

TRANSFORMERS = "transformers-gemma4-per-layer-config"
FASTAPI = "fastapi-included-router-path"


def dependency_entry(**changes) -> dict:
    entry = {"id": "dep", "title": "t", "kind": "dependency", "releases": ">=0.21.0,<0.28",
             "package": "transformers", "specifier": "<5.15", "upstream": {"issue": 51744},
             "why": "w"}
    entry.update(changes)
    return entry


def status_of(statuses, patch_id):
    return next(s for s in statuses if s.id == patch_id)


def test_the_committed_constraints_load_with_the_agreed_shape():
    series = load_series()
    transformers = series.get(TRANSFORMERS)
    assert transformers.kind == "dependency" and transformers.files == []
    assert transformers.package == "transformers"
    assert transformers.specifier == SpecifierSet("<5.15")
    assert transformers.releases == ">=0.21.0,<0.28"
    assert {k: v for k, v in transformers.upstream.items() if v} == {
        "issue": 51744, "pr": 49797, "fixed_in": "0.28.0"}
    fastapi = series.get(FASTAPI)
    assert (fastapi.package, str(fastapi.specifier)) == ("fastapi", "<0.137")


def test_release_requirements_follow_includes_from_the_real_sdist():
    lines = dependencies.release_requirements("0.24.0")
    # cuda.txt pins torch itself and pulls fastapi and transformers in through `-r common.txt`.
    assert "torch==2.11.0" in lines
    assert any(line.startswith("fastapi[standard] >= 0.133.0, < 0.137.0") for line in lines)
    declared = dependencies.release_declares("0.24.0", "fastapi")
    assert declared.specifier == SpecifierSet(">=0.133.0,<0.137.0")
    assert dependencies.release_declares("0.24.0", "no-such-dependency").specifier is None


def test_a_release_tree_carries_its_requirement_files_so_the_sdist_is_read_once(tmp_path):
    """The tree's one pass over the sdist takes requirements/ and CMakeLists.txt too: with the
    sdist gone afterwards (and no network), the same lines and the same build file come from the
    tree. In a process of its own, on an empty cache (the mirror serves from this process's)."""
    expected = dependencies.release_requirements("0.24.0")
    cmake = releases.release_build_file("0.24.0", "CMakeLists.txt")
    assert cmake is not None
    script = ("import json; from forge.upstream import releases; from forge.patching import dependencies\n"
              "tree = releases.release_tree('0.24.0')\n"
              "assert (tree / dependencies.REQUIREMENTS_ENTRY).is_file(), sorted(p.name for p in tree.iterdir())\n"
              "releases.fetch_sdist('0.24.0').unlink()\n"
              "cmake = releases.release_build_file('0.24.0', 'CMakeLists.txt', offline=True)\n"
              "assert cmake == tree / 'CMakeLists.txt', cmake\n"
              "print(json.dumps([dependencies.release_requirements('0.24.0', offline=True),\n"
              "                  cmake.read_text()]))\n")
    with cold_cache(tmp_path / "cold") as env:
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                              env={**os.environ, **env}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [expected, cmake.read_text()]


@pytest.mark.parametrize("version, transformers, fastapi", [
    ("0.21.0", "applies", "applies"),          # transformers >= 4.56.0 and fastapi >= 0.115.0
    ("0.23.0", "applies", "applies"),
    ("0.24.0", "applies", "not-needed"),
    ("0.27.1", "applies", "not-needed"),       # transformers >= 5.5.3, uncapped
    ("0.28.0", "not-needed", "not-needed"),
    ("0.33.0", "not-needed", "not-needed"),
])
def test_status_against_each_release_comes_from_its_declared_requirements(version, transformers,
                                                                           fastapi):
    statuses = release_status(version)
    assert status_of(statuses, TRANSFORMERS).status == transformers
    assert status_of(statuses, FASTAPI).status == fastapi


def test_fastapi_outside_its_range_is_already_capped_by_the_release_itself(tmp_path):
    """The fastapi constraint stops at 0.24 because 0.24.0 caps fastapi < 0.137.0 itself: the
    same constraint over a wider range is already-upstream there, by the release's own facts."""
    wider = write_series(tmp_path, [dependency_entry(package="fastapi", specifier="<0.137",
                                                     releases=">=0.21.0")], {})
    series = load_series(wider)
    assert status_of(release_status("0.23.0", series=series), "dep").status == "applies"
    for version in ("0.24.0", "0.33.0"):
        assert status_of(release_status(version, series=series), "dep").status == \
            "already-upstream"


def test_a_release_that_caps_the_package_itself_is_already_upstream(tmp_path):
    """vLLM 0.33.0 declares transformers >= 5.16.1, < 5.21.0: a constraint <5.21 is kept by
    vLLM itself, <5.20 is not (5.20.x are published and admitted)."""
    capped = write_series(tmp_path / "a", [dependency_entry(releases=">=0.33.0",
                                                            specifier="<5.21")], {})
    uncapped = write_series(tmp_path / "b", [dependency_entry(releases=">=0.33.0",
                                                              specifier="<5.20")], {})
    kept = status_of(release_status("0.33.0", series=load_series(capped)), "dep")
    assert kept.status == "already-upstream"
    assert "transformers<5.21.0,>=5.16.1" in kept.detail
    loose = status_of(release_status("0.33.0", series=load_series(uncapped)), "dep")
    assert loose.status == "applies" and "newest 5.20." in loose.detail


def test_patches_command_shows_the_constraints():
    one = run_build("patches", "--vllm", "0.27.1")
    assert one.returncode == 0, one.stderr
    row = next(line for line in one.stdout.splitlines() if line.startswith(TRANSFORMERS))
    assert row.split()[1:3] == ["dependency", "applies"] and "transformers>=5.5.3" in row
    newer = json.loads(run_build("patches", "--vllm", "0.28.0", "--json").stdout)
    by_id = {p["id"]: p for p in newer["patches"]}
    assert by_id[TRANSFORMERS]["status"] == "not-needed"
    assert by_id[FASTAPI]["status"] == "not-needed"


@pytest.mark.parametrize("changes, field, message", [
    ({"package": "vllm-forge-no-such-project-9f3e"}, "package", "no project"),
    ({"package": "not a name!"}, "package", "not a valid Python project name"),
    ({"specifier": "<<5.15"}, "specifier", "not a PEP 440 version specifier"),
    ({"specifier": ">=999"}, "specifier", "no published version of transformers satisfies >=999"),
    ({"releases": "<0.20"}, "releases", "no known vLLM release"),
    ({"specifier": None}, "specifier", "a dependency patch needs one"),
    ({"files": [{"path": "x.diff", "sha256": "0" * 64}]}, "files", "a dependency patch has none"),
    ({"upstream": None}, "upstream", "names its upstream issue or pr"),
])
def test_a_bad_constraint_is_refused_at_load_naming_file_and_field(tmp_path, changes, field,
                                                                    message):
    series = write_series(tmp_path, [], {})
    # write_series fills file hashes; write the entry itself so `files` stays as given
    import yaml

    data = yaml.safe_load(series.read_text())
    data["patches"] = [{k: v for k, v in dependency_entry(**changes).items() if v is not None}]
    series.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_build("patches", "--vllm", "0.25.0", series=series)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {series}: patches[0].{field}: ")
    assert message in result.stderr


def test_package_and_specifier_belong_to_dependency_patches_only(tmp_path):
    import yaml

    series = write_series(tmp_path, [], {})
    data = yaml.safe_load(series.read_text())
    data["patches"] = [dict(dependency_entry(), kind="moe-config", specifier=None)]
    del data["patches"][0]["specifier"]
    series.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ForgeError, match=r"patches\[0\]\.package: only dependency patches have one"):
        load_series(series)


def test_the_index_is_cached_and_used_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ForgeError, match=r"cannot read 'fastapi' .*offline.* nothing is cached"):
        pypi.published_versions("fastapi", offline=True)
    online = pypi.published_versions("fastapi")
    assert Version("0.137.0") in online and Version("0.136.1") in online
    cached = tmp_path / "cache" / "pypi" / "fastapi.json"
    assert json.loads(cached.read_text())["versions"][-1] == str(online[-1])
    assert pypi.published_versions("fastapi", offline=True) == online
    # Oldest first in PEP 440 order, also in the cache (as text 0.99.0 would follow 0.137.0).
    assert online == sorted(online) and online[-1] == max(online)
    assert [Version(v) for v in json.loads(cached.read_text())["versions"]] == online


def test_load_offline_without_a_cached_index_names_the_field(tmp_path, monkeypatch):
    series = write_series(tmp_path / "s", [dependency_entry()], {})
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ForgeError, match=r"patches\[0\]\.package: cannot check it: .*offline"):
        load_series(series, offline=True)
    assert load_series(series, offline=True, check_index=False).get("dep").package == "transformers"


def test_plan_record_labels_and_build_args_list_each_constraint_with_its_pin(tmp_path):
    """`build.py --target gb10 --vllm 0.27.1 --plan`: the transformers constraint applies, and the
    image build pins the newest version that satisfies both it and 0.27.1's own requirement."""
    newest_fitting = max(v for v in pypi.published_versions("transformers")
                         if v in SpecifierSet("<5.15,>=5.5.3"))
    lock = tmp_path / "lock.yaml"    # a locked base, so the plan is complete (labels, args)
    lock.write_text("bases:\n  vllm/vllm-openai:v0.27.1: sha256:" + "a" * 64 + "\n"
                    "platforms:\n  vllm/vllm-openai:v0.27.1: [linux/amd64, linux/arm64]\n")
    result = run_build("--target", "gb10", "--vllm", "0.27.1", "--plan", "--json",
                       VLLM_FORGE_LOCK=str(lock))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    entry = next(p for p in plan["record"]["patches"] if p["id"] == TRANSFORMERS)
    assert (entry["status"], entry["package"], entry["specifier"], entry["pin"]) == \
        ("applies", "transformers", "<5.15", str(newest_fitting))
    assert next(p for p in plan["patches"] if p["id"] == FASTAPI)["pin"] is None
    assert plan["build_args"]["VLLM_FORGE_PINS"] == f"transformers=={newest_fitting}"
    assert plan["labels"]["io.vllm-forge.dependencies"] == f"transformers<5.15=={newest_fitting}"
    human = run_build("--target", "gb10", "--vllm", "0.27.1", "--plan", VLLM_FORGE_LOCK=str(lock))
    assert f"    transformers=={newest_fitting}  (constraint <5.15" in human.stdout
    newer = json.loads(run_build("--target", "gb10", "--vllm", "0.28.0", "--plan", "--json",
                                 "--allow-unlocked").stdout)
    assert newer["build_args"] is None or newer["build_args"]["VLLM_FORGE_PINS"] == ""
    assert next(p for p in newer["patches"] if p["id"] == TRANSFORMERS)["status"] == "not-needed"


def test_verify_reads_the_shipped_moe_configs_without_the_package_index(tmp_path, monkeypatch):
    """mtp_smoke asks which MoE configs the series ships, inside images on GPU hosts that may not
    reach PyPI and hold no forge cache: that load skips the dependency index checks."""
    from forge.patching.status import shipped_moe_configs

    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("VLLM_FORGE_PYPI", "http://127.0.0.1:9/simple/")
    with pytest.raises(ForgeError, match=r"\.package: cannot check it"):
        load_series()
    assert "E=128,N=704,device_name=NVIDIA_H200.json" in shipped_moe_configs("0.25.0")
