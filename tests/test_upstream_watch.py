"""upstream-watch on real release data: PyPI's vLLM release list and the releases' real sources.

Each test works on a copy of the real manifest (patches/) in a temporary directory and runs the
real `build.py upstream-watch` command.
"""
import hashlib
import os
import shutil
from pathlib import Path

import pytest
import yaml

from forge.patching.series import load_series
from forge.upstream import releases
from forge.watch import drift, upstream
from forge.watch.dependencies import load_watch
from tests.build_cli import run_build
from tests.test_dependency_drift import add_constraint, method_line, series_without_constraints

REPO_ROOT = Path(__file__).resolve().parents[1]
EMBEDDING_PATCH = "gemma4-mtp-share-embeddings"


@pytest.fixture(scope="module")
def newest_release() -> str:
    return str(releases.list_releases()[-1])


def watch_checked_through(patches_dir: Path, version: str | None = None) -> Path:
    """Set the copied dependency-watch.yaml's transformers `checked_through` (default: PyPI's
    newest, so the vLLM-side tests check no dependency version)."""
    watch_file = patches_dir / "dependency-watch.yaml"
    version = version or drift.newest_version("transformers")
    text = watch_file.read_text()
    current = load_watch(watch_file).dependencies[0].checked_through
    watch_file.write_text(text.replace(f"checked_through: {current}\n", f"checked_through: {version}\n"))
    assert load_watch(watch_file).dependencies[0].checked_through == version
    return watch_file


def manifest_copy(tmp_path: Path, checked_through: str, **patch_edits) -> Path:
    """A copy of patches/ whose series.yaml says `checked_through` and carries `patch_edits`
    (field -> value, None deletes) on the embedding patch."""
    shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches")
    watch_checked_through(tmp_path / "patches")
    series_file = tmp_path / "patches" / "series.yaml"
    text = series_file.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    data = yaml.safe_load(text)
    data["checked_through"] = checked_through
    patch = next(p for p in data["patches"] if p["id"] == EMBEDDING_PATCH)
    for name, value in patch_edits.items():
        if value is None:
            patch.pop(name, None)
        else:
            patch[name] = value
    series_file.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return series_file


def watch(series_file: Path, *extra: str):
    return run_build("upstream-watch", "--series", str(series_file), *extra, timeout=1800)


