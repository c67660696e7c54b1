"""`build.py apply` brings a dependency inside its constraint, atomically with the source patches:
real transformers wheels from PyPI (5.15.0 breaks Gemma 4 on vLLM < 0.28, 5.14.1 does not) in a
site-packages that also holds the real vLLM 0.25.0 tree and its dist-info. The failure and kill
cases run on real fastapi wheels and the vLLM 0.23.0 tree (SMALL_*): the same transaction."""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from packaging.version import Version

from forge.patching.apply import FAIL_AFTER_ENV, KILL_AFTER_ENV, RECORD_DIR, TEMP_SUFFIX, apply_series
from forge.patching.series import load_series
from forge.patching.status import shipped_moe_configs, tree_status
from forge.upstream import releases
from tests.fixtures_patches import (
    WHEELS,
    applied_record,
    copy_tree,
    install_wheel,
    make_site_packages,
    snapshot,
    source_patches_applying,
    wheelhouse,
)
from tests.test_patch_series import run_build

TARGET = "vllm/v1/spec_decode/llm_base_proposer.py"
FIXED_LINE = b'            if share_embeddings and hasattr(self.model, "has_own_embed_tokens"):\n'
CONSTRAINT = "transformers-gemma4-per-layer-config"
UNREACHABLE_INDEX = "http://127.0.0.1:9/simple/"     # discard port: nothing listens

# The failure and kill cases run on the series' other constraint, fastapi <0.137 on vLLM 0.21-0.23
# (test_patch_revert_killed too): the same transaction as transformers' 3,500 files, on 58.
SMALL_RELEASE = "0.23.0"
SMALL_CONSTRAINT = "fastapi-included-router-path"
SMALL_PACKAGE = "fastapi"
SMALL_BROKEN, SMALL_PINNED = WHEELS[SMALL_PACKAGE]   # 0.137.0 violates it; 0.136.3 is the newest below
SMALL_SOURCE_PATCH = "gemma4-mtp-draft-seq-lens"     # applies on 0.23.0

# slow: pip installs real wheels (transformers: ~3500 files) on every apply.
pytestmark = pytest.mark.slow


def installed_version(site, package: str) -> str | None:
    found = [d.version for d in importlib.metadata.distributions(path=[str(site)])
             if d.metadata["Name"] == package]
    assert len(found) <= 1, f"two {package} dist-infos in {site}: {found}"
    return found[0] if found else None


def transformers_in(site) -> str | None:
    return installed_version(site, "transformers")


def carries_the_small_patch(site) -> bool:
    """Every file SMALL_SOURCE_PATCH touches (its series entry says which) differs from the
    release's own."""
    touched = load_series(check_index=False).get(SMALL_SOURCE_PATCH).touches or []
    assert touched, f"{SMALL_SOURCE_PATCH} lists no files it touches"
    return all((site / path).read_bytes() != releases.release_file(SMALL_RELEASE, path).read_bytes()
               for path in touched)


@pytest.fixture
def small_site(vllm_site):
    """A site-packages holding vLLM SMALL_RELEASE and fastapi SMALL_BROKEN."""
    site = vllm_site(SMALL_RELEASE)
    install_wheel(site, SMALL_PACKAGE, SMALL_BROKEN)
    return site


def newest_below_5_15() -> str:
    """What apply must pick from PyPI: the newest transformers within <5.15 and vLLM 0.25.0's
    own >=5.5.3 (5.14.1 when this was written)."""
    from packaging.specifiers import SpecifierSet

    from forge.upstream import pypi

    return str(max(SpecifierSet("<5.15,>=5.5.3").filter(pypi.published_versions("transformers"))))


def leftovers(site) -> list[str]:
    """Every path under `site` (directory or not: what rglob("*") finds, one os.walk) whose name
    is a temp file's or holds "vllm-forge" (the record directory, pip's staging directory)."""
    found = []
    for folder, folders, files in os.walk(site):
        found += [os.path.relpath(os.path.join(folder, name), site) for name in folders + files
                  if name.endswith(TEMP_SUFFIX) or "vllm-forge" in name]
    return sorted(found)


