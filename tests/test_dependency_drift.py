"""The dependency drift check on real parts: transformers wheels from PyPI (5.14.1 and 5.15.0,
installed once into cached environments), the real vLLM release sources of every supported
release, and the real `build.py drift` command.

Expected lines are read from the release sources here (ast), never typed in: the check must find
what the release's code really does.
"""
import ast
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from forge.errors import ForgeError
from forge.patching.series import Patch, load_series
from forge.upstream import pyenvs, releases
from forge.watch import drift
from forge.watch.dependencies import load_watch
from forge.watch.drift import declared_specifier
from tests.build_cli import run_build
from verify import dummy_models

REPO_ROOT = Path(__file__).resolve().parents[1]
CONVERTORS = "vllm/transformers_utils/model_arch_config_convertor.py"
AMBIGUOUS = ("transformers.integrations.heterogeneity.configuration_utils."
             "AmbiguousGlobalPerLayerAttributeError")
CONSTRAINT_ID = "transformers-gemma4-per-layer-config"
FIXED_IN = Version("0.28.0")   # vLLM PR #49797


def series_without_constraints(tmp_path: Path):
    """A copy of the real manifest with no `kind: dependency` entry (whatever the shipped one has)."""
    shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches")
    series_file = tmp_path / "patches" / "series.yaml"
    text = series_file.read_text()
    data = yaml.safe_load(text)
    data["patches"] = [p for p in data["patches"] if p["kind"] != "dependency"]
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    series_file.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return series_file


def add_constraint(series, specifier: str, vllm_range: str = ">=0.21.0,<0.28"):
    """The transformers entry in the agreed `kind: dependency` shape (Patch.package/.specifier)."""
    constraint = Patch(id=CONSTRAINT_ID, title="Keep transformers below 5.15 for Gemma 4",
                       kind="dependency", files=[], releases=vllm_range, why="test")
    constraint.package, constraint.specifier = "transformers", SpecifierSet(specifier)
    series.patches.append(constraint)
    return series


@pytest.fixture(scope="module")
def bare_series(tmp_path_factory):
    return series_without_constraints(tmp_path_factory.mktemp("series"))


@pytest.fixture(scope="module")
def report_5_15(bare_series):
    return drift.check("transformers", "5.15.0", load_series(bare_series))


@pytest.fixture(scope="module")
def report_5_14(bare_series):
    return drift.check("transformers", "5.14.1", load_series(bare_series))


def method_line(release: str, class_name: str, method: str, needle: str) -> int:
    """The line of `needle` inside class_name.method of the release's convertor module."""
    path = releases.release_tree(release) / CONVERTORS
    module = ast.parse(path.read_text())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    function = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method)
    lines = path.read_text().splitlines()
    return next(i for i in range(function.lineno, function.end_lineno + 1) if needle in lines[i - 1])


@pytest.mark.slow
def test_the_check_covers_every_supported_release(report_5_15, bare_series):
    series = load_series(bare_series)
    checked = [Version(r.release) for r in report_5_15.results]
    assert checked[0] == Version(series.checked_from) and checked[-1] == Version(series.checked_through)
    assert checked == [v for v in releases.list_releases()
                       if Version(series.checked_from) <= v <= Version(series.checked_through)]
    assert "transformers==5.15.0" in report_5_15.environment


def excluded_by_vllm(release: str, version: str) -> bool:
    return not declared_specifier(release, "transformers").contains(version)


@pytest.mark.slow
def test_transformers_5_15_breaks_gemma4_on_every_release_before_0_28(report_5_15):
    target = dummy_models.target_config()
    for result in report_5_15.results:
        if Version(result.release) >= FIXED_IN:
            assert result.outcome == "works", result
            assert result.verdict == ("excluded-by-vllm" if excluded_by_vllm(result.release, "5.15.0")
                                      else "works")
            # vLLM >= 0.28.0 resolves the layers: sliding head_dim and full global_head_dim.
            assert result.models["target"]["head_sizes"] == [target["head_dim"], target["global_head_dim"]]
            continue
        assert result.verdict == "breaks", result
        for model in result.models.values():
            error = model["error"]
            assert error["type"] == AMBIGUOUS
            assert error["runtime_error"] is True  # so getattr(config, "head_dim", 0) cannot absorb it
            assert error["message"].startswith("'head_dim' is a per-layer attribute")
            assert error["raised_at"]["file"] == CONVERTORS
            assert error["raised_at"]["function"] == "get_head_size"
            assert str(releases.release_tree(result.release) / CONVERTORS) in error["traceback"]
    assert [r.release for r in report_5_15.findings] == [
        r.release for r in report_5_15.results if Version(r.release) < FIXED_IN]