def status_cell(body: str, release: str, patch_id: str) -> str:
    """The cell of `patch_id`'s column in `release`'s row of the pull request's status table."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines()
            if line.startswith("| ")]
    header = next(r for r in rows if r[0] == "release")
    return next(r for r in rows if r[0] == release)[header.index(f"`{patch_id}`")]


def read_outputs(path: Path) -> dict:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_new_releases_retire_the_embedding_patch_at_0_27_0(tmp_path, newest_release):
    series_file = manifest_copy(tmp_path, "0.26.0", retired_in=None)
    assert load_series(series_file).get(EMBEDDING_PATCH).retired_in is None
    outputs, body = tmp_path / "github_output", tmp_path / "body.md"

    result = watch(series_file, "--write", "--pr-body", str(body), "--github-output", str(outputs))

    assert result.returncode == 0, result.stderr
    series = load_series(series_file)
    assert series.checked_through == newest_release
    assert series.get(EMBEDDING_PATCH).retired_in == "0.27.0"
    assert series.header.startswith("# vllm-forge patch series")
    assert read_outputs(outputs) == {
        "newest": newest_release, "changed": "true", "conflicts": "false", "findings": "false",
        "branch": f"upstream-watch/vllm-{newest_release}",
        "title": f"upstream-watch: check patches through vLLM {newest_release}; "
                 f"retire {EMBEDDING_PATCH} (upstream in 0.27.0)"}
    text = body.read_text()
    assert f"- `{EMBEDDING_PATCH}`: `retired_in: 0.27.0` (already upstream from 0.27.0)" in text
    assert status_cell(text, "0.27.0", EMBEDDING_PATCH) == "already-upstream"
    assert f"python3 build.py lock --vllm {newest_release}" in text


def test_a_manifest_at_the_newest_release_proposes_nothing(tmp_path, newest_release):
    series_file = manifest_copy(tmp_path, newest_release)
    before = series_file.read_bytes()
    outputs = tmp_path / "github_output"

    result = watch(series_file, "--write", "--github-output", str(outputs))

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"upstream-watch: nothing new after vLLM {newest_release}")
    assert read_outputs(outputs)["changed"] == "false"
    assert series_file.read_bytes() == before


def test_second_run_after_writing_proposes_nothing(tmp_path, newest_release):
    series_file = manifest_copy(tmp_path, "0.26.0", retired_in=None)
    assert watch(series_file, "--write").returncode == 0
    written = series_file.read_bytes()
    proposal = upstream.propose(load_series(series_file))
    assert proposal.new_releases == [] and proposal.retire == {}
    assert watch(series_file, "--write").returncode == 0
    assert series_file.read_bytes() == written


def test_a_retired_patch_is_not_retired_again_and_fixed_in_is_filled(tmp_path, newest_release):
    series_file = manifest_copy(tmp_path, "0.26.0", retired_in=None,
                                upstream={"issue": 47794, "pr": 47953})
    proposal = upstream.propose(load_series(series_file))
    assert proposal.retire == {EMBEDDING_PATCH: "0.27.0"}
    assert proposal.set_fixed_in == {EMBEDDING_PATCH: "0.27.0"}
    assert proposal.new_releases[0] == "0.27.0" and proposal.newest == newest_release

    retired = manifest_copy(tmp_path / "retired", "0.26.0", retired_in="0.27.0")
    proposal = upstream.propose(load_series(retired))
    assert proposal.retire == {} and proposal.set_fixed_in == {}
    assert proposal.changes_manifest


def test_a_conflict_fails_loudly_and_changes_nothing(tmp_path):
    series_file = manifest_copy(tmp_path, "0.26.0", retired_in=None)
    # Damage one context line: the diff then fits neither forward nor reverse on any release,
    # while the code it fixes ("differs from draft") is still there from 0.27.0 on.
    diff_file = tmp_path / "patches" / "source" / f"{EMBEDDING_PATCH}.diff"
    diff_file.write_text(diff_file.read_text().replace(
        '"Sharing target model embedding weights with the draft model."',
        '"Sharing target model embedding weights with the draft (edited)."'))
    data = yaml.safe_load(series_file.read_text())
    data["patches"][0]["files"][0]["sha256"] = hashlib.sha256(diff_file.read_bytes()).hexdigest()
    series_file.write_text(yaml.safe_dump(data, sort_keys=False))
    before = series_file.read_bytes()
    outputs, body = tmp_path / "github_output", tmp_path / "body.md"

    result = watch(series_file, "--write", "--pr-body", str(body), "--github-output", str(outputs))

    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: vLLM 0.27.0: patch {EMBEDDING_PATCH} conflicts: "
                                    "neither forward nor reverse applies")
    assert series_file.read_bytes() == before
    assert read_outputs(outputs)["conflicts"] == "true"
    assert read_outputs(outputs)["title"].startswith(
        f"upstream-watch: patch {EMBEDDING_PATCH} conflicts with vLLM 0.27.0–")
    assert "**Conflicts: the manifest was not changed.**" in body.read_text()
    assert status_cell(body.read_text(), "0.27.0", EMBEDDING_PATCH) == "**CONFLICT**"


def test_the_workflow_steps_propose_and_regenerate_the_readme(tmp_path, newest_release):
    """upstream-watch.yml's own steps in a checkout whose manifest stops at 0.26.0."""
    from tests.workflow_steps import run_step, step_script, workflow_checkout

    checkout = workflow_checkout(tmp_path)
    watch_checked_through(checkout / "patches")
    series_file = checkout / "patches" / "series.yaml"
    series_file.write_text(series_file.read_text().replace(
        f"checked_through: {load_series(series_file).checked_through}\n", "checked_through: 0.26.0\n"))
    (tmp_path / "runner").mkdir()
    outputs = tmp_path / "github_output"
    env = {**os.environ, "RUNNER_TEMP": str(tmp_path / "runner"), "GITHUB_OUTPUT": str(outputs),
           "VLLM_FORGE_SERIES": str(series_file)}

    watch = run_step(step_script("upstream-watch.yml", "watch", "watch"), checkout, env)
    assert watch.returncode == 0, watch.stderr
    assert read_outputs(outputs)["changed"] == "true"
    assert f"`checked_through: 0.26.0` → `{newest_release}`" in (
        tmp_path / "runner" / "upstream-watch.md").read_text()
    series = load_series(series_file)
    assert (series.checked_through, series.get(EMBEDDING_PATCH).retired_in) == (newest_release, "0.27.0")

    table = run_step(step_script("upstream-watch.yml", "watch", "Regenerate README's patch status table"),
                     checkout, env)
    assert table.returncode == 0, table.stderr
    readme = (checkout / "README.md").read_text()
    from forge.patching.status import release_status

    # the embedding patch's column comes first: on the newest release, the status the source gives
    # (already-upstream while its file keeps the fix, not-needed once the file is gone, as in 0.34.0)
    first = next(s.status for s in release_status(newest_release, series=series) if s.id == EMBEDDING_PATCH)
    assert first in ("already-upstream", "not-needed")
    assert f"| {newest_release} | {first} |" in readme
    assert "retired in 0.27.0" in readme