def test_apply_pins_transformers_with_the_source_patch_and_revert_restores_5_15_0(
        site_with_transformers):
    site = site_with_transformers("0.25.0", "5.15.0")
    original = snapshot(site)
    newest = newest_below_5_15()
    result = run_build("apply", "--site-packages", str(site), "--vllm", "0.25.0")
    assert result.returncode == 0, result.stderr
    assert transformers_in(site) == newest
    assert FIXED_LINE in (site / TARGET).read_bytes()
    assert f"transformers 5.15.0 -> {newest} (pinned =={newest}: constraint <5.15" in result.stdout
    assert "vLLM requires transformers>=5.5.3" in result.stdout
    record = applied_record(site)
    assert record["applied"] == [*source_patches_applying("0.25.0"), CONSTRAINT]
    [entry] = record["dependencies"]
    assert (entry["package"], entry["specifier"], entry["previous"], entry["installed"]) == \
        ("transformers", "<5.15", "5.15.0", newest)
    assert entry["pip"].endswith(f"transformers=={newest}")
    assert not (site / "transformers-5.15.0.dist-info").exists()
    after = {s.id: s.status for s in tree_status(load_series(), site, Version("0.25.0"),
                                                 install_path=[str(site)])}
    assert after[CONSTRAINT] == "satisfied"
    again = run_build("apply", "--site-packages", str(site))
    assert "already carries this patch series" in again.stdout
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert f"transformers {newest} -> 5.15.0 (restored)" in reverted.stdout
    assert snapshot(site) == original
    assert transformers_in(site) == "5.15.0"
    assert leftovers(site) == []


def test_a_satisfied_constraint_is_left_alone_and_shown_as_satisfied(site_with_transformers):
    site = site_with_transformers("0.25.0", "5.14.1")
    result = run_build("apply", "--site-packages", str(site))
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if CONSTRAINT in line)
    assert row.split()[1] == "satisfied" and "transformers 5.14.1 satisfies <5.15" in row
    assert transformers_in(site) == "5.14.1"


def test_offline_is_refused_before_anything_changes_naming_the_pip_command(site_with_transformers):
    site = site_with_transformers("0.25.0", "5.15.0")
    original = snapshot(site)
    # --offline pins what the cached PyPI index says is newest; an index never read before
    # leaves the choice to pip within both specifiers.
    for args, env, why, requirement in (
            (["--offline"], {}, "--offline", f"transformers=={newest_below_5_15()}"),
            ([], {"VLLM_FORGE_PYPI": UNREACHABLE_INDEX},
             f"the package index {UNREACHABLE_INDEX} does not answer", "'transformers<5.15,>=5.5.3'")):
        result = run_build("apply", "--site-packages", str(site), *args, **env)
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1
        assert f"transformers must be brought inside <5.15,>=5.5.3 but {why}; nothing changed" \
            in result.stderr
        command = (f"{sys.executable} -m pip install --no-deps --target {site} --upgrade "
                   f"{requirement}")
        assert f"Run `{command}` where the index answers, or pass --find-links DIR" in result.stderr
        assert snapshot(site) == original and leftovers(site) == []


def test_find_links_applies_without_any_index(site_with_transformers):
    site = site_with_transformers("0.25.0", "5.15.0")
    original = snapshot(site)
    result = run_build("apply", "--site-packages", str(site), "--offline", "--find-links",
                       str(wheelhouse()), VLLM_FORGE_PYPI=UNREACHABLE_INDEX)
    assert result.returncode == 0, result.stderr
    assert transformers_in(site) == "5.14.1"
    record = applied_record(site)
    assert f"--no-index --find-links {wheelhouse()}" in record["dependencies"][0]["pip"]
    # Revert needs no network at all: the previous version comes from the record's originals.
    assert run_build("apply", "--site-packages", str(site), "--revert",
                     VLLM_FORGE_PYPI=UNREACHABLE_INDEX).returncode == 0
    assert snapshot(site) == original


def test_a_wheelhouse_without_a_fitting_version_or_with_a_broken_wheel_changes_nothing(
        site_with_transformers, tmp_path):
    site = site_with_transformers("0.25.0", "5.15.0")
    original = snapshot(site)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_build("apply", "--site-packages", str(site), "--find-links", str(empty))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"no version of transformers in --find-links {empty} satisfies <5.15,>=5.5.3" \
        in result.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "transformers-5.14.1-py3-none-any.whl").write_bytes(b"not a zip file")
    result = run_build("apply", "--site-packages", str(site), "--find-links", str(broken))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "pip could not fetch transformers==5.14.1" in result.stderr
    assert result.stderr.rstrip().endswith("nothing changed")
    assert snapshot(site) == original and leftovers(site) == []


