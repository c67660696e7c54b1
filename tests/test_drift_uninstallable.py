"""A dependency version the index cannot install, on real parts: real pip into real venvs
(forge.upstream.pyenvs), a loopback index (tests/local_index.py) that serves PyPI's own pages plus
small fixture wheels whose METADATA requires what no published release satisfies
(`packaging>=999`), and the real `build.py drift` and `build.py upstream-watch` commands.

Such a version is a fact about the version, not a failed check on this machine: the drift check
reports it as not checked (exit 2, never a pass), and the upstream watch records it without a
finding and without counting it as checked.
"""
import json
import re
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from forge.errors import ConflictError, ForgeError
from forge.patching.series import load_series
from forge.upstream import pyenvs, releases
from forge.watch import drift, upstream
from forge.watch.dependencies import load_watch
from tests.build_cli import run_build as build_cli_run
from tests.local_index import forge_fixture_wheel, isolated_cache, local_index, pypi_versions
from tests.test_dependency_drift import add_constraint
from tests.test_upstream_watch import dependency_manifest, read_outputs

# every test runs real pip against the loopback index (a venv, a resolution)
pytestmark = [pytest.mark.slow]
FIXTURE = "forge-drift-fixture"
UNMEETABLE = "packaging>=999"
# A transformers version that PyPI does not publish, between two it does (5.14.1 and 5.15.0): the
# index below lists it with the real ones, as a wheel that requires UNMEETABLE.
UNINSTALLABLE = "5.14.1.post1"


@pytest.fixture(scope="module")
def newest_packaging() -> str:
    return str(max(v for v in map(Version, pypi_versions("packaging"))
                   if not (v.is_prerelease or v.is_devrelease)))


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> str:
    wheels = tmp_path_factory.mktemp("wheels")
    built = [forge_fixture_wheel(wheels, FIXTURE, "1.0", [UNMEETABLE]),
             forge_fixture_wheel(wheels, FIXTURE, "2.0", [f"{FIXTURE}-dep"]),
             forge_fixture_wheel(wheels, f"{FIXTURE}-dep", "1.0", [UNMEETABLE]),
             # numpy 1.21.0 is on PyPI, with wheels for CPython 3.7-3.9 only and an sdist
             forge_fixture_wheel(wheels, FIXTURE, "3.0", ["numpy==1.21.0"]),
             forge_fixture_wheel(wheels, "transformers", UNINSTALLABLE, [UNMEETABLE])]
    with local_index(built) as url:
        yield url


@pytest.fixture(scope="module")
def index_cache(tmp_path_factory) -> Path:
    """One cache for the module's tests, as for one user's runs against the index: what one test
    read of the index is there for the next, as it would be on that user's next run."""
    return isolated_cache(tmp_path_factory.mktemp("index-cache"))