def test_recipes_whose_range_stops_short_are_listed_in_the_pull_request(tmp_path, newest_release):
    series_file = manifest_copy(tmp_path, "0.26.0", retired_in=None)
    recipes_root = tmp_path / "recipes"
    shutil.copytree(REPO_ROOT / "recipes", recipes_root)
    short = recipes_root / "gemma-4-26b-a4b-it.yaml"
    data = yaml.safe_load(short.read_text())
    assert data["defaults"]["vllm"] == ">=0.25.0"   # no cap of its own: it follows the series
    data["targets"]["h200"]["vllm"] = ">=0.25.0,<0.27"
    short.write_text(yaml.safe_dump(data, sort_keys=False))

    proposal = upstream.propose(load_series(series_file), recipes_root=recipes_root)

    assert proposal.recipes_behind == ["gemma-4-26b-a4b-it/h200"]
    body = upstream.body(proposal)
    assert "- `recipes/gemma-4-26b-a4b-it.yaml` targets.h200" in body
    assert f"build.py serve --recipe R --target T --vllm {newest_release}" in body


# --- the dependency drift watch ---------------------------------------------------------------

def dependency_manifest(tmp_path: Path, newest_release: str, watch_from: str) -> Path:
    """patches/ with no vLLM release to check, no dependency constraint, and transformers
    watched from `watch_from`."""
    series_file = series_without_constraints(tmp_path)
    data = yaml.safe_load(series_file.read_text())
    series_file.write_text(series_file.read_text().replace(
        f"checked_through: {data['checked_through']}\n", f"checked_through: {newest_release}\n"))
    watch_checked_through(series_file.parent, watch_from)
    return series_file