def test_a_failure_anywhere_in_apply_restores_everything_byte_for_byte(small_site):
    """Steps: 1 marks the record applying, 2 vLLM's RECORD, 3-6 the patched vLLM files, then
    fastapi's changed files one by one (about a dozen): 8 fails in the middle of the dependency.
    Each failure leaves the install as it was, so the next one starts from the same install."""
    site = small_site
    original = snapshot(site)
    for steps in (0, 1, 2, 8):
        result = run_build("apply", "--site-packages", str(site), "--find-links", str(wheelhouse()),
                           **{FAIL_AFTER_ENV: str(steps)})
        assert result.returncode == 2, result.stdout
        assert f"rolled back {steps} step(s), nothing changed" in result.stderr
        assert snapshot(site) == original and leftovers(site) == []
        assert installed_version(site, SMALL_PACKAGE) == SMALL_BROKEN


def test_a_kill_mid_apply_leaves_temp_files_the_next_run_removes(small_site):
    site = small_site
    original = snapshot(site)
    killed = run_build("apply", "--site-packages", str(site), "--find-links", str(wheelhouse()),
                       **{KILL_AFTER_ENV: "8"})       # as above: two of fastapi's files in place
    assert killed.returncode == -signal.SIGKILL
    temps = [p for p in site.rglob(f"*{TEMP_SUFFIX}")]
    assert len(temps) > 5            # fastapi's staged files that were never put in place
    again = run_build("apply", "--site-packages", str(site))
    assert again.returncode == 2 and "an earlier apply was interrupted" in again.stderr
    assert list(site.rglob(f"*{TEMP_SUFFIX}")) == []
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original and leftovers(site) == []


def test_a_kill_before_any_file_changed_is_cleaned_up_and_apply_proceeds(small_site):
    site = small_site
    killed = run_build("apply", "--site-packages", str(site), "--find-links", str(wheelhouse()),
                       **{KILL_AFTER_ENV: "0"})
    assert killed.returncode == -signal.SIGKILL
    assert list(site.rglob(f"*{TEMP_SUFFIX}")) and (site / "vllm" / RECORD_DIR).is_dir()
    assert installed_version(site, SMALL_PACKAGE) == SMALL_BROKEN
    again = run_build("apply", "--site-packages", str(site), "--find-links", str(wheelhouse()))
    assert again.returncode == 0, again.stderr
    assert list(site.rglob(f"*{TEMP_SUFFIX}")) == []
    assert installed_version(site, SMALL_PACKAGE) == SMALL_PINNED and carries_the_small_patch(site)


def test_a_failed_apply_creates_no_moe_config_dir_and_revert_removes_the_one_it_made(vllm_site,
                                                                                   tmp_path):
    site = vllm_site("0.25.0")
    moe_dir = tmp_path / "new" / "moe-configs"
    failed = run_build("apply", "--site-packages", str(site), "--moe-config-dir", str(moe_dir),
                       **{FAIL_AFTER_ENV: "2"})
    assert failed.returncode == 2 and "rolled back 2 step(s)" in failed.stderr
    assert not (tmp_path / "new").exists()
    report = apply_series(site_packages=site, moe_config_dir=moe_dir)
    shipped = shipped_moe_configs("0.25.0")  # what the series ships for 0.25.0, not a count kept here
    assert shipped and sorted(p.name for p in moe_dir.iterdir()) == sorted(shipped)
    # the source patches and each config
    assert len(report.applied) == len(source_patches_applying("0.25.0")) + len(shipped)
    apply_series(site_packages=site, revert=True)
    assert not (tmp_path / "new").exists()