@pytest.fixture
def index_env(index, index_cache, monkeypatch) -> dict[str, str]:
    env = {"VLLM_FORGE_PYPI": index, "VLLM_FORGE_CACHE": str(index_cache)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture(scope="module")
def newest_release() -> str:
    return str(releases.list_releases()[-1])


def leftovers(name: str) -> list[str]:
    """Entries of the environments folder (staging ones included) named after `name`."""
    return [p.name for p in (releases.cache_dir() / "envs").iterdir() if name.replace("-", "_") in
            p.name.replace("-", "_")]


def reason(newest_packaging: str) -> str:
    return (f"cannot be installed from the index: it requires {UNMEETABLE} and no published "
            f"packaging release satisfies it (newest {newest_packaging})")


def test_a_requirement_no_published_release_meets_makes_the_version_uninstallable(
        index_env, newest_packaging):
    with pytest.raises(pyenvs.UninstallableError) as caught:
        pyenvs.package_env(FIXTURE, "1.0")
    error = caught.value
    assert (error.package, error.version, error.requirement, error.newest_published, error.required_by) \
        == (FIXTURE, "1.0", UNMEETABLE, newest_packaging, None)
    assert str(error) == f"{FIXTURE} 1.0 {reason(newest_packaging)}"
    assert error.exit_code == 2
    assert leftovers(FIXTURE) == []   # nothing half-built stays in the cache


def test_a_dependencys_unmeetable_requirement_names_the_dependency(index_env, newest_packaging):
    with pytest.raises(pyenvs.UninstallableError) as caught:
        pyenvs.package_env(FIXTURE, "2.0")
    assert caught.value.required_by == f"{FIXTURE}-dep"
    assert str(caught.value) == (f"{FIXTURE} 2.0 cannot be installed from the index: it requires "
                                 f"{UNMEETABLE} (through {FIXTURE}-dep) and no published packaging "
                                 f"release satisfies it (newest {newest_packaging})")
    assert leftovers(FIXTURE) == []


def test_a_release_the_index_has_but_pip_cannot_take_here_stays_a_failed_check(index_env):
    """numpy 1.21.0 is published, only not as a wheel for this interpreter: pip fails the same
    way, but the index confirms a release that satisfies the requirement, so this is a check that
    failed on this machine, not a fact about the version."""
    assert Version("1.21.0") in map(Version, pypi_versions("numpy"))
    with pytest.raises(ForgeError) as caught:
        pyenvs.package_env(FIXTURE, "3.0")
    assert not isinstance(caught.value, pyenvs.UninstallableError)
    message = str(caught.value)
    assert message.startswith(f"pip cannot install {FIXTURE}==3.0 into ")
    # pip 26 adds the parent to pip's last line, which the message quotes
    assert re.search(r"ERROR: No matching distribution found for numpy==1\.21\.0"
                     rf"( \(from {FIXTURE}\))?$", message), message
    assert leftovers(FIXTURE) == []


def test_pip_output_without_a_confirmed_requirement_is_not_classified(index_env):
    """pip's own words are not enough: the index must confirm, and the package itself missing
    is no requirement of it."""
    line = "ERROR: No matching distribution found for {}\n"
    assert pyenvs.unmet_requirement(FIXTURE, "1.0", line.format("packaging>=20")) is None
    assert pyenvs.unmet_requirement(FIXTURE, "9.0", line.format(f"{FIXTURE}==9.0")) is None
    assert pyenvs.unmet_requirement(FIXTURE, "1.0", "ERROR: Could not install packages\n") is None
    confirmed = pyenvs.unmet_requirement(FIXTURE, "1.0", line.format(UNMEETABLE))
    assert confirmed is not None and confirmed.requirement == UNMEETABLE


def test_the_drift_report_of_an_uninstallable_version_says_not_checked(index_env, newest_packaging):
    report = drift.check("transformers", UNINSTALLABLE, load_series(), ["0.28.0"])
    assert report.uninstallable == reason(newest_packaging)
    assert (report.results, report.findings, report.probe_errors) == ([], [], [])
    assert report.to_dict()["uninstallable"] == reason(newest_packaging)
    line = f"transformers {UNINSTALLABLE} {reason(newest_packaging)}"
    assert drift.summary(report) == f"not checked: {line}; not a pass"
    assert "no finding" not in drift.render(report) and "| vLLM |" not in drift.render(report)
    with pytest.raises(ForgeError) as caught:
        drift.refuse_probe_errors(report)
    assert str(caught.value) == line


def run_build(env: dict, *args: str) -> subprocess.CompletedProcess:
    return build_cli_run(*args, env=env, timeout=1800)


def test_build_py_drift_of_an_uninstallable_version_exits_2_saying_not_checked(
        index_env, newest_packaging):
    line = f"transformers {UNINSTALLABLE} {reason(newest_packaging)}"
    result = run_build(index_env, "drift", "--version", UNINSTALLABLE, "--vllm", "0.28.0")
    assert result.returncode == 2
    assert result.stderr == f"error: {line}\n"
    assert f"not checked: {line}; not a pass" in result.stdout
    assert "no finding" not in result.stdout and "FINDING" not in result.stdout

    as_json = run_build(index_env, "drift", "--version", UNINSTALLABLE, "--vllm", "0.28.0", "--json")
    assert as_json.returncode == 2 and as_json.stderr == f"error: {line}\n"
    report = json.loads(as_json.stdout)
    assert (report["uninstallable"], report["results"], report["findings"]) == \
        (reason(newest_packaging), [], [])


def test_the_watch_records_an_uninstallable_version_and_never_moves_past_it(
        tmp_path, index_env, newest_release, newest_packaging):
    """transformers watched from 5.14.0 through 5.15.0, the series' constraint covering 5.15.0:
    5.14.1 checked, the uninstallable version not, 5.15.0 checked after it. Nothing blocks; the
    watch list moves to 5.14.1 and no further."""
    series_file = dependency_manifest(tmp_path, newest_release, "5.14.0")
    series = add_constraint(load_series(series_file), "<5.15")
    watch_file = series_file.parent / "dependency-watch.yaml"

    proposal = upstream.propose(series, watch=load_watch(watch_file), through={"transformers": "5.15.0"})

    [dependency] = proposal.dependencies
    assert dependency.new_versions == ["5.14.1", UNINSTALLABLE, "5.15.0"]
    assert dependency.unchecked == [(UNINSTALLABLE, reason(newest_packaging))]
    checked = {r.version: {x.verdict for x in r.results} for r in dependency.reports if r.results}
    assert set(checked) == {"5.14.1", "5.15.0"}          # the version after it is still checked
    assert "covered-by-constraint" in checked["5.15.0"]
    assert dependency.findings == [] and not proposal.blocked
    assert dependency.moves_to == "5.14.1" and proposal.changes_watch_list
    assert proposal.branch == "upstream-watch/transformers-5.14.1"
    assert upstream.title(proposal) == "upstream-watch: check transformers through 5.14.1"
    body = upstream.body(proposal)
    assert (f"- {UNINSTALLABLE}: not checked: {reason(newest_packaging)}; the watch tries it again "
            "on its next run") in body
    assert (f"- `transformers`: `checked_through: 5.14.0` → `5.14.1` (not past {UNINSTALLABLE}, "
            "which was not checked)") in body
    assert proposal.to_dict()["dependencies"][0]["unchecked"] == [
        {"version": UNINSTALLABLE, "reason": reason(newest_packaging)}]

    upstream.apply(proposal, series, load_watch(watch_file))
    assert load_watch(watch_file).dependencies[0].checked_through == "5.14.1"

    again = upstream.propose(series, watch=load_watch(watch_file), through={"transformers": "5.15.0"})
    [dependency] = again.dependencies
    assert dependency.new_versions == [UNINSTALLABLE, "5.15.0"] and dependency.moves_to is None
    assert not again.changes_watch_list and again.branch == "upstream-watch/nothing"


def test_a_finding_after_an_uninstallable_version_still_blocks(
        tmp_path, index_env, newest_release, newest_packaging):
    series_file = dependency_manifest(tmp_path, newest_release, "5.14.1")   # no constraint
    watch_file = series_file.parent / "dependency-watch.yaml"
    before = (series_file.read_bytes(), watch_file.read_bytes())
    outputs, body = tmp_path / "github_output", tmp_path / "body.md"

    result = run_build(index_env, "upstream-watch", "--series", str(series_file), "--write",
                       "--dependency-through", "transformers==5.15.0", "--pr-body", str(body),
                       "--github-output", str(outputs))

    assert result.returncode == ConflictError.exit_code, result.stderr
    assert result.stderr == ("error: transformers 5.15.0 breaks Gemma 4 on vLLM 0.21.0–0.27.1 "
                             "and no dependency constraint covers it\n")
    assert (series_file.read_bytes(), watch_file.read_bytes()) == before
    produced = read_outputs(outputs)
    assert (produced["findings"], produced["changed"]) == ("true", "false")
    text = body.read_text()
    assert f"- {UNINSTALLABLE}: not checked: {reason(newest_packaging)}" in text
    assert "- 5.15.0: breaks on vLLM 0.21.0–0.27.1" in text
    assert "**Dependency drift: nothing was changed.**" in text


def test_the_watch_step_with_only_an_uninstallable_version_passes_and_moves_nothing(
        tmp_path, index_env, newest_release, newest_packaging):
    series_file = dependency_manifest(tmp_path, newest_release, "5.14.1")
    watch_file = series_file.parent / "dependency-watch.yaml"
    before = (series_file.read_bytes(), watch_file.read_bytes())
    outputs, body = tmp_path / "github_output", tmp_path / "body.md"

    result = run_build(index_env, "upstream-watch", "--series", str(series_file), "--write",
                       "--dependency-through", f"transformers=={UNINSTALLABLE}", "--pr-body", str(body),
                       "--github-output", str(outputs))

    assert result.returncode == 0, result.stderr
    assert (series_file.read_bytes(), watch_file.read_bytes()) == before
    assert read_outputs(outputs) == {
        "newest": "", "changed": "false", "conflicts": "false", "findings": "false",
        "branch": "upstream-watch/nothing",
        "title": f"upstream-watch: nothing new after vLLM {newest_release}"}
    assert (f"- {UNINSTALLABLE}: not checked: {reason(newest_packaging)}; the watch tries it again "
            "on its next run") in body.read_text()
    assert "Edits to `patches/dependency-watch.yaml`" not in body.read_text()


@pytest.mark.parametrize("last_line", [
    "ERROR: No matching distribution found for packaging>=999",                 # pip 23-25
    "ERROR: No matching distribution found for packaging>=999 (from forge-drift-fixture-dep)",  # 26
])
def test_the_requirement_is_read_from_the_last_line_of_every_pip_that_prints_it(last_line):
    """The requirement without the parent pip 26 names after it (a `packaging>=999 (from x)` would
    not parse as a requirement, and the version would count as a failed check)."""
    stderr = ("ERROR: Could not find a version that satisfies the requirement packaging>=999 "
              "(from forge-drift-fixture-dep) (from versions: 26.3, 26.4)\n" + last_line + "\n")
    assert pyenvs.NO_DISTRIBUTION.findall(stderr) == ["packaging>=999"]