@pytest.mark.slow
def test_the_break_is_at_the_releases_own_line(report_5_15):
    by_release = {r.release: r for r in report_5_15.results}
    for release in ("0.21.0", "0.25.0", "0.27.1"):
        target = by_release[release].models["target"]
        assert target["convertor"] == "Gemma4ModelArchConfigConvertor"
        assert target["error"]["raised_at"]["line"] == method_line(
            release, "Gemma4ModelArchConfigConvertor", "get_head_size", '"head_dim"')
        assistant = by_release[release].models["assistant"]
        # The drafter is renamed gemma4_assistant -> gemma4_mtp by vllm/config/speculative.py and
        # reaches the base convertor's get_head_size.
        assert assistant["convertor"] == "Gemma4MTPModelArchConfigConvertor"
        assert assistant["renamed_at"].startswith("vllm/config/speculative.py:")
        assert assistant["error"]["raised_at"]["line"] == method_line(
            release, "ModelArchConfigConvertorBase", "get_head_size", '"head_dim"')


@pytest.mark.slow
def test_transformers_5_14_1_breaks_nothing(report_5_14):
    target = dummy_models.target_config()
    assert report_5_14.findings == [] and report_5_14.probe_errors == []
    for result in report_5_14.results:
        assert result.outcome == "works", result
        assert target["head_dim"] in result.models["assistant"]["head_sizes"]
        if excluded_by_vllm(result.release, "5.14.1"):
            # 0.32.0 on read per_layer_config only and require transformers >= 5.16.1.
            assert result.verdict == "excluded-by-vllm"
            continue
        assert result.verdict == "works"
        if Version(result.release) < FIXED_IN:
            # Gemma4ModelArchConfigConvertor.get_head_size: max(head_dim, global_head_dim)
            assert result.models["target"]["head_sizes"] == [target["global_head_dim"]]
        else:
            # vLLM PR #49797's own resolver split the flat 5.14.1 config into layers.
            assert result.models["target"]["per_layer"] is True
            assert result.models["target"]["head_sizes"] == [target["head_dim"], target["global_head_dim"]]
            assert "vllm/transformers_utils/configs/gemma4.py:gemma4_layer_config" in \
                result.models["target"]["release_code"]


def test_the_releases_declared_requirements_are_read_from_their_sdists():
    # Every release 0.25-0.28 requires only transformers >= 5.5.3, uncapped (vLLM #51744).
    for release in ("0.25.0", "0.27.1", "0.28.0"):
        assert declared_specifier(release, "transformers") == SpecifierSet(">=5.5.3")
    assert not declared_specifier("0.32.0", "transformers").contains("5.15.0")
    # vLLM #45596: 0.24.0 caps fastapi below 0.137; 0.23.0 does not.
    assert declared_specifier("0.23.0", "fastapi").contains("0.137.0")
    assert not declared_specifier("0.24.0", "fastapi").contains("0.137.0")
    assert declared_specifier("0.27.1", "no-such-dependency") == SpecifierSet()


@pytest.mark.slow
def test_a_constraint_covers_the_releases_it_keeps_the_version_out_of(bare_series, report_5_15):
    series = add_constraint(load_series(bare_series), "<5.15")
    covered = drift.check("transformers", "5.15.0", series, ["0.21.0", "0.27.1", "0.28.0"])
    assert [(r.release, r.verdict, r.constraint) for r in covered.results] == [
        ("0.21.0", "covered-by-constraint", CONSTRAINT_ID),
        ("0.27.1", "covered-by-constraint", CONSTRAINT_ID),
        ("0.28.0", "works", None)]
    assert covered.findings == []
    assert "no finding" in drift.summary(covered)

    assert "| 0.27.1 | covered-by-constraint (`transformers-gemma4-per-layer-config`) |" in \
        drift.render(covered)

    too_tight = add_constraint(load_series(bare_series), "<5.14")
    [held_back] = drift.check("transformers", "5.14.1", too_tight, ["0.27.1"]).results
    assert (held_back.verdict, held_back.constraint) == ("works", CONSTRAINT_ID)

    too_loose = add_constraint(load_series(bare_series), "<5.16")
    loose = drift.check("transformers", "5.15.0", too_loose, ["0.27.1"])
    assert [r.verdict for r in loose.results] == ["breaks"]
    assert drift.summary(loose).startswith("FINDING: transformers 5.15.0 breaks Gemma 4 on vLLM 0.27.1")