def test_pin_installs_exactly_that_version_and_refuses_one_outside_the_constraint(
        site_with_transformers):
    """An image build passes the version its plan chose (--pin); apply installs exactly it."""
    site = site_with_transformers("0.25.0", "5.15.0")
    original = snapshot(site)
    for pin, message in (("transformers==5.15.0",
                          "--pin transformers==5.15.0: outside <5.15,>=5.5.3"),
                         ("transformers>=5", "--pin transformers>=5: must be PACKAGE==VERSION"),
                         # no constraint names it: it was ignored without a word, exit 0
                         ("nosuchpkg==1.0", "--pin nosuchpkg==1.0: no dependency constraint in")):
        refused = run_build("apply", "--site-packages", str(site), "--pin", pin)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert message in refused.stderr
    missing = run_build("apply", "--site-packages", str(site), "--pin", "transformers==5.13.0",
                        "--find-links", str(wheelhouse()))
    assert missing.returncode == 2
    assert f"no version of transformers in --find-links {wheelhouse()} satisfies ==5.13.0" \
        in missing.stderr
    assert snapshot(site) == original
    pinned = run_build("apply", "--site-packages", str(site), "--pin", "transformers==5.14.0")
    assert pinned.returncode == 0, pinned.stderr      # fetched from PyPI itself
    assert transformers_in(site) == "5.14.0"
    assert "transformers 5.15.0 -> 5.14.0 (pinned ==5.14.0" in pinned.stdout
    assert run_build("apply", "--site-packages", str(site), "--revert").returncode == 0
    assert snapshot(site) == original


def test_a_pin_holds_an_image_to_its_planned_version_even_where_the_base_satisfies_it(
        site_with_transformers):
    """The image's label names the pinned version: a base whose version satisfies the constraint
    but differs from the pin gets the pin too; one that holds the pin is left alone."""
    site = site_with_transformers("0.25.0", "5.14.1")
    original = snapshot(site)
    same = run_build("apply", "--site-packages", str(site), "--pin", "transformers==5.14.1")
    assert same.returncode == 0, same.stderr
    sources = len(source_patches_applying("0.25.0"))
    assert f"applied {sources} patch(es)" in same.stdout and " -> " not in same.stdout  # source only
    record = applied_record(site)
    assert record["dependencies"] == [] and transformers_in(site) == "5.14.1"
    assert run_build("apply", "--site-packages", str(site), "--revert").returncode == 0
    assert snapshot(site) == original
    other = run_build("apply", "--site-packages", str(site), "--pin", "transformers==5.14.0")
    assert other.returncode == 0, other.stderr
    assert "transformers 5.14.1 -> 5.14.0 (pinned ==5.14.0" in other.stdout
    assert transformers_in(site) == "5.14.0"
    assert run_build("apply", "--site-packages", str(site), "--revert").returncode == 0
    assert snapshot(site) == original


def upgrade_as_pip_does(site, version: str, package: str = "transformers") -> None:
    """What `pip install -U PACKAGE==V` does to an environment after apply: pip itself
    uninstalls the installed version (every file its RECORD lists), then the new wheel's files go
    in (the same bytes pip's --target install of it produces, tests.fixtures_patches)."""
    result = subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes",
                             "--disable-pip-version-check", package],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    assert installed_version(site, package) is None, result.stdout
    install_wheel(site, package, version)
    assert installed_version(site, package) == version


@pytest.fixture(scope="module")
def drifted_without_apply(tmp_path_factory) -> tuple[dict[str, str], dict[str, str]]:
    """What revert must give back after a drift: the install as it was before the first apply,
    except for the dependency someone else changed afterwards, which comes back exactly as they
    left it. The same steps on a site without any apply make that state for real (snapshots
    before and after the upgrade; made once for the module: each source's case compares with it)."""
    site = make_site_packages("0.25.0", tmp_path_factory.mktemp("drifted-without-apply") / "site")
    install_wheel(site, "transformers", "5.14.1")
    before = snapshot(site)
    upgrade_as_pip_does(site, "5.15.0")
    return before, snapshot(site)