def test_a_new_dependency_version_that_breaks_a_supported_release_opens_an_issue(
        tmp_path, newest_release):
    series_file = dependency_manifest(tmp_path, newest_release, "5.14.1")
    watch_file = series_file.parent / "dependency-watch.yaml"
    before = (series_file.read_bytes(), watch_file.read_bytes())
    outputs, body = tmp_path / "github_output", tmp_path / "body.md"

    result = watch(series_file, "--write", "--dependency-through", "transformers==5.15.0",
                   "--pr-body", str(body), "--github-output", str(outputs))

    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr == ("error: transformers 5.15.0 breaks Gemma 4 on vLLM 0.21.0–0.27.1 "
                             "and no dependency constraint covers it\n")
    assert (series_file.read_bytes(), watch_file.read_bytes()) == before
    assert read_outputs(outputs) == {
        "newest": "", "changed": "false", "conflicts": "false", "findings": "true",
        "branch": "upstream-watch/transformers-5.15.0",
        "title": "upstream-watch: transformers 5.15.0 breaks Gemma 4 on vLLM 0.21.0–0.27.1"}
    text = body.read_text()
    assert "New transformers releases since `checked_through: 5.14.1`" in text
    line = method_line("0.21.0", "Gemma4ModelArchConfigConvertor", "get_head_size", '"head_dim"')
    assert ("- 5.15.0: breaks on vLLM 0.21.0–0.27.1 (AmbiguousGlobalPerLayerAttributeError at "
            f"vllm/transformers_utils/model_arch_config_convertor.py:{line})") in text
    assert "**Dependency drift: nothing was changed.**" in text
    assert "| 0.27.1 | breaks | AmbiguousGlobalPerLayerAttributeError at " in text


def test_a_covered_dependency_version_moves_checked_through(tmp_path, newest_release):
    series_file = dependency_manifest(tmp_path, newest_release, "5.14.1")
    series = add_constraint(load_series(series_file), "<5.15")
    watch_list = load_watch(series_file.parent / "dependency-watch.yaml")
    series_before = series_file.read_bytes()

    proposal = upstream.propose(series, watch=watch_list, through={"transformers": "5.15.0"})

    [dependency] = proposal.dependencies
    assert dependency.new_versions == ["5.15.0"] and dependency.findings == []
    verdicts = {r.release: r.verdict for r in dependency.reports[0].results}
    assert verdicts["0.27.1"] == verdicts["0.21.0"] == "covered-by-constraint"
    assert verdicts["0.28.0"] == "works"
    assert not proposal.blocked and proposal.changes_watch_list and not proposal.changes_manifest
    assert upstream.title(proposal) == "upstream-watch: check transformers through 5.15.0"
    assert proposal.branch == "upstream-watch/transformers-5.15.0"
    assert "- `transformers`: `checked_through: 5.14.1` → `5.15.0`" in upstream.body(proposal)

    upstream.apply(proposal, series, watch_list)

    assert load_watch(series_file.parent / "dependency-watch.yaml").dependencies[0].checked_through \
        == "5.15.0"
    assert series_file.read_bytes() == series_before  # no vLLM release to record
    again = upstream.propose(series, watch=load_watch(series_file.parent / "dependency-watch.yaml"),
                             through={"transformers": "5.15.0"})
    assert again.dependencies[0].new_versions == [] and not again.changes_watch_list


def test_a_bad_dependency_through_is_refused(tmp_path, newest_release):
    series_file = dependency_manifest(tmp_path, newest_release, "5.15.0")
    result = watch(series_file, "--dependency-through", "transformers>=5.15")
    assert result.returncode == 2
    assert result.stderr == ("error: --dependency-through: expected PACKAGE==VERSION "
                             "(got 'transformers>=5.15')\n")