@pytest.mark.slow
def test_the_shipped_constraint_covers_transformers_5_15_on_every_release_it_breaks(report_5_15):
    """patches/series.yaml as shipped: `build.py drift --version 5.15.0` finds nothing, because the
    transformers constraint keeps 5.15.0 out of exactly the releases it breaks."""
    result = run_drift("--version", "5.15.0", "--json")
    assert result.returncode == 0, result.stderr
    shipped = json.loads(result.stdout)
    assert shipped["findings"] == []
    broken = {r.release for r in report_5_15.results if r.outcome == "breaks"}
    covered = {r["release"] for r in shipped["results"] if r["verdict"] == "covered-by-constraint"}
    assert covered == broken
    assert {r["constraint"] for r in shipped["results"] if r["release"] in covered} == {CONSTRAINT_ID}


def run_drift(*args, env=None):
    return run_build("drift", *args, timeout=900, env=env)


@pytest.mark.slow
def test_build_py_drift_exits_1_on_a_finding(bare_series, report_5_15):
    result = run_drift("--version", "5.15.0", "--vllm", "0.27.1", "--vllm", "0.28.0",
                       "--series", str(bare_series))
    assert result.returncode == 1, result.stderr
    assert "| 0.27.1 | breaks | AmbiguousGlobalPerLayerAttributeError at " in result.stdout
    assert "| 0.28.0 | works | head size 256/512 | head size 256/512 |" in result.stdout
    assert "FINDING: transformers 5.15.0 breaks Gemma 4 on vLLM 0.27.1 and no" in result.stdout

    fine = run_drift("--version", "5.14.1", "--vllm", "0.27.1", "--series", str(bare_series), "--json")
    assert fine.returncode == 0, fine.stderr
    report = json.loads(fine.stdout)
    assert (report["version"], report["findings"]) == ("5.14.1", [])


@pytest.mark.slow
def test_build_py_drift_newest_checks_the_indexs_newest_release(bare_series, report_5_15, tmp_path):
    """--newest checks the newest final release the index lists, for real. Against PyPI itself
    this test used to return early, passing, whenever that release could not be installed
    (transformers 5.25.0 requires kernels>=0.19.1,<0.20, which PyPI does not publish): it then
    checked nothing. Here the index is PyPI's own pages capped at 5.15.0 (tests/local_index.py),
    so the newest is a release known to install and to break vLLM 0.27.1 (an uninstallable newest
    is tests/test_drift_uninstallable.py's)."""
    from tests.local_index import isolated_cache, local_index

    with local_index([], newest={"transformers": "5.15.0"}) as index:
        env = {"VLLM_FORGE_PYPI": index, "VLLM_FORGE_CACHE": str(isolated_cache(tmp_path))}
        result = run_drift("--newest", "--vllm", "0.27.1", "--vllm", "0.28.0", "--series",
                           str(bare_series), "--json", env=env)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["version"] == "5.15.0"
    fixed = "excluded-by-vllm" if excluded_by_vllm("0.28.0", "5.15.0") else "works"
    assert {r["release"]: r["verdict"] for r in report["results"]} == {"0.27.1": "breaks",
                                                                        "0.28.0": fixed}
    assert report["findings"] == ["0.27.1"]


def manifest_of(tree: Path) -> dict[str, str]:
    """The manifest a tree copy changed on purpose answers to: its own files as they are now."""
    return releases._hashes_under(tree)