@pytest.mark.parametrize("where", ["index", "find-links"])
def test_apply_pins_a_dependency_that_drifted_after_an_earlier_apply_and_revert_undoes_both(
        site_with_transformers, drifted_without_apply, where):
    """The bug seen on the H200: an install patched while transformers 5.14.1 satisfied the
    constraint got 5.15.0 over it; apply said "nothing to do" and Gemma 4 still could not start."""
    site = site_with_transformers("0.25.0", "5.14.1")
    original = snapshot(site)
    source = ["--find-links", str(wheelhouse()), "--offline"] if where == "find-links" else []
    env = {"VLLM_FORGE_PYPI": UNREACHABLE_INDEX} if where == "find-links" else {}
    first = run_build("apply", "--site-packages", str(site), "--vllm", "0.25.0", *source, **env)
    assert first.returncode == 0, first.stderr
    assert transformers_in(site) == "5.14.1" and FIXED_LINE in (site / TARGET).read_bytes()
    upgrade_as_pip_does(site, "5.15.0")
    before, expected = drifted_without_apply
    assert before == original and expected != original

    status = run_build("patches", "--site-packages", str(site), "--offline")
    assert status.returncode == 0, status.stderr
    rows = {line.split()[0]: line.split() for line in status.stdout.splitlines() if line.strip()}
    # the table wraps each detail at 100 columns: read the words, not the lines
    assert rows[CONSTRAINT][2] == "applies" and "5.15.0 violates <5.15" in " ".join(status.stdout.split())
    assert rows["gemma4-mtp-share-embeddings"][2] == "applied"
    again = run_build("apply", "--site-packages", str(site), "--vllm", "0.25.0", *source, **env)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" not in again.stdout
    assert "drifted outside their constraint since: pinned again" in again.stdout
    newest = "5.14.1" if where == "find-links" else newest_below_5_15()
    assert f"transformers 5.15.0 -> {newest} (pinned =={newest}: constraint <5.15" \
        in again.stdout
    row = next(line for line in again.stdout.splitlines() if line.split()[0] == CONSTRAINT)
    assert row.split()[1] == "applies" and "transformers 5.15.0 violates <5.15" in row
    assert transformers_in(site) == newest and FIXED_LINE in (site / TARGET).read_bytes()
    record = applied_record(site)
    assert record["state"] == "applied" and record["dependencies"] == []
    [later] = record["later"]
    assert later["applied"] == [CONSTRAINT]
    assert [(d["previous"], d["installed"]) for d in later["dependencies"]] == [("5.15.0", newest)]
    # The run's files: transformers', and vLLM's RECORD, which now lists the run's originals.
    assert {e.get("package") or e["path"] for e in later["files"]} == \
        {"transformers", "vllm-0.25.0.dist-info/RECORD"}

    settled = run_build("apply", "--site-packages", str(site), *source, **env)
    assert settled.returncode == 0, settled.stderr
    assert "every dependency is inside its constraint; nothing to do" in settled.stdout
    assert f"transformers {newest} satisfies <5.15" in settled.stdout
    status = run_build("patches", "--site-packages", str(site), "--offline", "--json")
    assert status.returncode == 0, status.stderr
    by_id = {p["id"]: p["status"] for p in json.loads(status.stdout)["patches"]}
    assert by_id[CONSTRAINT] == "satisfied" and by_id["gemma4-mtp-share-embeddings"] == "applied"

    reverted = run_build("apply", "--site-packages", str(site), "--revert",
                         VLLM_FORGE_PYPI=UNREACHABLE_INDEX)
    assert reverted.returncode == 0, reverted.stderr
    assert f"transformers {newest} -> 5.15.0 (restored)" in reverted.stdout
    assert snapshot(site) == expected
    assert FIXED_LINE not in (site / TARGET).read_bytes() and leftovers(site) == []


@pytest.fixture(scope="module")
def drifted_after_apply_template(tmp_path_factory):
    """vLLM 0.23.0 with fastapi 0.137.0, applied from the wheelhouse (0.136.3 pinned), then
    0.137.0 put back over it as `pip install -U` does; made once for the module: its path, a copy
    of it, and what the install was before apply."""
    base = tmp_path_factory.mktemp("drifted-after-apply")
    site = make_site_packages(SMALL_RELEASE, base / "site")
    install_wheel(site, SMALL_PACKAGE, SMALL_BROKEN)
    original = snapshot(site)
    applied = run_build("apply", "--site-packages", str(site), "--find-links", str(wheelhouse()))
    assert applied.returncode == 0, applied.stderr
    assert installed_version(site, SMALL_PACKAGE) == SMALL_PINNED
    upgrade_as_pip_does(site, SMALL_BROKEN, SMALL_PACKAGE)
    copy_tree(site, base / "template")
    return site, base / "template", original


