"""Candidate patches (series.yaml `candidate: true`): the mechanism, shown on
`triton-attn-head512-launch`, a candidate on every checked release from 0.25.0 on (its own facts
are in tests/test_candidate_head512_launch.py, the other candidate's in
tests/test_candidate_group_kv_heads.py; the first candidate, triton-spec-decode-split-kv, ships
since it won, tests/test_patch_triton_spec_decode_split_kv.py).

A candidate's status is computed and shown like every patch's, on the real release trees; `build.py
apply` on a real unpacked install leaves it out unless `--with-candidate ID` names it, and the
image plan (what the Dockerfile's `build.py apply` writes) never carries it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.patching.readme_table import BEGIN, END
from forge.patching.report import CANDIDATE_NOTE
from forge.patching.series import load_series
from forge.patching.status import applied_statuses, release_status
from tests.build_cli import copy_checkout
from tests.build_cli import run_build as run_in
from tests.fixtures_patches import applied_record, make_site_packages, real_patch_entry, snapshot, write_series
from tests.test_images_plan import copy_repo, plan, write_lock
from tests.test_patch_series import run_build

REPO = Path(__file__).resolve().parents[1]
PATCH = "triton-attn-head512-launch"
FLAG = "--with-candidate"
LAUNCHER = "vllm/v1/attention/ops/triton_unified_attention.py"
A = "applies"
# 0.33.0: every candidate applies there, and none of the shipped patches of this series' day
# (a patch added since may: shipped_sources says which).
BARE = "0.33.0"


def candidates() -> set[str]:
    return {p.id for p in load_series().patches if p.candidate}


def shipped_sources(version: str) -> list[str]:
    """The shipped (not candidate) source patches that apply on `version`, in series order: what
    a plain `build.py apply` writes there, read from the series rather than listed."""
    series = load_series()
    return [s.id for s in release_status(version, series=series)
            if s.status == A and series.get(s.id).kind == "source" and not series.get(s.id).candidate]


def in_series_order(ids) -> list[str]:
    return [p.id for p in load_series().patches if p.id in set(ids)]


def patches_row(patch_id: str, version: str) -> list[str]:
    """The first three cells of a patch's row in `build.py patches --vllm VERSION --offline`."""
    result = run_build("patches", "--vllm", version, "--offline")
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith(patch_id)).split()[:3]


def test_build_patches_marks_the_candidates_and_no_other_patch():
    """Each candidate's own test file checks its ID* row; the --all header is checked in
    tests/test_patch_status.py."""
    result = run_build("patches", "--vllm", BARE, "--offline")
    assert result.returncode == 0, result.stderr
    assert CANDIDATE_NOTE in result.stdout
    assert CANDIDATE_NOTE == (f"*: a candidate: `build.py apply` and image builds leave it out "
                              f"unless asked (`{FLAG} ID`)")
    as_json = json.loads(run_build("patches", "--vllm", BARE, "--offline", "--json").stdout)
    marked = {p["id"] for p in as_json["patches"] if p.get("candidate")}
    assert PATCH in marked and marked == candidates()
    # the flag is written only as true: absent on every other patch
    assert all(p.get("candidate", True) is True for p in as_json["patches"])


def test_apply_leaves_the_candidates_out_unless_asked(vllm_site):
    site = vllm_site(BARE)
    original = snapshot(site)
    shipped = shipped_sources(BARE)
    plain = run_build("apply", "--site-packages", str(site), "--vllm", BARE)
    assert plain.returncode == 0, plain.stderr
    first = plain.stdout.splitlines()[0]
    if shipped:
        assert first.startswith(f"applied {len(shipped)} patch(es) to vLLM {BARE}"), plain.stdout
        assert applied_record(site)["applied"] == shipped
    else:
        assert first.startswith(f"nothing to apply to vLLM {BARE}"), plain.stdout
    notes = {line.strip().split(":")[0] for line in plain.stdout.splitlines()
             if ": candidate, not applied" in line}
    assert notes == candidates()
    assert f"{PATCH}: candidate, not applied ({A}); `{FLAG} {PATCH}` applies it" in plain.stdout
    if shipped:
        assert run_build("apply", "--site-packages", str(site), "--revert").returncode == 0
    assert snapshot(site) == original

    asked = run_build("apply", "--site-packages", str(site), "--vllm", BARE, FLAG, PATCH)
    assert asked.returncode == 0, asked.stderr
    assert PATCH in asked.stdout.splitlines()[0], asked.stdout
    assert applied_record(site)["applied"] == in_series_order([*shipped, PATCH])
    assert (site / LAUNCHER).read_bytes() != original[LAUNCHER]
    compile((site / LAUNCHER).read_bytes(), LAUNCHER, "exec", dont_inherit=True)
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original