def release_copy_missing(tmp_path: Path, release: str, relative: str, name: str, renamed: str) -> Path:
    """A cache whose tree for `release` holds the files the probe reads, with `name` renamed in
    `relative`; the environments are the real cached ones."""
    cache = tmp_path / "cache"
    real_tree = releases.release_tree(release)
    tree = cache / "trees" / release
    for path in ("vllm/__init__.py", "vllm/config/speculative.py", "vllm/transformers_utils/config.py",
                 CONVERTORS):
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real_tree / path, tree / path)
    damaged = tree / relative
    damaged.write_text(damaged.read_text().replace(f"def {name}(", f"def {renamed}("))
    shutil.copyfile(releases.cache_dir() / "index.json", cache / "index.json")
    # the copy's manifest, as if the release's sdist held it so (the probe runs manifest files only)
    sdist = releases.sdist_info(release, offline=True)
    (cache / "tree-manifests").mkdir()
    (cache / "tree-manifests" / f"{release}.json").write_text(
        releases._manifest_entry(sdist.version, sdist.sha256, manifest_of(tree)))
    for shared in ("envs", "sdists"):
        (cache / shared).symlink_to(releases.cache_dir() / shared)
    return cache


@pytest.mark.slow
def test_a_function_the_probe_needs_missing_is_a_failed_check(tmp_path, bare_series, report_5_15):
    cache = release_copy_missing(tmp_path, "0.27.1", "vllm/transformers_utils/config.py",
                                 "get_hf_text_config", "get_text_config_renamed")
    result = run_drift("--version", "5.15.0", "--vllm", "0.27.1", "--series", str(bare_series),
                       "--offline", env={"VLLM_FORGE_CACHE": str(cache)})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: drift probe error on vLLM 0.27.1: "
                                    "vllm/transformers_utils/config.py: the release defines no "
                                    "top-level 'get_hf_text_config'")
    assert "| 0.27.1 | probe-error |" in result.stdout
    assert "FINDING" not in result.stdout and "no finding" not in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("statement, named", [
    ("envs.VLLM_MLA_DISABLE", "vllm\\.envs"),          # an import of vLLM internals
    ("logger.debug('head size')", "logger"),          # a module-level object (init_logger(...))
])
def test_the_probe_refuses_code_paths_it_does_not_load(tmp_path, report_5_15, statement, named):
    """A convertor that needs torch, vLLM internals or module state fails loudly (probe-error),
    never passes and never passes for a break."""
    cache = release_copy_missing(tmp_path, "0.27.1", CONVERTORS, "get_head_size", "get_head_size")
    convertors = cache / "trees" / "0.27.1" / CONVERTORS
    # The Gemma 4 convertor's get_head_size now touches the name first thing.
    convertors.write_text(convertors.read_text().replace(
        "        # Gemma4 uses dual head dimensions", f"        {statement}\n"
        "        # Gemma4 uses dual head dimensions", 1))
    python = pyenvs.package_env("transformers", "5.15.0", offline=True)
    tree = cache / "trees" / "0.27.1"
    raw = drift.run_probe(python, {"0.27.1": tree}, {"0.27.1": manifest_of(tree)})
    target = raw["releases"]["0.27.1"]["target"]
    assert target["outcome"] == "probe-error"
    assert re.search(r"the release code used vllm/transformers_utils/model_arch_config_convertor"
                     rf"\.py:\d+: {named}, which the probe does not load", target["error"]["message"])


def test_offline_without_a_cached_environment_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ForgeError) as caught:
        pyenvs.package_env("transformers", "5.15.0", offline=True)
    message = str(caught.value)
    assert message.startswith("offline and no cached environment for transformers==5.15.0 at ")
    assert "-m pip install --only-binary :all: transformers==5.15.0" in message


@pytest.mark.slow
def test_a_version_pip_cannot_install_leaves_no_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ForgeError, match=r"pip cannot install transformers==0\.0\.1 into "):
        pyenvs.package_env("transformers", "0.0.1")
    assert list((tmp_path / "cache" / "envs").iterdir()) == []