@pytest.mark.slow
def test_the_workflow_step_reports_dependency_drift_for_pypis_newest_transformers(
        tmp_path, newest_release):
    """upstream-watch.yml's own watch step, transformers watched from the release before PyPI's
    newest and no constraint in the series: its outputs agree with the drift check of that version,
    and the issue step fires on a finding."""
    from tests.workflow_steps import run_step, step_script, workflow_checkout

    checkout = workflow_checkout(tmp_path)
    bare = series_without_constraints(tmp_path / "bare")
    series_file = checkout / "patches" / "series.yaml"
    series_file.write_text(bare.read_text().replace(
        f"checked_through: {load_series(bare).checked_through}\n", f"checked_through: {newest_release}\n"))
    before_newest, newest = [str(v) for v in drift.final_versions("transformers")[-2:]]
    watch_file = watch_checked_through(checkout / "patches", before_newest)
    (tmp_path / "runner").mkdir()
    outputs = tmp_path / "github_output"
    env = {**os.environ, "RUNNER_TEMP": str(tmp_path / "runner"), "GITHUB_OUTPUT": str(outputs),
           "VLLM_FORGE_SERIES": str(series_file)}

    step = run_step(step_script("upstream-watch.yml", "watch", "watch"), checkout, env, timeout=1800)

    expected = drift.check("transformers", newest, load_series(series_file))
    produced = read_outputs(outputs)
    assert produced["findings"] == ("true" if expected.findings else "false")
    assert produced["newest"] == ""
    if expected.uninstallable:
        # PyPI's newest cannot be installed from PyPI (2026-12-02: transformers 5.25.0 requires
        # kernels>=0.19.1, none published): not checked, no finding, and never counted as checked
        assert step.returncode == 0, step.stderr
        assert (produced["changed"], produced["branch"]) == ("false", "upstream-watch/nothing")
        assert load_watch(watch_file).dependencies[0].checked_through == before_newest
        assert (f"- {newest}: not checked: {expected.uninstallable}; the watch tries it again on "
                "its next run") in (tmp_path / "runner" / "upstream-watch.md").read_text()
    elif expected.findings:
        assert step.returncode == 3
        assert produced["changed"] == "false"
        assert load_watch(watch_file).dependencies[0].checked_through == before_newest
    else:
        assert step.returncode == 0, step.stderr
        assert (produced["changed"], produced["branch"]) == ("true", f"upstream-watch/transformers-{newest}")
        assert load_watch(watch_file).dependencies[0].checked_through == newest
    workflow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "upstream-watch.yml").read_text())
    steps = {s.get("name"): s for s in workflow["jobs"]["watch"]["steps"]}
    issue = steps["Open an issue for the conflict or the dependency drift"]
    assert "steps.watch.outputs.findings == 'true'" in issue["if"]
    assert "patches/dependency-watch.yaml" in steps["Open the pull request"]["with"]["add-paths"]
    assert steps["Open the pull request"]["with"]["branch"] == "${{ steps.watch.outputs.branch }}"


def test_a_dependency_check_that_cannot_run_fails_the_watch_and_moves_nothing(
        tmp_path, newest_release):
    """The newest release's tree lacks a function the probe needs: exit 2 naming it, the watch
    list stays where it was (a probe error never counts as a version checked)."""
    from tests.test_dependency_drift import release_copy_missing

    series_file = dependency_manifest(tmp_path, newest_release, "5.14.1")
    series_file.write_text(series_file.read_text().replace(
        f"checked_from: {load_series(series_file).checked_from}\n", f"checked_from: {newest_release}\n"))
    watch_file = series_file.parent / "dependency-watch.yaml"
    before = watch_file.read_bytes()
    cache = release_copy_missing(tmp_path, newest_release, "vllm/transformers_utils/config.py",
                                 "get_hf_text_config", "get_text_config_renamed")
    drift.final_versions("transformers")  # the real PyPI answer, read into the temp cache below
    (cache / "pypi").mkdir()
    shutil.copy(releases.cache_dir() / "pypi" / "transformers.json", cache / "pypi")

    result = run_build("upstream-watch", "--series", str(series_file), "--write", "--offline",
                       "--dependency-through", "transformers==5.15.0", timeout=900,
                       env={"VLLM_FORGE_CACHE": str(cache)})

    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"error: transformers 5.15.0: drift probe error on vLLM {newest_release}: "
                             "vllm/transformers_utils/config.py: the release defines no top-level "
                             "'get_hf_text_config'\n")
    assert watch_file.read_bytes() == before