@pytest.fixture
def drifted_after_apply(drifted_after_apply_template):
    """The applied-then-drifted install, at the path it was applied at (the record names its
    site by path), as an exact copy (cp -a keeps bytes, modes and times)."""
    site, template, original = drifted_after_apply_template
    shutil.rmtree(site, ignore_errors=True)
    copy_tree(template, site)
    return site, original


def test_a_failed_or_killed_re_pin_keeps_the_first_record_and_revert_restores_the_start(
        drifted_after_apply):
    """First apply pinned 0.137.0 down to 0.136.3; 0.137.0 came back over it. A re-pin that fails
    or is killed part way leaves the drifted install and the first run's record exactly as they
    were; the finished re-pin then reverts to the install from before the first apply."""
    site, original = drifted_after_apply
    links = ["--find-links", str(wheelhouse())]
    drifted = snapshot(site)
    for steps in (0, 1, 5):      # 1: the re-pin's entry marked in the record; 5: mid-dependency
        failed = run_build("apply", "--site-packages", str(site), *links,
                           **{FAIL_AFTER_ENV: str(steps)})
        assert failed.returncode == 2 and failed.stderr.count("\n") == 1
        assert f"rolled back {steps} step(s), nothing changed" in failed.stderr
        assert snapshot(site) == drifted
    killed = run_build("apply", "--site-packages", str(site), *links, **{KILL_AFTER_ENV: "0"})
    assert killed.returncode == -signal.SIGKILL
    again = run_build("apply", "--site-packages", str(site), *links)
    assert again.returncode == 0, again.stderr
    assert f"{SMALL_PACKAGE} {SMALL_BROKEN} -> {SMALL_PINNED} (pinned =={SMALL_PINNED}" in again.stdout
    assert list(site.rglob(f"*{TEMP_SUFFIX}")) == []
    assert installed_version(site, SMALL_PACKAGE) == SMALL_PINNED
    record = applied_record(site)
    assert len(record["later"]) == 1       # the killed run left no trace in the record
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert reverted.stdout.count(" (restored)") == 1
    assert snapshot(site) == original and leftovers(site) == []


def test_a_drifted_dependency_offline_is_refused_naming_the_pip_command_and_nothing_changes(
        site_with_transformers):
    site = site_with_transformers("0.25.0", "5.14.1")
    assert run_build("apply", "--site-packages", str(site), "--offline").returncode == 0
    upgrade_as_pip_does(site, "5.15.0")
    drifted = snapshot(site)
    refused = run_build("apply", "--site-packages", str(site), "--offline")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "transformers must be brought inside <5.15,>=5.5.3 but --offline; nothing changed" \
        in refused.stderr
    assert f"-m pip install --no-deps --target {site} --upgrade transformers==" in refused.stderr
    assert snapshot(site) == drifted


def test_a_source_patch_lost_after_apply_is_refused_not_reported_as_carried(vllm_site):
    site = vllm_site("0.25.0")
    before = (site / TARGET).read_bytes()
    assert run_build("apply", "--site-packages", str(site)).returncode == 0
    (site / TARGET).write_bytes(before)        # what a reinstall of vLLM's file does
    changed = snapshot(site)
    refused = run_build("apply", "--site-packages", str(site))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "gemma4-mtp-share-embeddings recorded as applied but no longer in the installed " \
        "files" in refused.stderr
    assert snapshot(site) == changed


def test_a_re_pin_killed_while_replacing_files_is_reverted_to_the_start(drifted_after_apply):
    site, original = drifted_after_apply
    links = ["--find-links", str(wheelhouse())]
    killed = run_build("apply", "--site-packages", str(site), *links, **{KILL_AFTER_ENV: "5"})
    assert killed.returncode == -signal.SIGKILL
    assert list(site.rglob(f"*{TEMP_SUFFIX}"))
    again = run_build("apply", "--site-packages", str(site), *links)
    assert again.returncode == 2 and "an earlier apply was interrupted" in again.stderr
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original and leftovers(site) == []
    assert installed_version(site, SMALL_PACKAGE) == SMALL_BROKEN