def test_final_versions_of_transformers_come_from_pypi(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    found = drift.final_versions("transformers")
    assert {Version("5.14.1"), Version("5.15.0")} <= set(found)
    assert all(not (v.is_prerelease or v.is_devrelease) for v in found)
    assert found == sorted(found)
    assert drift.final_versions("transformers", newer_than="5.14.1", offline=True)[0] == Version("5.15.0")
    assert drift.newest_version("transformers", offline=True) == str(found[-1])


def test_the_shipped_watch_list_loads_and_names_transformers():
    watch = load_watch()
    assert [(d.package, d.probe) for d in watch.dependencies] == [("transformers", "gemma4-config")]


@pytest.mark.parametrize("edit, error", [
    ({"probe": "nope"}, "dependencies[0].probe: no such reproduction (known: gemma4-config)"),
    ({"package": "fastapi"}, "dependencies[0].package: no drift reproduction for 'fastapi'"),
    ({"checked_through": "5.x"}, "dependencies[0].checked_through: not a PEP 440 version: '5.x'"),
    ({"colour": "red"}, "dependencies[0].colour: unknown field"),
])
def test_a_bad_watch_list_is_refused_naming_file_and_field(tmp_path, edit, error):
    data = yaml.safe_load((REPO_ROOT / "patches" / "dependency-watch.yaml").read_text())
    data["dependencies"][0].update(edit)
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ForgeError) as caught:
        load_watch(path)
    assert str(caught.value).startswith(f"{path}: {error}")


def test_a_package_listed_twice_is_refused(tmp_path):
    data = yaml.safe_load((REPO_ROOT / "patches" / "dependency-watch.yaml").read_text())
    data["dependencies"].append(dict(data["dependencies"][0], package="Transformers"))
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ForgeError, match=r"dependencies\[1\]\.package: Transformers is listed twice"):
        load_watch(path)


@pytest.mark.slow
@pytest.mark.parametrize("args, error", [
    (["--package", "fastapi", "--version", "0.137.0"],
     "error: no drift reproduction for 'fastapi' (known: transformers)\n"),
    (["--version", "5.x"], "error: not a version of transformers: '5.x'\n"),
    (["--version", "5.15.0", "--vllm", "0.0.99"],
     f"error: vLLM 0.0.99 has no sdist on the index {releases.index_url()}\n"),
])
def test_build_py_drift_refuses_bad_input_in_one_line(args, error, report_5_15):
    result = run_drift(*args)
    assert result.returncode == 2
    assert result.stderr == error
    assert result.stdout == ""


MODULE_UNDER_PROBE = '''\
import no_such_module_here
from vllm.other import helper_from_other
from vllm.other import OtherClass

LIMIT = 3
logger = make_logger()


def twice(x):
    return 2 * x


class Base:
    def size(self) -> "Tensor":
        return twice(LIMIT)


class Child(Base):
    def remote(self):
        return helper_from_other(1)

    def sibling(self):
        return isinstance(self, Sibling)

    def log(self):
        logger.info("x")

    def torch_path(self):
        return no_such_module_here.float16

    def other_class(self):
        return OtherClass()


class Sibling:
    pass
'''


def test_the_probe_loads_a_definition_with_its_same_file_helpers_and_refuses_the_rest(tmp_path):
    """forge/watch/drift_probe.py's loader on a small source tree: functions and literal constants of the
    file and functions of other vllm files run for real; module state, classes it was not asked
    for, other-file classes and missing modules refuse with the file and line that bound them."""
    from forge.watch.drift_probe import ProbeError, ReleaseCode

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "m.py").write_text(MODULE_UNDER_PROBE)
    (tmp_path / "vllm" / "other.py").write_text(
        "def helper_from_other(x):\n    return x + 1\n\n\nclass OtherClass:\n    pass\n")
    code = ReleaseCode(tmp_path, manifest_of(tmp_path))
    child = code.load("vllm/m.py", "Child")()
    assert child.size() == 6 and child.remote() == 2
    def line_of(start: str) -> int:
        return next(i for i, line in enumerate(MODULE_UNDER_PROBE.splitlines(), 1)
                    if line.startswith(start))

    refusals = {"sibling": f"vllm/m.py:{line_of('class Sibling')}: Sibling",
                "log": f"vllm/m.py:{line_of('logger =')}: logger",
                "torch_path": f"vllm/m.py:{line_of('import no_such')}: no_such_module_here",
                "other_class": f"vllm/m.py:{line_of('from vllm.other import OtherClass')}: "
                               "vllm.other.OtherClass"}
    for method, named in refusals.items():
        with pytest.raises(ProbeError, match=f"^the release code used {re.escape(named)}, "):
            getattr(child, method)()
    assert code.load("vllm/m.py", "Sibling")().__class__.__name__ == "Sibling"  # loaded for real now
    assert child.sibling() is False  # the same namespace: Child now sees the real class
    with pytest.raises(ProbeError, match=r"^vllm/m\.py: the release defines no top-level 'Missing'$"):
        code.load("vllm/m.py", "Missing")