@pytest.fixture(scope="module")
def refusing_site(tmp_path_factory):
    """One copy of the BARE release's install, and its snapshot, for the commands refused before
    they write anything: each test checks it is left as it was (a copy and two snapshots each
    were most of these tests' time)."""
    site = make_site_packages(BARE, tmp_path_factory.mktemp("refusing") / "site-packages")
    return site, snapshot(site)


@pytest.mark.parametrize("patch_id, problem", [
    ("no-such-patch", "has no patch with that id"),
    ("gemma4-mtp-share-embeddings", "not a candidate in"),
    ("triton-spec-decode-split-kv", "not a candidate in"),   # a candidate until it shipped
])
def test_a_bad_with_candidate_is_refused_in_one_line(refusing_site, patch_id, problem):
    site, original = refusing_site
    result = run_build("apply", "--site-packages", str(site), FLAG, PATCH, FLAG, patch_id)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {FLAG} {patch_id}: "), lines
    assert problem in lines[0]
    assert snapshot(site) == original


def test_with_candidate_and_revert_are_refused_together(refusing_site):
    site, original = refusing_site
    result = run_build("apply", "--site-packages", str(site), "--revert", FLAG, PATCH)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {FLAG}: not with --revert (a revert restores every patched file, candidates "
        "included)"]
    assert snapshot(site) == original


def test_the_image_plan_and_the_dockerfile_leave_the_candidates_out(tmp_path):
    series = load_series()
    statuses = release_status(BARE, offline=True, series=series)
    assert candidates() <= {s.id for s in statuses}
    assert not candidates() & {s.id for s in applied_statuses(statuses, series)}
    assert PATCH in {s.id for s in applied_statuses(statuses, series, frozenset({PATCH}))}
    repo = copy_repo(tmp_path / "repo")
    entry = plan(repo, "h200", BARE, write_lock(tmp_path / "lock.yaml", BARE))
    assert not any(c in json.dumps(entry) for c in candidates())
    assert FLAG not in (REPO / "images" / "Dockerfile").read_text()


@pytest.mark.parametrize("value, problem", [
    (False, "write it only as `candidate: true`"),
    ("yes", "must be"),
])
def test_a_bad_candidate_field_is_refused_naming_file_and_field(tmp_path, value, problem):
    entry, diff = real_patch_entry(candidate=value)
    path = write_series(tmp_path, [entry], {"source/p.diff": diff})
    with pytest.raises(ForgeError) as caught:
        load_series(path, check_index=False)
    message = str(caught.value)
    assert message.startswith(f"{path}: patches[0].candidate: ") and problem in message
    assert "\n" not in message


def test_the_readme_table_marks_the_candidates_and_no_other_patch():
    """The statuses in the table are checked by tests/test_readme.py (`readme-table --check`)."""
    table = (REPO / "README.md").read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    header = [c.strip() for c in table.strip().splitlines()[0].split("|")][2:-1]
    series = load_series()
    assert header == [f"`{p.id}`" + " (candidate)" * p.candidate for p in series.patches]
    for patch in series.patches:
        marked = f"- `{patch.id}` (candidate: not applied by `build.py apply` or the images unless " \
                 f"asked, `{FLAG} {patch.id}`): "
        assert (marked in table) == patch.candidate, patch.id
    assert f"`{PATCH}` (candidate)" in header


def test_a_refreshed_candidate_stays_a_candidate(tmp_path):
    """refresh-patch rewrites the entry from its fields: `candidate` is one of them."""
    checkout = copy_checkout(tmp_path / "checkout")
    started = run_in("refresh-patch", PATCH, "--vllm", "0.27.1", cwd=checkout)
    assert started.returncode == 0, started.stderr
    launcher = checkout / "build" / "patch-work" / PATCH / LAUNCHER
    comment = "# head_size 512 (Gemma 4's full-attention layers)"
    text = launcher.read_text()
    assert text.count(comment) == 1
    launcher.write_text(text.replace(comment, "# Head size 512 (Gemma 4's full-attention layers)"))
    finished = run_in("refresh-patch", PATCH, "--vllm", "0.27.1", "--finish", cwd=checkout)
    assert finished.returncode == 0, finished.stderr
    refreshed = load_series(checkout / "patches" / "series.yaml", check_index=False).get(PATCH)
    assert refreshed.candidate and refreshed.files[0].sha256 != load_series().get(PATCH).files[0].sha256
